"""extract_features.py end to end: the original's JSON layout, values equal to the encoder's."""

import json
import platform

import numpy as np
import pytest
import tensorflow as tf

from data import features
from data.tokenization import FullTokenizer
from modeling import checkpoints, distribution, extracted_features
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from helpers import block_ops, randomize, rounding_tolerance
from scripts import last_error_line, run_script
from conftest import write_vocab

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox",
         "jumps", "who", "?", ".", "##s", "dog"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp("model")
  config = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=3,
                      num_attention_heads=2, intermediate_size=20,
                      max_position_embeddings=32, type_vocab_size=2)
  encoder = BertEncoder(config)
  randomize(encoder, 7)
  vocab = write_vocab(directory / "words.txt", WORDS)
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(encoder), str(directory),
                                  config=config, vocab_file=vocab)
  return directory, encoder


def test_output_layout_and_values(model_dir, tmp_path):
  directory, encoder = model_dir
  lines = ["The quick brown fox jumps.", "Who jumps? ||| the dog jumps", "", "foxes " * 40]
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
  run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
             f"--output_file={tmp_path / 'out.jsonl'}",
             f"--init_checkpoint={directory / 'bert_model.ckpt'}",
             "--layers=-1,0", "--max_seq_length=12", "--batch_size=3")
  records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
  assert [r["linex_index"] for r in records] == [0, 1, 2, 3]
  assert list(records[1]) == ["linex_index", "features"]
  assert list(records[1]["features"][0]) == ["token", "layers"]
  assert [f["token"] for f in records[1]["features"]] == [
      "[CLS]", "who", "jumps", "?", "[SEP]", "the", "dog", "jumps", "[SEP]"]
  assert [f["token"] for f in records[2]["features"]] == ["[CLS]", "[SEP]"]
  assert len(records[3]["features"]) == 12  # truncated to max_seq_length
  tokenizer = FullTokenizer(str(directory / "vocab.txt"))
  for i, pair in enumerate([("The quick brown fox jumps.", None), ("Who jumps?", "the dog jumps")]):
    packed = features.pack_pair(tokenizer, *pair, 12)
    out = encoder(features.pad_batch([packed], 12))["encoder_outputs"]
    for layer in records[i]["features"][0]["layers"]:
      want = np.asarray(out[layer["index"]])[0, :len(packed.tokens)]
      got = np.array([[v for lay in f["layers"] if lay["index"] == layer["index"]
                       for v in lay["values"]] for f in records[i]["features"]])
      # float32, the script's batches of 3 against a batch of 1: the embeddings' LayerNorm
      # and up to 3 blocks; printed to 6 decimals (5e-7).
      tol = rounding_tolerance("float32", 2 * 16 + 3 * block_ops(encoder.config, 12),
                               np.abs(want).max())
      np.testing.assert_allclose(got, want, rtol=0, atol=tol + 5e-7)
      assert all(round(v, 6) == v for v in layer["values"])


def test_write_features_pads_each_batch_only_as_far_as_it_must(model_dir, tmp_path):
  """The library function alone: batches of 2 padded to their longest example give the
  values of one batch padded to max_seq_length, line by line."""
  directory, encoder = model_dir
  tokenizer = FullTokenizer(str(directory / "vocab.txt"))
  pairs = [("the dog", None), ("who jumps ?", "the quick brown fox"), ("fox", "dog")]
  out = {}
  for name, batch_size, multiple in (("trimmed", 2, 1), ("full", 3, 0)):
    path = tmp_path / f"{name}.jsonl"
    extracted_features.write_features(encoder, tokenizer, pairs, [-1, 0], str(path), 16,
                                      batch_size, multiple)
    out[name] = [json.loads(line) for line in path.read_text().splitlines()]
  assert [r["linex_index"] for r in out["trimmed"]] == [0, 1, 2]
  for got, want in zip(out["trimmed"], out["full"]):
    assert [f["token"] for f in got["features"]] == [f["token"] for f in want["features"]]
    values = lambda r: np.array([[v for lay in f["layers"] for v in lay["values"]]  # noqa: E731
                                 for f in r["features"]])
    # float32, batches of other widths (padding is masked): the embeddings' LayerNorm and
    # 3 blocks on 16 positions; both printed to 6 decimals (5e-7 each).
    tol = rounding_tolerance("float32", 2 * 16 + 3 * block_ops(encoder.config, 16),
                             np.abs(values(want)).max())
    np.testing.assert_allclose(values(got), values(want), rtol=0, atol=tol + 1e-6)


@pytest.mark.bfloat16
def test_bfloat16_values_are_float32_within_its_rounding(model_dir, tmp_path):
  """--dtype=bfloat16: the layers' values against the float32 encoder's, within bfloat16's
  rounding through the blocks (and far from equal: the products did run in 16 bits)."""
  directory, encoder = model_dir
  (tmp_path / "in.txt").write_text("The quick brown fox jumps. ||| the dog jumps\n")
  proc = run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}",
                    f"--init_checkpoint={directory / 'bert_model.ckpt'}", "--layers=-1",
                    "--max_seq_length=16", "--dtype=bfloat16")
  # The log warns where this machine emulates bfloat16 or rounds its products toward zero.
  warning = distribution.bfloat16_warning(
      "bfloat16", bool(tf.config.list_logical_devices("GPU")), distribution.read_cpuinfo(),
      distribution.onednn_bfloat16(), platform.machine().lower() in ("x86_64", "amd64"))
  assert ("emulated" in proc.stderr or "toward zero" in proc.stderr) == bool(warning)
  assert not warning or warning in proc.stderr
  assert "Precision: bfloat16 matrix products" in proc.stderr  # said, as the other scripts do
  record = json.loads((tmp_path / "out.jsonl").read_text())
  got = np.array([f["layers"][0]["values"] for f in record["features"]])
  tokenizer = FullTokenizer(str(directory / "vocab.txt"))
  packed = features.pack_pair(tokenizer, "The quick brown fox jumps.", "the dog jumps", 16)
  want = np.asarray(encoder(features.pad_batch([packed], 16))["encoder_outputs"][-1])[0]
  want = want[:len(packed.tokens)]
  # bfloat16 against float32 through the 3 blocks.
  ops = 3 * block_ops(encoder.config, 16, "bfloat16")
  np.testing.assert_allclose(got, want, rtol=0,
                             atol=rounding_tolerance("bfloat16", ops, np.abs(want).max()))
  assert np.abs(got - want).max() > 1e-4


@pytest.mark.slow
@pytest.mark.bfloat16
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64")
                    or bool(tf.config.list_logical_devices("GPU")), reason="an x86 CPU's case")
def test_bfloat16_with_onednn_off_warns_of_rounding_toward_zero(model_dir, tmp_path, monkeypatch):
  """With TensorFlow's oneDNN kernels off its own kernels compute bfloat16 products, which
  round toward zero, on any x86 CPU: the log says so (the warning's wiring, whatever the
  host)."""
  directory, _ = model_dir
  (tmp_path / "in.txt").write_text("the dog jumps\n")
  monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "false")  # TensorFlow's spellings: 0 or false
  # A fresh interpreter: the test runner's forked children share TensorFlow's oneDNN setting.
  monkeypatch.setenv("BERT_TESTS_FORK", "0")
  proc = run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}",
                    f"--init_checkpoint={directory / 'bert_model.ckpt'}", "--layers=-1",
                    "--max_seq_length=8", "--dtype=bfloat16")
  assert "round every one toward zero" in proc.stderr


@pytest.mark.slow
def test_bad_input_is_one_line_and_leaves_no_output(model_dir, tmp_path):
  directory, _ = model_dir
  (tmp_path / "in.txt").write_text("hello\n")
  proc = run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}",
                    f"--init_checkpoint={directory / 'bert_model.ckpt'}", "--layers=-1,5",
                    "--max_seq_length=12",
                    expect_ok=False)
  assert proc.returncode != 0
  assert last_error_line(proc) == "error: --layers: 5 is out of range for a model with 3 layers."
  assert not (tmp_path / "out.jsonl").exists()
  proc = run_script("extract_features.py", f"--input_file={tmp_path / 'nope.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}",
                    f"--init_checkpoint={directory / 'bert_model.ckpt'}", "--max_seq_length=12",
                    expect_ok=False)
  assert "nope.txt" in last_error_line(proc) and last_error_line(proc).startswith("error: ")


def test_help_describes_batch_length_multiple_without_xla():
  """extract_features.py has no --jit_compile and no TPU: its help names neither for
  --batch_length_multiple's default, as the fine-tuning scripts' help does."""
  def helped(script):  # (the whole help, the flag's own text on one line)
    text = run_script(script, "--helpfull", expect_ok=False).stdout
    start = text.index("--batch_length_multiple:")
    return text, " ".join(text[start:text.index("(a non-negative integer)", start)].split())
  whole, extract = helped("extract_features.py")
  assert extract.endswith("Unset: 1 (exact lengths) on CPUs, 8 on GPUs."), extract
  assert "--jit_compile" not in whole
  assert "16 with --jit_compile" in helped("run_classifier.py")[1]
