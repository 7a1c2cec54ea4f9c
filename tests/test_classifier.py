"""run_classifier.py end to end on generated GLUE-layout data: learning, outputs, export."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import fast_tokenization, features, tokenization
from helpers import (adam_step, assert_close, block_ops, read_eval_results,
                     rounding_tolerance)
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from scripts import last_error_line, run_script

GOOD, BAD = ["good", "great", "fine"], ["bad", "awful", "poor"]
FILLER = ["the", "a", "film", "was", "very", "and", "plot", "actors", "music", "quite"]


def classifier_files(d):
  """A tiny config, its vocab and pretrained-like weights in directory `d`: (d, vocab)."""
  vocab = write_vocab(d / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!"]
                      + GOOD + BAD + FILLER)
  config = BertConfig(vocab_size=len(open(vocab).read().split()), hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  # Pretrained-like weights for the runs that only evaluate or predict.
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(config)),
                                  str(d / "pretrained"), config=config, vocab_file=vocab)
  return d, vocab


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
  return classifier_files(tmp_path_factory.mktemp("clf"))


def _sentence(rng, label):
  words = [rng.choice(FILLER) for _ in range(rng.randint(2, 9))]
  words.insert(rng.randint(0, len(words)), rng.choice(GOOD if label else BAD))
  return " ".join(words).capitalize() + rng.choice([".", "!", ""])


def _sst2(directory, seed, n_train=480, n_dev=100, n_test=50):
  rng = random.Random(seed)
  directory.mkdir(parents=True, exist_ok=True)
  for name, n in (("train", n_train), ("dev", n_dev)):
    rows = ["sentence\tlabel"]
    for _ in range(n):
      label = rng.randint(0, 1)
      rows.append(f"{_sentence(rng, label)}\t{label}")
    (directory / f"{name}.tsv").write_text("\n".join(rows) + "\n")
  rows = ["index\tsentence"] + [f"{i}\t{_sentence(rng, rng.randint(0, 1))}" for i in range(n_test)]
  (directory / "test.tsv").write_text("\n".join(rows) + "\n")


def _common(d, vocab, data, out, *extra):
  return [f"--data_dir={data}", f"--bert_config_file={d / 'bert_config.json'}",
          f"--vocab_file={vocab}", f"--output_dir={out}", "--max_seq_length=24", "--seed=1",
          *extra]


@pytest.mark.slow
def test_learns_a_separable_task_and_exports_raw_text_model(model_files, tmp_path):
  d, vocab = model_files
  _sst2(tmp_path / "data", seed=3)
  out, export = tmp_path / "out", tmp_path / "export"
  proc = run_script("run_classifier.py", *_common(
      d, vocab, tmp_path / "data", out, "--task_name=SST-2", "--do_train", "--do_eval",
      "--do_predict", "--train_batch_size=16", "--learning_rate=1e-3", "--num_train_epochs=6",
      "--eval_batch_size=16", "--predict_batch_size=7", "--log_steps=30", f"--export_dir={export}"))
  results = read_eval_results(out / "eval_results.txt")
  assert list(results) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  assert results["eval_accuracy"] > 0.95, proc.stderr[-2000:]
  assert results["global_step"] == int(480 / 16 * 6)
  # test_results.tsv: one line per test example, a probability per class summing to 1.
  probs = np.loadtxt(out / "test_results.tsv")
  assert probs.shape == (50, 2)
  assert_close(probs.sum(1), np.ones(50), "float32", 8)  # a float32 softmax over 2, summed
  submission = (out / "SST-2.tsv").read_text().splitlines()
  assert submission[0] == "index\tprediction" and len(submission) == 51
  assert submission[1:] == [f"{i}\t{int(p.argmax())}" for i, p in enumerate(probs)]
  # The SavedModel on raw strings gives what the Python path gives.
  texts = ["The film was good!", "Awful plot and very bad acting", "quite fine", ""]
  served = fast_tokenization.load_serving(str(export))(
      text_a=tf.constant(texts))
  model = BertClassifier(BertEncoder(BertConfig.from_json_file(str(d / "bert_config.json"))), 2)
  checkpoints.load_checkpoint(model, str(out))
  tokenizer = tokenization.FullTokenizer(vocab)
  batch = features.pad_batch([features.pack_pair(tokenizer, t, None, 24) for t in texts], 24)
  logits = model(batch)["logits"].numpy()
  # float32, the SavedModel's graph against eager: 2 blocks, the pooler and the classifier
  # (sums of 32); a probability moves by at most twice its logits' change (four times
  # the roundings), relative to the logits.
  assert_close(served["probabilities"].numpy(), tf.nn.softmax(logits).numpy(), "float32",
               4 * (2 * block_ops(model.config, 24) + 2 * 32), np.abs(logits).max())
  assert [s.decode() for s in served["label"].numpy()[:2]] == ["1", "0"]
  # --output_dir alone is the trained model: its config and vocab are there, so a later
  # run evaluates it without --init_checkpoint or the config flags and scores the same,
  assert (out / "bert_config.json").read_text() == (d / "bert_config.json").read_text()
  assert (out / "vocab.txt").read_bytes() == open(vocab, "rb").read()
  run_script("run_classifier.py", "--task_name=SST-2", f"--data_dir={tmp_path / 'data'}",
             f"--output_dir={out}", "--max_seq_length=24", "--do_eval", "--eval_batch_size=16")
  again = read_eval_results(out / "eval_results.txt")
  assert again["eval_accuracy"] == results["eval_accuracy"]
  assert again["global_step"] == results["global_step"]
  # Exported alone with --output_dir only: the task, length and casing from run.json, no data.
  run_script("run_classifier.py", f"--output_dir={out}", f"--export_dir={tmp_path / 'again'}")
  np.testing.assert_array_equal(fast_tokenization.load_serving(str(tmp_path / "again"))(
      text_a=tf.constant(texts))["probabilities"].numpy(), served["probabilities"].numpy())
  # and converts to Hugging Face's layout with the task's labels named.
  run_script("convert_checkpoint.py", f"--input_checkpoint={out}",
             f"--output_dir={tmp_path / 'hf'}", "--output_format=hf")
  hf = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert hf["id2label"] == {"0": "0", "1": "1"}  # LABEL_0, LABEL_1 without run.json's names


@pytest.mark.slow
def test_regression_and_pair_inputs(model_files, tmp_path):
  d, vocab = model_files
  rng = random.Random(5)
  data = tmp_path / "stsb"
  data.mkdir()
  head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
  for name in ("train", "dev"):
    rows = [head + "\tscore"] + [f"{i}\tg\tf\t2012\t{i}\tn\tn\t{_sentence(rng, 1)}\t"
                                 f"{_sentence(rng, 0)}\t{rng.uniform(0, 5):.2f}" for i in range(64)]
    (data / f"{name}.tsv").write_text("\n".join(rows) + "\n")
  rows = [head] + [f"{i}\tg\tf\t2012\t{i}\tn\tn\tA good film.\tA bad film." for i in range(5)]
  (data / "test.tsv").write_text("\n".join(rows) + "\n")
  out = tmp_path / "out"
  run_script("run_classifier.py", *_common(
      d, vocab, data, out, "--task_name=sts-b", "--do_train", "--do_eval", "--do_predict",
      "--train_batch_size=16", "--num_train_epochs=1", f"--export_dir={tmp_path / 'export'}"))
  keys = list(read_eval_results(out / "eval_results.txt"))
  assert keys == ["eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]
  lines = (out / "STS-B.tsv").read_text().splitlines()
  assert lines[0] == "index\tprediction" and len(lines) == 6
  assert all(len(l.split("\t")[1].split(".")[1]) == 3 for l in lines[1:])
  served = fast_tokenization.load_serving(str(tmp_path / "export"))(
      text_a=tf.constant(["A good film."]), text_b=tf.constant(["A bad film."]))
  first = float(lines[1].split("\t")[1])
  # float32, the SavedModel's graph against the script's batches: 2 blocks, the pooler
  # and the regression layer (sums of 32); STS-B.tsv prints 3 decimals (5e-4).
  config = BertConfig.from_json_file(str(d / "bert_config.json"))
  tol = rounding_tolerance("float32", 2 * block_ops(config, 24) + 2 * 32, abs(first)) + 5e-4
  assert abs(float(served["score"][0]) - first) <= tol


def test_mnli_evaluates_matched_and_mismatched(model_files, tmp_path):
  d, vocab = model_files
  data = tmp_path / "mnli"
  data.mkdir()
  cols = "index\tpromptID\tpairID\tgenre\ta\tb\tc\td\tsentence1\tsentence2"
  row = lambda i: f"{i}\t1\t2\tg\t\t\t\t\tThe film was good.\tIt was bad."
  (data / "dev_matched.tsv").write_text(cols + "\tl1\tl2\tl3\tl4\tl5\tgold\n"
                                        + "\n".join(row(i) + "\tx\tx\tx\tx\tx\tneutral" for i in range(9)))
  (data / "dev_mismatched.tsv").write_text((data / "dev_matched.tsv").read_text())
  (data / "train.tsv").write_text(cols + "\tl1\tgold\n" + "\n".join(
      row(i) + f"\tx\t{label}" for i, label in enumerate(["neutral", "entailment"] * 2)))
  for name in ("test_matched.tsv", "test_mismatched.tsv"):
    (data / name).write_text(cols + "\n" + "\n".join(row(i) for i in range(4)) + "\n")
  out = tmp_path / "out"
  run_script("run_classifier.py", *_common(d, vocab, data, out, "--task_name=MNLI", "--do_train",
                                           "--train_batch_size=4", "--num_train_epochs=1",
                                           "--do_eval", "--do_predict", "--eval_batch_size=4",
                                           f"--init_checkpoint={d / 'pretrained'}"))
  keys = list(read_eval_results(out / "eval_results.txt"))
  assert keys == ["eval_accuracy", "eval_loss", "eval_mismatched_accuracy", "eval_mismatched_loss",
                  "global_step", "loss"]
  for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
    lines = (out / name).read_text().splitlines()
    assert len(lines) == 5 and lines[1].split("\t")[1] in ("contradiction", "entailment", "neutral")
  assert np.loadtxt(out / "test_mismatched_results.tsv").shape == (4, 3)


@pytest.mark.slow
def test_bad_flags_are_one_line(model_files, tmp_path):
  d, vocab = model_files
  _sst2(tmp_path / "data", seed=4, n_train=8)
  proc = run_script("run_classifier.py", *_common(d, vocab, tmp_path / "data", tmp_path / "o",
                                                  "--task_name=sst-3", "--do_train"),
                    expect_ok=False)
  assert last_error_line(proc).startswith("error: --task_name=sst-3: unknown task")
  proc = run_script("run_classifier.py", "--task_name=cola", f"--data_dir={tmp_path}",
                    f"--output_dir={tmp_path / 'o'}", "--do_train", expect_ok=False)
  assert last_error_line(proc) == ("error: --bert_config_file is required when "
                                   "--init_checkpoint is not given and --output_dir holds "
                                   "no trained model's bert_config.json.")
  proc = run_script("run_classifier.py", *_common(
      d, vocab, tmp_path / "data", tmp_path / "o", "--task_name=sst-2", "--do_train",
      "--init_checkpoint=/x/cased_L-12_H-768_A-12/bert_model.ckpt"), expect_ok=False)
  assert "--do_lower_case=True does not match" in last_error_line(proc)
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "train.tsv").write_text("sentence\tlabel\n")
  proc = run_script("run_classifier.py", *_common(d, vocab, empty, tmp_path / "o2",
                                                  "--task_name=sst-2", "--do_train"),
                    expect_ok=False)
  assert last_error_line(proc) == (
      f"error: the training set in {empty}: 0 training example(s) make no step of "
      "--train_batch_size=32 over --num_train_epochs=3.0.")


@pytest.mark.slow
def test_trimmed_batches_train_and_predict_as_fixed_length_ones(model_files, tmp_path):
  """Batches cut to their longest sequence give the weights and outputs of full-length ones."""
  d, vocab = model_files
  config = BertConfig.from_json_file(str(d / "bert_config.json"))
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
  config.to_json_file(str(tmp_path / "config.json"))
  _sst2(tmp_path / "data", seed=6, n_train=96, n_dev=30, n_test=21)
  runs = {}
  for name, extra in (("fixed", ["--batch_length_multiple=0"]),
                      ("trimmed", ["--batch_length_multiple=4"])):
    out = tmp_path / name
    run_script("run_classifier.py", f"--data_dir={tmp_path / 'data'}",
               f"--bert_config_file={tmp_path / 'config.json'}", f"--vocab_file={vocab}",
               f"--output_dir={out}", "--max_seq_length=48", "--seed=3", "--task_name=SST-2",
               "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
               "--learning_rate=1e-4", "--num_train_epochs=1", "--eval_batch_size=4",
               "--predict_batch_size=4", *extra)
    model = BertClassifier(BertEncoder(config), 2)
    checkpoints.load_checkpoint(model, str(out))
    runs[name] = (model, out)
  (fixed, fixed_out), (trimmed, trimmed_out) = runs["fixed"], runs["trimmed"]
  assert len(fixed.weights) == len(trimmed.weights) > 20
  for a, b in zip(fixed.weights, trimmed.weights):
    # The weights after 12 Adam steps at lr 1e-4, batches of other widths (so other
    # summation orders): no bound follows from the arithmetic (helpers.adam_step says why),
    # so the tolerance is a sixteenth of one step's largest update, adam_step(1e-4) =
    # 3.2e-4. A batch that trained on other tokens moves weights by whole updates; the
    # rounding noise stays orders below (4e-9 on the AVX2 machine these tests were written on).
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=adam_step(1e-4) / 16,
                               err_msg=a.path)
  # The probabilities (in [0, 1]) and the loss (near 0.7) those weights give: after training
  # as well, so no bound from the arithmetic either; 1e-5 absolute, far above the rounding
  # noise (6e-8 on that AVX2 machine), far below what weights apart by updates change.
  np.testing.assert_allclose(np.loadtxt(fixed_out / "test_results.tsv"),
                             np.loadtxt(trimmed_out / "test_results.tsv"), atol=1e-5)
  read = lambda out: read_eval_results(out / "eval_results.txt")  # noqa: E731
  assert read(fixed_out)["eval_accuracy"] == read(trimmed_out)["eval_accuracy"]
  assert abs(read(fixed_out)["eval_loss"] - read(trimmed_out)["eval_loss"]) < 1e-5


@pytest.mark.slow
def test_output_dir_of_another_run_is_refused_not_reused(model_files, tmp_path):
  """A finished SST-2 run's --output_dir is not resumed for MRPC, another length or casing,
  and an evaluation that does not give the length takes the one run.json records."""
  d, vocab = model_files
  _sst2(tmp_path / "sst2", seed=8, n_train=16, n_dev=4, n_test=2)
  (tmp_path / "mrpc").mkdir()
  rows = "".join(f"{i % 2}\t1\t2\tThe film was good.\tIt was bad.\n" for i in range(4))
  (tmp_path / "mrpc" / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                             + rows)
  out = tmp_path / "out"
  run_script("run_classifier.py", *_common(d, vocab, tmp_path / "sst2", out, "--task_name=SST-2",
                                           "--do_train", "--train_batch_size=16",
                                           "--num_train_epochs=1"))
  record = json.loads((out / "run.json").read_text())
  from cli import run_identity
  assert record == {"task_name": "sst-2", "labels": ["0", "1"], "bilstm_head": False,
                    "causal_attention": False, "optimizer": "adamw",
                    **run_identity.vocab_entry(str(vocab)), "max_seq_length": 24,
                    "do_lower_case": True, "doc_stride": 0}
  other_vocab = tmp_path / "other_vocab.txt"  # one entry renamed: other words, same rows
  other_vocab.write_text(open(vocab).read().replace("\nfilm\n", "\nmovie\n"))
  before = sorted(p.name for p in out.iterdir())
  for data, extra, wrong, use in (
      ("mrpc", ["--task_name=MRPC"], "task_name 'sst-2', not 'mrpc'", ""),
      ("sst2", ["--task_name=sst-2", "--max_seq_length=32"], "max_seq_length 24, not 32",
       "Pass --max_seq_length=24 to use it, or a new --output_dir to start afresh."),
      ("sst2", ["--task_name=sst-2", "--do_lower_case=false"], "do_lower_case True, not False",
       "Pass --do_lower_case=True to use it, or a new --output_dir to start afresh."),
      # A resume under LAMB would go on from AdamW's moments (the same slot names).
      ("sst2", ["--task_name=sst-2", "--do_train", "--optimizer=lamb"],
       "optimizer 'adamw', not 'lamb'",
       "Pass --optimizer=adamw to use it, or a new --output_dir to start afresh."),
      ("sst2", ["--task_name=sst-2", f"--vocab_file={other_vocab}"],
       f"vocab {record['vocab']!r}, not "
       f"{run_identity.vocab_entry(str(other_vocab))['vocab']!r}",
       f"Pass the vocab.txt it was trained with ({out}/vocab.txt) as --vocab_file, or a new "
       "--output_dir to start afresh.")):
    proc = run_script("run_classifier.py", *_common(d, vocab, tmp_path / data, out, "--do_eval"),
                      *extra, expect_ok=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert last_error_line(proc) == (
        f"error: --output_dir={out} holds a model trained with {wrong}; it would be reused. "
        + (use or "Pass a new --output_dir to start afresh."))
  assert sorted(p.name for p in out.iterdir()) == before  # nothing written or overwritten
  # Without --max_seq_length, the trained length (not the default 128) and the same scores.
  given = [a for a in _common(d, vocab, tmp_path / "sst2", out, "--task_name=sst-2",
                              "--do_eval") if a != "--max_seq_length=24"]
  proc = run_script("run_classifier.py", *given)
  assert f"--max_seq_length=24, as {out}/run.json records the model was trained with" \
      in proc.stderr
  first = (out / "eval_results.txt").read_text()
  run_script("run_classifier.py", *given, "--max_seq_length=24")
  assert (out / "eval_results.txt").read_text() == first
  # --export_dir alone exports the trained model (here in bfloat16), touching no results.
  run_script("run_classifier.py", *[a for a in given if a != "--do_eval"], "--dtype=bfloat16",
             f"--export_dir={tmp_path / 'half'}")
  assert (tmp_path / "half" / "saved_model.pb").exists()
  assert (out / "eval_results.txt").read_text() == first
