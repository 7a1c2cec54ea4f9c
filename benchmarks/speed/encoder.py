"""Encoder inference throughput: ours against tf-models-official's BertEncoderV2.

For each model size, compute dtype and XLA setting, both encoders (same
config, random weights, same batch) are timed in this one process, one after
the other, and the ratio ours / Model Garden is printed.

  python benchmarks/speed/encoder.py --models=small,base --batch_size=16 --seconds=8
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("models", ["small", "base"], "Sizes to run: tiny, small, base.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
flags.DEFINE_list("jit", ["off", "on"], "XLA settings.")
flags.DEFINE_integer("batch_size", 16, "Sequences per batch.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_float("seconds", 8.0, "Measuring time per case (after warm-up).")
FLAGS = flags.FLAGS

SIZES = {  # (layers, hidden, heads)
    "tiny": (2, 128, 2),
    "small": (4, 512, 8),
    "base": (12, 768, 12),
}


def _time(fn, batch, seconds):
  return timing.items_per_second(lambda: fn(batch)["sequence_output"].numpy(),
                                 FLAGS.batch_size, seconds, min_calls=1)


def main(_):
  import numpy as np
  import tensorflow as tf
  import tf_keras
  from official.nlp.modeling import networks
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder

  print(f"TensorFlow {tf.__version__}, {timing.cpu()}; batch {FLAGS.batch_size} x {FLAGS.seq_length} tokens; "
        f"{FLAGS.seconds:.0f}s per case")
  print(f"{'model':<6} {'dtype':<9} {'jit':<4} {'ours seq/s':>11} {'MG seq/s':>10} {'ratio':>6}")
  rng = np.random.default_rng(0)
  for size in FLAGS.models:
    layers, hidden, heads = SIZES[size]
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden,
                        type_vocab_size=2)
    ids = rng.integers(1, 30522, (FLAGS.batch_size, FLAGS.seq_length)).astype("int32")
    mask = np.ones_like(ids)
    mask[:, FLAGS.seq_length * 3 // 4:] = 0  # a quarter of padding, as real batches have
    segments = np.zeros_like(ids)
    ours_batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    mg_batch = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments}
    for dtype in FLAGS.dtypes:
      policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
      ours = BertEncoder(config, dtype=policy)
      # Model Garden reads the global policy when it builds its sublayers.
      tf_keras.mixed_precision.set_global_policy(policy)
      mg = networks.BertEncoderV2(
          vocab_size=config.vocab_size, hidden_size=hidden, num_layers=layers,
          num_attention_heads=heads, inner_dim=4 * hidden, type_vocab_size=2,
          inner_activation="gelu")
      mg(mg_batch)  # builds its sublayers while the policy is set
      tf_keras.mixed_precision.set_global_policy("float32")
      for jit in FLAGS.jit:
        compile_ = jit == "on"
        ours_fn = tf.function(lambda b: ours(b, training=False), jit_compile=compile_)
        mg_fn = tf.function(lambda b: mg(b, training=False), jit_compile=compile_)
        a = _time(ours_fn, ours_batch, FLAGS.seconds)
        b = _time(mg_fn, mg_batch, FLAGS.seconds)
        print(f"{size:<6} {dtype:<9} {jit:<4} {a:11.1f} {b:10.1f} {a / b:6.2f}", flush=True)


if __name__ == "__main__":
  app.run(main)
