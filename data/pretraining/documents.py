"""The generator's input: text files read into tokenized documents and a `Corpus`.

The text has one sentence per line and a blank line between documents. Lines
are split on "\\n" only, decoded as UTF-8 with undecodable bytes dropped (and
counted), stripped, and tokenized one by one with `FullTokenizer`
(`tokenize_to_ids`, which caches each word's ids). As in the original, a blank
line starts a new document, a line whose tokenization is empty is skipped,
empty documents are dropped and a document may continue from one input file
into the next. Unlike the original, UTF-16 or UTF-32 text (a byte order mark,
or lines laced with NUL bytes) is refused: read as UTF-8 it would lose its
line breaks' meaning and merge every document into one.
"""

import dataclasses

import numpy as np

from data import files, text_decoding


@dataclasses.dataclass
class Corpus:
  """Tokenized documents.

  tokens: int32 [T] all token ids; segment_starts: int64 [S + 1], segment s is
  tokens[starts[s]:starts[s + 1]]; documents: int64 [D, 2] (first segment,
  end segment) of each non-empty document.
  """
  tokens: np.ndarray
  segment_starts: np.ndarray
  documents: np.ndarray


@dataclasses.dataclass
class ReadStats:
  """What reading found: counts, and the bytes dropped as not UTF-8."""
  lines: int = 0
  bytes_read: int = 0
  undecodable: text_decoding.Undecodable = dataclasses.field(default_factory=text_decoding.Undecodable)
  documents: int = 0
  segments: int = 0
  tokens: int = 0


def read_lines(paths, stats):
  """Yields (path, line number, stripped text) of every line of every file.

  Raises ValueError naming file:line at UTF-16 or UTF-32 text.
  """
  for path in paths:
    with files.open_file(path, "rb") as f:
      for number, raw in enumerate(f, start=1):
        text_decoding.check_not_wide(raw, f"{path}:{number}", at_start=number == 1)
        stats.lines += 1
        stats.bytes_read += len(raw)
        yield path, number, stats.undecodable.decode(raw, path, number).strip()


def tokenized_documents(paths, tokenizer, stats, keep=None):
  """Yields (document index, [int32 id array per non-empty segment]) in input order.

  Args:
    paths: input files, read in this order.
    tokenizer: a FullTokenizer.
    stats: a ReadStats, updated as reading goes.
    keep: optional predicate on the raw document index (its count of blank
      lines before it); documents it rejects are skipped without tokenizing.
  """
  index, segments = 0, []
  for _, _, text in read_lines(paths, stats):
    if not text:
      if segments:
        yield _finish(index, segments, stats)
      index, segments = index + 1, []
    elif keep is None or keep(index):
      ids = tokenizer.tokenize_to_ids(text)
      if ids:
        segments.append(np.array(ids, np.int32))
  if segments:
    yield _finish(index, segments, stats)


def _finish(index, segments, stats):
  stats.documents += 1
  stats.segments += len(segments)
  stats.tokens += sum(len(s) for s in segments)
  return index, segments


def read_corpus(paths, tokenizer, stats, progress=None):
  """Reads and tokenizes every input file into one in-memory `Corpus`.

  progress: optional callable(bytes read, documents read), called after each document.
  """
  def reported(documents):
    for document in documents:
      yield document
      if progress is not None:
        progress(stats.bytes_read, stats.documents)
  return to_corpus(reported(tokenized_documents(paths, tokenizer, stats)))


def to_corpus(documents):
  """A Corpus of (index, [int32 id array per segment]) documents, in their order."""
  arrays, starts, ranges = [], [0], []
  for _, segments in documents:
    first = len(starts) - 1
    for segment in segments:
      arrays.append(segment)
      starts.append(starts[-1] + len(segment))
    ranges.append((first, len(starts) - 1))
  tokens = np.concatenate(arrays) if arrays else np.zeros(0, np.int32)
  return Corpus(tokens, np.array(starts, np.int64), np.array(ranges, np.int64).reshape(-1, 2))

