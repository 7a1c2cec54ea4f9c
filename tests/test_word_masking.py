"""Masking that follows words: per-word decisions and n-gram spans (data/pretraining/masking.py).

Statistics are checked on generated id sequences against the rules the flags
state (the masking mix per decision unit, the budget round(n * masked_lm_prob),
span lengths with P(n) proportional to 1/n); each bound is 5 binomial standard
deviations of the share it tests, seeded so it is the same on every machine.
"""

import random

import numpy as np
import pytest

from data import tokenization
from data.pretraining import generation, instances, masking, mersenne
from test_pretraining_data import check_statistics, make_corpus, make_vocab, read_records

CLS, SEP, MASK = 2, 3, 4
STARTS = np.arange(5, 25)  # ids of word-initial pieces
CONTINUATIONS = np.arange(25, 40)  # ids of "##" pieces
IS_CONTINUATION = np.zeros(40, np.bool_)
IS_CONTINUATION[CONTINUATIONS] = True
# The random-word pool leaves out [MASK], so that a random draw is never read as [MASK].
VOCAB = instances.MaskingVocab(CLS, SEP, MASK, np.arange(5, 40, dtype=np.int64), IS_CONTINUATION)


def sequences(count, seed, max_pieces=3, words=(40, 60)):
  """[CLS] A [SEP] B [SEP] id arrays with words of 1..max_pieces pieces, and for each
  position its word's number counted across all sequences (-1 for [CLS]/[SEP])."""
  rng = np.random.default_rng(seed)
  out, first_word = [], 0
  for _ in range(count):
    counts = rng.integers(*words, size=2)
    pieces = rng.integers(1, max_pieces + 1, size=counts.sum())
    word_of = np.repeat(np.arange(first_word, first_word + len(pieces)), pieces)
    is_first = np.diff(word_of, prepend=-1) != 0
    tokens = np.where(is_first, rng.choice(STARTS, len(word_of)),
                      rng.choice(CONTINUATIONS, len(word_of)))
    cut = pieces[:counts[0]].sum()
    tokens = np.concatenate([[CLS], tokens[:cut], [SEP], tokens[cut:], [SEP]])
    word_of = np.concatenate([[-1], word_of[:cut], [-1], word_of[cut:], [-1]])
    out.append((tokens.astype(np.int64), word_of))
    first_word += len(pieces)
  return out


def five_sigma(share, count):
  return 5 * np.sqrt(share * (1 - share) / count)


def budget(n, config):
  return min(config.max_predictions_per_seq, max(1, int(round(n * config.masked_lm_prob))))


@pytest.mark.parametrize("mix", [(0.8, 0.1, 0.1), (0.5, 0.2, 0.3)])
def test_per_word_decision_masks_whole_words_with_one_draw_each(mix):
  config = instances.GenerationConfig(256, 40, 0.15, masking_mix=mix, per_word_decision=True)
  state = mersenne.state_from(random.Random(1))
  words, kinds, total_tokens, all_words = [], [], 0, []
  for tokens, word_of in sequences(1200, seed=0):
    positions, replacements = masking.create_masked_lm_predictions(tokens, config, VOCAB, state)
    limit = budget(len(tokens), config)
    # Whole words only: the budget can end at most a longest word (3 pieces) minus one short.
    assert limit - 2 <= len(positions) <= limit
    words.append(word_of[positions])
    kinds.append(np.where(replacements == MASK, 0, np.where(replacements == masking.KEEP, 1, 2)))
    total_tokens += len(tokens)
    all_words.append(word_of)
  words, kinds = np.concatenate(words), np.concatenate(kinds)
  assert (words >= 0).all()  # never [CLS] / [SEP]
  length = np.bincount(np.concatenate(all_words) + 1)[1:]  # pieces per word
  masked_words = np.unique(words)
  np.testing.assert_array_equal(np.bincount(words)[masked_words], length[masked_words])
  # One decision per word: the same kind on all its pieces.
  lowest = np.full(len(length), 3)
  highest = np.full(len(length), -1)
  np.minimum.at(lowest, words, kinds)
  np.maximum.at(highest, words, kinds)
  assert (lowest[masked_words] == highest[masked_words]).all()
  count = len(masked_words)
  assert count > 15_000
  shares = np.bincount(lowest[masked_words], minlength=3) / count
  for observed, share in zip(shares, mix):  # 5 sigma, and the 0.02
    assert abs(observed - share) <= min(0.02, five_sigma(share, count)), (shares, mix)
  # The masked share of all tokens: the budget's rounding and whole words keep it close.
  assert abs(len(words) / total_tokens - 0.15) < 0.01


def test_ngram_span_lengths_follow_one_over_n():
  N = 3
  config = instances.GenerationConfig(256, 40, 0.15, max_ngram_size=N)
  state = mersenne.state_from(random.Random(2))
  first = np.zeros(N + 1)
  expected = np.zeros(N + 1)
  weights = 1 / np.arange(1, N + 1)
  given_left = np.zeros((N + 1, N + 1))  # row k: the 1/n distribution over 1..k
  for k in range(1, N + 1):
    given_left[k, 1:k + 1] = weights[:k] / weights[:k].sum()
  all_kinds = []
  for tokens, word_of in sequences(1500, seed=1, max_pieces=1, words=(5, 30)):
    positions, replacements, spans = masking.mask_word_spans(tokens, config, VOCAB, state)
    # One-piece words always fit the budget exactly, and spans never cross a [SEP].
    assert len(positions) == budget(len(tokens), config) == spans.sum()
    assert spans.max() <= N and not np.isin(tokens[positions], [CLS, SEP]).any()
    # The first span chosen is never cut by the budget or an earlier span: its length
    # is the 1/n draw over the words left in its segment from a uniform start word.
    first[spans[0]] += 1
    starts = np.flatnonzero(word_of >= 0)
    seps = np.flatnonzero(tokens == SEP)
    left = seps[np.searchsorted(seps, starts)] - starts
    expected += given_left[np.minimum(left, N)].mean(axis=0)
    all_kinds.append(np.where(replacements == MASK, 0,
                              np.where(replacements == masking.KEEP, 1, 2)))
  count = first.sum()
  for n in range(1, N + 1):
    share = expected[n] / count
    assert abs(first[n] / count - share) <= five_sigma(share, count), (first, expected)
  # Without per_word_decision the mix is drawn per token, as the original.
  kinds = np.concatenate(all_kinds)
  for observed, share in zip(np.bincount(kinds) / len(kinds), (0.8, 0.1, 0.1)):
    assert abs(observed - share) <= five_sigma(share, len(kinds))


def test_generator_records_with_word_masking(tmp_path):
  """Through the generator: records mask whole words, the summary says how."""
  vocab_file = make_vocab(tmp_path / "vocab.txt")
  corpus = make_corpus(tmp_path / "corpus.txt", documents=20, seed=5)
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 2, per_word_decision=True,
                                      max_ngram_size=3)
  out = str(tmp_path / "out.tfrecord")
  summary = generation.generate_exact([corpus], [out], vocab_file, True, config, 3)
  records = read_records([out], 64, 10)
  inv = tokenization.FullTokenizer(vocab_file).inv_vocab
  check_statistics(records, inv, 2, 3, 4, whole_word=True)
  assert any("one [MASK]/kept/random decision per word, spans of 1-3 whole words" in line
             for line in summary.lines())
  default = str(tmp_path / "default.tfrecord")  # and the additions do change the draws
  generation.generate_exact([corpus], [default], vocab_file, True,
                            config._replace(per_word_decision=False, max_ngram_size=1), 3)
  assert open(out, "rb").read() != open(default, "rb").read()
