"""Attention's transposes: tf.transpose (oneDNN's kernel under the scripts' settings) against
attention.transpose (TensorFlow's kernel, through a float64 view of the same bytes).

Two parts, each side taking turns call by call so that a change in the machine's speed falls
on both alike:
1. The transposes alone: attention's two (the joined query, key and value [B, S, 3, N, D] to
   [3, B, N, S, D], and the context [B, N, S, D] to [B, S, N, D]; all-MiniLM-L6-v2's 12 heads
   of 32), microseconds per call, median of --repeats timed calls of 12 chained transposes.
2. The path a served request takes: all-MiniLM-L6-v2 as the exports hold it
   (inference.inference_copy, the classifier head) through export.served_outputs, traced as
   the exports trace it (unknown batch and length), built once with each transpose;
   milliseconds per call, median, and the largest logit difference (0: bit for bit).

  python benchmarks/investigations/transposes.py --threads=2
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py: the exports' weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags(repeats=100)
timing.define_shapes_flag(["1x24", "1x64", "1x128", "8x48", "32x128", "64x128"],
                          "Batch x tokens, without padding.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
FLAGS = flags.FLAGS

CHAIN = 12  # transposes per timed call, so that the call's own overhead is shared


def transposes_alone(dtype, batch, length, calls):
  """(tf.transpose, attention.transpose) microseconds per transpose, each of attention's two."""
  import tensorflow as tf
  from modeling import attention
  out = []
  for shape, perm in (([batch, length, 3, 12, 32], [2, 0, 3, 1, 4]),
                      ([batch, 12, length, 32], [0, 2, 1, 3])):
    x = tf.cast(tf.random.normal(shape), dtype)
    spec = tf.TensorSpec([None] * (len(shape) - 1) + [32], dtype)

    def chain(step):
      def run(t):
        for _ in range(CHAIN):
          t = tf.reshape(step(t), tf.shape(t))  # back to the input's shape, values moved
        return t
      return tf.function(run, input_signature=[spec], autograph=False)
    functions = {
        "none": chain(lambda t: t),
        "tf": chain(lambda t: tf.transpose(t, perm)),
        "view": chain(lambda t: attention.transpose(t, perm, tf.shape(t)))}
    ms = timing.median_ms({k: (lambda f: lambda t: f(t).numpy())(f) for k, f in functions.items()},
                   (x,), calls)
    out.append(tuple(1000 * (ms[k] - ms["none"]) / CHAIN for k in ("tf", "view")))
  return out


def main(_):
  timing.use_threads(FLAGS.threads)
  shapes = timing.shapes(FLAGS.shapes)
  print("1. Attention's transposes alone, us per transpose, tf.transpose / attention.transpose")
  print(f"{'dtype':<10}{'shape':>8}{'[B,S,3,N,D] -> [3,B,N,S,D]':>30}"
        f"{'[B,N,S,D] -> [B,S,N,D]':>26}")
  for dtype in FLAGS.dtypes:
    for batch, length in shapes:
      joined, context = transposes_alone(dtype, batch, length, timing.calls_for(FLAGS.repeats, batch))
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{'%.1f / %.1f' % joined:>30}"
            f"{'%.1f / %.1f' % context:>26}", flush=True)
  from modeling import attention
  view = attention.transpose
  print("\n2. ", end="")
  timing.print_served_variants(
      FLAGS.dtypes, {"tf.transpose": [(attention, "transpose", lambda x, perm, shape, _=True:
                                       view(x, perm, shape, False))],
                     "attention.transpose": []}, shapes, FLAGS.repeats)


if __name__ == "__main__":
  app.run(main)
