"""extract_features.py's work: chosen encoder layers' values for every token of every input
line, run in batches and written as the original's JSON lines.

One record per line, in the original's layout and spelling:
  {"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]}]}]}
with values rounded to 6 decimals, for every real token, [CLS] and [SEP] included.
"""

import json
import time

import numpy as np
import tensorflow as tf
from absl import logging

from data import features, files


def feature_json(index, tokens, layer_outputs, layer_indexes):
  """The original's JSON record of one example.

  Args:
    index: the example's line number, from 0.
    tokens: its S tokens, [CLS] and [SEP] included.
    layer_outputs: per entry of layer_indexes, a float array [>= S, H] of its values.
    layer_indexes: the encoder_outputs indexes written (-1: the last block).
  """
  records = []
  for position, token in enumerate(tokens):
    records.append({"token": token, "layers": [
        {"index": layer, "values": [round(float(v), 6) for v in values[position]]}
        for layer, values in zip(layer_indexes, layer_outputs)]})
  return {"linex_index": index, "features": records}


def write_features(encoder, tokenizer, pairs, layer_indexes, output_file, max_seq_length,
                   batch_size, length_multiple=0):
  """Runs `encoder` over `pairs` and writes one JSON line per pair to `output_file`.

  Args:
    encoder: a BertEncoder holding the weights to read.
    tokenizer: the FullTokenizer of the encoder's vocab.
    pairs: [(text_a, text_b or None)], one per input line, in order.
    layer_indexes: the encoder_outputs indexes to write (-1: the last block).
    output_file: written under a temporary name, in place once complete.
    max_seq_length: tokens per example, [CLS] and [SEP] included; longer input is cut.
    batch_size: examples per batch.
    length_multiple: each batch is padded to its longest example rounded up to this
      multiple (at most max_seq_length); 0 pads every batch to max_seq_length.
  """
  @tf.function(reduce_retracing=True)
  def layer_outputs(batch):
    outputs = encoder(batch, training=False)["encoder_outputs"]
    return [outputs[i] for i in layer_indexes]

  multiple = length_multiple or max_seq_length
  start = time.time()
  with files.atomic_output(output_file) as out:
    for first in range(0, len(pairs), batch_size):
      packed = [features.pack_pair(tokenizer, a, b, max_seq_length)
                for a, b in pairs[first:first + batch_size]]
      # Padding is masked, so a batch is padded only to its longest example, rounded up.
      longest = max(len(p.input_ids) for p in packed)
      length = min(max_seq_length, -(-longest // multiple) * multiple)
      values = [np.asarray(v) for v in layer_outputs(features.pad_batch(packed, length))]
      for k, p in enumerate(packed):
        record = feature_json(first + k, p.tokens, [v[k] for v in values], layer_indexes)
        out.write(json.dumps(record) + "\n")
      done = first + len(packed)
      rate = done / max(time.time() - start, 1e-9)
      logging.info("%d/%d lines, %.1f lines/s, ETA %.0fs", done, len(pairs), rate,
                   (len(pairs) - done) / rate)
  logging.info("Wrote %d lines to %s in %.1fs.", len(pairs), output_file, time.time() - start)
