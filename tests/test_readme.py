"""The README's snippets that a user copies: they must work as written."""

import os
import re

from data import glue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _section(title):
  text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
  start = text.index(f"### {title}")
  return text[start:text.index("\n## ", start)]


def test_own_task_snippet_reads_its_files(tmp_path):
  """The "Your own task" entry, added to the task table, reads the layout it describes."""
  section = _section("Your own task")
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  name, expression = re.match(r'\s*"([^"]+)":\s*(.*),\s*$', code, re.S).groups()
  task = eval(expression, {"Task": glue.Task, "Layout": glue.Layout})  # noqa: S307
  assert name in section.split("--task_name=")[1]
  (tmp_path / "train.tsv").write_text("sentence\tlabel\ngreat film\tpositive\n"
                                      "dull plot\tnegative\nit was a film\tneutral\n")
  (tmp_path / "dev.tsv").write_text("sentence\tlabel\nvery good\tpositive\n")
  (tmp_path / "test.tsv").write_text("index\tsentence\n7\tgood plot\n")
  train = glue.examples(task, str(tmp_path), "train")
  assert [(e.text_a, e.text_b, e.label) for e in train] == [
      ("great film", None, "positive"), ("dull plot", None, "negative"),
      ("it was a film", None, "neutral")]
  assert [e.label for e in glue.examples(task, str(tmp_path), "dev")] == ["positive"]
  test = glue.examples(task, str(tmp_path), "test")
  assert [(e.text_a, e.index, e.label) for e in test] == [("good plot", "7", None)]
  assert task.labels == ["negative", "neutral", "positive"] and not task.is_pair
