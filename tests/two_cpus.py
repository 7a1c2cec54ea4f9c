"""Runs an entry script with TensorFlow seeing two logical CPUs.

  python tests/two_cpus.py SCRIPT [FLAGS...]

TensorFlow's MirroredStrategy() mirrors over GPUs only; here --strategy=mirrored
mirrors over the two logical CPUs instead, so the tests can run two replicas on
any machine. Logical devices must be set before TensorFlow starts, hence a
wrapper process rather than a fixture.
"""

import os
import runpy
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(script, args):
  import tensorflow as tf
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  from modeling import distribution
  make_strategy = distribution.make_strategy

  def two_cpu_strategy(name, *rest, **kwargs):
    if name == "mirrored":
      return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return make_strategy(name, *rest, **kwargs)

  distribution.make_strategy = two_cpu_strategy
  sys.argv = [script, *args]
  runpy.run_path(os.path.join(ROOT, script), run_name="__main__")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
