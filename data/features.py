"""Model inputs from text: [CLS] a [SEP] b [SEP] packing, and text-pair files."""

import dataclasses
import re

import numpy as np
import tensorflow as tf

from data import files, record_checks, text_decoding

_PAIR_LINE = re.compile(r"^(.*) \|\|\| (.*)$")


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Pops tokens off the end of the longer list (b on a tie) until both fit."""
  while len(tokens_a) + len(tokens_b) > max_length:
    (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


@dataclasses.dataclass
class PairFeatures:
  """One packed example: the tokens and the three model inputs (unpadded)."""
  tokens: list
  input_ids: list
  segment_ids: list


def pack_pair(tokenizer, text_a, text_b, max_seq_length):
  """Tokenizes and packs `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`.

  A pair is truncated by popping from the end of the longer side (b on a tie),
  a single text by cutting its end, so the result has at most max_seq_length
  tokens. As in the original, a b that is empty, or has no pieces before or after
  the truncation, packs as a single text (no second [SEP]).
  """
  needed = 3 if text_b else 2
  if max_seq_length < needed:
    raise ValueError(f"A maximum of {max_seq_length} tokens leaves no room for "
                     f"{'a pair' if text_b else 'a text'}: [CLS] and [SEP]s "
                     f"alone take {needed}.")
  ids_a = tokenizer.tokenize_to_ids(text_a)
  ids_b = tokenizer.tokenize_to_ids(text_b) if text_b else None
  if ids_b:
    truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
  else:
    ids_a = ids_a[:max_seq_length - 2]
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  input_ids = [cls_id] + ids_a + [sep_id]
  segment_ids = [0] * len(input_ids)
  if ids_b:
    input_ids += ids_b + [sep_id]
    segment_ids += [1] * (len(ids_b) + 1)
  return PairFeatures(tokenizer.convert_ids_to_tokens(input_ids), input_ids, segment_ids)


def pad_batch(packed, max_seq_length):
  """Stacks PairFeatures into int32 arrays [B, max_seq_length] with zero padding."""
  batch = {name: np.zeros((len(packed), max_seq_length), np.int32)
           for name in ("input_ids", "input_mask", "segment_ids")}
  for i, p in enumerate(packed):
    n = len(p.input_ids)
    batch["input_ids"][i, :n] = p.input_ids
    batch["input_mask"][i, :n] = 1
    batch["segment_ids"][i, :n] = p.segment_ids
  return batch


def read_text_pairs(path, undecodable):
  """Lines of `text_a` or `text_a ||| text_b` -> list of (text_a, text_b or None).

  UTF-16/32 text is refused (ValueError naming the file); other bytes that are
  not UTF-8 are dropped, as the original drops them, and counted in
  `undecodable` (text_decoding.Undecodable).
  """
  pairs = []
  try:
    with files.open_file(path, "rb") as f:
      for number, raw in enumerate(f, start=1):
        text_decoding.check_not_wide(raw, f"{path}:{number}", at_start=number == 1)
        line = undecodable.decode(raw, path, number).strip()
        m = _PAIR_LINE.match(line)
        pairs.append((m.group(1), m.group(2)) if m else (line, None))
  except OSError as e:
    raise ValueError(f"Cannot read {path}: {e}") from e
  return pairs


# --- TFRecord examples -----------------------------------------------------

def pretraining_feature_spec(max_seq_length, max_predictions_per_seq):
  """The original run_pretraining parsing spec for the generator's records."""
  L, P = max_seq_length, max_predictions_per_seq
  return {
      "input_ids": tf.io.FixedLenFeature([L], tf.int64),
      "input_mask": tf.io.FixedLenFeature([L], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([L], tf.int64),
      "masked_lm_positions": tf.io.FixedLenFeature([P], tf.int64),
      "masked_lm_ids": tf.io.FixedLenFeature([P], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([P], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }


def check_pretraining_records(patterns, max_seq_length, max_predictions_per_seq, config,
                              compression=""):
  """Raises ValueError naming the file whose records do not fit pretraining.

  patterns: {flag: comma-separated paths or globs}. Every file's first record
  must have the layout the lengths give, and the ids of its first records
  must fit the config's tables (ids the embedding tables lack would fail deep
  in a step, or read zeros on GPUs).
  """
  spec, hints, limits = pretraining_record_checks(max_seq_length, max_predictions_per_seq, config)
  for flag, pattern in patterns.items():
    record_checks.check_records(pattern, spec, hints, compression, limits, source=flag)


def pretraining_record_checks(max_seq_length, max_predictions_per_seq, config):
  """What pretraining records are checked against (record_checks.check_records' spec,
  flag_hint and id_limits): their layout, the flag that sets each length, and the ranges
  the config's tables give the ids."""
  spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq)
  hints = {n: "--max_seq_length" for n in ("input_ids", "input_mask", "segment_ids")}
  hints.update({n: "--max_predictions_per_seq" for n in
                ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")})
  vocab = (config.vocab_size, "the config's vocab_size")
  limits = {"input_ids": vocab, "masked_lm_ids": vocab,
            "segment_ids": (config.type_vocab_size, "the config's type_vocab_size"),
            "masked_lm_positions": (max_seq_length, "--max_seq_length")}
  return spec, hints, limits


def check_pretraining_inputs(input_file, eval_input_file, max_seq_length,
                             max_predictions_per_seq, config, compression="",
                             whole_eval_batch=None):
  """check_pretraining_records over --input_file and --eval_input_file (when given); with
  whole_eval_batch (a batch size), also that the evaluation records (--eval_input_file,
  else --input_file) fill one whole batch (record_checks.check_whole_batch)."""
  patterns = {flag: pattern for flag, pattern in (("--input_file", input_file),
                                                  ("--eval_input_file", eval_input_file))
              if pattern}
  check_pretraining_records(patterns, max_seq_length, max_predictions_per_seq, config,
                            compression)
  if whole_eval_batch:
    record_checks.check_whole_batch(eval_input_file or input_file, compression, whole_eval_batch)
