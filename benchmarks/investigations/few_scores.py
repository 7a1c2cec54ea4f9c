"""Attention at inference over few scores: oneDNN's kernels against TensorFlow's own.

attention.attend runs inputs of at most attention.FEW_SCORES scores (batch x heads x
queries x keys) in TensorFlow's own kernels (BatchMatMulV3 in float32, the softmax written
out) and larger ones in the batched products and softmax that TensorFlow's oneDNN rewriter
turns into oneDNN kernels. Both ways, each side taking turns call by call so that a change
in the machine's speed falls on both alike:
1. Attention alone: six layers' worth of attend (all-MiniLM-L6-v2's 12 heads of 32) chained
   in one call, traced for unknown sizes as the exports trace it; ms per call, median of
   --repeats timed calls.
2. The path a served request takes: all-MiniLM-L6-v2 as the exports hold it
   (inference.inference_copy, the classifier head) through export.served_outputs, built once
   each way; ms per call, median, and the largest logit difference.

  python benchmarks/investigations/few_scores.py --threads=2
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py: the exports' weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags(repeats=200)
timing.define_shapes_flag(["1x8", "1x16", "1x24", "1x32", "2x16", "3x16", "1x64", "8x48",
                           "32x128"], "Batch x tokens, without padding.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
FLAGS = flags.FLAGS

LAYERS = 6


def attention_alone(dtype, batch, length, calls):
  """{"oneDNN", "few"}: ms per call of LAYERS chained attends, the sides in turns."""
  import tensorflow as tf
  from modeling import attention
  x = tf.cast(tf.random.normal([batch, 12, length, 32]), dtype)
  bias = tf.zeros([batch, 1, 1, length], dtype)
  spec = [tf.TensorSpec([None, 12, None, 32], dtype), tf.TensorSpec([None, 1, 1, None], dtype)]

  def traced(few_scores):
    def run(t, b):
      for _ in range(LAYERS):
        t = attention.attend(t, t, t, b, 32 ** -0.5)
      return t
    kept = attention.FEW_SCORES
    attention.FEW_SCORES = few_scores
    try:
      return tf.function(run, input_signature=spec).get_concrete_function()
    finally:
      attention.FEW_SCORES = kept
  functions = {"none": tf.function(lambda t, b: t, input_signature=spec),
               "oneDNN": traced(0), "few": traced(attention.FEW_SCORES)}
  ms = timing.median_ms({k: (lambda f: lambda t, b: f(t, b).numpy())(f)
                         for k, f in functions.items()}, (x, bias), calls)
  return {k: ms[k] - ms["none"] for k in ("oneDNN", "few")}


def main(_):
  timing.use_threads(FLAGS.threads)
  from modeling import attention
  shapes = timing.shapes(FLAGS.shapes)
  scores = lambda b, s: b * 12 * s * s
  print(f"attention.FEW_SCORES = {attention.FEW_SCORES}")
  print(f"\n1. {LAYERS} layers of attention alone, ms per call, median")
  print(f"{'dtype':<10}{'shape':>8}{'scores':>8}{'oneDNN':>9}{'own kernels':>13}{'taken':>8}")
  for dtype in FLAGS.dtypes:
    for batch, length in shapes:
      ms = attention_alone(dtype, batch, length, timing.calls_for(FLAGS.repeats, batch))
      taken = "own" if scores(batch, length) <= attention.FEW_SCORES else "oneDNN"
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{scores(batch, length):>8}"
            f"{ms['oneDNN']:>9.3f}{ms['few']:>13.3f}{taken:>8}", flush=True)
  print("\n2. ", end="")
  timing.print_served_variants(FLAGS.dtypes, {"oneDNN always": [(attention, "FEW_SCORES", 0)],
                                              "as attend picks": []}, shapes, FLAGS.repeats)


if __name__ == "__main__":
  app.run(main)
