"""CoNLL-2003-style named-entity files: reading, tag schemes, label lists, predictions.

Layouts read: one word per line with space- or tab-separated columns, a blank
line between sentences and optional `-DOCSTART-` lines between documents.
The word is the first column. The tag is the last column, unless no value
of the last column looks like a tag (as in `word TAG 0` copies), in which
case it is the column before. A file with one column has no tags (prediction
input). Tags are IOB1 or IOB2 and are converted to IOB2 on reading; the
conversion never changes an entity's span or type. The model's inputs made
from these files are data/tagging_inputs.py's.
"""

import dataclasses
import re


from data import files, text_decoding

_TAG = re.compile(r"^(O|[BI]-\S+)$")
# Columns are separated by spaces and tabs only: str.split() would also cut a
# word at a no-break space, U+2028 or \x1c.
_SEPARATORS = " \t"
_COLUMNS = re.compile("[ \t]+")
_DOCSTART = "-DOCSTART-"
SPLIT_FILES = {"train": ("train.txt", "eng.train"),
               "dev": ("valid.txt", "dev.txt", "testa", "testa.txt", "eng.testa"),
               "test": ("test.txt", "testb", "testb.txt", "eng.testb")}


@dataclasses.dataclass
class Sentence:
  """One sentence: words, IOB2 tags (None without a tag column), source lines and their numbers."""
  words: list
  tags: list
  lines: list
  line_numbers: list


@dataclasses.dataclass
class Document:
  """Sentences of one document; `header` is its -DOCSTART- line (None when unmarked);
  `tag_last`: whether the file's tag is its last column (not so in `word TAG 0` copies);
  `columns`: the file's column count; `iob1`: whether the file's tags are IOB1 (I- tags
  open entities and no B- tag does: an IOB2 file with a stray I- stays IOB2)."""
  sentences: list
  header: str = None
  tag_last: bool = True
  columns: int = 1
  iob1: bool = False


def to_iob2(tags):
  """IOB1 or IOB2 tags -> IOB2: an I- tag that opens an entity becomes B-.

  An I-X opens an entity when the previous tag is O or of another type (the
  conlleval reading of both schemes), so spans and types do not change.
  """
  out = []
  for i, tag in enumerate(tags):
    if tag.startswith("I-") and (i == 0 or tags[i - 1] == "O" or tags[i - 1][2:] != tag[2:]):
      tag = "B-" + tag[2:]
    out.append(tag)
  return out


def to_iob1(tags):
  """IOB2 tags -> IOB1: B- only where an entity follows one of its own type, I- elsewhere;
  spans and types as conlleval reads them do not change (to_iob2 undoes it)."""
  return ["I-" + tag[2:] if tag.startswith("B-") and (i == 0 or tags[i - 1][2:] != tag[2:])
          else tag for i, tag in enumerate(tags)]


def find_split_file(data_dir, split):
  """The first existing file of a split (train / dev / test) in data_dir, or None."""
  import os
  for name in SPLIT_FILES[split]:
    path = os.path.join(data_dir, name)
    if files.exists(path):
      return path
  return None


def read_conll(path):
  """Documents of a CoNLL file; ValueError naming the file and line of a row that does not fit."""
  text = text_decoding.read_text(path)
  documents, current, rows, first = [], Document([]), [], None

  def end_sentence():
    if rows:
      current.sentences.append(rows[:])
      rows.clear()

  for number, raw in enumerate(text_decoding.text_lines(text), 1):
    line = raw.strip(_SEPARATORS)
    if not line:
      end_sentence()
      continue
    columns = _COLUMNS.split(line)
    if columns[0] == _DOCSTART:
      end_sentence()
      if current.sentences or current.header is not None:
        documents.append(current)
      current = Document([], line)
      continue
    if first is None:
      first = (len(columns), number)
    elif len(columns) != first[0]:
      raise ValueError(f"{path}:{number}: {len(columns)} column(s) where line {first[1]} has "
                       f"{first[0]}: {line!r}.")
    rows.append((columns, line, number))
  end_sentence()
  if current.sentences or current.header is not None:
    documents.append(current)
  if first is None:
    raise ValueError(f"{path} holds no words.")
  tag_column = _tag_column(documents, first[0])
  i_opens = b_opens = False
  for doc in documents:
    doc.tag_last = tag_column is None or tag_column == first[0] - 1
    doc.columns = first[0]
    parsed = []
    for sentence in doc.sentences:
      tags = None
      if tag_column is not None:
        tags = [r[0][tag_column] for r in sentence]
        for tag, (_, line, number) in zip(tags, sentence):
          if not _TAG.match(tag):
            raise ValueError(f"{path}:{number}: {tag!r} in column {tag_column + 1} is not a "
                             f"tag (O, B-TYPE or I-TYPE): {line!r}.")
        iob2 = to_iob2(tags)
        i_opens = i_opens or iob2 != tags
        b_opens = b_opens or any(t.startswith("B-") and (i == 0 or tags[i - 1][2:] != t[2:])
                                 for i, t in enumerate(tags))
        tags = iob2
      parsed.append(Sentence([r[0][0] for r in sentence], tags, [r[1] for r in sentence],
                             [r[2] for r in sentence]))
    doc.sentences = parsed
  for doc in documents:
    doc.iob1 = i_opens and not b_opens
  return documents


def _tag_column(documents, num_columns):
  """Index of the tag column: the last, or the one before when the last holds no tag."""
  if num_columns == 1:
    return None
  last = [columns[-1] for doc in documents for rows in doc.sentences for columns, _, _ in rows]
  if num_columns > 2 and not any(_TAG.match(v) for v in last):
    return num_columns - 2
  return num_columns - 1


def has_document_markers(documents):
  """True when the file marked its documents with -DOCSTART- lines."""
  return any(doc.header is not None for doc in documents)


def labels_of(documents, path):
  """The label list of a training file: O, then B-/I- of every entity type, sorted."""
  types = sorted({t[2:] for doc in documents for s in doc.sentences for t in (s.tags or [])
                  if t != "O"})
  if any(s.tags is None for doc in documents for s in doc.sentences):
    raise ValueError(f"{path} has no tag column; training needs word and tag columns.")
  return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def read_training_file(data_dir):
  """(path, documents, label list) of data_dir's training file; ValueError naming the
  directory when it has none."""
  path = find_split_file(data_dir, "train")
  if path is None:
    raise ValueError(f"--data_dir={data_dir} has no train.txt (or eng.train).")
  documents = read_conll(path)
  return path, documents, labels_of(documents, path)


def write_labels(path, labels):
  """Saves the label list, one per line."""
  with files.atomic_output(path) as f:
    f.write("\n".join(labels) + "\n")


def read_labels(path):
  """The label list saved by write_labels."""
  if not files.exists(path):
    raise ValueError(f"No label list at {path}: train first (--do_train) with this --output_dir.")
  return [line.strip() for line in text_decoding.text_lines(text_decoding.read_text(path)) if line.strip()]


def write_predictions(path, documents, predicted_tags):
  """The input file with a predicted-tag column added, in conlleval's layout: columns
  separated by one space, the gold tag and the prediction last, every line with as many
  columns. Where the gold tag is not the file's last column (`word TAG 0`), it is written
  again before the prediction, so that conlleval reads the two. The predictions take the
  file's tag scheme (IOB1 or IOB2), so that conlleval's token accuracy compares like with
  like; gold tags are written as the file has them."""
  tags = iter(predicted_tags)
  with files.atomic_output(path) as f:
    for doc in documents:
      gold_again = not doc.tag_last
      if doc.header is not None:
        given = _COLUMNS.split(doc.header)
        columns = given if len(given) == doc.columns else (
            [_DOCSTART] + ["-X-"] * (doc.columns - 2) + ["O"] * (doc.columns > 1))
        f.write(" ".join(columns + ["O"] * gold_again + ["O"]) + "\n\n")
      for sentence in doc.sentences:
        gold = sentence.tags or [None] * len(sentence.lines)
        guessed = [next(tags) for _ in sentence.lines]
        if doc.iob1:
          guessed = to_iob1(guessed)
        for line, gold_tag, tag in zip(sentence.lines, gold, guessed):
          f.write(" ".join(_COLUMNS.split(line) + [gold_tag] * bool(gold_again and gold_tag)
                           + [tag]) + "\n")
        f.write("\n")
