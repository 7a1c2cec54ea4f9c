"""SWAG-style multiple choice: reading the csv files, features, and the prediction files.

A SWAG file (train.csv, val.csv, test.csv) is comma-separated with quoting,
one question per row under a header naming the columns: `video-id`,
`fold-ind`, `startphrase`, `sent1`, `sent2`, `gold-source`, `ending0` ...
`ending{C-1}` and `label` (absent or empty in the test file). Some copies
start every row with an unnamed index column. Columns are found by their
header names, so either layout reads the same. Each choice is packed as
`[CLS] sent1 [SEP] sent2 ending [SEP]` and truncated as the original
truncates pairs.

The last part makes questions in this layout from plain-text books (a
sentence, its true successor and three sentences from elsewhere in the same
book), for benchmarks/experiments/make_swag.py.
"""

import csv
import dataclasses
import io
import re
import sys

import numpy as np

from data import corpus, features, files, text_decoding


@dataclasses.dataclass
class SwagExample:
  """One question: its id, the context (sent1), the start of the ending (sent2), the endings
  and the index of the right one (None when unlabelled)."""
  guid: str
  context: str
  start: str
  endings: list
  label: int = None


def _columns(header, path, num_choices):
  """Column index per needed name; ValueError naming the file when one is missing."""
  position = {name.strip(): i for i, name in enumerate(header)}
  needed = ["sent1", "sent2"] + [f"ending{i}" for i in range(num_choices)]
  missing = [name for name in needed if name not in position]
  if missing:
    raise ValueError(f"{path}:1: the header has no column {', '.join(missing)} (found "
                     f"{', '.join(repr(h) for h in header)}); expected SWAG's columns with "
                     f"--num_choices={num_choices} endings.")
  return position


def read_examples(path, num_choices=4, require_labels=True):
  """The questions of a SWAG-layout csv file.

  Args:
    path: the csv file.
    num_choices: endings per question (columns ending0 .. ending{num_choices-1}).
    require_labels: when True every row needs a label in [0, num_choices); when
      False (test files) a missing or empty label, or -1, gives label None.
  Returns:
    list of SwagExample. A question's id is the unnamed index column when
    present, else `fold-ind`, else its row number.
  Raises:
    ValueError: naming the file and line of a short row, a bad label or bytes
      that are not UTF-8.
  """
  csv.field_size_limit(sys.maxsize)
  reader = csv.reader(io.StringIO(text_decoding.read_text(path), newline=""))
  header = next(reader, None)
  if header is None:
    raise ValueError(f"{path} is empty; expected a header line and one question per row.")
  position = _columns(header, path, num_choices)
  id_column = 0 if header[0].strip() == "" else position.get("fold-ind")
  label_column = position.get("label")
  if require_labels and label_column is None:
    raise ValueError(f"{path}:1: the header has no label column.")
  out = []
  line = reader.line_num + 1
  for row in reader:
    where = f"{path}:{line}"
    line = reader.line_num + 1  # a quoted field may span lines: the next row starts here
    if not row or row == [""]:
      continue
    if len(row) != len(header):
      unclosed = any("\n" in field or "\r" in field for field in row)
      raise ValueError(f"{where}: expected {len(header)} comma-separated fields as in the "
                       f"header, found {len(row)} (" + (
                           "a quote left open runs on over the next lines?" if unclosed else
                           "quote fields that hold commas") + ").")
    label = None
    value = row[label_column].strip() if label_column is not None else ""
    if not require_labels and value == "-1":
      value = ""  # test files' usual mark of "no label"
    if value or require_labels:
      try:
        label = int(value)
      except ValueError:
        label = -1
      if not 0 <= label < num_choices:
        raise ValueError(f"{where}: label {value!r} is not an ending index 0 to "
                         f"{num_choices - 1}.")
    guid = row[id_column].strip() if id_column is not None else str(len(out))
    out.append(SwagExample(guid, row[position["sent1"]], row[position["sent2"]],
                           [row[position[f"ending{i}"]] for i in range(num_choices)], label))
  return out


def read_questions(path, num_choices=4, require_labels=True):
  """read_examples, with a ValueError naming the file when it holds no questions."""
  examples = read_examples(path, num_choices, require_labels)
  if not examples:
    raise ValueError(f"{path} holds no questions.")
  return examples


def choice_text(example, i):
  """Segment B of choice i: sent2 followed by ending i."""
  return " ".join(t for t in (example.start.strip(), example.endings[i].strip()) if t)


def feature_arrays(examples, tokenizer, max_seq_length, num_choices, pad_to=1):
  """Model inputs of `examples`: int64 [N, C, max_seq_length] ids, mask and segments.

  label_ids and is_real_example are [N]. The question count is padded up to
  a multiple of `pad_to` with all-zero questions whose is_real_example is 0.
  """
  n = len(examples) + (-len(examples)) % pad_to
  arrays = {name: np.zeros((n, num_choices, max_seq_length), np.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}
  arrays["label_ids"] = np.zeros(n, np.int64)
  arrays["is_real_example"] = np.zeros(n, np.int64)
  for q, example in enumerate(examples):
    for c in range(num_choices):
      packed = features.pack_pair(tokenizer, example.context, choice_text(example, c),
                                  max_seq_length)
      length = len(packed.input_ids)
      arrays["input_ids"][q, c, :length] = packed.input_ids
      arrays["input_mask"][q, c, :length] = 1
      arrays["segment_ids"][q, c, :length] = packed.segment_ids
    arrays["label_ids"][q] = example.label or 0
    arrays["is_real_example"][q] = 1
  return arrays


def write_predictions(path, examples, predictions):
  """The predictions file: `id<TAB>label` under a header, label = the chosen ending's index."""
  with files.atomic_output(path) as f:
    f.write("id\tlabel\n")
    for example, prediction in zip(examples, predictions):
      f.write(f"{example.guid}\t{int(prediction)}\n")


# --- Questions from plain-text books (for trying the script on real text) -----

_BODY_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG|^\*END\*.*SMALL PRINT",
                         re.IGNORECASE)
_BODY_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG|^End of (the )?Project "
                       r"Gutenberg|^\*\*\*\*?START\*\*THE SMALL PRINT", re.IGNORECASE)
QUESTION_HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                   "ending0", "ending1", "ending2", "ending3", "label"]


def book_body(lines):
  """The lines of a Gutenberg etext between its header (and licence) and its footer."""
  start = 0
  for i, line in enumerate(lines[:len(lines) // 2]):
    if _BODY_START.search(line):
      start = i + 1
  for end in range(start, len(lines)):
    if _BODY_END.search(lines[end]):
      return lines[start:end]
  return lines[start:]


def book_sentences(text):
  """(sentence, paragraph number) of a book's body, in order."""
  out = []
  for number, paragraph in enumerate(corpus.document_paragraphs(book_body(text.split("\n")))):
    joined = " ".join(" ".join(paragraph).split())
    out.extend((s, number) for s in corpus.split_sentences(joined))
  return out


def _usable(sentence, min_words, max_words):
  words = sentence.split()
  return (min_words <= len(words) <= max_words and any(c.islower() for c in sentence)
          and not sentence.isupper())


def book_questions(name, sentences, rng, min_words=5, max_words=40, min_distance=20):
  """Every question of one book: (name, index, sent1, the 4 endings, label)."""
  usable = [i for i, (s, _) in enumerate(sentences) if _usable(s, min_words, max_words)]
  ok = set(usable)
  out = []
  for i in usable:
    if i + 1 not in ok or sentences[i][1] != sentences[i + 1][1]:
      continue
    far = [j for j in rng.sample(usable, min(len(usable), 12)) if abs(j - i) >= min_distance]
    distractors = list(dict.fromkeys(sentences[j][0] for j in far))[:3]
    if len(distractors) < 3 or sentences[i + 1][0] in distractors:
      continue
    label = rng.randrange(4)
    endings = distractors[:label] + [sentences[i + 1][0]] + distractors[label:]
    out.append((name, i, sentences[i][0], endings, label))
  return out


def write_questions(path, questions, with_labels=True):
  """A SWAG-layout csv: the unnamed index column, then SWAG's columns."""
  with files.atomic_output(path, "w") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(QUESTION_HEADER if with_labels else QUESTION_HEADER[:-1])
    for n, (name, index, sent1, endings, label) in enumerate(questions):
      row = [n, name, index, sent1, sent1, "", "gold", *endings]
      w.writerow(row + [label] if with_labels else row)
