"""convert_checkpoint.py: Hugging Face -> TF1 -> TF2 keeps every value and writes the original layout."""

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from scripts import last_error_line, run_script


@pytest.mark.slow
def test_minilm_through_all_formats(minilm_dir, tmp_path):
  run_script("convert_checkpoint.py", f"--input_checkpoint={minilm_dir}",
             f"--output_dir={tmp_path / 'tf1'}", "--output_format=tf1")
  names = dict(tf.train.list_variables(str(tmp_path / "tf1" / "bert_model.ckpt")))
  assert names["bert/encoder/layer_5/attention/self/query/kernel"] == [384, 384]
  assert len(names) == 6 * 16 + 5 + 2
  assert (tmp_path / "tf1" / "vocab.txt").read_text() == open(f"{minilm_dir}/vocab.txt").read()
  assert (tmp_path / "tf1" / "bert_config.json").exists()
  run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'tf1'}",
             f"--output_dir={tmp_path / 'tf2'}", "--output_format=tf2")
  original = checkpoints.read_checkpoint(minilm_dir).weights
  converted = checkpoints.read_checkpoint(str(tmp_path / "tf2"))
  assert converted.format == "tf2" and set(converted.weights) == set(original)
  for name, value in original.items():
    np.testing.assert_array_equal(converted.weights[name], value)


def test_missing_input_is_one_line(tmp_path):
  proc = run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'x'}",
                    f"--output_dir={tmp_path / 'out'}", expect_ok=False)
  assert proc.returncode != 0
  assert last_error_line(proc).startswith("error: No bert_config.json or config.json beside")
