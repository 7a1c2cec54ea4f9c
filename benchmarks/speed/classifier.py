r"""Fine-tuning and prediction throughput of the classifier at fixed shapes, against
tf-models-official and PyTorch, at equal work.

Sequences per second at one shape (batch x length, no padding, so that no side has
padding to skip) for the MiniLM (L6/H384) and BERT-Base (L12/H768) shapes, random
weights: training steps through the Trainer as run_classifier.py builds it (forward,
backward, clipping, AdamWeightDecay) and prediction batches through the inference copy its
evaluation, prediction and exports run (modeling/inference.py), in float32 and bfloat16,
both in the training process (as run_classifier.py evaluates and predicts) and, as
"frozen", in a child process that converts each weight once for oneDNN as predict.py,
extract_features.py and a server that sets TF_ONEDNN_ASSUME_FROZEN_WEIGHTS do;
tf-models-official's BertClassifier over BertEncoderV2 (float32, its AdamWeightDecay)
in the same process; with --hf_python, Hugging Face's BertForSequenceClassification in
PyTorch (benchmarks/speed/hf_peer.py --task=fixed, float32 and bfloat16 autocast) in a
child process, one case after the other, all with the same number of threads.

"of peak" sets the model arithmetic per second (flops.forward a sequence predicted, 3 x that
a sequence trained) against a plain [4096, H] x [H, 4H] matrix product's rate in the same
dtype, measured in the same run: how much of what the CPU's matrix units give turns into
model arithmetic, for every row, the peers' included (their dtype's product rate; PyTorch's
autocast against the bfloat16 rate). A prediction above 100% of it is out of reach, which
bounds any ratio against a peer.

  python benchmarks/speed/classifier.py --models=minilm,base --seconds=15 \
      --hf_python=/work/hfvenv/bin/python
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402

from benchmarks.common import launch, timing  # noqa: E402

flags.DEFINE_list("models", ["minilm", "base"], "Shapes to run.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Our compute dtypes (and the peer's).")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.", lower_bound=1)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.", lower_bound=2, upper_bound=512)
flags.DEFINE_float("seconds", 15.0, "Least measuring time per case.", lower_bound=0.1)
flags.DEFINE_bool("tf_models", True, "Also run tf-models-official's classifier (float32).")
flags.DEFINE_string("hf_python", None, "A Python with torch and transformers: also run "
                    "Hugging Face's classifier in PyTorch.")
flags.DEFINE_string("frozen_side", None, "Internal: time prediction alone for this "
                    "model:dtype with frozen weights and print its sequences/s as JSON.")
flags.register_validator("models", lambda v: set(v) <= set(timing.CLASSIFIER_SHAPES),
                         f"--models: each one of {', '.join(timing.CLASSIFIER_SHAPES)}")
flags.register_validator("dtypes", lambda v: bool(v) and set(v) <= {"float32", "bfloat16"},
                         "--dtypes: each float32 or bfloat16")
flags.register_validator(
    "frozen_side", lambda v: v is None or (len(v.split(":")) == 2 and v.split(":")[0] in
                                           timing.CLASSIFIER_SHAPES and v.split(":")[1] in
                                           ("float32", "bfloat16")),
    "--frozen_side: model:dtype, such as minilm:bfloat16")
FLAGS = flags.FLAGS


def timed(run):
  """Sequences/s of run() (one batch per call)."""
  return timing.items_per_second(run, FLAGS.batch_size, FLAGS.seconds)


def tf_models_rates(hidden, layers, heads, batch):
  """tf-models-official's (train, predict) sequences/s, float32."""
  import tensorflow as tf
  from official.nlp import optimization as mg_optimization
  from official.nlp.modeling import models as mg_models, networks
  encoder = networks.BertEncoderV2(vocab_size=30522, hidden_size=hidden, num_layers=layers,
                                   num_attention_heads=heads, inner_dim=4 * hidden,
                                   type_vocab_size=2, inner_activation="gelu")
  model = mg_models.BertClassifier(encoder, num_classes=2)
  inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
            "input_type_ids": batch["segment_ids"]}
  model(inputs)
  optimizer = mg_optimization.AdamWeightDecay(2e-5, weight_decay_rate=0.01, epsilon=1e-6,
                                              exclude_from_weight_decay=["LayerNorm", "bias"])

  @tf.function
  def train():
    with tf.GradientTape() as tape:
      logits = model(inputs, training=True)
      loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
          batch["label_ids"], logits, from_logits=True))
    grads, _ = tf.clip_by_global_norm(tape.gradient(loss, model.trainable_variables), 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
  predict = tf.function(lambda: model(inputs, training=False))
  return timed(lambda: float(train())), timed(lambda: predict().numpy())


def peer_rates(layers, hidden, dtype):
  """PyTorch's (train, predict) sequences/s, or None when the peer fails."""
  done = launch.script(
      "benchmarks/speed/hf_peer.py", "--task=fixed", f"--num_layers={layers}",
      f"--hidden_size={hidden}", f"--train_batch_size={FLAGS.batch_size}",
      f"--max_seq_length={FLAGS.seq_length}", f"--max_seconds={FLAGS.seconds}",
      f"--autocast={dtype}", f"--num_threads={os.cpu_count()}", python=FLAGS.hf_python,
      check=False)
  result = done.json_line()
  if done.returncode or result is None:
    print(f"hf_peer.py failed: {done.stderr[-500:]}", file=sys.stderr)
    return None
  return result["train_sequences_per_second"], result["predict_sequences_per_second"]


def frozen_rate(size, dtype):
  """Our prediction's sequences/s with frozen weights, timed in a child process."""
  done = launch.script("benchmarks/speed/classifier.py", f"--frozen_side={size}:{dtype}",
                       f"--batch_size={FLAGS.batch_size}", f"--seq_length={FLAGS.seq_length}",
                       f"--seconds={FLAGS.seconds}")
  return done.json_line()["predict_sequences_per_second"]


def served_predict(size, dtype, batch):
  """(the Trainer, a traced prediction call of its inference copy on `batch`)."""
  import tensorflow as tf
  from modeling import inference
  from modeling.classification import ClassificationTask
  config = timing.classifier_config(size)
  trainer = timing.benchmark_trainer(ClassificationTask(config, 2), dtype, FLAGS.batch_size,
                                     2e-5)
  served = inference.inference_copy(trainer.model)  # what evaluation and exports run
  return trainer, tf.function(lambda: served(batch, training=False)["logits"])


def main(_):
  import json
  import tensorflow as tf
  from benchmarks.common import flops

  B, S = FLAGS.batch_size, FLAGS.seq_length
  batch = timing.classifier_batch(B, S)
  if FLAGS.frozen_side:
    from cli.app import use_inference_defaults
    use_inference_defaults()  # before the first model runs
    size, dtype = FLAGS.frozen_side.split(":")
    _, predict = served_predict(size, dtype, batch)
    print(json.dumps({"predict_sequences_per_second": timed(lambda: predict().numpy())}))
    return
  print(f"TensorFlow {tf.__version__}, {timing.cpu()}; batch {B} x {S} tokens, "
        "no padding")
  print(f"{'model':<7} {'run':<28} {'train seq/s':>12} {'predict seq/s':>14} "
        f"{'frozen seq/s':>13} {'train of peak':>14} {'predict of peak':>16} "
        f"{'frozen of peak':>15} {'train x peer':>13} {'predict x peer':>15} "
        f"{'frozen x peer':>14}")
  for size in FLAGS.models:
    config = timing.classifier_config(size)
    layers, hidden, heads = (config.num_hidden_layers, config.hidden_size,
                             config.num_attention_heads)
    forward = flops.forward(config, S, 0)  # per sequence
    peaks = {}  # each dtype's product rate, measured just before its first row

    def measure_peak(dtype):
      if dtype not in peaks:
        peaks[dtype] = timing.matmul_flops_per_second(hidden, dtype)
    rows = []
    if FLAGS.tf_models:
      measure_peak("float32")
      rows.append(("tf-models-official float32", "float32",
                   tf_models_rates(hidden, layers, heads, batch)))
    peers = {}
    for dtype in FLAGS.dtypes:
      measure_peak(dtype)
      trainer, predict = served_predict(size, dtype, batch)
      iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
      train_rate = timing.training_sequences_per_second(trainer, iterator, FLAGS.seconds, B,
                                                        steps_per_call=4, min_steps=8)
      rates = (train_rate, timed(lambda: predict().numpy()), frozen_rate(size, dtype))
      rows.append((f"ours {dtype}", dtype, rates))
      if FLAGS.hf_python:
        peers[dtype] = peer_rates(layers, hidden, dtype)
        if peers[dtype]:
          name = "PyTorch " + ("bf16 autocast" if dtype == "bfloat16" else "float32")
          rows.append((name, dtype, peers[dtype]))
    for name, dtype, rates in rows:
      rates = rates + (None,) * (3 - len(rates))  # the peers have no frozen column
      peer = peers.get(dtype) if not name.startswith("PyTorch") else None
      cells = [f"{r:12.1f}" if r else f"{'':>12}" for r in rates]
      cells += [f"{100 * f * forward * r / peaks[dtype]:13.1f}%" if r else f"{'':>14}"
                for f, r in zip((3, 1, 1), rates)]
      against = (peer[0], peer[1], peer[1]) if peer else (None,) * 3  # frozen: its predict
      cells += [f"{r / p:13.2f}" if r and p else f"{'':>13}" for r, p in zip(rates, against)]
      print(f"{size:<7} {name:<28} " + " ".join(cells), flush=True)


if __name__ == "__main__":
  launch.main_guarded(main)
