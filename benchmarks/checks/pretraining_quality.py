"""Masked-LM pretraining quality at equal steps: run_pretraining.py against Model Garden.

Both sides train the same small config from the same initial weights on the
same records in the same order (pipeline.record_dataset with one seed), with
the same batch, learning rate schedule (linear warmup, then linear decay to 0),
AdamW settings (betas 0.9 / 0.999, epsilon 1e-6, weight decay 0.01 except
LayerNorm and biases) and clipping (global norm 1), for the same number of
steps:
  ours: run_pretraining.py from the initial weights written as an original
    checkpoint (its AdamWeightDecay, as the original's, has no bias correction);
  Model Garden (tf-models-official, an independent implementation):
    BertPretrainerV2 over BertEncoderV2 with its create_optimizer (Keras Adam
    with bias correction, its WarmUp schedule), in a plain GradientTape loop.
Masked LM only (--next_sentence_weight=0 for ours, no classification head for
theirs): Model Garden's next-sentence head has a dense layer of its own where
the original reads the pooler, so with it the two would not train the same
function. Then both score the held-out book's records (the same batches):
masked-LM loss and accuracy, for every seed in --seeds (initial weights,
data order and dropout follow it).

  python benchmarks/checks/pretraining_quality.py --work_dir=/tmp/quality --steps=3000 --seeds=1,2
  python benchmarks/checks/pretraining_quality.py --work_dir=/tmp/quality_quick --quick
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags, logging  # noqa: E402

from benchmarks.common import corpus, launch  # noqa: E402
from benchmarks.common import model_garden as model_garden_peer  # noqa: E402

corpus.define_flags(__name__, steps=3000)
flags.DEFINE_string("size", "4/256/4", "Model as L/H/A (feed-forward 4H).")
flags.DEFINE_integer("eval_batches", 100, "Held-out batches of 32 scored by both.")
flags.DEFINE_list("seeds", ["1", "2"], "One run of each side per seed.")
flags.DEFINE_bool("quick", False, "A few minutes' check of the flow: two short books, a "
                  "2/64/2 model, 20 steps.")
FLAGS = flags.FLAGS


def initial_weights(config_file, seed, directory, heldout):
  """Our BertPretrainer's initial weights for `seed`, written as an original checkpoint;
  returns (config, weights, the masked-LM loss of the first held-out batch at them)."""
  import keras
  import tensorflow as tf
  from modeling import checkpoints, pretraining
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder
  config = BertConfig.from_json_file(config_file)
  model = pretraining.BertPretrainer(BertEncoder(config))
  if not os.path.exists(os.path.join(directory, "checkpoint")):
    keras.utils.set_random_seed(seed)
    model.build()
    checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), directory, config)
  checkpoints.load_checkpoint(model, directory)
  batch = _first_batch(heldout)
  logits = model(batch)["masked_lm_logits"]
  weights = tf.cast(batch["masked_lm_weights"], tf.float32)
  nll = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["masked_lm_ids"], logits)
  loss = float(tf.reduce_sum(weights * nll) / tf.reduce_sum(weights))
  return config, checkpoints.read_checkpoint(directory).weights, loss


def _spec():
  from data import features
  return features.pretraining_feature_spec(FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)


def _first_batch(heldout):
  from data import pipeline
  return next(iter(pipeline.record_dataset(heldout, _spec(), 32, False)))


def ours(config_file, init, records, heldout, seed, out):
  """Trains and evaluates with run_pretraining.py; its held-out (loss, accuracy)."""
  if not os.path.exists(os.path.join(out, "eval_results.txt")):
    every = max(FLAGS.steps // 20, 1)
    launch.script(
        "run_pretraining.py", f"--bert_config_file={config_file}", f"--input_file={records}",
        f"--eval_input_file={heldout}", f"--output_dir={out}", f"--init_checkpoint={init}",
        "--do_train", "--do_eval", f"--train_batch_size={FLAGS.batch_size}",
        "--eval_batch_size=32", f"--max_seq_length={FLAGS.max_seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
        f"--num_train_steps={FLAGS.steps}", f"--num_warmup_steps={max(FLAGS.steps // 10, 1)}",
        f"--learning_rate={FLAGS.learning_rate}", f"--save_checkpoints_steps={FLAGS.steps}",
        f"--iterations_per_loop={every}", f"--log_steps={every}",
        f"--max_eval_steps={FLAGS.eval_batches}", f"--seed={seed}", "--next_sentence_weight=0")
  results = launch.read_results(os.path.join(out, "eval_results.txt"))
  return float(results["masked_lm_loss"]), float(results["masked_lm_accuracy"])


def _model_garden(config, weights):
  """tf-models-official's BertPretrainerV2 (masked LM only) holding `weights`."""
  import numpy as np
  import tf_keras
  from official.nlp.modeling import models
  model = models.BertPretrainerV2(
      encoder_network=model_garden_peer.encoder(config),
      mlm_activation=tf_keras.activations.get(config.hidden_act))
  zeros = np.zeros((1, 4), np.int32)
  model(dict(input_word_ids=zeros, input_mask=zeros + 1, input_type_ids=zeros,
             masked_lm_positions=zeros[:, :1]))
  return model_garden_peer.assign(model, weights)


def model_garden(config, weights, records, heldout, seed):
  """Trains Model Garden's pretrainer; (the first held-out batch's masked-LM loss at the
  initial weights, held-out loss, held-out accuracy)."""
  import tensorflow as tf
  from official.nlp import optimization
  from data import pipeline
  tf.random.set_seed(seed)  # dropout
  model = _model_garden(config, weights)
  optimizer = optimization.create_optimizer(FLAGS.learning_rate, FLAGS.steps,
                                            max(FLAGS.steps // 10, 1))  # clips to norm 1
  spec = _spec()

  def sums(batch, training):
    logits = model(dict(input_word_ids=batch["input_ids"], input_mask=batch["input_mask"],
                        input_type_ids=batch["segment_ids"],
                        masked_lm_positions=batch["masked_lm_positions"]),
                   training=training)["mlm_logits"]  # [B, P, V]
    weights_ = tf.cast(batch["masked_lm_weights"], tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["masked_lm_ids"], logits)
    right = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                             batch["masked_lm_ids"]), tf.float32)
    return tf.reduce_sum(weights_ * nll), tf.reduce_sum(weights_ * right), tf.reduce_sum(weights_)

  @tf.function
  def step(batch):
    with tf.GradientTape() as tape:
      total, _, count = sums(batch, True)
      loss = total / (count + 1e-5)  # the original's masked-LM loss, as ours
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  total, _, count = sums(_first_batch(heldout), False)
  initial = float(total / count)
  train = pipeline.record_dataset(records, spec, FLAGS.batch_size, True, seed)
  for i, batch in enumerate(train.take(FLAGS.steps)):
    loss = step(batch)
    if (i + 1) % max(FLAGS.steps // 20, 1) == 0:
      logging.info("Model Garden step %d: masked-LM loss %.4f", i + 1, float(loss))
  evaluate = tf.function(lambda batch: sums(batch, False))
  totals = [0.0, 0.0, 0.0]
  for batch in pipeline.record_dataset(heldout, spec, 32, False).take(FLAGS.eval_batches):
    totals = [t + float(v) for t, v in zip(totals, evaluate(batch))]
  return initial, totals[0] / totals[2], totals[1] / totals[2]


def main(_):
  if not FLAGS.work_dir:
    raise ValueError("--work_dir is required.")
  if FLAGS.quick:
    corpus.apply_quick()
    FLAGS.size, FLAGS.eval_batches = "2/64/2", 5
  start = time.time()
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  p = corpus.prepare_text(work, corpus.books(FLAGS.input_files, FLAGS.quick), FLAGS.vocab_size)
  shape = (FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)
  records = corpus.make_records(p["train.txt"], p["vocab.txt"],
                                os.path.join(work, "train.tfrecord"), *shape, FLAGS.dupe_factor)
  heldout = corpus.make_records(p["heldout.txt"], p["vocab.txt"],
                                os.path.join(work, "heldout.tfrecord"), *shape, 1)
  config_file = corpus.write_config(os.path.join(work, "bert_config.json"), p["vocab.txt"],
                                    FLAGS.size)
  rows = []
  for seed in (int(s) for s in FLAGS.seeds):
    init = os.path.join(work, f"init_seed{seed}")
    config, weights, start_loss = initial_weights(config_file, seed, init, heldout)
    mine = ours(config_file, init, records, heldout, seed, os.path.join(work, f"ours_seed{seed}"))
    their_start, *theirs = model_garden(config, weights, records, heldout, seed)
    # Both sides must start from the same function, or the comparison says nothing.
    if abs(start_loss - their_start) > 1e-3:
      raise RuntimeError(f"seed {seed}: the initial weights give a held-out loss of "
                         f"{start_loss:.5f} in ours but {their_start:.5f} in Model Garden.")
    logging.info("seed %d: initial held-out loss %.5f (ours) and %.5f (Model Garden)", seed,
                 start_loss, their_start)
    rows.append((seed, mine, theirs))
  print(f"\nMasked-LM pretraining at equal steps: L/H/A {FLAGS.size}, {FLAGS.steps} steps of "
        f"{FLAGS.batch_size} x {FLAGS.max_seq_length} tokens, held-out book "
        f"({FLAGS.eval_batches} batches of 32 at most)\n")
  print("| seed | ours: loss | ours: accuracy | Model Garden: loss | Model Garden: accuracy |")
  print("|---|---|---|---|---|")
  for seed, (loss, acc), (mg_loss, mg_acc) in rows:
    print(f"| {seed} | {loss:.4f} | {acc:.4f} | {mg_loss:.4f} | {mg_acc:.4f} |")
  spread = lambda xs: max(xs) - min(xs)
  for side, index in (("ours", 1), ("Model Garden", 2)):
    losses = [r[index][0] for r in rows]
    accs = [r[index][1] for r in rows]
    print(f"{side}: mean loss {sum(losses) / len(losses):.4f} (seed range {spread(losses):.4f}),"
          f" mean accuracy {sum(accs) / len(accs):.4f} (seed range {spread(accs):.4f})")
  print(f"wall time {time.time() - start:.0f} s (runs already done in --work_dir are reused)")


if __name__ == "__main__":
  launch.main_guarded(main)
