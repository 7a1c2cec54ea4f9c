"""The README's main job: the whole pipeline, at a reduced size, on a fresh directory."""

import os
import pytest

from helpers import read_eval_results
from scripts import run_script


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
