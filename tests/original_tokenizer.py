"""A deliberately literal, character-by-character rendering of the original
tokenizer's algorithm (reference section g), used only as a test oracle for the
optimised Python path and the graph path."""

import unicodedata


def _control(c):
  return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def _whitespace(c):
  return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _punctuation(c):
  cp = ord(c)
  return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
          or unicodedata.category(c).startswith("P"))


def _cjk(cp):
  return any(lo <= cp <= hi for lo, hi in (
      (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
      (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def basic_tokens(text, do_lower_case):
  cleaned = []
  for c in text:
    if ord(c) in (0, 0xFFFD) or _control(c):
      continue
    cleaned.append(" " if _whitespace(c) else c)
  spaced = []
  for c in cleaned:
    spaced.append(f" {c} " if _cjk(ord(c)) else c)
  out = []
  for token in "".join(spaced).split():
    if do_lower_case:
      token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                      if unicodedata.category(c) != "Mn")
    pieces, start_new = [], True
    for c in token:
      if _punctuation(c):
        pieces.append([c])
        start_new = True
      else:
        if start_new:
          pieces.append([])
        start_new = False
        pieces[-1].append(c)
    out.extend("".join(p) for p in pieces)
  return " ".join(out).split()


def wordpiece(word, vocab, max_chars=200):
  if len(word) > max_chars:
    return ["[UNK]"]
  pieces, start = [], 0
  while start < len(word):
    end, found = len(word), None
    while start < end:
      piece = ("##" if start > 0 else "") + word[start:end]
      if piece in vocab:
        found = piece
        break
      end -= 1
    if found is None:
      return ["[UNK]"]
    pieces.append(found)
    start = end
  return pieces


def token_ids(text, vocab, do_lower_case):
  return [vocab[p] for w in basic_tokens(text, do_lower_case) for p in wordpiece(w, vocab)]
