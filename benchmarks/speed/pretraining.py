"""Pretraining step throughput: ours against tf-models-official's BERT pretrainer.

For each model size, ours runs full training steps (forward, backward, the
original's AdamWeightDecay with clipping) through the Trainer in float32 and
bfloat16, XLA off and on; tf-models-official's BertPretrainerV2 over
BertEncoderV2 (same config, batch and sequence length, a masked-LM and a
next-sentence head, its AdamWeightDecay, float32) runs the same kind of step
in the same process. Also printed: the achieved FLOP/s as a fraction of a
plain matmul's FLOP/s in the same dtype, measured here too.

The batch's last eighth of positions is padding. Ours computes it, as tf-models-official
does (equal work), and with --pack=on also skips it, as run_pretraining.py does outside
XLA; a packed row's share of the matmul rate is not printed, since its arithmetic is less.

  python benchmarks/speed/pretraining.py --models=demo,tiny,mini,small,base --seconds=20

"demo" is the model demo.py pretrains (L2/H128, its ~6,800-piece vocabulary).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import flops, timing  # noqa: E402

flags.DEFINE_list("models", ["demo", "tiny", "mini", "small", "base"], "Sizes to run.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Our compute dtypes.")
flags.DEFINE_list("jit", ["off", "on"], "Our XLA settings.")
flags.DEFINE_list("pack", ["off", "on"], "Ours without XLA: on skips the padded positions "
                  "(run_pretraining.py's default), off computes them as the peer does.")
for _name in ("jit", "pack"):
  flags.register_validator(_name, lambda values: set(values) <= {"off", "on"},
                           message=f"--{_name} takes off and/or on")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_float("seconds", 20.0, "Least measuring time per case (after warm-up).")
flags.DEFINE_bool("peer", True, "Also run tf-models-official.")
FLAGS = flags.FLAGS

# (layers, hidden, heads, vocabulary)
SIZES = {"demo": (2, 128, 2, 6799), "tiny": (2, 128, 2, 30522), "mini": (4, 256, 4, 30522),
         "small": (4, 512, 8, 30522), "base": (12, 768, 12, 30522)}


def batch(rng, size, vocab):
  import numpy as np
  B, S, P = size, FLAGS.seq_length, FLAGS.predictions
  mask = np.ones((B, S), np.int32)
  mask[:, S * 7 // 8:] = 0
  return {"input_ids": rng.integers(1, vocab, (B, S)).astype(np.int32) * mask,
          "input_mask": mask, "segment_ids": (np.arange(S)[None] >= S // 2).astype(np.int32) * mask,
          "masked_lm_positions": np.sort(rng.integers(1, S * 7 // 8, (B, P)), axis=1).astype(np.int32),
          "masked_lm_ids": rng.integers(1, vocab, (B, P)).astype(np.int32),
          "masked_lm_weights": np.ones((B, P), np.float32),
          "next_sentence_labels": rng.integers(0, 2, (B, 1)).astype(np.int32)}


def time_steps(run, steps_per_call):
  """Sequences/s of run(n) (n steps per call), at least FLAGS.seconds after warm-up."""
  return timing.items_per_second(lambda: run(steps_per_call),
                                 steps_per_call * FLAGS.batch_size, FLAGS.seconds, min_calls=2)


def ours(config, data, dtype, jit, pack):
  import tensorflow as tf
  from modeling import pretraining
  trainer = timing.benchmark_trainer(pretraining.PretrainingTask(config), dtype,
                                     FLAGS.batch_size, 1e-4, pack_tokens=pack, jit_compile=jit)
  iterator = iter(tf.data.Dataset.from_tensors(data).repeat())
  return lambda n: float(trainer._train_loop(iterator, tf.constant(n))[0]["loss"])


def model_garden(layers, hidden, heads, vocab, data):
  import tensorflow as tf
  from official.nlp import optimization as mg_optimization
  from official.nlp.modeling import layers as mg_layers, models, networks
  encoder = networks.BertEncoderV2(vocab_size=vocab, hidden_size=hidden, num_layers=layers,
                                   num_attention_heads=heads, inner_dim=4 * hidden,
                                   type_vocab_size=2, inner_activation="gelu")
  model = models.BertPretrainerV2(
      encoder_network=encoder, mlm_activation="gelu",
      classification_heads=[mg_layers.ClassificationHead(inner_dim=hidden, num_classes=2,
                                                         name="next_sentence")])
  inputs = {"input_word_ids": data["input_ids"], "input_mask": data["input_mask"],
            "input_type_ids": data["segment_ids"],
            "masked_lm_positions": data["masked_lm_positions"]}
  model(inputs)
  optimizer = mg_optimization.AdamWeightDecay(
      1e-4, weight_decay_rate=0.01, epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
  variables = model.trainable_variables

  @tf.function
  def steps(n):
    loss = tf.constant(0.0)
    for _ in tf.range(n):
      with tf.GradientTape() as tape:
        out = model(inputs, training=True)
        mlm = tf.keras.losses.sparse_categorical_crossentropy(
            data["masked_lm_ids"], out["mlm_logits"], from_logits=True)
        w = data["masked_lm_weights"]
        nsp = tf.keras.losses.sparse_categorical_crossentropy(
            data["next_sentence_labels"][:, 0], out["next_sentence"], from_logits=True)
        loss = tf.reduce_sum(w * mlm) / (tf.reduce_sum(w) + 1e-5) + tf.reduce_mean(nsp)
      grads = tape.gradient(loss, variables)
      grads, _ = tf.clip_by_global_norm(grads, 1.0)
      optimizer.apply_gradients(zip(grads, variables))
    return loss
  return lambda n: float(steps(tf.constant(n)))


def main(_):
  import numpy as np
  import platform
  import tensorflow as tf
  from modeling.config import BertConfig
  print(f"TensorFlow {tf.__version__}, {platform.machine()}, {os.cpu_count()} CPUs; batch "
        f"{FLAGS.batch_size} x {FLAGS.seq_length} tokens, {FLAGS.predictions} predictions")
  print(timing.cpu())
  print(f"{'model':<6} {'run':<31} {'seq/s':>8} {'vs MG fp32':>10} {'of matmul peak':>15}")
  for size in FLAGS.models:
    layers, hidden, heads, vocab = SIZES[size]
    data = batch(np.random.default_rng(0), FLAGS.batch_size, vocab)
    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden,
                        type_vocab_size=2)
    per_sequence = flops.training(config, FLAGS.seq_length, FLAGS.predictions)
    peaks = {d: timing.matmul_flops_per_second(hidden, d) for d in FLAGS.dtypes}
    steps = max(1, int(256 // FLAGS.batch_size // max(1, layers * hidden // 256)))
    mg = time_steps(model_garden(layers, hidden, heads, vocab, data), steps) if FLAGS.peer else None
    if mg:
      print(f"{size:<6} {'tf-models-official fp32':<31} {mg:8.1f} {1.0:10.2f} "
            f"{mg * per_sequence / peaks['float32']:15.1%}", flush=True)
    for dtype in FLAGS.dtypes:
      for jit, pack in [(j, p) for j in FLAGS.jit for p in FLAGS.pack if j == "off" or p == "off"]:
        rate = time_steps(ours(config, data, dtype, jit == "on", pack == "on"), steps)
        ratio = f"{rate / mg:10.2f}" if mg else f"{'-':>10}"
        share = "-" if pack == "on" else f"{rate * per_sequence / peaks[dtype]:.1%}"
        name = f"ours {dtype} xla {jit}" + (" packed" if pack == "on" else "")
        print(f"{size:<6} {name:<31} {rate:8.1f} {ratio} {share:>15}", flush=True)


if __name__ == "__main__":
  app.run(main)
