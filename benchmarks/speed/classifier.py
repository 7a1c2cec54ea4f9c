"""Fine-tuning and prediction throughput of the classifier, ours against tf-models-official.

Sequences per second at sequence length 128 for the MiniLM (L6/H384) and
BERT-Base shapes: training steps through the Trainer (forward, backward,
AdamWeightDecay) and prediction batches, float32 and bfloat16; tf-models-
official's BertClassifier over BertEncoderV2 (same shape and batch, float32)
in the same process.

  python benchmarks/speed/classifier.py --models=minilm,base --seconds=15
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("models", ["minilm", "base"], "Shapes to run.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Our compute dtypes.")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_float("seconds", 15.0, "Least measuring time per case.")
FLAGS = flags.FLAGS

SHAPES = {"minilm": (6, 384, 12), "base": (12, 768, 12)}


def timed(run):
  """Sequences/s of run() (one batch per call)."""
  return timing.items_per_second(run, FLAGS.batch_size, FLAGS.seconds)


def main(_):
  import numpy as np
  import tensorflow as tf
  from official.nlp import optimization as mg_optimization
  from official.nlp.modeling import models as mg_models, networks
  from modeling.classification import ClassificationTask
  from modeling.config import BertConfig

  rng = np.random.default_rng(0)
  B, S = FLAGS.batch_size, FLAGS.seq_length
  mask = (np.arange(S)[None] < rng.integers(S // 2, S + 1, (B, 1))).astype(np.int32)
  batch = {"input_ids": rng.integers(1, 30522, (B, S)).astype(np.int32) * mask,
           "input_mask": mask, "segment_ids": np.zeros((B, S), np.int32),
           "label_ids": rng.integers(0, 2, B).astype(np.int32),
           "is_real_example": np.ones(B, np.int32)}
  print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; batch {B} x {S} tokens")
  print(f"{'model':<7} {'run':<26} {'train seq/s':>12} {'predict seq/s':>14} {'train vs MG':>12} "
        f"{'predict vs MG':>14}")
  for size in FLAGS.models:
    layers, hidden, heads = SHAPES[size]
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden,
                        type_vocab_size=2)
    encoder = networks.BertEncoderV2(vocab_size=30522, hidden_size=hidden, num_layers=layers,
                                     num_attention_heads=heads, inner_dim=4 * hidden,
                                     type_vocab_size=2, inner_activation="gelu")
    mg = mg_models.BertClassifier(encoder, num_classes=2)
    inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
              "input_type_ids": batch["segment_ids"]}
    mg(inputs)
    mg_opt = mg_optimization.AdamWeightDecay(2e-5, weight_decay_rate=0.01, epsilon=1e-6,
                                             exclude_from_weight_decay=["LayerNorm", "bias"])

    @tf.function
    def mg_train():
      with tf.GradientTape() as tape:
        logits = mg(inputs, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            batch["label_ids"], logits, from_logits=True))
      grads, _ = tf.clip_by_global_norm(tape.gradient(loss, mg.trainable_variables), 1.0)
      mg_opt.apply_gradients(zip(grads, mg.trainable_variables))
      return loss
    mg_predict = tf.function(lambda: mg(inputs, training=False))
    mg_rates = (timed(lambda: float(mg_train())), timed(lambda: mg_predict().numpy()))
    print(f"{size:<7} {'tf-models-official fp32':<26} {mg_rates[0]:12.1f} {mg_rates[1]:14.1f} "
          f"{1.0:12.2f} {1.0:14.2f}", flush=True)
    for dtype in FLAGS.dtypes:
      trainer = timing.benchmark_trainer(ClassificationTask(config, 2), dtype, B, 2e-5,
                                         pack_tokens=False)  # like for like: padding computed
      iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
      predict = tf.function(lambda: trainer.model(batch, training=False)["logits"])
      rates = (timed(lambda: float(trainer._train_loop(iterator, tf.constant(1))[0]["loss"])),
               timed(lambda: predict().numpy()))
      print(f"{size:<7} {'ours ' + dtype:<26} {rates[0]:12.1f} {rates[1]:14.1f} "
            f"{rates[0] / mg_rates[0]:12.2f} {rates[1] / mg_rates[1]:14.2f}", flush=True)


if __name__ == "__main__":
  app.run(main)
