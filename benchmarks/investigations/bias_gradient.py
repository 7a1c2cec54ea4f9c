r"""Bias gradients in bfloat16 training: TensorFlow's BiasAddGrad against tf.reduce_sum.

A dense layer's bias gradient is the sum of its upstream gradient's rows. TensorFlow 2.20's
BiasAddGrad sums bfloat16 rows in bfloat16 on the CPU; layers.bias_add takes the sum with
tf.reduce_sum instead, which accumulates bfloat16 in float32 and rounds once. Two parts, the
forms taking turns in random order:
1. The sum alone, bfloat16 rows x width, gradient values uniform in [0, 1) (all of one sign,
   as a bias's gradient often is for many steps) and normal (mixed signs): the largest
   error relative to the float64 sum of the same bfloat16 values, and ms per call, median;
   also a [1, rows] x [rows, C] product with ones (float32 accumulation in oneDNN's
   kernels, not in TensorFlow's own, which TF_ENABLE_ONEDNN_OPTS=0 runs).
2. Whole bfloat16 training steps of the classifier (the Trainer as run_classifier.py builds
   it, random weights, batch 32 x --seq_length, no padding), traced once with each form.

  python benchmarks/investigations/bias_gradient.py --threads=2
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags()
flags.DEFINE_list("shapes", ["4096x3072", "4096x768", "640x768", "32x768"],
                  "Rows x width for part 1.")
flags.DEFINE_integer("calls", 40, "Timed calls per form in part 1.", lower_bound=1)
flags.DEFINE_list("models", ["minilm", "base"], "Classifier shapes for part 2.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence in part 2.", lower_bound=8)
flags.DEFINE_integer("steps", 10, "Timed steps per form in part 2.", lower_bound=1)
FLAGS = flags.FLAGS


def stock_bias_add(x, bias, training=False):
  """The bias add as Keras' Dense ran it before: tf.nn.bias_add, whose gradient is
  BiasAddGrad."""
  del training
  import tensorflow as tf
  return tf.nn.bias_add(x, bias)


def alone():
  import numpy as np
  import tensorflow as tf
  print("1. The bias gradient alone, bfloat16: largest error relative to the exact sum, and "
        "ms per call, median: BiasAddGrad / reduce_sum / product with ones")
  forms = {"stock": lambda dy: tf.raw_ops.BiasAddGrad(out_backprop=dy),
           "sum": lambda dy: tf.reduce_sum(dy, axis=0),
           "product": lambda dy: tf.matmul(tf.ones([1, tf.shape(dy)[0]], dy.dtype), dy)[0]}
  functions = {n: tf.function(f, autograph=False) for n, f in forms.items()}
  rng = np.random.default_rng(0)
  for shape in FLAGS.shapes:
    rows, width = (int(v) for v in shape.split("x"))
    for values in ("uniform", "normal"):
      draw = rng.uniform(0, 1, (rows, width)) if values == "uniform" else rng.standard_normal(
          (rows, width))
      dy = tf.constant(draw, tf.bfloat16)
      exact = np.sum(np.asarray(tf.cast(dy, tf.float64)), axis=0)
      scale = np.sum(np.abs(np.asarray(tf.cast(dy, tf.float64))), axis=0)  # the terms' size
      errors = {n: float(np.max(np.abs(f(dy).numpy().astype(np.float64) - exact) / scale))
                for n, f in functions.items()}
      ms = timing.median_ms({n: (lambda f=f: f(dy).numpy()) for n, f in functions.items()}, (),
                            FLAGS.calls)
      print(f"   {shape:>10} {values:<8} error " + " / ".join(f"{errors[n]:.1e}" for n in forms)
            + "   ms " + " / ".join(f"{ms[n]:7.3f}" for n in forms), flush=True)
  print("   (error: |sum - exact| over the sum of the terms' sizes, the largest over the "
        "columns; one bfloat16 rounding is at most 3.9e-3)")


def training_steps():
  from modeling import layers
  print(f"\n2. bfloat16 training steps, batch 32 x {FLAGS.seq_length}, no padding, ms per step, "
        "median: BiasAddGrad / reduce_sum (layers.bias_add)")
  for model in FLAGS.models:
    config = timing.classifier_config(model)
    batch = {k: v[None] for k, v in timing.classifier_batch(32, FLAGS.seq_length).items()}
    runs = timing.classifier_steps_by_form({"stock": stock_bias_add, "sum": layers.bias_add},
                                           layers, "bias_add", config, batch, False)
    ms = timing.median_ms(runs, (), FLAGS.steps)
    print(f"   {model:<7} {ms['stock']:9.1f} / {ms['sum']:9.1f}  "
          f"(x{ms['sum'] / ms['stock']:.3f})", flush=True)


def main(_):
  timing.use_threads(FLAGS.threads)
  print(timing.cpu())
  alone()
  training_steps()


if __name__ == "__main__":
  app.run(main)
