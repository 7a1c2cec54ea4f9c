"""WordPiece tokenization with exactly the behaviour of the original BERT code.

`FullTokenizer` = `BasicTokenizer` (cleaning, CJK splitting, optional lower-casing
and accent stripping, punctuation splitting) followed by `WordpieceTokenizer`
(greedy longest-match-first sub-words with a `##` continuation prefix).

The character rules are written once, as predicates (`is_whitespace`,
`is_control`, `is_punctuation`, `is_cjk`), and compiled into character classes
(`character_classes`). The Python path applies those classes with `re`; the
TensorFlow graph path in `data/fast_tokenization.py` applies the very same
classes with RE2, which is what keeps the two paths in agreement.
"""

import collections
import functools
import json
import os
import re
import unicodedata

import numpy as np

from data import files, text_decoding

UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# The eight CJK Unified Ideograph blocks the original splits into single
# characters. Hangul, Hiragana and Katakana are deliberately not included.
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)

# The names of Google's released checkpoints, for the do_lower_case check: the kind, which
# says the casing, then layers, hidden size and heads. The original listed seven names; the
# pattern also covers the whole-word-masking models (wwm_cased_, wwm_uncased_) and the 24
# small uncased ones (uncased_L-2_H-128_A-2 ... uncased_L-12_H-768_A-12).
_RELEASE_NAME = re.compile(r"(?:wwm_(?=(?:un)?cased_))?"
                           r"(uncased|cased|multi_cased|multilingual|chinese)_L-\d+_H-\d+_A-\d+")
_LOWERCASED_KINDS = frozenset(["uncased", "multilingual", "chinese"])


def convert_to_unicode(text):
  """Returns `text` as str; bytes are decoded as UTF-8, dropping invalid bytes."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError(f"Unsupported string type: {type(text).__name__}")


def printable_text(text):
  """`text` as str for printing or logging: the original's name (in Python 3 it is
  convert_to_unicode)."""
  return convert_to_unicode(text)


def convert_by_vocab(vocab, items):
  """Looks every item up in `vocab` (tokens to ids, or ids to tokens with the inverse);
  an item it lacks raises KeyError, as in the original."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  return convert_by_vocab(inv_vocab, ids)


def is_whitespace(char):
  """True for space, tab, newline, carriage return and Unicode `Zs`."""
  if char in " \t\n\r":
    return True
  return unicodedata.category(char) == "Zs"


def is_control(char):
  """True for `Cc`/`Cf` characters other than tab, newline and return."""
  if char in "\t\n\r":
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char):
  """True for all non-alphanumeric ASCII symbols and Unicode `P*`."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


# The original's private names, for code written against its module.
_is_whitespace, _is_control, _is_punctuation = is_whitespace, is_control, is_punctuation


def is_cjk(cp):
  """True when code point `cp` lies in one of the CJK ideograph blocks."""
  return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


@functools.lru_cache(maxsize=None)
def unicode_categories():
  """The general category of every code point, as a numpy array of str [0x110000]."""
  return np.array([unicodedata.category(chr(cp)) for cp in range(0x110000)])


def assigned_code_points():
  """Code points with a category other than unassigned, private use or surrogate.

  Only these have case mappings, decompositions or combining classes.
  """
  return np.flatnonzero(~np.isin(unicode_categories(), ["Cn", "Co", "Cs"]))


def ranges(mask):
  """Sorted inclusive (first, last) code point ranges where bool mask[cp] holds.

  Surrogates are left out: they cannot occur in valid UTF-8 text.
  """
  mask = np.asarray(mask, bool).copy()
  mask[0xD800:0xE000] = False
  cps = np.flatnonzero(mask)
  if not len(cps):
    return ()
  breaks = np.flatnonzero(np.diff(cps) > 1)
  firsts = np.concatenate([cps[:1], cps[breaks + 1]])
  lasts = np.concatenate([cps[breaks], cps[-1:]])
  return tuple(zip(firsts.tolist(), lasts.tolist()))


@functools.lru_cache(maxsize=None)
def character_classes():
  """Code point ranges of each character class the basic tokenizer uses.

  The classes are the predicates above (`is_control`, `is_whitespace`,
  `is_punctuation`, CJK) evaluated over all of Unicode, vectorised; a test
  checks them against the predicates code point by code point.

  Returns:
    dict of name -> tuple of inclusive (first, last) code point ranges:
    "drop" (removed while cleaning), "space" (turned into " " while cleaning),
    "cjk" (isolated), "punct" (isolated after lower-casing), "split" (where
    `str.split()` splits, which the original uses to cut words), "mn"
    (non-spacing marks, removed when stripping accents).
  """
  category = unicode_categories()
  cps = np.arange(0x110000)
  drop = np.isin(category, ["Cc", "Cf"])
  drop[[ord("\t"), ord("\n"), ord("\r")]] = False
  drop[[0, 0xFFFD]] = True
  space = category == "Zs"
  space[[ord(" "), ord("\t"), ord("\n"), ord("\r")]] = True
  ascii_symbols = (((cps >= 33) & (cps <= 47)) | ((cps >= 58) & (cps <= 64))
                   | ((cps >= 91) & (cps <= 96)) | ((cps >= 123) & (cps <= 126)))
  punct = ascii_symbols | np.char.startswith(category, "P")
  split = np.zeros(0x110000, bool)
  split[[cp for cp in range(0x3001) if chr(cp).isspace()]] = True  # none lie higher
  return {"drop": ranges(drop), "space": ranges(space), "cjk": tuple(sorted(CJK_RANGES)),
          "punct": ranges(punct), "split": ranges(split), "mn": ranges(category == "Mn")}


def class_pattern(ranges, escape):
  """A regex character class `[...]` for `ranges`; escape(cp) writes one code point."""
  parts = [escape(lo) if lo == hi else f"{escape(lo)}-{escape(hi)}"
           for lo, hi in ranges]
  return "[" + "".join(parts) + "]"


def _py_escape(cp):
  return "\\U%08x" % cp


@functools.lru_cache(maxsize=None)
def _python_regexes():
  """(drop, space, mn, words) compiled regexes of the Python path."""
  classes = character_classes()
  inner = lambda name: class_pattern(classes[name], _py_escape)[1:-1]
  compile_class = lambda name: re.compile(f"[{inner(name)}]")
  # A punctuation or CJK character alone, or a run of anything else but
  # whitespace (\s is exactly str.isspace() for str patterns).
  isolated = inner("punct") + inner("cjk")
  words = re.compile(f"[{isolated}]|[^\\s{isolated}]+")
  return compile_class("drop"), compile_class("space"), compile_class("mn"), words


def vocab_tokens(vocab_file):
  """A vocab.txt's entries in id order: its lines, stripped (the id is the line number)."""
  try:
    with files.open_file(vocab_file, "rb") as f:
      data = f.read()
  except Exception as e:  # OSError locally, tf.errors.OpError remotely
    raise ValueError(f"Cannot read vocab file {vocab_file}: "
                     f"{getattr(e, 'strerror', None) or e}") from None
  try:
    text = text_decoding.decode_utf8(data, vocab_file)
  except ValueError as e:
    raise ValueError(f"Vocab file {e}") from None
  tokens = [line.strip() for line in text_decoding.text_lines(text)]
  if not tokens:
    raise ValueError(f"Vocab file {vocab_file} is empty.")
  return tokens


def load_vocab(vocab_file):
  """Reads a vocab.txt (one token a line) into an ordered token -> id dict.

  Lines are stripped; the id is the line number; a repeated token keeps its
  last line number, as in the original.
  """
  vocab = collections.OrderedDict()
  for index, token in enumerate(vocab_tokens(vocab_file)):
    vocab[token] = index
  return vocab


def require_tokens(vocab, tokens, vocab_file):
  """Raises ValueError naming `vocab_file` and whichever of `tokens` `vocab` lacks."""
  missing = [t for t in tokens if t not in vocab]
  if missing:
    raise ValueError(f"Vocab file {vocab_file} lacks required token(s) {', '.join(missing)}.")


def whitespace_tokenize(text):
  """Splits on whitespace (Python's definition), dropping empty pieces."""
  return text.split()


class BasicTokenizer:
  """Cleaning, CJK splitting, optional lower-casing/accent removal, punctuation splitting."""

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    """Returns the list of basic tokens (str) of `text`.

    The original cleans, spaces out CJK characters, splits on whitespace,
    lower-cases and strips accents word by word, spaces out punctuation and
    splits again. Here the same happens on the whole text at once and one
    regex then picks the words: lower-casing and NFD never cross a space,
    never create or remove whitespace, punctuation or CJK characters, and treat
    a space and a CJK character alike as neither cased nor case-ignorable, so
    the result is the same (checked against the original's outputs).
    """
    drop, space, mn, words = _python_regexes()
    text = drop.sub("", convert_to_unicode(text))
    if self.do_lower_case:
      if text.isascii():  # nothing to decompose or strip
        text = text.lower()
      else:
        text = mn.sub("", unicodedata.normalize("NFD", space.sub(" ", text).lower()))
    return words.findall(text)


class WordpieceTokenizer:
  """Greedy longest-match-first WordPiece over whitespace-separated words."""

  def __init__(self, vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    # No vocab entry is longer than this, so longer candidates need no lookup.
    self._max_piece_chars = max((len(t) for t in vocab), default=0)
    self.tokenize_word = functools.lru_cache(maxsize=1 << 17)(self.word_pieces)

  def tokenize(self, text):
    """Returns the WordPiece tokens of already basic-tokenized `text`."""
    output = []
    for word in whitespace_tokenize(convert_to_unicode(text)):
      output.extend(self.tokenize_word(word))
    return output

  def word_pieces(self, word, continuation=False):
    """The pieces of one word; with `continuation`, of the rest of a word (the first piece
    also takes "##"), as the pieces of a "##" vocab entry."""
    if len(word) > self.max_input_chars_per_word:
      return (self.unk_token,)
    pieces, start = [], 0
    while start < len(word):
      prefix = "##" if start > 0 or continuation else ""
      end = min(len(word), start + self._max_piece_chars)
      while end > start and prefix + word[start:end] not in self.vocab:
        end -= 1
      if end == start:  # Nothing matches here: the whole word is unknown.
        return (self.unk_token,)
      pieces.append(prefix + word[start:end])
      start = end
    return tuple(pieces)


class FullTokenizer:
  """End-to-end tokenization: basic tokenization, then WordPiece."""

  def __init__(self, vocab_file, do_lower_case=True, max_input_chars_per_word=200):
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(
        vocab=self.vocab, max_input_chars_per_word=max_input_chars_per_word)
    self._word_ids = {}

  def tokenize(self, text):
    """Returns the WordPiece tokens (list of str) of raw `text`."""
    split_tokens = []
    for token in self.basic_tokenizer.tokenize(text):
      split_tokens.extend(self.wordpiece_tokenizer.tokenize_word(token))
    return split_tokens

  def tokenize_to_ids(self, text):
    """The ids of tokenize(text), with a word -> ids cache for speed on large corpora."""
    cache, ids = self._word_ids, []
    for word in self.basic_tokenizer.tokenize(text):
      word_ids = cache.get(word)
      if word_ids is None:
        if len(cache) >= 1 << 20:
          cache.clear()
        word_ids = cache[word] = self.convert_tokens_to_ids(
            self.wordpiece_tokenizer.tokenize_word(word))
      ids.extend(word_ids)
    return ids

  def convert_tokens_to_ids(self, tokens):
    """Maps tokens to ids; an unknown token raises KeyError as in the original."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Maps ids back to tokens."""
    return convert_by_vocab(self.inv_vocab, ids)

  def require_tokens(self, tokens):
    """Raises ValueError naming the vocab file when any of `tokens` is missing."""
    require_tokens(self.vocab, tokens, self.vocab_file)


def validate_case_matches_tokenizer_config(do_lower_case, init_checkpoint):
  """Raises ValueError when do_lower_case contradicts the `do_lower_case` that a Hugging
  Face checkpoint's tokenizer_config.json records (in the directory init_checkpoint names,
  or the one holding the file it names); without that file or entry, nothing is checked."""
  if not init_checkpoint:
    return
  recorded = _casing_in(os.path.join(_checkpoint_dir(init_checkpoint), "tokenizer_config.json"))
  if recorded is not None and recorded != bool(do_lower_case):
    raise ValueError(
        f"--do_lower_case={bool(do_lower_case)} does not match --init_checkpoint="
        f"{init_checkpoint}: its tokenizer_config.json says do_lower_case "
        f"{str(recorded).lower()}. Pass --do_lower_case={recorded}.")


def _checkpoint_dir(checkpoint):
  """The directory a checkpoint path names, or holds the file it names."""
  return checkpoint if files.isdir(checkpoint) else os.path.dirname(checkpoint)


def _casing_in(path):
  """The boolean `do_lower_case` that JSON file `path` records; None without the file, the
  entry, or with a file that cannot be read as JSON (the vocab then decides, as elsewhere)."""
  if not files.exists(path):
    return None
  try:
    with files.open_file(path, "r") as f:
      recorded = json.load(f).get("do_lower_case")
  except (OSError, ValueError, AttributeError):
    return None
  return recorded if isinstance(recorded, bool) else None


def _release_casing(checkpoint):
  """(lowercased, release name) when `checkpoint` names one of Google's releases (see
  validate_case_matches_checkpoint), else None."""
  if not checkpoint:
    return None
  pattern = r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt"
  m = (re.match(pattern, checkpoint)
       or re.match(pattern, checkpoint.rstrip("/") + "/bert_model.ckpt"))
  release = m and _RELEASE_NAME.fullmatch(m.group(1))
  if not release:
    return None
  return release.group(1) in _LOWERCASED_KINDS, m.group(1)


def recorded_casing(checkpoint):
  """(do_lower_case, what records it) for a checkpoint path or directory: a Hugging Face
  tokenizer_config.json beside it, a fine-tuning run's run.json, or a Google release's
  name; (None, None) when nothing does."""
  for name in ("tokenizer_config.json", "run.json"):
    path = os.path.join(_checkpoint_dir(checkpoint), name)
    recorded = _casing_in(path)
    if recorded is not None:
      return recorded, path
  release = _release_casing(checkpoint)
  return (release[0], f"the release name {release[1]}") if release else (None, None)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises ValueError when do_lower_case contradicts a released checkpoint's casing.

  As the original, the name is the directory holding bert_model.ckpt (here also
  that directory itself, which our scripts take and the original did not). A name
  of Google's releases says the casing: uncased_, multilingual_ and chinese_ models
  are lowercased, cased_ and multi_cased_ ones are not, with or without wwm_ (whole
  word masking) in front, whatever the size (_L-N_H-N_A-N). Any other path passes.
  """
  release = _release_casing(init_checkpoint)
  if release is None:
    return
  lowercased, model_name = release
  if lowercased and not do_lower_case:
    actual, case_name, opposite = "False", "lowercased", "True"
  elif not lowercased and do_lower_case:
    actual, case_name, opposite = "True", "cased", "False"
  else:
    return
  raise ValueError(
      f"--do_lower_case={actual} does not match --init_checkpoint="
      f"{init_checkpoint}: {model_name} is a {case_name} model. Pass "
      f"--do_lower_case={opposite} (or fix the checkpoint path).")
