"""The README's lists of output files against the code: every file name the README says a
script writes is one the code writes (a string in the entry scripts or in data/, modeling/,
cli/), and the GLUE table's submission files are exactly those of the task table."""

import ast
import glob
import inspect
import os
import re

import tensorflow as tf

from data import glue
from test_readme import README, ROOT, _read

# Columns of README tables that list files a script writes.
OUTPUT_COLUMNS = ("file", "writes", "files written")
# Prose that lists files a script writes: (where it starts, where it ends), whitespace joined.
OUTPUT_PROSE = (
    ("Each task's own outputs", "a later run"),  # after the --output_dir table: run.json
    ("**Choosing on dev", "```"),  # eval_log.csv, best/, finetune_search.py's files
    ("Every `eval_results.txt` also holds", "Added:"),  # GLUE
    ("as do the outputs", "Added:"),  # SQuAD
    ("**Outputs.**", "The `--export_dir` SavedModel"),  # NER
    ("Outputs: `eval_results.txt`", "The SavedModel"),  # SWAG
    ("What it writes in `--output_dir`:", "## Your domain"),  # pretraining
    ("held-out text before and after", ";"),  # learn_vocab.py's report
)
# A file or directory name in a code span: an extension or a trailing slash.
_FILE = re.compile(r"(?:[\w<>.-]+/)*(?:[\w<>*.-]+\.(?:\w+|\*)|[\w-]+/)")
# Written by tf.train.CheckpointManager under its default name, not by a string of ours.
_CHECKPOINT_MANAGER = re.compile(r"ckpt-N\.(?:\*|index|data-\*)")


def _code_strings():
  """Every string constant of the entry scripts and the library (f-strings' parts too)."""
  strings = set()
  paths = glob.glob(os.path.join(ROOT, "*.py")) + [
      p for package in ("data", "modeling", "cli")
      for p in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True)]
  for path in paths:
    for node in ast.walk(ast.parse(_read(path), path)):
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        strings.add(node.value)
  return strings


def _tables(text):
  """[(header cells, [row cells])] of every table in `text`."""
  tables, lines = [], text.splitlines()
  rule = re.compile(r"\|[-| :]+\|")
  for i, line in enumerate(lines[:-1]):
    if line.startswith("|") and rule.fullmatch(lines[i + 1]):
      rows = []
      for row in lines[i + 2:]:
        if not row.startswith("|"):
          break
        rows.append([c.strip() for c in row.strip().strip("|").split("|")])
      tables.append(([c.strip() for c in line.strip().strip("|").split("|")], rows))
  return tables


def _file_names(text, every_span=False):
  """The file names in `text`'s code spans (every_span: each span is one), each as its last
  path component."""
  names = []
  for span in re.findall(r"`([^`]+)`", text):
    if ((every_span or _FILE.fullmatch(span)) and not span.startswith("-")
        and not span.endswith(".py")):
      names.append(span.rstrip("/").split("/")[-1] + ("/" if span.endswith("/") else ""))
    elif span.startswith("--output_dir/"):
      names.append(span[len("--output_dir/"):])
  return names


def output_lists(text):
  """{where: [file names]} of what `text` (the README) says the scripts write; a missing
  prose anchor is reported as a name that cannot be found."""
  found = {}
  for header, rows in _tables(text):
    for column in OUTPUT_COLUMNS:
      if column in header:
        for row in rows:
          found.setdefault(f"table column {column!r}", []).extend(
              _file_names(row[header.index(column)], every_span=True))
  joined = " ".join(text.split())
  for start, end in OUTPUT_PROSE:
    at = joined.find(start)
    if at < 0:
      found[f"prose from {start!r}"] = [f"<the README no longer has {start!r}>"]
      continue
    stop = joined.find(end, at + len(start))
    found[f"prose from {start!r}"] = _file_names(joined[at:stop if stop > 0 else None])
  return found


def unwritten(name, strings):
  """Why no code writes `name` (a README file name), or None when some code does."""
  plain = name.rstrip("/")
  if _CHECKPOINT_MANAGER.fullmatch(plain):
    return None  # checked by test_checkpoint_files_are_the_checkpoint_managers
  candidates = {plain, re.sub(r"\.\*$", "", plain)}
  if plain.startswith("<"):  # "<name>_extension.json": the code's fixed part
    candidates.add(plain.split(">", 1)[1])
  if candidates & strings:
    return None
  # A suffix the code appends to a name the user chose (vocab.txt: vocab_extension.json).
  if any(s.startswith("_") and len(s) > 5 and plain.endswith(s) for s in strings):
    return None
  return f"{name}: no script or library module has the string {sorted(candidates)[0]!r}"


def test_every_output_file_the_readme_names_is_written_by_the_code():
  strings = _code_strings()
  lists = output_lists(_read(README))
  problems = [f"README.md, {where}: {why}" for where, names in lists.items()
              for name in names if (why := unwritten(name, strings))]
  assert not problems, "\n".join(problems)
  assert len(lists) == len(OUTPUT_COLUMNS) + len(OUTPUT_PROSE)  # every list was found
  assert all(lists.values()), lists
  assert sum(map(len, lists.values())) > 60  # the parser found them


def test_checkpoint_files_are_the_checkpoint_managers():
  """ckpt-N.*: tf.train.CheckpointManager's default name, which training does not change."""
  manager = inspect.signature(tf.train.CheckpointManager).parameters["checkpoint_name"]
  assert manager.default == "ckpt"
  assert "checkpoint_name" not in _read(os.path.join(ROOT, "modeling", "train_state.py"))


def test_glue_submission_files_are_the_task_tables():
  header, rows = next((h, r) for h, r in _tables(_read(README)) if "submission file" in h)
  column = header.index("submission file")
  listed = {name.strip() for row in rows for name in row[column].split(",") if name.strip()}
  written = {f"{stem}.tsv" for task in glue.tasks().values()
             for stem in task.submissions.values()}
  assert listed == written


def test_output_check_reports_names_the_code_does_not_write():
  """The checker itself, on a small text: a table column, prose between its anchors, paths
  reduced to their last part, flags and inputs left alone."""
  text = ("| file | written |\n|---|---|\n| `ckpt-N.index`, `checkpoint` | always |\n\n"
          "Each task's own outputs: `--output_dir/best/`, `a/b/report.json`, `x.py`, `--flag`; "
          "a later run `in.txt`.\n")
  lists = output_lists(text)
  assert lists["table column 'file'"] == ["ckpt-N.index", "checkpoint"]
  assert lists["prose from \"Each task's own outputs\""] == ["best/", "report.json"]
  assert lists["prose from '**Outputs.**'"] == ["<the README no longer has '**Outputs.**'>"]
  strings = {"out.txt", "best", "_extension.json", "bert_model.ckpt"}
  assert [n for n in ("ckpt-N.index", "out.txt", "best/", "<name>_extension.json",
                      "vocab_extension.json", "bert_model.ckpt.*")
          if unwritten(n, strings)] == []
  assert unwritten("report.json", strings) == (
      "report.json: no script or library module has the string 'report.json'")
