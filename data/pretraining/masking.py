"""Which positions of an instance are masked, and what is written there.

`create_masked_lm_predictions` is the original's rule, draw for draw: the
candidates ([CLS]/[SEP] excluded; whole words with do_whole_word_mask) are
shuffled and taken in that order until masked_lm_prob of the tokens are
covered, and each *token* independently becomes [MASK], keeps its value or a
random word (the masking mix, 80/10/10).

Two additions, off by default (the original's draws are then unchanged):
  per_word_decision: the [MASK] / keep / random choice is drawn once per
    word and applies to all its WordPieces (the original draws it per piece,
    so a masked word can come out half [MASK], half itself).
  max_ngram_size N > 1: n-gram (span) masking of whole words. Each shuffled
    start word opens a span of n consecutive words of its segment, n drawn
    with probability proportional to 1/n over 1..N (fewer when the segment
    ends sooner), shortened while it would exceed the budget; a span touching
    a masked position is skipped.
Either addition makes the candidates whole words.
"""

import numba
import numpy as np

from data.pretraining import mersenne

KEEP = -1  # replacement code: the masked position keeps its original token


@numba.njit(cache=True)
def _candidate_groups(tokens, vocab, whole_words):
  """(candidates, group_starts, groups): positions other than [CLS]/[SEP] and, for
  each group (a whole word when whole_words, else one token), its slice of them."""
  n = len(tokens)
  candidates = np.empty(n, np.int64)
  group_starts = np.empty(n + 1, np.int64)
  count, groups = 0, 0
  for i in range(n):
    token = tokens[i]
    if token == vocab.cls_id or token == vocab.sep_id:
      continue
    if not (whole_words and groups > 0 and vocab.is_continuation[token]):
      group_starts[groups] = count
      groups += 1
    candidates[count] = i
    count += 1
  group_starts[groups] = count
  return candidates, group_starts, groups


@numba.njit(cache=True)
def _draw(config, vocab, state):
  """The masking mix for one decision unit: vocab.mask_id, KEEP or a random word id."""
  mask_share, same_share, random_share = config.masking_mix
  rest = same_share + random_share
  keep_share = same_share / rest if rest > 0.0 else 1.0
  # The original's draws: r1 < 0.8 -> [MASK], else r2 < 0.5 -> keep. With the
  # default mix 0.1 / (0.1 + 0.1) is exactly 0.5, so the draws are identical.
  if mersenne.random(state) < mask_share:
    return vocab.mask_id
  if mersenne.random(state) < keep_share:
    return KEEP
  return -2  # random: the caller draws the word (one per WordPiece)


@numba.njit(cache=True)
def _random_word(vocab, state):
  return vocab.word_ids[mersenne.randint(state, 0, len(vocab.word_ids) - 1)]


@numba.njit(cache=True)
def _num_to_predict(n, config):
  return min(config.max_predictions_per_seq, max(1, int(round(n * config.masked_lm_prob))))


@numba.njit(cache=True)
def _uncovered(candidates, lo, hi, covered):
  """Whether none of the positions candidates[lo:hi] is masked yet."""
  for k in range(lo, hi):
    if covered[candidates[k]]:
      return False
  return True


@numba.njit(cache=True)
def create_masked_lm_predictions(tokens, config, vocab, state):
  """Chooses masked positions and their replacements, as the original does
  (or with the additions above when configured).

  Args:
    tokens: int [n] ids of [CLS] A [SEP] B [SEP].
  Returns:
    (positions, replacements): int64 arrays sorted by position; a replacement
    is the id written there or KEEP. The labels are tokens[positions].
  """
  if config.per_word_decision or config.max_ngram_size > 1:
    positions, replacements, _ = mask_word_spans(tokens, config, vocab, state)
    return positions, replacements
  n = len(tokens)
  candidates, group_starts, groups = _candidate_groups(tokens, vocab,
                                                       config.do_whole_word_mask)
  order = np.arange(groups)
  mersenne.shuffle(state, order)
  num_to_predict = _num_to_predict(n, config)
  covered = np.zeros(n, np.bool_)
  positions = np.empty(num_to_predict, np.int64)
  replacements = np.empty(num_to_predict, np.int64)
  masked = 0
  for g in order:
    lo, hi = group_starts[g], group_starts[g + 1]
    if masked >= num_to_predict:
      break
    if masked + hi - lo > num_to_predict or not _uncovered(candidates, lo, hi, covered):
      continue
    for k in range(lo, hi):
      index = candidates[k]
      covered[index] = True
      replacement = _draw(config, vocab, state)
      if replacement == -2:
        replacement = _random_word(vocab, state)
      positions[masked] = index
      replacements[masked] = replacement
      masked += 1
  by_position = np.argsort(positions[:masked])
  return positions[:masked][by_position], replacements[:masked][by_position]


@numba.njit(cache=True)
def mask_word_spans(tokens, config, vocab, state):
  """Whole-word masking with per-word decisions and/or n-gram spans (see the module doc).

  Returns:
    (positions, replacements, span_words): as create_masked_lm_predictions,
    plus the number of words of each span masked, in the order they were
    chosen.
  """
  n = len(tokens)
  candidates, group_starts, groups = _candidate_groups(tokens, vocab, True)
  order = np.arange(groups)
  mersenne.shuffle(state, order)
  num_to_predict = _num_to_predict(n, config)
  max_n = max(1, config.max_ngram_size)
  covered = np.zeros(n, np.bool_)
  positions = np.empty(num_to_predict, np.int64)
  replacements = np.empty(num_to_predict, np.int64)
  span_words = np.empty(num_to_predict, np.int64)
  masked, spans = 0, 0
  for g in order:
    if masked >= num_to_predict:
      break
    # Words that may follow g in one span: adjacent, no [SEP] between.
    available = 1
    while (available < max_n and g + available < groups
           and candidates[group_starts[g + available]]
           == candidates[group_starts[g + available] - 1] + 1):
      available += 1
    words = 1
    if available > 1:  # P(n) proportional to 1/n, n = 1..available
      total = 0.0
      for k in range(1, available + 1):
        total += 1.0 / k
      r = mersenne.random(state) * total
      words = available
      for k in range(1, available + 1):
        r -= 1.0 / k
        if r < 0.0:
          words = k
          break
    while words > 1 and masked + group_starts[g + words] - group_starts[g] > num_to_predict:
      words -= 1
    lo, hi = group_starts[g], group_starts[g + words]
    if masked + hi - lo > num_to_predict or not _uncovered(candidates, lo, hi, covered):
      continue
    for w in range(g, g + words):
      decision = _draw(config, vocab, state) if config.per_word_decision else 0
      for k in range(group_starts[w], group_starts[w + 1]):
        replacement = decision if config.per_word_decision else _draw(config, vocab, state)
        if replacement == -2:
          replacement = _random_word(vocab, state)
        index = candidates[k]
        covered[index] = True
        positions[masked] = index
        replacements[masked] = replacement
        masked += 1
    span_words[spans] = words
    spans += 1
  by_position = np.argsort(positions[:masked])
  return (positions[:masked][by_position], replacements[:masked][by_position],
          span_words[:spans])
