"""Weights that follow the vocabulary: new word rows started from the base model's pieces.

A run whose vocab extends its starting checkpoint's (learn_vocab.py
--base_vocab_file) has rows the checkpoint never trained: rows past the
checkpoint's last (an appended vocab, config vocab_size larger than the
checkpoint's) and [unusedN] rows that now hold words. `grow` gives each such
row, before the weights are assigned to the model:
  mean_of_pieces: the mean of the base model's embeddings of the pieces the
    base vocab splits the token into, and the mean of their masked-LM output
    biases. The embedding carries the word's meaning into the encoder.
  random: a truncated normal of the config's initializer_range and bias 0,
    as a fresh model's rows.
A token the base vocab can only read as [UNK] gets a random row either way.
The output layer is tied to the embedding (one variable), so it follows.
"""

import dataclasses
import zlib

import numpy as np
from absl import logging

from data import tokenization, vocab_extension

EMBEDDINGS = "bert/embeddings/word_embeddings"
OUTPUT_BIAS = "cls/predictions/output_bias"
MODES = ("mean_of_pieces", "random")


def base_pieces(token, wordpiece):
  """The base vocab's ids of a vocab entry's WordPieces, split by `wordpiece` (a
  tokenization.WordpieceTokenizer of the base vocab); a "##" entry is split as the
  continuation it is. None when some part has no piece."""
  continuation = token.startswith("##")
  pieces = wordpiece.word_pieces(token[2:] if continuation else token, continuation)
  if not pieces or pieces == (wordpiece.unk_token,):
    return None
  return [wordpiece.vocab[p] for p in pieces]


def new_rows(base_tokens, tokens, checkpoint_rows):
  """[(row, token)] of the run's vocab that the checkpoint did not train as that token:
  rows at or past checkpoint_rows or past the base vocab's last entry (a checkpoint may
  hold more rows than its vocab has entries: padding), and base [unusedN] rows that now
  hold another token."""
  rows = []
  for row, token in enumerate(tokens):
    if row >= checkpoint_rows or (base_tokens and row >= len(base_tokens)):
      rows.append((row, token))
    elif row < len(base_tokens) and vocab_extension.is_unused(base_tokens[row]) and token != base_tokens[row]:
      rows.append((row, token))
  return rows


@dataclasses.dataclass
class VocabGrowth:
  """How to grow a checkpoint's word rows to a run's vocab (see `grow`)."""
  base_tokens: list  # the checkpoint's vocab in id order ([] if unknown)
  tokens: list  # the run's vocab in id order ([] if unknown)
  vocab_size: int  # the model's rows
  mode: str = "mean_of_pieces"
  initializer_range: float = 0.02
  seed: int = None

  def __call__(self, ckpt):
    """The Checkpoint with its word rows grown; unchanged when nothing is new."""
    weights = grow(ckpt.weights, self)
    return ckpt if weights is ckpt.weights else dataclasses.replace(ckpt, weights=weights)


def grow(weights, growth):
  """`weights` ({name: array}) with word rows grown per `growth`; the same dict if none is new."""
  if EMBEDDINGS not in weights:
    return weights
  table = weights[EMBEDDINGS]
  base_rows = len(table)
  if base_rows > growth.vocab_size:
    return weights  # a smaller model: the load reports the mismatch
  tokens = growth.tokens or []
  base_tokens = growth.base_tokens or tokens[:base_rows]
  rows = new_rows(base_tokens, tokens, base_rows)
  listed = {row for row, _ in rows}
  rows += [(row, None) for row in range(base_rows, growth.vocab_size) if row not in listed]
  if not rows:
    return weights
  # Without a seed, one derived from the new tokens: every worker of a multi-worker run
  # grows the same rows alike.
  seed = growth.seed
  if seed is None:
    seed = zlib.crc32("\n".join(str(token) for _, token in rows).encode("utf-8"))
  rng = np.random.default_rng(seed)
  wordpiece = tokenization.WordpieceTokenizer(
      {t: i for i, t in enumerate(base_tokens) if i < base_rows})
  bias = weights.get(OUTPUT_BIAS)
  grown = np.zeros((growth.vocab_size, table.shape[1]), table.dtype)
  grown[:base_rows] = table
  grown_bias = None
  if bias is not None:
    grown_bias = np.zeros(growth.vocab_size, bias.dtype)
    grown_bias[:base_rows] = bias
  from_pieces = []
  for row, token in rows:
    pieces = base_pieces(token, wordpiece) if token and growth.mode == "mean_of_pieces" else None
    if pieces:
      grown[row] = table[pieces].mean(axis=0)
      if grown_bias is not None:
        grown_bias[row] = bias[pieces].mean()
      from_pieces.append(row)
    else:  # as BERT's initializer: a normal truncated at two standard deviations (redrawn)
      grown[row] = truncated_normal(rng, growth.initializer_range, table.shape[1])
      if grown_bias is not None:
        grown_bias[row] = 0.0
  appended = growth.vocab_size - base_rows
  logging.info(
      "New vocabulary rows (%d appended to the checkpoint's %d, %d [unusedN] rows now words): "
      "%d initialised as the mean of their base pieces' embeddings%s, %d at "
      "random%s.", appended, base_rows, len(rows) - appended, len(from_pieces),
      " and output biases" if grown_bias is not None else "",
      len(rows) - len(from_pieces),
      "" if growth.mode == "random" else " (no pieces in the base vocab)")
  out = dict(weights)
  out[EMBEDDINGS] = grown
  if grown_bias is not None:
    out[OUTPUT_BIAS] = grown_bias
  return out


def truncated_normal(rng, stddev, size):
  """`size` draws of a normal of mean 0 and `stddev`, each beyond two standard deviations
  drawn again (TensorFlow's truncated_normal, BERT's initializer)."""
  values = rng.normal(0.0, stddev, size)
  while (outside := np.abs(values) > 2 * stddev).any():
    values[outside] = rng.normal(0.0, stddev, int(outside.sum()))
  return values


def read_tokens(vocab_file):
  """A vocab's entries in id order; [] without a file."""
  return tokenization.vocab_tokens(vocab_file) if vocab_file else []


def growth_for(init_checkpoint, vocab_file, config, mode="mean_of_pieces", seed=None):
  """The VocabGrowth of a run starting from `init_checkpoint` with `vocab_file` (the base
  vocab: the vocab.txt beside the checkpoint, if any); None without a checkpoint."""
  if not init_checkpoint:
    return None
  from modeling import checkpoints
  try:
    base_vocab_file = checkpoints.find_vocab(init_checkpoint)
  except ValueError:
    base_vocab_file = None
  return VocabGrowth(read_tokens(base_vocab_file), read_tokens(vocab_file), config.vocab_size,
                     mode, config.initializer_range, seed)
