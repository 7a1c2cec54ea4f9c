"""Where new vocabulary rows help or hurt at step 0: as inputs, as answers, by kind of answer.

Reads a finished benchmarks/experiments/domain_adaptation.py work directory:
its `continued` run (MiniLM after continued pretraining, masked-LM head
trained, MiniLM's vocab) is grown to the extended vocab by
modeling/vocab_growth.grow, once per --new_token_embeddings mode, and scored
on the extended vocab's records without training. The masked-LM loss is split
by answer: the masked positions whose answer is one of the new words (where
rows from their pieces can help) and all the others (where a new row can only
take probability). The output layer is tied to the embedding; to tell the
rows' two roles apart, the same rows are also tried untied: the encoder reads
one mode's rows while the output layer scores with the other's.

  python benchmarks/investigations/new_rows_step0.py --work_dir=/tmp/i40run/domain
  python benchmarks/investigations/new_rows_step0.py --work_dir=/tmp/i40run/domain \
    --records=/tmp/i40run/domain/extended.tfrecord   (text of the training books)
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_string("work_dir", None, "A domain_adaptation.py --work_dir whose runs finished.")
flags.DEFINE_string("records", None, "Records of the extended vocab to score (default: the "
                    "work dir's extended_heldout.tfrecord, the held-out book).")
flags.DEFINE_integer("max_records", 1600, "Records scored (the benchmark scores 50 x 32).",
                     lower_bound=1)
flags.DEFINE_integer("seed", 1, "Seed of the random rows.")
FLAGS = flags.FLAGS

MODES = ("mean_of_pieces", "random")


def read_batches(path, limit):
  import tensorflow as tf
  first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path).take(1))).numpy())
  length = len(first.features.feature["input_ids"].int64_list.value)
  predictions = len(first.features.feature["masked_lm_ids"].int64_list.value)
  spec = {k: tf.io.FixedLenFeature([length], tf.int64)
          for k in ("input_ids", "input_mask", "segment_ids")}
  spec.update({k: tf.io.FixedLenFeature([predictions], tf.int64)
               for k in ("masked_lm_positions", "masked_lm_ids")})
  spec["masked_lm_weights"] = tf.io.FixedLenFeature([predictions], tf.float32)
  data = tf.data.TFRecordDataset(path).take(limit).batch(64).map(
      lambda r: tf.io.parse_example(r, spec))
  return [{k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in b.items()}
          for b in data]


def main(_):
  import numpy as np
  import tensorflow as tf
  from modeling import checkpoints, pretraining, vocab_growth
  from modeling.config import BertConfig
  work = FLAGS.work_dir
  if not work or not os.path.exists(os.path.join(work, "continued", "checkpoint")):
    sys.exit(f"error: --work_dir={work} has no finished continued run of "
             "domain_adaptation.py")
  records = FLAGS.records or os.path.join(work, "extended_heldout.tfrecord")
  config = BertConfig.from_json_file(os.path.join(work, "extended_config.json"))
  ckpt = checkpoints.read_checkpoint(os.path.join(work, "continued"))
  base_tokens = vocab_growth.read_tokens(checkpoints.find_vocab(ckpt.path))
  tokens = vocab_growth.read_tokens(os.path.join(work, "extended_vocab.txt"))
  new_ids = np.array([row for row, _ in vocab_growth.new_rows(base_tokens, tokens,
                                                              len(base_tokens))])
  grown = {mode: vocab_growth.grow(ckpt.weights, vocab_growth.VocabGrowth(
      base_tokens, tokens, config.vocab_size, mode, config.initializer_range, FLAGS.seed))
      for mode in MODES}
  batches = read_batches(records, FLAGS.max_records)
  model = pretraining.BertPretrainer(config, next_sentence=False)
  model.build()
  head = model.masked_lm

  def score(inputs, outputs):
    """Loss sums and counts: (new-word answers, other answers), and accuracy."""
    checkpoints.load_checkpoint(model, ckpt.path,
                                ckpt=dataclasses.replace(ckpt, weights=grown[inputs]))
    table = tf.constant(grown[outputs][vocab_growth.EMBEDDINGS])
    bias = tf.constant(grown[outputs][vocab_growth.OUTPUT_BIAS])
    sums, counts, correct = np.zeros(2), np.zeros(2), 0.0
    for b in batches:
      hidden = tf.gather(model.encoder(b)["sequence_output"], b["masked_lm_positions"],
                         batch_dims=1)
      logits = tf.einsum("bph,vh->bpv", head.layer_norm(head.activation(head.transform(hidden))),
                         table) + bias
      nll, right = (t.numpy() for t in pretraining.masked_lm_terms(logits, b["masked_lm_ids"]))
      weights = b["masked_lm_weights"].numpy()
      new = np.isin(b["masked_lm_ids"].numpy(), new_ids)
      for kind, where in enumerate((new, ~new)):
        sums[kind] += (nll * weights * where).sum()
        counts[kind] += (weights * where).sum()
      correct += (right * weights).sum()
    return sums, counts, correct / counts.sum()

  print(f"{len(new_ids)} new rows; {records}, {FLAGS.max_records} records at most")
  print("| encoder reads | output scores | MLM loss | accuracy | loss, answer a new word (n) "
        "| loss, other answers (n) |")
  print("|---|---|---|---|---|---|")
  for inputs, outputs in [(m, m) for m in MODES] + [(a, b) for a in MODES for b in MODES
                                                    if a != b]:
    sums, counts, accuracy = score(inputs, outputs)
    print(f"| {inputs} | {outputs} | {sums.sum() / counts.sum():.4f} | {accuracy:.4f} "
          f"| {sums[0] / counts[0]:.3f} ({counts[0]:.0f}) | {sums[1] / counts[1]:.4f} "
          f"({counts[1]:.0f}) |", flush=True)


if __name__ == "__main__":
  app.run(main)
