"""Masked-LM / next-sentence instances, step for step the original's algorithm.

The corpus is integer token ids in one flat array: a segment (sentence) is a
[start, end) range of it and a document a run of consecutive segments. Every
random decision is the original's draw from Python's Mersenne Twister, in the
original's order (see `mersenne.py`), so the same corpus, vocab, flags
and seed give the original's instances. The loops are compiled with numba;
they read as the Python they are.

An instance is [CLS] A [SEP] B [SEP] where A and B are each a contiguous token
range (truncation only trims their ends; B is empty when the mode without
next-sentence pairs takes a one-sentence chunk), so it is stored as four offsets,
the next-sentence label and its masked positions with their replacements.
"""

import collections
import dataclasses

import numba
import numpy as np
from numba.typed import List

from data.pretraining import mersenne
from data.pretraining.masking import create_masked_lm_predictions

MaskingVocab = collections.namedtuple(
    "MaskingVocab", ["cls_id", "sep_id", "mask_id", "word_ids", "is_continuation"])
MaskingVocab.__doc__ = """Vocabulary facts as ids: word_ids lists every vocab entry in file
order (a repeated token once), the pool of random replacements;
is_continuation[id] says the token starts with "##"."""

GenerationConfig = collections.namedtuple(
    "GenerationConfig", ["max_seq_length", "max_predictions_per_seq", "masked_lm_prob",
                         "short_seq_prob", "do_whole_word_mask", "dupe_factor", "masking_mix",
                         "next_sentence", "per_word_decision", "max_ngram_size"],
    defaults=[128, 20, 0.15, 0.1, False, 10, (0.8, 0.1, 0.1), True, False, 1])
GenerationConfig.__doc__ = """The generator flags that shape instances (original defaults).
masking_mix: float shares (mask, same, random) of masked positions written as
[MASK], kept, a random word; next_sentence: False makes every B the text that
follows A (no random next, labels all 0); per_word_decision, max_ngram_size:
masking.py's additions (False, 1: the original's masking)."""


def validate_masking_mix(mix, source):
  """Raises ValueError unless `mix` is 3 non-negative shares summing to 1 (within 1e-6)."""
  if len(mix) != 3 or any(not 0.0 <= share <= 1.0 for share in mix) or abs(sum(mix) - 1) > 1e-6:
    raise ValueError(f"{source}: expected three shares MASK,SAME,RANDOM, each in [0, 1] and "
                     f"summing to 1 (e.g. 0.8,0.1,0.1); got {','.join(map(str, mix))}.")


def parse_masking_mix(text, source):
  """The shares of a "MASK,SAME,RANDOM" string; ValueError naming `source` if malformed."""
  try:
    mix = tuple(float(part) for part in text.split(","))
  except ValueError:
    raise ValueError(f"{source}: expected three numbers MASK,SAME,RANDOM such as "
                     "0.8,0.1,0.1.") from None
  validate_masking_mix(mix, source)
  return mix


def masking_vocab(vocab):
  """MaskingVocab from a token -> id dict (`tokenization.load_vocab`)."""
  is_continuation = np.zeros(max(vocab.values()) + 1, np.bool_)
  for token, index in vocab.items():
    is_continuation[index] = token.startswith("##")
  return MaskingVocab(vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"],
                      np.array(list(vocab.values()), np.int64), is_continuation)


@dataclasses.dataclass
class InstanceStore:
  """Instances in compact arrays: ranges [M, 5] = (a_start, a_end, b_start, b_end,
  is_random_next); instance i's masked positions and replacement ids (or masking.KEEP)
  are positions/replacements[mask_offsets[i]:mask_offsets[i + 1]]."""
  ranges: np.ndarray
  mask_offsets: np.ndarray
  positions: np.ndarray
  replacements: np.ndarray

  def __len__(self):
    return len(self.ranges)

  @classmethod
  def concatenate(cls, parts):
    """One store from per-chunk (ranges, mask_counts, positions, replacements)."""
    counts = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return cls(np.concatenate([p[0] for p in parts]).reshape(-1, 5) if parts
               else np.zeros((0, 5), np.int64),
               np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
               np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64),
               np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, np.int64))


@numba.njit(cache=True)
def truncate_seq_pair(a0, a1, b0, b1, max_num_tokens, state):
  """Trims the longer of A, B (B on a tie) at a random end until both fit."""
  while (a1 - a0) + (b1 - b0) > max_num_tokens:
    trim_a = (a1 - a0) > (b1 - b0)
    if mersenne.random(state) < 0.5:  # drop the first token
      if trim_a:
        a0 += 1
      else:
        b0 += 1
    elif trim_a:  # drop the last token
      a1 -= 1
    else:
      b1 -= 1
  return a0, a1, b0, b1


@numba.njit(cache=True)
def _document_instances(corpus_tokens, starts, documents, document_index, config, vocab,
                        state, out_ranges, out_counts, out_positions, out_replacements):
  """Appends one document's instances to the out lists; returns 1 for a short target."""
  first, stop = documents[document_index]
  max_num_tokens = config.max_seq_length - 3
  target_seq_length = max_num_tokens
  short = 0
  if mersenne.random(state) < config.short_seq_prob:
    target_seq_length = mersenne.randint(state, 2, max_num_tokens)
    short = 1
  chunk_first, current_length = first, 0
  i = first
  while i < stop:
    current_length += starts[i + 1] - starts[i]
    if i == stop - 1 or current_length >= target_seq_length:
      chunk_size = i - chunk_first + 1
      a_end = 1 if chunk_size < 2 else mersenne.randint(state, 1, chunk_size - 1)
      a0, a1 = starts[chunk_first], starts[chunk_first + a_end]
      if not config.next_sentence:  # B is the rest of the chunk (empty for one sentence)
        is_random_next = 0
        b0, b1 = a1, starts[i + 1]
      elif chunk_size == 1 or mersenne.random(state) < 0.5:
        is_random_next = 1
        target_b_length = target_seq_length - (a1 - a0)
        random_index = 0
        for _ in range(10):
          random_index = mersenne.randint(state, 0, len(documents) - 1)
          if random_index != document_index:
            break
        r_first, r_stop = documents[random_index]
        j = r_first + mersenne.randint(state, 0, r_stop - r_first - 1)
        b0 = starts[j]
        b1 = b0
        while j < r_stop:
          b1 = starts[j + 1]
          if b1 - b0 >= target_b_length:
            break
          j += 1
        i -= chunk_size - a_end  # the unused segments are read again
      else:
        is_random_next = 0
        b0, b1 = a1, starts[i + 1]
      a0, a1, b0, b1 = truncate_seq_pair(a0, a1, b0, b1, max_num_tokens, state)
      tokens = np.empty(a1 - a0 + b1 - b0 + 3, np.int64)
      tokens[0] = vocab.cls_id
      tokens[1:1 + a1 - a0] = corpus_tokens[a0:a1]
      tokens[1 + a1 - a0] = vocab.sep_id
      tokens[2 + a1 - a0:len(tokens) - 1] = corpus_tokens[b0:b1]
      tokens[len(tokens) - 1] = vocab.sep_id
      positions, replacements = create_masked_lm_predictions(tokens, config, vocab, state)
      for value in (a0, a1, b0, b1, is_random_next):
        out_ranges.append(value)
      out_counts.append(len(positions))
      for k in range(len(positions)):
        out_positions.append(positions[k])
        out_replacements.append(replacements[k])
      chunk_first, current_length = i + 1, 0
    i += 1
  return short


@numba.njit(cache=True)
def documents_instances(corpus_tokens, starts, documents, first, stop, config, vocab, state):
  """Instances of documents[first:stop] (in order), drawing from `state`.

  Returns (ranges [M * 5], mask counts [M], positions, replacements, number of
  short targets) as int64 arrays.
  """
  ranges = List.empty_list(numba.int64)
  counts = List.empty_list(numba.int64)
  positions = List.empty_list(numba.int64)
  replacements = List.empty_list(numba.int64)
  short = 0
  for d in range(first, stop):
    short += _document_instances(corpus_tokens, starts, documents, d, config, vocab, state,
                                 ranges, counts, positions, replacements)
  return (_to_array(ranges), _to_array(counts), _to_array(positions),
          _to_array(replacements), short)


@numba.njit(cache=True)
def _to_array(values):
  out = np.empty(len(values), np.int64)
  for i in range(len(values)):
    out[i] = values[i]
  return out


def create_training_instances(corpus, config, vocab, rng, progress=None, chunk=256):
  """The original's main loop: document shuffle, dupe_factor passes, instance shuffle.

  Args:
    corpus: a documents.Corpus.
    config: GenerationConfig; vocab: MaskingVocab.
    rng: a random.Random, seeded with --random_seed, advanced as the original's.
    progress: optional callable(document passes done, instances so far).
  Returns:
    (store, order, short): the instances, the permutation to write them in,
    and how many document passes drew a short target length.
  """
  state = mersenne.state_from(rng)
  order = np.arange(len(corpus.documents))
  mersenne.shuffle(state, order)
  documents = np.ascontiguousarray(corpus.documents[order])
  parts, short, made = [], 0, 0
  for dupe in range(config.dupe_factor):
    for first in range(0, len(documents), chunk):
      stop = min(first + chunk, len(documents))
      ranges, counts, positions, replacements, n_short = documents_instances(
          corpus.tokens, corpus.segment_starts, documents, first, stop, config, vocab, state)
      # Compact dtypes: positions are below max_seq_length, ids below 2**31.
      part = (ranges, counts, positions.astype(np.int16 if config.max_seq_length < 2**15
                                              else np.int32), replacements.astype(np.int32))
      parts.append(part)
      short += n_short
      made += len(part[1])
      if progress is not None:
        progress(dupe * len(documents) + stop, made)
  store = InstanceStore.concatenate(parts)
  order = np.arange(len(store))
  mersenne.shuffle(state, order)
  mersenne.restore(rng, state)
  return store, order, short
