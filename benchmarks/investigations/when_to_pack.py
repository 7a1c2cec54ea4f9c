r"""When a padded batch is faster packed: the rule export.served_outputs applies.

MiniLM's shape (6 layers, hidden 384, 12 heads; random weights, a 2-label classifier) as the
exports hold it (inference.inference_copy in each --dtypes entry), traced as they trace it,
run two ways taking turns call by call: as is (the padded batch), and packed with attention
in blocks (pack_tokens and blocked_attention, the branch served_outputs picks for padded
batches). For each batch x length, rows drawn (seeded) so that a given share of the
positions are real tokens, the longest row always full. Prints the median ms of each and
packed over as is; served_outputs packs where that is below 1 across this table
(PACKED_FROM_POSITIONS, PACKED_MAX_REAL_SHARE).

  python benchmarks/investigations/when_to_pack.py --threads=2 --dtypes=float32,bfloat16
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
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes, one table each.")
flags.DEFINE_list("real_shares", ["0.45", "0.6", "0.75", "0.97"],
                  "Shares of real tokens among the positions.")


def _shares_valid(values):
  try:
    return all(0 < float(x) <= 1 for x in values)
  except ValueError:
    return False


flags.register_validator("real_shares", _shares_valid, "--real_shares: each a number in (0, 1]")
flags.register_validator("dtypes", lambda v: set(v) <= {"float32", "bfloat16", "float16"},
                         "--dtypes: each one of float32, bfloat16, float16")
timing.define_shapes_flag(["16x64", "16x128", "32x64", "32x128", "64x64", "64x128"],
                          "Batch x length of each case.")
FLAGS = flags.FLAGS


def lengths_for(rng, rows, length, share):
  """Row lengths, the first full, the others uniform around `share` of the length."""
  low = max(1, round((2 * share - 1) * length)) if share > 0.5 else 1
  high = length if share > 0.5 else max(1, round(2 * share * length))
  lengths = rng.integers(low, high + 1, rows)
  lengths[0] = length
  return lengths


def main(_):
  import numpy as np
  import tensorflow as tf
  from modeling import classification, distribution, inference
  from modeling.encoder import BertEncoder
  timing.use_threads(FLAGS.threads)
  print(timing.cpu())
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  for dtype in FLAGS.dtypes:
    distribution.set_precision(dtype)
    model = classification.BertClassifier(BertEncoder(timing.classifier_config("minilm")), 2)
    model.build()
    copy = inference.inference_copy(model)
    distribution.set_precision("float32")
    ways = {"as is": lambda f: copy(f, training=False)["logits"],
            "packed": lambda f: copy(f, training=False, pack_tokens=True,
                                     blocked_attention=True)["logits"]}
    calls = {name: (lambda g: lambda x: g(x).numpy())(
        tf.function(way, input_signature=[spec]).get_concrete_function())
        for name, way in ways.items()}
    rng = np.random.default_rng(0)
    print(f"{'dtype':<10}{'batch x len':>12}{'real':>6}{'as is ms':>10}{'packed ms':>11}"
          f"{'packed/as is':>14}")
    for share in map(float, FLAGS.real_shares):
      for rows, length in timing.shapes(FLAGS.shapes):
        lengths = lengths_for(rng, rows, length, share)
        mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
        x = {"input_ids": tf.constant(rng.integers(1000, 2000, mask.shape) * mask, tf.int32),
             "input_mask": tf.constant(mask), "segment_ids": tf.zeros(mask.shape, tf.int32)}
        ms = timing.median_ms(calls, (x,), max(15, timing.calls_for(FLAGS.repeats, rows)))
        print(f"{dtype:<10}{f'{rows}x{length}':>12}{mask.mean():>6.2f}{ms['as is']:>10.2f}"
              f"{ms['packed']:>11.2f}{ms['packed'] / ms['as is']:>14.3f}", flush=True)


if __name__ == "__main__":
  app.run(main)
