"""Learning a WordPiece vocab.txt from raw text.

Words are counted with the original's basic tokenizer (so cleaning, casing,
accents, punctuation and CJK splitting match what the vocab will be used
with); tensorflow-text's WordPiece learner then picks the pieces.

The vocab starts with the special tokens [PAD] [UNK] [CLS] [SEP] [MASK]
(ids 0-4), then `num_unused` placeholders [unused0], [unused1], ..., then the
learned pieces, "##" marking a piece that continues a word. Google's released
vocabularies follow the same idea in another order: [PAD] at 0, [unused0] to
[unused98] at 1-99, [UNK] [CLS] [SEP] [MASK] at 100-103, more [unusedN] after;
the placeholders exist so that users can later swap in domain words without
resizing the embedding table. Nothing depends on the ids of the special
tokens: every script looks them up by name.
"""

import collections
import inspect

from data import files, text_decoding, tokenization


def count_words(paths, do_lower_case, progress=None, undecodable=None):
  """Counter of basic-tokenizer words over every line of `paths` (UTF-16/32: ValueError);
  bytes that are not UTF-8 are dropped, and counted in `undecodable` (text_decoding.Undecodable)."""
  basic = tokenization.BasicTokenizer(do_lower_case)
  counts = collections.Counter()
  undecodable = undecodable if undecodable is not None else text_decoding.Undecodable()
  done = 0
  for path in paths:
    with files.open_file(path, "rb") as f:
      for number, raw in enumerate(f, start=1):
        text_decoding.check_not_wide(raw, f"{path}:{number}", at_start=number == 1)
        counts.update(basic.tokenize(undecodable.decode(raw, path, number)))
        done += len(raw)
        if progress is not None:
          progress(done)
  return counts


def reserved_tokens(vocab_size, num_unused=0):
  """The special and [unusedN] tokens a vocabulary starts with; ValueError when vocab_size
  leaves no room after them (checked before any counting)."""
  reserved = list(tokenization.SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(num_unused)]
  if vocab_size <= len(reserved):
    raise ValueError(f"--vocab_size={vocab_size} leaves no room after {len(reserved)} "
                     "special and unused tokens.")
  return reserved


def learn(counts, vocab_size, num_unused=0, min_count=2, max_unique_chars=1000,
          max_token_length=50, iterations=4):
  """A vocabulary (list of tokens, specials first) of at most vocab_size tokens."""
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib
  reserved = reserved_tokens(vocab_size, num_unused)
  learn_args = dict(lower_thresh=min_count, num_iterations=iterations,
                    max_unique_chars=max_unique_chars, max_token_length=max_token_length)
  vocab = None
  if len(counts) < vocab_size:  # a small corpus: the target size is likely out of reach
    vocab = _lowest_threshold_vocab(lib, list(counts.items()), vocab_size, reserved,
                                    **learn_args)
  if vocab is None:
    vocab = lib.learn(list(counts.items()), vocab_size, reserved, **learn_args)
  # The learner's threshold search can stop above the target size. Its pieces come
  # most frequent first, so drop the rarest ones, keeping every character (alone
  # and as ##continuation) so that no word becomes [UNK].
  excess = len(vocab) - vocab_size
  for i in range(len(vocab) - 1, len(reserved) - 1, -1):
    if excess <= 0:
      break
    if len(vocab[i].removeprefix("##")) > 1:
      del vocab[i]
      excess -= 1
  return vocab


def _lowest_threshold_vocab(lib, word_counts, vocab_size, reserved, lower_thresh,
                            num_iterations, max_unique_chars, max_token_length):
  """lib.learn's result, in one learning pass instead of its whole threshold search, when
  the corpus cannot fill vocab_size; None when it can (then the search must run).

  lib.learn halves the count threshold between its bounds, going lower while the vocab is
  short of the target by more than its slack. The vocab grows as the threshold falls, so
  a vocab that is short at the search's lowest threshold means that the search walks all
  the way down and returns exactly that vocab: on small corpora (the demo's, a few books)
  the search's 15-20 passes become one (equal results checked on both).
  """
  d = {name: p.default for name, p in inspect.signature(lib.learn).parameters.items()}
  params = lib.Params(d["upper_thresh"], lower_thresh, num_iterations, d["max_input_tokens"],
                      max_token_length, max_unique_chars, vocab_size, d["slack_ratio"],
                      d["include_joiner_token"], d["joiner"], reserved)
  upper, lower = lib.get_search_threshs(word_counts, d["upper_thresh"], lower_thresh)
  thresh = (upper + lower) // 2
  while not (lower >= upper or thresh <= 1):  # the search's path when always short
    upper = thresh - 1
    thresh = (upper + lower) // 2
  all_counts = lib.get_input_words(word_counts, reserved, max_token_length)
  filtered = lib.filter_input_words(
      all_counts, lib.get_allowed_chars(all_counts, max_unique_chars), d["max_input_tokens"])
  vocab = lib.learn_with_thresh(filtered, thresh, params)
  short = vocab_size - len(vocab) > max(d["slack_ratio"] * vocab_size, 0)
  return vocab if short else None


def coverage(counts, vocab):
  """(fraction of word occurrences without [UNK], WordPiece tokens per word)."""
  wordpiece = tokenization.WordpieceTokenizer({t: i for i, t in enumerate(vocab)})
  words = known = pieces = 0
  for word, count in counts.items():
    p = wordpiece.tokenize_word(word)
    words += count
    pieces += count * len(p)
    known += count * (p != ("[UNK]",))
  return known / max(words, 1), pieces / max(words, 1)
