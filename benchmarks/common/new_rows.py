"""New vocabulary rows at step 0 beside a trained masked-LM head, split by answer and by role.

A checkpoint with a trained head (MiniLM after continued pretraining, its own
vocab) is grown to an extended vocab by modeling/vocab_growth.grow, once per
--new_token_embeddings mode, and scored without training on records of the
extended vocab. The masked-LM loss is split by answer: positions whose answer
is one of the new words (where rows from their pieces can help) and all the
others (where a new row can only take probability). The output layer is tied
to the embedding; to tell the rows' two roles apart the rows are also tried
untied, the encoder reading one mode's rows while the output layer scores with
the other's (an experiment only: the product keeps them tied).
"""

import dataclasses

def read_batches(path, limit):
  """The first `limit` pretraining records of `path`, parsed, in batches of 64."""
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


def split_losses(checkpoint, config_file, vocab_file, records, max_records, seed):
  """One row per (encoder rows, output rows) pair of modes, tied pairs first:
  {inputs, outputs, loss, accuracy, new_loss, new_count, other_loss, other_count}
  (new_loss None when no answer is a new word)."""
  import numpy as np
  import tensorflow as tf
  from modeling import checkpoints, pretraining, vocab_growth
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder
  config = BertConfig.from_json_file(config_file)
  ckpt = checkpoints.read_checkpoint(checkpoint)
  base_tokens = vocab_growth.read_tokens(checkpoints.find_vocab(ckpt.path))
  tokens = vocab_growth.read_tokens(vocab_file)
  new_ids = np.array([row for row, _ in vocab_growth.new_rows(base_tokens, tokens,
                                                              len(base_tokens))])
  grown = {mode: vocab_growth.grow(ckpt.weights, vocab_growth.VocabGrowth(
      base_tokens, tokens, config.vocab_size, mode, config.initializer_range, seed))
      for mode in vocab_growth.MODES}
  batches = read_batches(records, max_records)
  model = pretraining.BertPretrainer(BertEncoder(config), next_sentence=False)
  model.build()
  head = model.masked_lm
  rows = []
  modes = vocab_growth.MODES
  for inputs, outputs in [(m, m) for m in modes] + [(a, b) for a in modes for b in modes
                                                    if a != b]:
    checkpoints.load_checkpoint(model, ckpt.path,
                                ckpt=dataclasses.replace(ckpt, weights=grown[inputs]))
    table = tf.constant(grown[outputs][vocab_growth.EMBEDDINGS])
    bias = tf.constant(grown[outputs][vocab_growth.OUTPUT_BIAS])
    sums, counts, correct = np.zeros(2), np.zeros(2), 0.0
    for b in batches:
      hidden = tf.gather(model.encoder(b)["sequence_output"], b["masked_lm_positions"],
                         batch_dims=1)  # [B, P, H]
      logits = tf.einsum("bph,vh->bpv", head.layer_norm(head.activation(head.transform(hidden))),
                         table) + bias  # [B, P, V]
      nll, right = (t.numpy() for t in pretraining.masked_lm_terms(logits, b["masked_lm_ids"]))
      weights = b["masked_lm_weights"].numpy()
      new = np.isin(b["masked_lm_ids"].numpy(), new_ids)
      for kind, where in enumerate((new, ~new)):
        sums[kind] += (nll * weights * where).sum()
        counts[kind] += (weights * where).sum()
      correct += (right * weights).sum()
    rows.append({"inputs": inputs, "outputs": outputs,
                 "loss": float(sums.sum() / counts.sum()),
                 "accuracy": float(correct / counts.sum()),
                 "new_loss": float(sums[0] / counts[0]) if counts[0] else None,
                 "new_count": int(counts[0]), "other_loss": float(sums[1] / counts[1]),
                 "other_count": int(counts[1])})
  return rows


def print_table(rows):
  print("| encoder reads | output scores | MLM loss | accuracy | loss, answer a new word (n) "
        "| loss, other answers (n) |")
  print("|---|---|---|---|---|---|")
  for r in rows:
    new = "-" if r["new_loss"] is None else f"{r['new_loss']:.3f}"
    print(f"| {r['inputs']} | {r['outputs']} | {r['loss']:.4f} | {r['accuracy']:.4f} "
          f"| {new} ({r['new_count']}) | {r['other_loss']:.4f} ({r['other_count']}) |")
