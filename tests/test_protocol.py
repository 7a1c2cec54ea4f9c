"""Evaluation during training in the scripts (modeling/periodic_eval.py, cli/runner.py):
eval_log.csv, the best checkpoint, early stopping, resuming, and repeatable seeded runs."""

import csv
import json
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf

from helpers import read_eval_results
from modeling import checkpoints, periodic_eval, reports, selection
from scripts import run_script
from conftest import write_vocab
from modeling.config import BertConfig
from test_classifier import BAD, FILLER, GOOD, _common, _sst2
from test_squad import _fine_tune, _zebra_or_nobody

# 64 examples at batch 16, 3 epochs: 12 steps, evaluated every 3.
RUN = ("--task_name=SST-2", "--do_train", "--do_eval", "--train_batch_size=16",
       "--learning_rate=1e-3", "--num_train_epochs=3", "--eval_batch_size=16",
       "--eval_every_steps=3", "--early_stopping_patience=2", "--use_best_checkpoint",
       "--keep_checkpoint_max=10", "--log_steps=3")


def _eval_log(out):
  with open(out / "eval_log.csv") as f:
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _weights(path):
  return checkpoints.read_checkpoint(str(path)).weights


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
  """test_classifier's tiny model (from scratch) and data: one run with RUN's flags."""
  tmp = d = tmp_path_factory.mktemp("protocol")
  vocab = write_vocab(d / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!"]
                      + GOOD + BAD + FILLER)
  BertConfig(vocab_size=len(GOOD + BAD + FILLER) + 7, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
             type_vocab_size=2).to_json_file(str(d / "bert_config.json"))
  _sst2(tmp / "data", seed=11, n_train=64, n_dev=40, n_test=2)
  out = tmp / "a"
  run_script("run_classifier.py", *_common(d, vocab, tmp / "data", out, *RUN))
  return d, vocab, tmp, out


@pytest.mark.slow
def test_evaluations_pick_the_best_checkpoint_and_stop_early(full_run):
  _, _, _, out = full_run
  log = _eval_log(out)
  best = json.loads((out / "best" / "best.json").read_text())
  steps = [int(r["step"]) for r in log]
  assert steps == [3 * (i + 1) for i in range(len(log))]
  # best.json records each evaluation's eval_accuracy, as eval_log.csv has it (6 digits).
  assert [s for s, _ in best["evaluations"]] == steps
  np.testing.assert_allclose([v for _, v in best["evaluations"]],
                             [r["eval_accuracy"] for r in log], rtol=1e-6)
  values = [v for _, v in best["evaluations"]]
  first_max = int(np.argmax(values))  # the first of equal values stays the best
  assert (best["step"], best["value"]) == (steps[first_max], values[first_max])
  # Early stopping after 2 evaluations without improvement, else the 12 steps.
  stop = next((s for i, s in enumerate(steps) if i - first_max >= 2), None)
  assert best["stopped_at"] == stop
  assert steps[-1] == (stop or 12)
  assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{steps[-1]}")
  # best/ holds the very weights of the regular checkpoint at the best step.
  kept, regular = _weights(out / "best"), _weights(out / f"ckpt-{best['step']}")
  assert kept.keys() == regular.keys()
  for name in kept:
    np.testing.assert_array_equal(kept[name], regular[name], err_msg=name)
  # --use_best_checkpoint: --do_eval scores best/ with the same code as the evaluations.
  assert read_eval_results(out / "eval_results.txt") == best["results"]
  assert list((out / "eval").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_a_seeded_run_repeats_and_a_restarted_one_keeps_its_best(full_run):
  """A run killed before its first checkpoint starts again from scratch, with best/ as the
  killed run left it: the seeded steps and evaluations repeat bit for bit, and best/ stays
  the one the killed run chose (an equal value is no improvement)."""
  d, vocab, tmp, out = full_run
  killed = tmp / "killed"
  shutil.copytree(out, killed)
  for path in [*killed.glob("ckpt-*"), killed / "checkpoint"]:
    path.unlink()
  run_script("run_classifier.py", *_common(d, vocab, tmp / "data", killed, *RUN))
  rows = (killed / "eval_log.csv").read_text().splitlines()
  first = (out / "eval_log.csv").read_text().splitlines()
  assert rows == first  # the same evaluations again, each replacing its earlier row
  assert (json.loads((killed / "best" / "best.json").read_text())
          == json.loads((out / "best" / "best.json").read_text()))
  assert (killed / "eval_results.txt").read_text() == (out / "eval_results.txt").read_text()
  for name, value in _weights(killed / "best").items():
    np.testing.assert_array_equal(value, _weights(out / "best")[name], err_msg=name)


@pytest.mark.parametrize("flags, message", [
    (dict(eval_every_steps=3, eval_every_epochs=1.0, do_eval=True),
     "Give --eval_every_steps or --eval_every_epochs, not both."),
    (dict(eval_every_epochs=1.0), "--eval_every_epochs needs --do_eval: it scores the dev "
     "data that --do_eval reads."),
    (dict(eval_every_steps=2, do_eval=True, do_train=False),
     "--eval_every_steps evaluates during training: it needs --do_train."),
    (dict(early_stopping_patience=2),
     "--early_stopping_patience needs --eval_every_steps or --eval_every_epochs."),
    (dict(use_best_checkpoint=True), "--use_best_checkpoint with --do_train needs "
     "--eval_every_steps or --eval_every_epochs (they choose the best checkpoint)."),
    (dict(use_best_checkpoint=True, do_train=False), "--use_best_checkpoint: "
     "/nonexistent/best holds no best checkpoint; train with --eval_every_steps or "
     "--eval_every_epochs first."),
])
def test_protocol_flags_that_disagree_are_refused_before_any_work(flags, message):
  values = dict(every_steps=0, every_epochs=0.0, best_metric=None, patience=0, use_best=False,
                do_train=True, dev_given=False, dev_flag="do_eval", output_dir="/nonexistent")
  renamed = {"eval_every_steps": "every_steps", "eval_every_epochs": "every_epochs",
             "early_stopping_patience": "patience", "use_best_checkpoint": "use_best",
             "do_eval": "dev_given"}
  values.update({renamed.get(k, k): v for k, v in flags.items()})
  with pytest.raises(ValueError) as raised:
    periodic_eval.check_options(**values)
  assert str(raised.value) == message


def test_a_resumed_run_keeps_the_metric_its_best_was_chosen_by(tmp_path):
  """A run begun under an older default (QQP chose by accuracy before F1) resumes by it when
  no --best_metric is given; one given against it is refused."""
  (tmp_path / "best").mkdir()
  (tmp_path / "best" / "best.json").write_text(json.dumps(
      {"metric": "eval_accuracy", "higher_is_better": True, "step": 2, "value": 0.8,
       "evaluations": [[2, 0.8]], "stopped_at": None, "checkpoint": "ckpt-2"}))
  options = dict(every_steps=2, every_epochs=0.0, patience=0, use_best=False, do_train=True,
                 dev_given=True, dev_flag="do_eval", output_dir=str(tmp_path),
                 default_metric="eval_f1")
  periodic_eval.check_options(best_metric=None, **options)
  assert periodic_eval.chosen_metric(None, "eval_f1", str(tmp_path)) == "eval_accuracy"
  assert periodic_eval.chosen_metric(None, "eval_f1", str(tmp_path / "new")) == "eval_f1"
  with pytest.raises(ValueError, match="chosen by eval_accuracy"):
    periodic_eval.check_options(best_metric="eval_f1", **options)


def test_the_default_metric_is_the_tasks_headline():
  for script, task, metric in (
      ("run_classifier.py", "MRPC", "eval_f1"), ("run_classifier.py", "sts-b", "eval_spearman"),
      ("run_classifier.py", "CoLA", "eval_matthews_corrcoef"),
      ("run_classifier.py", "qqp", "eval_f1"), ("run_squad.py", None, "f1"),
      ("run_ner.py", None, "eval_f1"), ("/x/run_swag.py", None, "eval_accuracy")):
    assert selection.script_metric(script, task) == metric


@pytest.mark.slow
def test_squad_v2_is_scored_during_training_by_the_official_scorer(tmp_path):
  rng = random.Random(3)
  out, scores = _fine_tune(tmp_path, _zebra_or_nobody(rng, 64), _zebra_or_nobody(rng, 16),
                           "--version_2_with_negative", "--num_train_epochs=2",
                           "--eval_every_epochs=1", "--null_score_diff_threshold=1.0")
  best = json.loads((out / "best" / "best.json").read_text())
  # An epoch: 64 questions at batch 16 (the original counts examples, not features).
  assert best["metric"] == "f1" and [s for s, _ in best["evaluations"]] == [4, 8]
  # The last evaluation scored the final model as --do_predict did after training, with
  # the official v2.0 scorer at the same threshold.
  assert best["evaluations"][-1][1] == scores["f1"]
  last = _eval_log(out)[-1]
  assert sorted(last) == sorted(["step", *(k for k in scores if k != "global_step")])


def test_eval_log_keeps_every_metric_met_across_restarts(tmp_path):
  """NER reports a type's figures once it is predicted: later columns are added, not lost."""
  path = str(tmp_path / "eval_log.csv")
  reports.CsvLog(path).append(3, {"eval_f1": 0.25, "eval_LOC_f1": 0.5})
  reports.CsvLog(path).append(6, {"eval_f1": 0.5, "eval_PER_f1": 0.125})  # resumed
  with open(path) as f:
    assert list(csv.reader(f)) == [["step", "eval_f1", "eval_LOC_f1", "eval_PER_f1"],
                                   ["3", "0.25", "0.5", ""], ["6", "0.5", "", "0.125"]]


def test_a_resumed_run_replaces_the_rows_logged_after_its_checkpoint(tmp_path):
  """Killed at step 7 after a checkpoint at 4, a run logs 6 again: the lost part's rows (6,
  and 7's) give way to the resumed run's, so each step is in the log once."""
  path = str(tmp_path / "train_log.csv")
  first = reports.CsvLog(path)
  for step in (2, 4, 6, 7):
    first.append(step, {"loss": float(step)})
  again = reports.CsvLog(path)
  for step in (6, 8):
    again.append(step, {"loss": step + 0.5})
  with open(path) as f:
    assert list(csv.reader(f)) == [["step", "loss"], ["2", "2"], ["4", "4"], ["6", "6.5"],
                                   ["8", "8.5"]]


def _best_copy(path, evaluations, complete=True):
  path.mkdir()
  (path / "ckpt-3.index").write_bytes(b"")
  (path / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
  if complete:
    (path / "best.json").write_text(json.dumps(
        {"metric": "eval_loss", "checkpoint": "ckpt-3", "evaluations": evaluations}))


def test_a_best_dir_lost_between_its_renames_comes_back_and_leftovers_go(tmp_path):
  """Killed between publish_dir's renames (old best/ aside, new one not in), a run leaves
  no best/ but two complete copies: the chief at its start restores the newer, then removes
  every temporary copy, those of the export included."""
  from cli import runner
  out = tmp_path / "out"
  out.mkdir()
  _best_copy(out / ".best.tmp-00000001", [[3, 0.5]])  # the old best/, renamed aside
  _best_copy(out / ".best.tmp-00000002", [[3, 0.5], [6, 0.4]])  # the new one
  _best_copy(out / ".best.tmp-00000003", [], complete=False)  # killed while filling it
  (tmp_path / ".export.tmp-0000abcd").mkdir()
  runner.remove_leftovers(str(out), str(tmp_path / "export"))
  assert json.loads((out / "best" / "best.json").read_text())["evaluations"] == [
      [3, 0.5], [6, 0.4]]
  assert sorted(p.name for p in out.iterdir()) == ["best"]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
  assert periodic_eval.recover_best(str(out)) is None  # best/ there: left alone
