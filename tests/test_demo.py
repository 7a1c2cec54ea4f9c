"""The README's main job: the whole pipeline, at a reduced size, on a fresh directory."""

import os
import subprocess
import sys
import pytest

from helpers import read_eval_results
from scripts import ROOT, last_error_line, run_script


@pytest.mark.slow
def test_demo_pipeline_end_to_end(tmp_path):
  work = tmp_path / "demo"
  out = run_script("demo.py", "--quick", f"--work_dir={work}",
                   "--sentence=An excellent and charming film.").stdout
  for step in ("[1] Corpus", "[2] Vocabulary", "[3] Pretraining data", "[4] Pretraining",
               "[5] Fine-tuning", "[6] Serving"):
    assert step in out
  assert "$ python run_pretraining.py --bert_config_file=" in out  # commands are shown
  vocab = (work / "vocab.txt").read_text().splitlines()
  assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) <= 2000
  assert (work / "pretraining.tfrecord").stat().st_size > 0
  assert (work / "pretrained" / "export" / "bert_model.ckpt.index").exists()
  assert (work / "pretrained" / "training_curves.png").exists()
  results = read_eval_results(work / "classifier" / "eval_results.txt")
  # The dev set's adjectives are unseen in training: well above chance means it learned.
  assert results["eval_accuracy"] >= 0.9, results
  assert "-> positive (label 1)" in out  # a plainly positive sentence
  assert "What was made:" in out and "total" in out
  assert os.path.isdir(work / "saved_model")


# (case, flags, the one-line error): each refused before any step runs or --work_dir is made.
REFUSED = [
    ("pair for the demo task", ["--sentence=A great film. ||| I loved it."],  # the demo's own task, SST-2
     "error: --sentence: SST-2 takes one text, not 'first ||| second'."),
    ("one text for a pair task", ["--glue_dir=my_task", "--task_name=RTE", "--sentence=One text."],
     "error: --sentence: RTE takes a pair: write 'first ||| second'."),
    ("task without glue_dir", ["--task_name=RTE", "--sentence=A. ||| B."],
     "error: --task_name=RTE needs --glue_dir (the demo's own task is SST-2): pass your "
     "task's directory too, or drop --task_name."),
    ("zero pretraining steps", ["--pretrain_steps=0"],
     "error: --pretrain_steps=0: pretraining needs at least 1."),
]


@pytest.mark.parametrize("case,args,want", REFUSED, ids=[c[0] for c in REFUSED])
def test_demo_refuses_bad_flags_before_any_work(tmp_path, case, args, want):
  work = tmp_path / "demo"
  proc = run_script("demo.py", "--quick", f"--work_dir={work}", *args, expect_ok=False)
  assert proc.returncode == 1 and last_error_line(proc) == want, proc.stderr[-2000:]
  assert "[1] Corpus" not in proc.stdout
  assert not work.exists()


def test_demo_pretrain_steps_count_under_quick():
  """--quick shrinks every step, but an explicit --pretrain_steps is used as given. In a
  process of its own: demo.py's flags share names with the scripts' (--task_name)."""
  code = ("import demo; print([demo._check_flags(*a) for a in ((None, None, 'One text.', None,"
          " True), (None, None, 'One text.', None, False), (None, None, 'One text.', 50, True),"
          " ('task', 'rte', 'A. ||| B.', None, False))])")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout
  assert out.strip() == "[('SST-2', 8), ('SST-2', 1000), ('SST-2', 50), ('rte', 1000)]"
