"""run_pretraining --dynamic_masking: masks drawn anew each pass (data/dynamic_masking.py).

Checked against the generator's documented rule (round(n * masked_lm_prob) of the
non-[CLS]/[SEP] tokens, each 80/10/10 [MASK]/kept/random) with bounds of 5 binomial
standard deviations; seeded, so the same on every machine.
"""

import numpy as np
import pytest
import tensorflow as tf

from data import dynamic_masking, features, pipeline
from data.pretraining import generation, instances
from test_pretraining_data import make_corpus, make_vocab

CLS, SEP, MASK, VOCAB_SIZE = 2, 3, 4, 100
S, P = 48, 8


def batch_of(rows, seed):
  """Records as the generator writes them (one old mask), of real lengths 20..S."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((rows, S), np.int32)
  lengths = rng.integers(20, S + 1, rows)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(5, VOCAB_SIZE, n)
    ids[i, [0, n // 2, n - 1]] = [CLS, SEP, SEP]
  text = ids.copy()
  positions = np.zeros((rows, P), np.int32)
  positions[:, :3] = [1, 2, 4]
  old = {"input_ids": ids, "input_mask": (np.arange(S) < lengths[:, None]).astype(np.int32),
         "segment_ids": np.zeros_like(ids), "masked_lm_positions": positions,
         "masked_lm_ids": np.where(np.arange(P) < 3, np.take_along_axis(text, positions, 1), 0),
         "masked_lm_weights": (np.arange(P) < 3).astype(np.float32)[None].repeat(rows, 0),
         "next_sentence_labels": np.zeros((rows, 1), np.int32)}
  old["input_ids"][:, [1, 2, 4]] = MASK
  return old, text, lengths


def five_sigma(share, count):
  return 5 * np.sqrt(share * (1 - share) / count)


def test_each_pass_masks_anew_by_the_generator_rule():
  old, text, lengths = batch_of(3000, seed=0)
  data = tf.data.Dataset.from_tensors(old).repeat(2)
  passes = [{k: v.numpy() for k, v in b.items()} for b in dynamic_masking.dynamic_masking(
      data, 7, VOCAB_SIZE, CLS, SEP, MASK, 0.15)]
  assert len(passes) == 2
  assert not np.array_equal(passes[0]["masked_lm_positions"], passes[1]["masked_lm_positions"])
  kinds = np.zeros(2)  # [MASK], the token itself
  for b in passes:
    real = b["masked_lm_weights"] > 0
    want = np.minimum(P, np.maximum(1, np.round(lengths * 0.15).astype(int)))
    np.testing.assert_array_equal(real.sum(1), want)
    rows = np.nonzero(real)[0]
    positions = b["masked_lm_positions"][real]
    assert (text[rows, positions] > SEP).all(), "never [CLS], [SEP] or padding"
    assert (np.diff(np.where(real, b["masked_lm_positions"], S + np.arange(P)), axis=1) > 0).all()
    np.testing.assert_array_equal(b["masked_lm_ids"][real], text[rows, positions])
    assert (b["masked_lm_ids"][~real] == 0).all() and (b["masked_lm_positions"][~real] == 0).all()
    unmasked = np.ones_like(text, bool)
    unmasked[rows, positions] = False
    np.testing.assert_array_equal(b["input_ids"][unmasked], text[unmasked])  # old mask undone
    written = b["input_ids"][rows, positions]
    kinds += [(written == MASK).sum(), (written == text[rows, positions]).sum()]
  count = sum((b["masked_lm_weights"] > 0).sum() for b in passes)
  # A random id is [MASK] or the token itself one time in VOCAB_SIZE each.
  expected = [0.8 + 0.1 / VOCAB_SIZE, 0.1 + 0.1 / VOCAB_SIZE]
  for observed, share in zip(kinds / count, expected):
    assert abs(observed - share) <= five_sigma(share, count), (kinds / count, expected)


def test_every_candidate_position_is_equally_likely():
  old, text, lengths = batch_of(4000, seed=1)
  old = {k: v[lengths == S] for k, v in old.items()}  # one length: fixed [SEP] places
  b = next(iter(dynamic_masking.dynamic_masking(
      tf.data.Dataset.from_tensors(old), 3, VOCAB_SIZE, CLS, SEP, MASK, 0.15)))
  rows = len(old["input_ids"])
  hits = np.zeros(S)
  real = b["masked_lm_weights"].numpy() > 0
  np.add.at(hits, b["masked_lm_positions"].numpy()[real], 1)
  candidates = [j for j in range(S) if j not in (0, S // 2, S - 1)]
  share = round(S * 0.15) / len(candidates)
  assert rows > 50
  assert np.all(np.abs(hits[candidates] / rows - share) <= five_sigma(share, rows))
  assert hits[[0, S // 2, S - 1]].sum() == 0


def test_masked_anew_on_generator_records(tmp_path):
  """The training pipeline's batches, from real records: labels are the text's tokens."""
  vocab_file = make_vocab(tmp_path / "vocab.txt")
  corpus = make_corpus(tmp_path / "corpus.txt", documents=8, seed=2)
  out = str(tmp_path / "records")
  generation.generate_exact([corpus], [out], vocab_file, True,
                            instances.GenerationConfig(32, 5, 0.15, 0.1, False, 1), 4)
  from data import tokenization
  vocab = tokenization.load_vocab(vocab_file)
  spec = features.pretraining_feature_spec(32, 5)

  class Context:
    input_pipeline_id = 0

  plain = lambda ctx: pipeline.record_dataset(out, spec, 16, True, seed=1)
  masked = dynamic_masking.masked_anew(plain, vocab, 0.15, seed=1)(Context())
  for a, b in zip(plain(Context()).take(3), masked.take(3)):
    text = dynamic_masking.original_tokens(a).numpy()
    np.testing.assert_array_equal(dynamic_masking.original_tokens(b).numpy(), text)
    real = b["masked_lm_weights"].numpy() > 0
    assert real.any(1).all()
    assert not np.array_equal(a["masked_lm_positions"].numpy(), b["masked_lm_positions"].numpy())
  # Whole words, grouped by the generator's own function: none is masked in part.
  from data.pretraining import masking
  words = dynamic_masking.masked_anew(plain, vocab, 0.15, seed=1, per_word_decision=True)
  for b in words(Context()).take(3):
    ids = dynamic_masking.original_tokens(b).numpy()
    for row, n, positions in zip(ids, b["input_mask"].numpy().sum(1),
                                 b["masked_lm_positions"].numpy()):
      candidates, starts, groups = masking._candidate_groups(
          row[:n].astype(np.int64), instances.masking_vocab(vocab), True)
      masked = np.zeros(n, bool)
      masked[positions[positions > 0]] = True
      for g in range(groups):
        word = masked[candidates[starts[g]:starts[g + 1]]]
        assert word.all() or not word.any(), row[candidates[starts[g]:starts[g + 1]]]


# Whole words: ids of 50 and up are "##" pieces, so a word has about two pieces.
CONTINUATION = np.arange(VOCAB_SIZE) >= 50


def python_words(ids, length):
  """Each position's word number (-1 for [CLS]/[SEP]/padding), grouped as the generator's
  _candidate_groups groups them: a "##" piece joins the last word before it."""
  words, count = np.full(S, -1), 0
  for j in range(length):
    if ids[j] in (CLS, SEP):
      continue
    if not (count > 0 and CONTINUATION[ids[j]]):
      count += 1
    words[j] = count - 1
  return words


def test_words_are_numbered_and_taken_by_the_generators_rules():
  old, text, lengths = batch_of(200, seed=5)
  candidate = (old["input_mask"] > 0) & (text != CLS) & (text != SEP)
  got = dynamic_masking.word_numbers(tf.constant(text), tf.constant(candidate),
                                     tf.constant(CONTINUATION)).numpy()
  for row in range(200):
    np.testing.assert_array_equal(got[row], python_words(text[row], lengths[row]))
  # A table shorter than the ids (a config padded past its vocab): those ids start words.
  short = dynamic_masking.word_numbers(tf.constant([[CLS, 60, 70, 99, SEP]]),
                                       tf.constant([[False, True, True, True, False]]),
                                       tf.constant(CONTINUATION[:70])).numpy()
  np.testing.assert_array_equal(short, [[-1, 0, 1, 2, -1]])
  rng = np.random.default_rng(6)
  sizes = rng.integers(0, 5, (300, 12))  # pieces per word in the order tried; 0: no word
  budget = rng.integers(1, 12, 300)
  taken = dynamic_masking.take_words(tf.constant(sizes, tf.int32),
                                     tf.constant(budget, tf.int32)).numpy()
  for row in range(300):  # the generator's loop: skip a word that would pass the budget
    total, want = 0, []
    for size in sizes[row]:
      want.append(bool(size) and total + size <= budget[row])
      total += size if want[-1] else 0
    np.testing.assert_array_equal(taken[row], want)


def test_whole_words_never_pass_the_prediction_slots():
  """With 3 slots (records of max_predictions_per_seq=3) and words of up to 4 pieces, a word
  that would not fit is skipped whole, never cut."""
  old, text, lengths = batch_of(500, seed=10)
  old = {k: v[:, :3] if k.startswith("masked_lm") else v for k, v in old.items()}
  b = next(iter(dynamic_masking.dynamic_masking(
      tf.data.Dataset.from_tensors(old), 11, VOCAB_SIZE, CLS, SEP, MASK, 0.15,
      continuation=CONTINUATION)))
  positions, weights = b["masked_lm_positions"].numpy(), b["masked_lm_weights"].numpy()
  assert positions.shape == (500, 3)
  for row in range(500):
    words = python_words(text[row], lengths[row])
    masked = np.zeros(S, bool)
    masked[positions[row][weights[row] > 0]] = True
    size = np.bincount(words[words >= 0])
    hit = np.bincount(words[masked], minlength=len(size))
    assert np.all((hit == 0) | (hit == size)) and 0 < masked.sum() <= 3


@pytest.mark.parametrize("per_word_decision", [False, True])
def test_whole_words_are_masked_anew_whole(per_word_decision):
  old, text, lengths = batch_of(3000, seed=8)
  b = next(iter(dynamic_masking.dynamic_masking(
      tf.data.Dataset.from_tensors(old), 9, VOCAB_SIZE, CLS, SEP, MASK, 0.15,
      continuation=CONTINUATION, per_word_decision=per_word_decision)))
  b = {k: v.numpy() for k, v in b.items()}
  kinds, mixed, multi = np.zeros(3), 0, 0  # words all [MASK], all kept, other
  first_last = np.zeros(2)  # how often each row's first and last word are masked
  for row in range(3000):
    words = python_words(text[row], lengths[row])
    real = b["masked_lm_weights"][row] > 0
    positions = b["masked_lm_positions"][row][real]
    np.testing.assert_array_equal(b["masked_lm_ids"][row][real], text[row, positions])
    masked = np.zeros(S, bool)
    masked[positions] = True
    count = min(P, max(1, round(lengths[row] * 0.15)))
    size = np.bincount(words[words >= 0])
    hit = np.bincount(words[masked], minlength=len(size))
    assert np.all((hit == 0) | (hit == size)), "a word masked in part"
    # Taken in some order, each word whole and skipped when it would pass the budget:
    # at most `count` pieces, and no word left out would still have fitted.
    assert masked.sum() <= count and np.all(size[hit == 0] > count - masked.sum())
    first_last += hit[0] > 0, hit[-1] > 0
    for word in np.nonzero(hit)[0]:
      written = b["input_ids"][row, words == word]
      original = text[row, words == word]
      kind = 0 if (written == MASK).all() else 1 if (written == original).all() else 2
      kinds[kind] += 1
      if len(written) > 1:
        multi += 1
        mixed += (written == MASK).any() and not (written == MASK).all()
  total = kinds.sum()
  assert total > 9000 and multi > 3000  # five standard deviations of 0.8: about 0.02
  # Words are tried in a random order: a row's first word is masked as often as its last
  # (trying them by position would mask nearly every first word).
  share = first_last.mean() / 3000
  assert abs(first_last[0] - first_last[1]) / 3000 <= 2 * five_sigma(share, 3000)
  if per_word_decision:
    # One draw per word: [MASK] 0.8 and kept 0.1, plus a random word whose every piece
    # happened to be [MASK] or itself (at most 1 / VOCAB_SIZE); [MASK] mixed with other
    # ids only where a random piece drew [MASK] (0.1 x 1 / VOCAB_SIZE a piece).
    for observed, share in zip(kinds[:2] / total, (0.8, 0.1)):
      assert abs(observed - share) <= five_sigma(share, total) + 1 / VOCAB_SIZE
    assert mixed / multi <= 0.1 * 4 / VOCAB_SIZE + five_sigma(0.004, multi)
  else:
    # One draw per piece, as the generator's --do_whole_word_mask: a word of two pieces
    # is [MASK] on one and not the other 2 x 0.8 x 0.2 = 0.32 of the time.
    assert mixed / multi > 0.25
