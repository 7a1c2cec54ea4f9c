"""LayerNorm at inference: the elementwise form (mean, centre, variance, scale: six passes)
against one fused normalization (FusedBatchNormV3 over the rows as NCHW channels, oneDNN's
batch normalization on CPUs), which layers.LayerNorm takes from FUSED_LAYER_NORM_SIZE values.

Two parts, the sides taking turns call by call:
1. One LayerNorm alone, chains of 13 (a MiniLM forward pass holds 13), ms per chain, median,
   per row count and width.
2. all-MiniLM-L6-v2's classifier served as the exports serve it, once elementwise at every
   size and once as layers.LayerNorm chooses; ms per call, median, and the largest logit
   difference between the two.

  python benchmarks/investigations/layer_norm.py --threads=2
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
flags.DEFINE_list("rows", ["20", "128", "256", "512", "4096"], "Row counts for part 1.")
flags.DEFINE_list("widths", ["384", "768"], "Hidden sizes for part 1.")
timing.define_shapes_flag(["1x24", "1x128", "8x48", "32x128", "64x128"],
                          "Batch x tokens for part 2, without padding.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes for part 2.")
FLAGS = flags.FLAGS

CHAIN = 13
EVERY_SIZE, NO_SIZE = 0, (1 << 31) - 1  # FUSED_LAYER_NORM_SIZE: fused always, never


def chains(width):
  """{name: tf.function of 13 chained LayerNorms of `width`} (unknown row count)."""
  import tensorflow as tf
  from modeling import layers
  norm = layers.LayerNorm()
  norm.build((None, width))
  spec = [tf.TensorSpec([None, width], tf.float32)]
  out = {}
  for name, size in (("elementwise", NO_SIZE), ("fused", EVERY_SIZE)):
    saved = layers.FUSED_LAYER_NORM_SIZE
    try:
      layers.FUSED_LAYER_NORM_SIZE = size  # read when traced

      def run(x):
        for _ in range(CHAIN):
          x = norm(x)
        return x
      function = tf.function(run, input_signature=spec, autograph=False)
      function.get_concrete_function()
      out[name] = lambda x, function=function: function(x).numpy()
    finally:
      layers.FUSED_LAYER_NORM_SIZE = saved
  return out


def main(_):
  import tensorflow as tf
  from modeling import layers
  timing.use_threads(FLAGS.threads)
  print(f"1. {CHAIN} chained LayerNorms, ms per chain, median: elementwise / fused")
  print(f"{'rows':>6}" + "".join(f"{f'width {w}':>20}" for w in FLAGS.widths))
  functions = {int(w): chains(int(w)) for w in FLAGS.widths}
  for rows in (int(r) for r in FLAGS.rows):
    cells = []
    for width, pair in functions.items():
      x = tf.random.stateless_normal([rows, width], [1, rows])
      ms = timing.median_ms(pair, (x,), timing.calls_for(FLAGS.repeats * 20, rows))
      cells.append("%.3f / %.3f" % (ms["elementwise"], ms["fused"]))
    print(f"{rows:>6}" + "".join(f"{c:>20}" for c in cells), flush=True)

  shapes = timing.shapes(FLAGS.shapes)
  print("\n2. ", end="")
  timing.print_served_variants(
      FLAGS.dtypes, {"elementwise": [(layers, "FUSED_LAYER_NORM_SIZE", NO_SIZE)], "chosen": []},
      shapes, FLAGS.repeats)


if __name__ == "__main__":
  app.run(main)
