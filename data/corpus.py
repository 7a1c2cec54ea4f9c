"""Raw text to the generator's input: one sentence per line, a blank line between documents.

Documents are whole input files, or the stretches between separator lines.
Within a document, blank lines end paragraphs; a paragraph's hard-wrapped
lines are joined and split into sentences with Bling Fire's sentence breaker
(rule-based, shipped inside its wheel, no model download).
"""

import dataclasses
import re

from data import files, text_decoding


@dataclasses.dataclass
class PrepareStats:
  """What preparation read and wrote."""
  # First: the field `files` below hides the module inside this class body.
  undecodable: text_decoding.Undecodable = dataclasses.field(default_factory=text_decoding.Undecodable)
  files: int = 0
  bytes_read: int = 0
  documents: int = 0
  paragraphs: int = 0
  sentences: int = 0


def split_sentences(paragraph):
  """Sentences of one paragraph (whitespace already normalised)."""
  import blingfire
  return [s.strip() for s in blingfire.text_to_sentences(paragraph).split("\n") if s.strip()]


def document_paragraphs(lines):
  """Groups lines into paragraphs (lists of lines) at blank lines."""
  paragraph = []
  for line in lines:
    if line.strip():
      paragraph.append(line)
    elif paragraph:
      yield paragraph
      paragraph = []
  if paragraph:
    yield paragraph


def read_documents(paths, stats, separator=None):
  """Yields each document as a list of text lines.

  Args:
    paths: input files.
    stats: a PrepareStats to update.
    separator: optional regex; a line matching it ends a document (and is
      dropped). Without one, every file is one document.
  Raises:
    ValueError: naming the file when it holds UTF-16 or UTF-32 text.
  """
  pattern = re.compile(separator) if separator else None
  for path in paths:
    stats.files += 1
    with files.open_file(path, "rb") as f:
      data = f.read()
    stats.bytes_read += len(data)
    text_decoding.check_not_wide(data, path)
    text = stats.undecodable.decode(data, path)
    document = []
    for line in text.split("\n"):
      if pattern is not None and pattern.search(line):
        if document:
          yield document
        document = []
      else:
        document.append(line)
    if document:
      yield document


def prepare(paths, out, stats, separator=None, min_sentence_chars=1):
  """Writes the documents of `paths` to the text stream `out` in the generator's format."""
  first = True
  for document in read_documents(paths, stats, separator):
    sentences = []
    for paragraph in document_paragraphs(document):
      stats.paragraphs += 1
      text = " ".join(" ".join(paragraph).split())
      sentences.extend(s for s in split_sentences(text) if len(s) >= min_sentence_chars)
    if not sentences:
      continue
    if not first:
      out.write("\n")
    out.write("\n".join(sentences) + "\n")
    first = False
    stats.documents += 1
    stats.sentences += len(sentences)
