"""Extending a released vocab.txt with a domain's words (learn_vocab.py --base_vocab_file).

The new tokens are whole words of the domain's text: those the base vocab
splits into the most WordPieces, weighted by how often they occur, i.e.
ranked by count * (pieces - 1), the tokens a corpus saves when the word
becomes one token. Words the base vocab already holds whole, and words it
can only read as [UNK] (there are no pieces to start their embedding from),
are left out. The new tokens either take the base vocab's [unusedN] slots in
id order (every other id unchanged, so the base checkpoint fits as it is) or
are appended after its last entry (a larger vocab_size; see
modeling/vocab_growth.py for the rows the model then gains).
"""

import json
import os
import unicodedata

from data import files, tokenization, wordpiece_vocab

def is_unused(token):
  """True for the placeholder tokens [unusedN] of Google's vocabularies."""
  return token.startswith("[unused") and token.endswith("]")


def is_uncased(tokens):
  """True when the vocab's words (not [CLS], [unused0], ...) have lower-case letters and no
  upper-case ones. A vocab of scripts without case (CJK, Devanagari) is not uncased: there
  --do_lower_case=false keeps the marks that lower-casing strips."""
  words = [t for t in tokens if not (t.startswith("[") and t.endswith("]"))]
  marks = any(unicodedata.category(c) == "Mn" for t in words for c in t)  # uncased strips them
  return (not marks and any(t != t.upper() for t in words)
          and all(t == t.lower() for t in words))


def domain_words(counts, base_tokens, num_new_tokens, min_count=2):
  """The `num_new_tokens` words best worth a token: [(word, count, base pieces)], best first.

  Args:
    counts: {word: occurrences} from wordpiece_vocab.count_words.
    base_tokens: the base vocab's entries in id order.
  """
  wordpiece = tokenization.WordpieceTokenizer({t: i for i, t in enumerate(base_tokens)})
  ranked = []
  for word, count in counts.items():
    if count < min_count:
      continue
    pieces = wordpiece.tokenize_word(word)
    if len(pieces) > 1 and "[UNK]" not in pieces:
      ranked.append((count * (len(pieces) - 1), word, count, len(pieces)))
  ranked.sort(key=lambda r: (-r[0], r[1]))  # ties by the word: the same order every run
  return [(word, count, pieces) for _, word, count, pieces in ranked[:num_new_tokens]]


def extend(base_tokens, new_tokens, extension):
  """The extended vocab's entries in id order.

  Raises:
    ValueError: extension "unused" with fewer [unusedN] slots than new tokens.
  """
  if extension == "append":
    return list(base_tokens) + list(new_tokens)
  slots = [i for i, token in enumerate(base_tokens) if is_unused(token)]
  if len(slots) < len(new_tokens):
    raise ValueError(f"{len(new_tokens)} new tokens: the base vocab has only "
                     f"{len(slots)} [unusedN] slots; use fewer or --extension=append.")
  tokens = list(base_tokens)
  for slot, token in zip(slots, new_tokens):
    tokens[slot] = token
  return tokens


def report_path(vocab_file):
  """Where the extension's report goes: <vocab name>_extension.json beside the vocab."""
  return os.path.splitext(vocab_file)[0] + "_extension.json"


def write_report(vocab_file, report):
  with files.atomic_output(report_path(vocab_file)) as f:
    f.write(json.dumps(report, indent=2) + "\n")


def extend_vocab_file(counts, base_vocab_file, vocab_file, num_new_tokens, extension,
                      held_out_counts=None, min_count=2):
  """Writes the extended vocab and its report (`report_path`); returns the report.

  Args:
    counts, held_out_counts: {word: occurrences} of the domain's text and of the
      text to measure pieces per word on (default: counts).
  """
  base = tokenization.vocab_tokens(base_vocab_file)
  words = domain_words(counts, base, num_new_tokens, min_count)
  tokens = extend(base, [w for w, _, _ in words], extension)
  held_out = counts if held_out_counts is None else held_out_counts
  report = {"base_vocab_file": base_vocab_file, "extension": extension,
            "vocab_size": len(tokens),
            "pieces_per_word_before": pieces_per_word(held_out, base),
            "pieces_per_word_after": pieces_per_word(held_out, tokens),
            "new_tokens": [{"token": w, "count": c, "base_pieces": p} for w, c, p in words]}
  with files.atomic_output(vocab_file) as f:
    f.write("\n".join(tokens) + "\n")
  write_report(vocab_file, report)
  return report


def pieces_per_word(counts, tokens):
  """WordPiece tokens per word occurrence of `counts` under the vocab `tokens`."""
  return wordpiece_vocab.coverage(counts, tokens)[1]
