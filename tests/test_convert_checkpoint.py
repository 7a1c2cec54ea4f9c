"""convert_checkpoint.py: Hugging Face -> TF1 -> HF / TF2 keeps every value; bad inputs are one line."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from conftest import script_module
from scripts import last_error_line, run_script


def _tensors(path):
  """{key: (dtype, shape, raw bytes)} of a safetensors file, read by safetensors itself."""
  from safetensors import safe_open
  with safe_open(path, "np") as f:
    return {k: (str(v.dtype), v.shape, v.tobytes()) for k in f.keys() for v in [f.get_tensor(k)]}


@pytest.mark.slow
def test_minilm_through_all_formats(minilm_dir, tmp_path):
  run_script("convert_checkpoint.py", f"--input_checkpoint={minilm_dir}",
             f"--output_dir={tmp_path / 'tf1'}")  # tf1 is the default
  names = dict(tf.train.list_variables(str(tmp_path / "tf1" / "bert_model.ckpt")))
  assert names["bert/encoder/layer_5/attention/self/query/kernel"] == [384, 384]
  assert len(names) == 6 * 16 + 5 + 2
  assert (tmp_path / "tf1" / "vocab.txt").read_text() == open(f"{minilm_dir}/vocab.txt").read()
  assert (tmp_path / "tf1" / "bert_config.json").exists()
  # Back to Hugging Face: the same file, tensor for tensor, byte for byte, but for the
  # position index buffer the released file carries (save_pretrained no longer writes it).
  run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'tf1'}",
             f"--output_dir={tmp_path / 'hf'}", "--output_format=hf")
  assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors",
                                                 "tokenizer_config.json", "vocab.txt"]
  # The casing travels with the weights: the release's tokenizer_config.json, as it is.
  for out in ("tf1", "hf"):
    assert ((tmp_path / out / "tokenizer_config.json").read_bytes()
            == open(os.path.join(minilm_dir, "tokenizer_config.json"), "rb").read())
  original = _tensors(os.path.join(minilm_dir, "model.safetensors"))
  written = _tensors(str(tmp_path / "hf" / "model.safetensors"))
  assert sorted(written) == sorted(set(original) - {"embeddings.position_ids"})
  assert len(original) == 104 and len(written) == 103
  for key, entry in written.items():
    assert original[key] == entry, key
  with open(os.path.join(minilm_dir, "config.json")) as f:
    want = json.load(f)
  with open(tmp_path / "hf" / "config.json") as f:
    got = json.load(f)
  assert {k: got[k] for k in want if k in got} == {
      k: want[k] for k in want if k not in ("_name_or_path", "gradient_checkpointing",
                                             "transformers_version", "use_cache")}
  # A Google release's name says its casing where no file does.
  cased = tmp_path / "cased_L-6_H-384_A-12"
  cased.mkdir()
  for name in os.listdir(tmp_path / "tf1"):
    if name != "tokenizer_config.json":
      os.link(tmp_path / "tf1" / name, cased / name)
  run_script("convert_checkpoint.py", f"--input_checkpoint={cased}",
             f"--output_dir={tmp_path / 'cased_hf'}", "--output_format=hf")
  assert json.loads((tmp_path / "cased_hf" / "tokenizer_config.json").read_text()) == {
      "do_lower_case": False}
  run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'tf1'}",
             f"--output_dir={tmp_path / 'tf2'}", "--output_format=tf2")
  original = checkpoints.read_checkpoint(minilm_dir).weights
  converted = checkpoints.read_checkpoint(str(tmp_path / "tf2"))
  assert converted.format == "tf2" and set(converted.weights) == set(original)
  for name, value in original.items():
    np.testing.assert_array_equal(converted.weights[name], value)  # exact: copied bits


def _assert_one_line_error(proc, *parts):
  line = last_error_line(proc)
  assert proc.returncode == 1, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert line.startswith("error: "), line
  for part in parts:
    assert part in line, line


def test_missing_input_is_reported_as_missing(tmp_path):
  proc = run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'x'}",
                    f"--output_dir={tmp_path / 'out'}", expect_ok=False)
  _assert_one_line_error(proc, f"Checkpoint {tmp_path / 'x'} does not exist")
  assert not (tmp_path / "out").exists()


def test_an_output_dir_that_is_a_file_is_refused_before_the_input_is_read(tmp_path):
  (tmp_path / "out").write_text("a file")
  proc = run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'missing'}",
                    f"--output_dir={tmp_path / 'out'}", expect_ok=False)
  assert last_error_line(proc) == (f"error: --output_dir={tmp_path / 'out'} is a file; name a "
                                   "directory for the checkpoint.")


def test_extract_features_reports_a_missing_checkpoint(tmp_path):
  (tmp_path / "input.txt").write_text("hello world\n")
  proc = run_script("extract_features.py", f"--input_file={tmp_path / 'input.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}",
                    f"--init_checkpoint={tmp_path / 'nowhere' / 'bert_model.ckpt'}",
                    expect_ok=False)
  _assert_one_line_error(proc, f"Checkpoint {tmp_path / 'nowhere' / 'bert_model.ckpt'} "
                         "does not exist")
  assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("fmt,part", [("tf1", "bert_model.ckpt.index"),
                                      ("tf1", "bert_model.ckpt.data-00000-of-00001"),
                                      ("hf", "model.safetensors")])
def test_truncated_input_is_one_line_naming_the_file(tmp_path, fmt, part):
  from modeling import hf_checkpoints
  config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)
  weights = checkpoints.model_weights(BertEncoder(config))
  source = tmp_path / "in"
  if fmt == "tf1":
    checkpoints.save_tf1_checkpoint(weights, str(source), config)
  else:
    hf_checkpoints.save_hf_checkpoint(weights, str(source), config)
  data = (source / part).read_bytes()
  (source / part).write_bytes(data[:len(data) // 2])
  proc = run_script("convert_checkpoint.py", f"--input_checkpoint={source}",
                    f"--output_dir={tmp_path / 'out'}", "--output_format=hf", expect_ok=False)
  _assert_one_line_error(proc, f"Checkpoint file {source / part} is truncated")
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("vocab", ["missing", "latin1", "too_large"])
def test_bad_vocab_stops_before_anything_is_written(tmp_path, vocab):
  config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)
  source = tmp_path / "in"
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(config)), str(source),
                                  config)
  path = tmp_path / "vocab.txt"
  if vocab == "latin1":
    path.write_bytes(b"[PAD]\ncaf\xe9\n")
  elif vocab == "too_large":
    path.write_text("".join(f"w{i}\n" for i in range(31)))
  proc = run_script("convert_checkpoint.py", f"--input_checkpoint={source}",
                    f"--output_dir={tmp_path / 'out'}", "--output_format=tf2",
                    f"--vocab_file={path}", expect_ok=False)
  _assert_one_line_error(proc, {"missing": "Cannot read vocab file", "latin1": "not UTF-8",
                                "too_large": "has 31 entries but the model's vocab_size is 30"
                                }[vocab])
  assert not (tmp_path / "out").exists()


def test_class_names_beside_a_checkpoint(tmp_path):
  """hf's id2label names: label_list.txt first, then run.json's labels; a run.json that
  does not fit, names nothing, or cannot be read leaves LABEL_i (the conversion goes on)."""
  with script_module("convert_checkpoint") as convert_checkpoint:
    labels_beside = convert_checkpoint._labels_beside
    ckpt = str(tmp_path / "ckpt-3")
    run = tmp_path / "run.json"
    assert labels_beside(ckpt, 3) is None  # nothing beside it
    run.write_text(json.dumps({"task_name": "mnli", "labels": ["contradiction", "entailment",
                                                              "neutral"]}))
    assert labels_beside(ckpt, 3) == ["contradiction", "entailment", "neutral"]
    assert labels_beside(ckpt, 2) is None  # another head
    assert labels_beside(ckpt, None) is None  # no classes at all
    run.write_text(json.dumps({"task_name": "sts-b", "labels": None}))  # regression
    assert labels_beside(ckpt, 1) is None
    run.write_text("{not json")
    assert labels_beside(ckpt, 3) is None
    run.unlink()
    config = tmp_path / "config.json"  # a Hugging Face classifier's own names
    config.write_text(json.dumps({"id2label": {"1": "POSITIVE", "0": "NEGATIVE"}}))
    assert labels_beside(ckpt, 2) == ["NEGATIVE", "POSITIVE"]
    config.write_text(json.dumps({"id2label": {"0": "LABEL_0", "1": "LABEL_1"}}))
    assert labels_beside(ckpt, 2) is None  # transformers' default names: none given
    config.write_text(json.dumps({"id2label": {"0": "A", "2": "B"}}))
    assert labels_beside(ckpt, 2) is None  # ids with a gap: not read
    (tmp_path / "label_list.txt").write_text("O\nB-PER\nI-PER\n")
    assert labels_beside(ckpt, 3) == ["O", "B-PER", "I-PER"]


def test_class_names_survive_hf_to_tf1_to_hf(tmp_path):
  """An hf classifier's id2label became LABEL_i, and a tf1 or tf2 output carried no names."""
  from modeling import hf_checkpoints
  from modeling.classification import BertClassifier
  config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)
  model = BertClassifier(BertEncoder(config), num_labels=2)
  hf_checkpoints.save_hf_checkpoint(checkpoints.model_weights(model), str(tmp_path / "hf"),
                                    config, labels=["NEGATIVE", "POSITIVE"])
  run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'hf'}",
             f"--output_dir={tmp_path / 'tf1'}")
  assert (tmp_path / "tf1" / "label_list.txt").read_text() == "NEGATIVE\nPOSITIVE\n"
  run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'tf1'}",
             f"--output_dir={tmp_path / 'back'}", "--output_format=hf")
  written = json.loads((tmp_path / "back" / "config.json").read_text())
  assert written["id2label"] == {"0": "NEGATIVE", "1": "POSITIVE"}


def test_a_training_runs_directory_is_refused_as_an_output(tmp_path):
  """Writing bert_model.ckpt or model.ckpt there would point the run's `checkpoint` state
  file at weights alone, and its next resume would lose the step and the optimizer; a
  model.safetensors there was read in place of the run's later checkpoints."""
  run = tmp_path / "run"
  run.mkdir()
  state = 'model_checkpoint_path: "ckpt-8"\nall_model_checkpoint_paths: "ckpt-8"\n'
  (run / "checkpoint").write_text(state)
  for fmt in ("tf1", "tf2", "hf"):
    proc = run_script("convert_checkpoint.py", f"--input_checkpoint={tmp_path / 'in'}",
                      f"--output_dir={run}", f"--output_format={fmt}", expect_ok=False)
    _assert_one_line_error(proc, f"--output_dir={run} holds a training run's checkpoints "
                           "(ckpt-8)")
    assert (run / "checkpoint").read_text() == state and os.listdir(run) == ["checkpoint"]
