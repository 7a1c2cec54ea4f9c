r"""Does oneDNN's bfloat16 math mode reach the CPU's bfloat16 units from float32 products?

oneDNN may compute a float32 product with bfloat16 inputs when its fpmath mode allows it
(ONEDNN_DEFAULT_FPMATH_MODE=BF16; TensorFlow also reads TF_SET_ONEDNN_FPMATH_MODE). This
times a float32 [4096, H] x [H, 4H] product written three ways (a 2-D tf.matmul, as Keras'
Dense runs it; a 3-D batched one; an einsum, as tf-models-official's EinsumDense runs it)
and the same product in bfloat16, each in a child process with and without the mode, and
reports which oneDNN kernel ran each (ONEDNN_VERBOSE=1: its implementation, and
attr-fpmath:bf16 where the mode applied).

  python benchmarks/investigations/fpmath_mode.py --hidden=768
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()

from absl import app, flags  # noqa: E402

flags.DEFINE_integer("hidden", 768, "H of the [4096, H] x [H, 4H] product.")
flags.DEFINE_float("seconds", 3.0, "Least time per product.")
flags.DEFINE_bool("child", False, "Internal: time the products and print one line each.")
FLAGS = flags.FLAGS

FORMS = ("2-D matmul float32", "3-D batched matmul float32", "einsum float32",
         "2-D matmul bfloat16")


def child():
  import tensorflow as tf
  h = FLAGS.hidden
  a, b = tf.random.normal((4096, h)), tf.random.normal((h, 4 * h))
  a3 = tf.reshape(a, (32, 128, h))
  calls = {
      FORMS[0]: lambda: tf.matmul(a, b)[:1, :1],
      FORMS[1]: lambda: tf.linalg.matmul(a3, b)[:1, :1, :1],
      FORMS[2]: lambda: tf.einsum("bsh,hi->bsi", a3, b)[:1, :1, :1],
      FORMS[3]: lambda: tf.matmul(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16))[:1, :1]}
  for name, call in calls.items():
    f = tf.function(call)
    f(), f()
    print(f"=== {name}", flush=True)
    f().numpy()  # the call ONEDNN_VERBOSE reports
    print("=== timing", flush=True)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < FLAGS.seconds:
      f().numpy()
      count += 1
    rate = 2 * 4096 * h * 4 * h * count / (time.perf_counter() - start) / 1e9
    print(f"=== rate {name}: {rate:.0f}", flush=True)


def run(mode):
  env = {**os.environ, "ONEDNN_VERBOSE": "1"}
  if mode:
    env["ONEDNN_DEFAULT_FPMATH_MODE"] = mode
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                        f"--hidden={FLAGS.hidden}", f"--seconds={FLAGS.seconds}"],
                       env=env, capture_output=True, text=True, check=True).stdout
  result, current, kernels = {}, None, []
  for line in out.splitlines():
    if line.startswith("=== rate "):
      name, rate = line[len("=== rate "):].rsplit(": ", 1)
      result[name] = (float(rate), "; ".join(sorted(set(kernels))))
    elif line.startswith("=== timing"):
      current = None
    elif line.startswith("=== "):
      current, kernels = line[4:], []
    elif current and line.startswith("onednn_verbose") and ",exec," in line:
      fields = line.split(",")
      if fields[5] in ("matmul", "inner_product", "gemm_api"):
        fpmath = " fpmath:bf16" if "attr-fpmath:bf16" in line else ""
        kernels.append(f"{fields[5]} {fields[6] or '(sgemm)'}{fpmath}")
  return result


def main(_):
  if FLAGS.child:
    return child()
  from benchmarks.common import timing
  print(timing.cpu())
  print(f"[4096, {FLAGS.hidden}] x [{FLAGS.hidden}, {4 * FLAGS.hidden}], GFLOP/s; the kernel "
        "oneDNN ran")
  for mode in (None, "BF16"):
    print(f"\nONEDNN_DEFAULT_FPMATH_MODE={mode or '(unset)'}")
    for name, (rate, kernels) in run(mode).items():
      print(f"  {name:<28} {rate:7.0f}   {kernels}")


if __name__ == "__main__":
  app.run(main)
