"""GLUE and XNLI: reading the standard task directories into examples.

Each task is a small table: its labels (None for the STS-B regression) and,
per split, the file(s), whether a header line comes first and which columns
hold the texts, the label and the row index. Files are tab-separated with
quoting off (sentences contain quote characters), read line by line as the
original reads them (only \\n, \\r\\n and \\r end a row), UTF-8 with an optional
byte order mark. A row that does not fit its task raises an error naming the
file and line; a header line that reads as data draws a warning, since it is
skipped (as the original skips it).
"""

import csv
import dataclasses
import math
import os
import sys

from absl import logging

from data import files, text_decoding

MNLI_LABELS = ["contradiction", "entailment", "neutral"]
NLI_LABELS = ["entailment", "not_entailment"]
BINARY = ["0", "1"]


@dataclasses.dataclass
class InputExample:
  """One example: guid, texts, label (str, float for regression, None when unlabelled) and
  the row's index for submission files."""
  guid: str
  text_a: str
  text_b: str = None
  label: object = None
  index: str = None


@dataclasses.dataclass
class Layout:
  """Where a split's data is: file names (first existing wins), columns (None: absent)."""
  files: tuple
  header: bool
  a: int
  b: int = None
  label: int = None
  index: int = None
  keep: tuple = None  # (column, value): only rows with this value, e.g. an XNLI language


@dataclasses.dataclass
class Task:
  """A task: labels (None: regression), layouts per split name, submission file stems."""
  labels: list
  splits: dict
  submissions: dict = dataclasses.field(default_factory=dict)  # split name -> file stem
  label_map: dict = dataclasses.field(default_factory=dict)

  @property
  def is_regression(self):
    return self.labels is None

  @property
  def is_pair(self):
    return any(layout.b is not None for layout in self.splits.values())


def _nli(name, labels=NLI_LABELS):
  return Task(labels, {"train": Layout(("train.tsv",), True, 1, 2, 3, 0),
                       "dev": Layout(("dev.tsv",), True, 1, 2, 3, 0),
                       "test": Layout(("test.tsv",), True, 1, 2, None, 0)}, {"test": name})


def _xnli(language):
  dev = lambda f: Layout((f,), True, 6, 7, 1, None, keep=(0, language))
  return Task(MNLI_LABELS, {
      "train": Layout((f"multinli/multinli.train.{language}.tsv",), True, 0, 1, 2),
      "dev": dev("xnli.dev.tsv"), "test": dev("xnli.test.tsv")},
      label_map={"contradictory": "contradiction"})


def tasks(xnli_language="zh"):
  """The task table, by lower-case name."""
  return {
      "cola": Task(BINARY, {"train": Layout(("train.tsv",), False, 3, None, 1),
                            "dev": Layout(("dev.tsv",), False, 3, None, 1),
                            "test": Layout(("test.tsv",), True, 1, None, None, 0)},
                   {"test": "CoLA"}),
      "sst-2": Task(BINARY, {"train": Layout(("train.tsv",), True, 0, None, 1),
                             "dev": Layout(("dev.tsv",), True, 0, None, 1),
                             "test": Layout(("test.tsv",), True, 1, None, None, 0)},
                    {"test": "SST-2"}),
      "mrpc": Task(BINARY, {"train": Layout(("train.tsv",), True, 3, 4, 0),
                            "dev": Layout(("dev.tsv",), True, 3, 4, 0),
                            "test": Layout(("test.tsv",), True, 3, 4, None, 0)},
                   {"test": "MRPC"}),
      "sts-b": Task(None, {"train": Layout(("train.tsv",), True, 7, 8, 9, 0),
                           "dev": Layout(("dev.tsv",), True, 7, 8, 9, 0),
                           "test": Layout(("test.tsv",), True, 7, 8, None, 0)},
                    {"test": "STS-B"}),
      "qqp": Task(BINARY, {"train": Layout(("train.tsv",), True, 3, 4, 5, 0),
                           "dev": Layout(("dev.tsv",), True, 3, 4, 5, 0),
                           "test": Layout(("test.tsv",), True, 1, 2, None, 0)},
                  {"test": "QQP"}),
      "mnli": Task(MNLI_LABELS, {
          "train": Layout(("train.tsv",), True, 8, 9, -1, 0),
          "dev": Layout(("dev_matched.tsv",), True, 8, 9, -1, 0),
          "dev_mismatched": Layout(("dev_mismatched.tsv",), True, 8, 9, -1, 0),
          "test": Layout(("test_matched.tsv",), True, 8, 9, None, 0),
          "test_mismatched": Layout(("test_mismatched.tsv",), True, 8, 9, None, 0)},
          {"test": "MNLI-m", "test_mismatched": "MNLI-mm"}),
      "qnli": _nli("QNLI"),
      "rte": _nli("RTE"),
      "wnli": _nli("WNLI", BINARY),
      "ax": Task(MNLI_LABELS, {"test": Layout(("diagnostic.tsv", "AX.tsv", "test.tsv"), True,
                                              1, 2, None, 0)}, {"test": "AX"}),
      "xnli": _xnli(xnli_language),
  }


def get_task(name, xnli_language="zh"):
  """The task named `name` (any case); ValueError listing the names otherwise."""
  table = tasks(xnli_language)
  task = table.get(name.lower())
  if task is None:
    raise ValueError(f"--task_name={name}: unknown task; expected one of {', '.join(table)}.")
  return task


def read_tsv(path):
  """(line number, fields) of a tab-separated file, quoting off, byte order mark dropped.

  Raises ValueError naming the file (and line) when it is unreadable or not UTF-8.
  """
  csv.field_size_limit(sys.maxsize)
  rows = csv.reader(text_decoding.text_lines(text_decoding.read_text(path)), delimiter="\t",
                    quoting=csv.QUOTE_NONE)
  return [(number, fields) for number, fields in enumerate(rows, start=1)]


def split_file(data_dir, layout):
  """The first of the layout's files that exists in data_dir."""
  for name in layout.files:
    path = os.path.join(data_dir, name)
    if files.exists(path):
      return path
  raise ValueError(f"--data_dir={data_dir} has no {' or '.join(layout.files)}.")


def examples(task, data_dir, split):
  """The examples of one split ("train", "dev", "test", ...) of a task."""
  if split not in task.splits:
    raise ValueError(f"This task has no {split} split (it has {', '.join(task.splits)}).")
  layout = task.splits[split]
  path = split_file(data_dir, layout)
  needed = max(c for c in (layout.a, layout.b, layout.label, layout.index,
                           layout.keep[0] if layout.keep else None) if c is not None and c >= 0)
  if layout.label is not None and layout.label < 0:  # a last-column label follows the texts
    needed += 1
  out = []
  for number, fields in read_tsv(path):
    if layout.header and number == 1:
      if _reads_as_data(task, layout, fields, needed):
        logging.warning("%s: the first line, skipped as the header, reads as data; a file "
                        "without a header line loses its first example.", path)
      continue
    if not fields or fields == [""]:
      continue
    where = f"{path}:{number}"
    if layout.keep and len(fields) > layout.keep[0] and fields[layout.keep[0]] != layout.keep[1]:
      continue  # another language's row: the original skips it unread
    if len(fields) <= needed:
      absent = [f"{what} (column {column + 1})" for what, column in _columns(layout)
                if column >= len(fields)]
      if layout.label is not None and layout.label < 0:
        absent.append("label (the last column, after the texts)")
      raise ValueError(f"{where}: expected at least {needed + 1} tab-separated columns, "
                       f"found {len(fields)}: no {', '.join(absent)}.")
    label = None
    if layout.label is not None:
      label = _label(task, fields[layout.label], where)
    index = fields[layout.index] if layout.index is not None else str(len(out))
    out.append(InputExample(f"{split}-{index}", fields[layout.a],
                            fields[layout.b] if layout.b is not None else None, label, index))
  return out


def held_out(task, task_name, data_dir, evaluate, predict):
  """{split: examples} of the dev splits (evaluate) and test splits (predict).

  Raises ValueError when the task has no such split or a file holds no examples.
  """
  out = {}
  for wanted, splits in ((evaluate, ("dev", "dev_mismatched")),
                         (predict, ("test", "test_mismatched"))):
    present = [split for split in splits if split in task.splits] if wanted else []
    if wanted and not present:
      raise ValueError(f"--task_name={task_name} has no {splits[0]} set.")
    for split in present:
      layout = task.splits[split]
      if split != splits[0] and not any(files.exists(os.path.join(data_dir, name))
                                        for name in layout.files):
        # The original reads MNLI's matched files alone: the mismatched ones are optional.
        logging.info("--data_dir=%s has no %s: its %s set is left out.", data_dir,
                     " or ".join(layout.files), split)
        continue
      out[split] = examples(task, data_dir, split)
      if not out[split]:
        raise ValueError(f"{split_file(data_dir, task.splits[split])} holds no examples.")
  return out


def _columns(layout):
  """(what, column index) of each column the layout reads (the last-column label excluded)."""
  named = (("text", layout.a), ("second text", layout.b), ("label", layout.label),
           ("index", layout.index), ("language", layout.keep[0] if layout.keep else None))
  return [(what, column) for what, column in named if column is not None and column >= 0]


def _reads_as_data(task, layout, fields, needed):
  """True when a header line looks like a row: a valid label, or a numeric index."""
  if len(fields) <= needed:
    return False
  if layout.label is not None:
    try:
      _label(task, fields[layout.label], "")
      return True
    except ValueError:
      return False
  return layout.index is not None and fields[layout.index].strip().isdigit()


def _label(task, value, where):
  value = task.label_map.get(value, value)
  if task.is_regression:
    try:
      score = float(value)
    except ValueError:
      raise ValueError(f"{where}: the score {value!r} is not a number.") from None
    if not math.isfinite(score):
      raise ValueError(f"{where}: the score {value!r} is not a finite number.")
    return score
  if value not in task.labels:
    empty = " (a tab at the end of the line?)" if not value.strip() else ""
    raise ValueError(f"{where}: label {value!r}{empty} is not one of {', '.join(task.labels)}.")
  return value


def feature_arrays(task, examples, tokenizer, max_seq_length, pad_to=1):
  """Model inputs of `examples` as int arrays [N, max_seq_length] (label_ids [N]).

  The example count is padded up to a multiple of `pad_to` with all-zero
  examples whose is_real_example is 0 (so every replica gets full batches).
  """
  import numpy as np
  from data import features
  n = len(examples) + (-len(examples)) % pad_to
  arrays = {name: np.zeros((n, max_seq_length), np.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}
  arrays["label_ids"] = np.zeros(n, np.float32 if task.is_regression else np.int64)
  arrays["is_real_example"] = np.zeros(n, np.int64)
  for i, example in enumerate(examples):
    packed = features.pack_pair(tokenizer, example.text_a, example.text_b, max_seq_length)
    length = len(packed.input_ids)
    arrays["input_ids"][i, :length] = packed.input_ids
    arrays["input_mask"][i, :length] = 1
    arrays["segment_ids"][i, :length] = packed.segment_ids
    if example.label is not None:
      arrays["label_ids"][i] = (example.label if task.is_regression
                                else task.labels.index(example.label))
    arrays["is_real_example"][i] = 1
  return arrays


def window_arrays(task, examples, tokenizer, max_seq_length, doc_stride, pad_to=1):
  """Model inputs of single-text `examples` cut into overlapping windows (--doc_stride).

  Each text's pieces are split as run_squad.py splits a document
  (windows.doc_spans): max_seq_length - 2 pieces a window, one starting every
  doc_stride pieces, the last reaching the end; each window is
  `[CLS] piece... [SEP]` with its example's label. Returns (arrays as
  feature_arrays gives them, one row per window, and example_of int64 [rows]:
  each row's example, -1 for padding rows).
  """
  import numpy as np
  from data import windows
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  rows = []
  for i, example in enumerate(examples):
    ids = tokenizer.tokenize_to_ids(example.text_a)
    for start, length in windows.doc_spans(len(ids), max_seq_length - 2, doc_stride) or [(0, 0)]:
      rows.append((i, [cls_id] + ids[start:start + length] + [sep_id]))
  n = len(rows) + (-len(rows)) % pad_to
  arrays = {name: np.zeros((n, max_seq_length), np.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}
  arrays["label_ids"] = np.zeros(n, np.float32 if task.is_regression else np.int64)
  arrays["is_real_example"] = np.zeros(n, np.int64)
  example_of = np.full(n, -1, np.int64)
  for row, (i, ids) in enumerate(rows):
    arrays["input_ids"][row, :len(ids)] = ids
    arrays["input_mask"][row, :len(ids)] = 1
    label = examples[i].label
    if label is not None:
      arrays["label_ids"][row] = label if task.is_regression else task.labels.index(label)
    arrays["is_real_example"][row] = 1
    example_of[row] = i
  return arrays, example_of


def model_arrays(task, examples, tokenizer, max_seq_length, doc_stride=0, pad_to=1):
  """(arrays, example_of) of `examples`: with doc_stride, their windows (window_arrays);
  without, a row each cut to max_seq_length (feature_arrays) and example_of None."""
  if doc_stride:
    return window_arrays(task, examples, tokenizer, max_seq_length, doc_stride, pad_to)
  return feature_arrays(task, examples, tokenizer, max_seq_length, pad_to=pad_to), None


def combine_windows(label_ids, logits, example_of, num_examples):
  """(label_ids [E], logits [E, C]) of the examples from their windows' rows (the real rows
  first, as window_arrays orders them): each example's label, its windows' mean logits."""
  import numpy as np
  owners = example_of[:len(logits)]
  first = np.searchsorted(owners, np.arange(num_examples))
  return label_ids[first], mean_over_windows(logits, owners, num_examples)


def mean_over_windows(logits, example_of, num_examples):
  """Each example's logits [E, C]: the mean of its windows' logits [rows, C].

  The mean of logits is the log of the geometric mean of the windows'
  (unnormalised) probabilities: a class wins where the windows agree on it,
  and one window that is sure of a class (the one holding the deciding words)
  moves the result in proportion to its confidence rather than being
  averaged away as a mean of probabilities would, bounded by 1 per window.
  For regression the logit is the score: the windows' mean score.
  """
  import numpy as np
  real = example_of >= 0
  sums = np.zeros((num_examples, logits.shape[1]), np.float64)
  np.add.at(sums, example_of[real], logits[real])
  counts = np.bincount(example_of[real], minlength=num_examples)[:, None]
  return (sums / np.maximum(counts, 1)).astype(logits.dtype)


def write_submission(path, task, examples, predictions):
  """A GLUE submission file: `index<TAB>prediction` under a header line.

  predictions: class indexes, or scores for a regression task.
  """
  with files.atomic_output(path) as f:
    f.write("index\tprediction\n")
    for example, prediction in zip(examples, predictions):
      value = f"{float(prediction):.3f}" if task.is_regression else task.labels[int(prediction)]
      f.write(f"{example.index}\t{value}\n")
