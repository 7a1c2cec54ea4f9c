"""Attention's scores at inference: 1 / sqrt(D) folded into the query's weights (the scores'
product, then the mask's add: two ops) against the scale applied to the scores
(q k^T * scale + bias, which TensorFlow's remapper turns into one oneDNN product with the
scale and the add as post-ops), each followed by the softmax, as SelfAttention runs them.
A third column without the mask shows what the add costs at all. Per dtype and
batch x tokens (12 heads of 32, MiniLM's), a tenth of the keys masked; ms per call of six
layers' worth (six chained score products and softmaxes), median, the forms taking turns
call by call.

  python benchmarks/investigations/attention_scale.py --threads=2
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags(repeats=100)
timing.define_shapes_flag(["1x16", "1x64", "8x48", "32x128", "16x384"], "Batch x tokens.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
FLAGS = flags.FLAGS

LAYERS, HEADS, HEAD_SIZE = 6, 12, 32


def forms(dtype):
  """{name: function of (q [B, N, S, D], bias [B, 1, 1, S])} for the three forms."""
  import tensorflow as tf
  scale = tf.constant(HEAD_SIZE ** -0.5, dtype)

  def chain(scores_of):
    def run(q, bias):
      for _ in range(LAYERS):  # the probabilities are the next layer's input: [B, N, S, S]
        probs = tf.nn.softmax(scores_of(q, bias), axis=-1)
        q = tf.matmul(probs, q)
      return q[:, 0, 0]
    spec = [tf.TensorSpec([None, HEADS, None, HEAD_SIZE], dtype),
            tf.TensorSpec([None, 1, 1, None], dtype)]
    function = tf.function(run, input_signature=spec)
    return lambda q, bias: function(q, bias).numpy()
  return {"folded": chain(lambda q, bias: tf.matmul(q, q, transpose_b=True) + bias),
          "post-ops": chain(lambda q, bias: tf.matmul(q, q, transpose_b=True) * scale + bias),
          "no mask": chain(lambda q, bias: tf.matmul(q, q, transpose_b=True))}


def main(_):
  import tensorflow as tf
  timing.use_threads(FLAGS.threads)
  print(f"{LAYERS} layers' score products and softmaxes, ms per call, median")
  print(f"{'dtype':<10}{'shape':>8}{'folded':>9}{'post-ops':>10}{'ratio':>7}{'no mask':>9}")
  for dtype in FLAGS.dtypes:
    functions = forms(dtype)
    for batch, length in timing.shapes(FLAGS.shapes):
      q = tf.cast(tf.random.stateless_normal([batch, HEADS, length, HEAD_SIZE], [1, 2]), dtype)
      masked = tf.random.stateless_uniform([batch, 1, 1, length], [3, 4]) < 0.1
      bias = tf.cast(tf.where(masked, -10000.0, 0.0), dtype)
      ms = timing.median_ms(functions, (q, bias), timing.calls_for(FLAGS.repeats, batch))
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{ms['folded']:>9.3f}{ms['post-ops']:>10.3f}"
            f"{ms['post-ops'] / ms['folded']:>7.3f}{ms['no mask']:>9.3f}", flush=True)


if __name__ == "__main__":
  app.run(main)
