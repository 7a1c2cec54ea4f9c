r"""How this process's bfloat16 products round: to nearest (oneDNN's kernels) or toward zero.

Multiplies bfloat16 matrices of values in [0.5, 1.5) (a 2-D product, as the dense layers
run, and a batched one, as attention's; and a 2-D one whose products are negative: there
too rounding toward zero leaves a negative error relative to the exact value, rounding down
a positive one) and compares them with the float64 products of the
same values: the mean signed error relative to the exact value (about -2^-8 / 1.5 for
rounding toward zero, near 0 for rounding to nearest) and the largest (2^-8 = 3.9e-3 at
most to nearest, 2^-7 = 7.8e-3 toward zero). TensorFlow hands bfloat16 products to oneDNN
on CPUs with AVX-512 or AVX-NE-CONVERT when its oneDNN kernels are on; otherwise its own
kernels compute them. Run it once as is and once with the kernels off:

  python benchmarks/investigations/bfloat16_rounding.py
  TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/investigations/bfloat16_rounding.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("depths", ["64", "512", "4096"], "Inner dimensions of the products.")
FLAGS = flags.FLAGS


def main(_):
  import numpy as np
  import tensorflow as tf
  print(timing.cpu())
  print(f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; bfloat16 products "
        "of values in [0.5, 1.5), error relative to the exact product: mean signed / largest")
  rng = np.random.default_rng(0)
  product = tf.function(tf.matmul, reduce_retracing=True)  # graph kernels, as the model
  for depth in map(int, FLAGS.depths):
    for kind, a_shape, b_shape in (("2-D", (64, depth), (depth, 64)),
                                   ("batched", (4, 64, depth), (4, depth, 64)),
                                   ("negative", (64, depth), (depth, 64))):
      sign = -1 if kind == "negative" else 1
      a = tf.constant(sign * rng.uniform(0.5, 1.5, a_shape), tf.bfloat16)
      b = tf.constant(rng.uniform(0.5, 1.5, b_shape), tf.bfloat16)
      exact = np.asarray(tf.cast(a, tf.float64)) @ np.asarray(tf.cast(b, tf.float64))
      error = (np.asarray(tf.cast(product(a, b), tf.float64)) - exact) / exact
      print(f"   {kind:<8} depth {depth:>5}   {error.mean():+.2e} / {np.abs(error).max():.2e}")


if __name__ == "__main__":
  app.run(main)
