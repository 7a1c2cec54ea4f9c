"""Choosing on dev without training: headline metrics, the best-so-far tracker, and the
search's table and selection (modeling/selection.py, modeling/search_results.py)."""

import json
import math

import pytest

from modeling import selection
from scripts import last_error_line, run_script


def test_headline_metrics_are_the_papers():
  # BERT paper, Table 1's caption: F1 for QQP and MRPC, Spearman for STS-B, Matthews
  # correlation for CoLA (its footnote), accuracy for the rest; SQuAD and CoNLL F1.
  assert selection.headline_metric("MRPC") == selection.headline_metric("QQP") == "eval_f1"
  assert selection.headline_metric("STS-B") == "eval_spearman"
  assert selection.headline_metric("cola") == "eval_matthews_corrcoef"
  for task in ("sst-2", "mnli", "qnli", "rte", "wnli", "xnli", "swag", None):
    assert selection.headline_metric(task) == "eval_accuracy"
  assert selection.headline_metric("squad") == "f1"
  assert selection.headline_metric("ner") == "eval_f1"
  assert selection.higher_is_better("eval_f1") and not selection.higher_is_better("eval_loss")


def test_docs_table_of_headline_metrics_is_the_codes():
  """docs/protocol.md's table of default --best_metric values says what HEADLINE holds."""
  import os
  import re
  path = os.path.join(os.path.dirname(__file__), "..", "docs", "protocol.md")
  with open(path, encoding="utf-8") as f:
    rows = re.findall(r"^\| (.+?) \| `(\w+)`", f.read(), re.M)
  table = {}
  for tasks, metric in rows:
    for task in re.split(r", | and ", tasks.replace("the other GLUE tasks", "").strip(", ")):
      table[task.lower()] = metric
  assert {t: selection.headline_metric(t) for t in table} == table
  assert set(selection.HEADLINE) <= set(table)


def _evaluate(tracker, values, start=1):
  """Adds evaluations at steps start, start+1, ...; returns the step where it stopped."""
  for step, value in enumerate(values, start):
    tracker.add(step, {"eval_f1": value, "global_step": step})
    if tracker.should_stop(step):
      return step
  return None


def test_the_first_best_is_kept_and_patience_counts_evaluations_since_it():
  tracker = selection.Tracker("eval_f1", patience=2)
  assert _evaluate(tracker, [0.5, 0.7, 0.7, 0.6, 0.9]) == 4  # 0.7 twice is no improvement
  assert (tracker.state["step"], tracker.best) == (2, 0.7)
  assert tracker.state["results"] == {"eval_f1": 0.7, "global_step": 2}
  assert tracker.stopped and tracker.state["stopped_at"] == 4
  never = selection.Tracker("eval_f1")  # patience 0: never stops
  assert _evaluate(never, [0.9, 0.1, 0.1, 0.1]) is None and never.best == 0.9


def test_losses_improve_downwards_and_nan_never_improves():
  tracker = selection.Tracker("eval_loss")
  for step, value in enumerate([float("nan"), 0.8, 0.9, 0.5], 1):
    tracker.add(step, {"eval_loss": value})
  assert (tracker.state["step"], tracker.best) == (4, 0.5)
  assert not selection.is_better(float("nan"), None)
  assert selection.is_better(0.1, float("nan"))


def test_a_resumed_run_redoes_lost_evaluations_and_keeps_the_best_exactly():
  straight = selection.Tracker("eval_f1", patience=2)
  _evaluate(straight, [0.5, 0.8, 0.6, 0.7, 0.65])
  # Killed after evaluating step 4 but before its checkpoint (the last at step 3): the
  # state read back from best.json, through JSON, forgets step 4 and redoes it.
  killed = selection.Tracker("eval_f1", patience=2)
  _evaluate(killed, [0.5, 0.8, 0.6, 0.7])
  resumed = selection.Tracker("eval_f1", patience=2, state=json.loads(json.dumps(killed.state)))
  resumed.resumed_at(3)
  assert [s for s, _ in resumed.state["evaluations"]] == [1, 2, 3]
  assert _evaluate(resumed, [0.7, 0.65], start=4) == 4
  assert resumed.state == straight.state
  # A stop recorded after the checkpoint it resumes from is undone.
  resumed.resumed_at(3)
  assert not resumed.stopped


def test_a_missing_metric_or_another_metric_names_the_flag():
  tracker = selection.Tracker("eval_f1")
  with pytest.raises(ValueError, match=r"^--best_metric=eval_f1 is not among the metrics of "
                     r"the evaluation: eval_accuracy, eval_loss\.$"):
    tracker.add(1, {"eval_accuracy": 0.5, "eval_loss": 0.6, "global_step": 1})
  with pytest.raises(ValueError, match=r"--best_metric=eval_accuracy: this --output_dir's "
                     r"best checkpoint was chosen by eval_f1"):
    selection.Tracker("eval_accuracy", state={"metric": "eval_f1"})
  assert math.isnan(selection.metric_value({"x": float("nan")}, "x"))


def test_a_metric_no_eval_results_can_hold_is_refused_before_any_run():
  """run_classifier, run_ner and run_swag key their dev results eval_* (and loss): another
  name can never be found, so it is refused at once, naming the flag."""
  with pytest.raises(ValueError) as e:
    selection.check_metric_name("/x/run_classifier.py", "f1", "--best_metric", "eval_f1")
  assert str(e.value) == ("--best_metric=f1 is not among the dev results of run_classifier.py, "
                          "all named eval_* (e.g. eval_f1).")
  for script, metric in (("run_ner.py", "eval_LOC_f1"), ("run_swag.py", "loss"),
                         ("run_squad.py", "f1"), ("run_classifier.py", None),
                         ("run_pretraining.py", "masked_lm_accuracy")):
    selection.check_metric_name(script, metric, "--metric", "eval_accuracy")


def test_run_classifier_refuses_such_a_metric_before_writing(tmp_path):
  proc = run_script("run_classifier.py", "--task_name=CoLA", f"--data_dir={tmp_path}",
                    f"--output_dir={tmp_path / 'out'}", "--do_train", "--do_eval",
                    "--eval_every_steps=10", "--best_metric=f1", expect_ok=False)
  assert last_error_line(proc) == ("error: --best_metric=f1 is not among the dev results of "
                                   "run_classifier.py, all named eval_* (e.g. "
                                   "eval_matthews_corrcoef).")
  assert not (tmp_path / "out").exists()
