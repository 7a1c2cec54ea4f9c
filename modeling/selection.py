"""Choosing a model on dev: each task's headline metric, and the best-so-far tracker.

HEADLINE is the one table of which dev metric (as keyed in eval_results.txt)
the scripts and finetune_search.py select on by default: the paper's figure
for each task; SCRIPT_TASKS says which task each script trains, and
script_metric is what both ask. `Tracker` keeps the best evaluation of one training run and
counts the evaluations since it, for --early_stopping_patience; its state is
a JSON-able dict (stored in --output_dir/best/best.json), so a resumed run
carries on with exactly the best it had. Pure Python: no TensorFlow.
"""

import math
import os

# task -> the eval_results.txt key of its headline dev metric.
HEADLINE = {
    "cola": "eval_matthews_corrcoef",
    "sts-b": "eval_spearman",
    "mrpc": "eval_f1",
    "qqp": "eval_f1",  # Table 1: "F1 scores are reported for QQP and MRPC"
    "squad": "f1",  # the official scorer's F1 (v2.0: at --null_score_diff_threshold)
    "ner": "eval_f1",  # conlleval's span F1
    "swag": "eval_accuracy",
}
DEFAULT_METRIC = "eval_accuracy"  # every other GLUE task, XNLI, SWAG
# script -> its task in HEADLINE; run_classifier.py's is its --task_name.
SCRIPT_TASKS = {"run_squad.py": "squad", "run_ner.py": "ner", "run_swag.py": "swag"}


def headline_metric(task):
  """The eval_results.txt key a task selects on: `task` as HEADLINE names it (any case)."""
  return HEADLINE.get((task or "").lower(), DEFAULT_METRIC)


def script_metric(script, task_name=None):
  """The headline metric of a run of `script` (a path or file name): its task's, or with
  `task_name` (run_classifier's --task_name) that task's."""
  return headline_metric(task_name or SCRIPT_TASKS.get(os.path.basename(script or "")))


# Scripts whose dev results are keyed eval_* (and `loss`, their mean training loss).
EVAL_PREFIXED = ("run_classifier.py", "run_ner.py", "run_swag.py")


def check_metric_name(script, metric, flag, headline):
  """ValueError naming `flag` when `metric` cannot be one of `script`'s dev results (those
  of EVAL_PREFIXED are all eval_*), before any run spends its steps on it; `headline`:
  the script's default, given as an example."""
  if (metric and os.path.basename(script or "") in EVAL_PREFIXED
      and not metric.startswith("eval_") and metric != "loss"):
    raise ValueError(f"{flag}={metric} is not among the dev results of "
                     f"{os.path.basename(script)}, all named eval_* (e.g. {headline}).")


def higher_is_better(metric):
  """Losses and perplexities go down; every other metric (accuracy, F1, correlations,
  exact match) goes up."""
  name = metric.lower()
  return not ("loss" in name or "perplexity" in name)


def is_better(value, than, higher=True):
  """Whether `value` strictly improves on `than` (None: nothing yet). NaN never does."""
  if value is None or math.isnan(value):
    return False
  if than is None or math.isnan(than):
    return True
  return value > than if higher else value < than


def metric_value(results, metric, source="the evaluation"):
  """results[metric] as a float; ValueError naming --best_metric and the keys there are."""
  if metric not in results:
    keys = ", ".join(sorted(k for k in results if k != "global_step"))
    raise ValueError(f"--best_metric={metric} is not among the metrics of {source}: {keys}.")
  return float(results[metric])


class Tracker:
  """The best evaluation of a run and the evaluations since it.

  state: {"metric", "higher_is_better", "step", "value", "results" (of the best
  evaluation), "evaluations": [[step, value], ...], "stopped_at"}; step and
  value are None until an evaluation is made.
  """

  def __init__(self, metric, higher=None, patience=0, state=None):
    self.metric = metric
    self.higher = higher_is_better(metric) if higher is None else higher
    self.patience = patience
    self.state = {"metric": metric, "higher_is_better": self.higher, "step": None,
                  "value": None, "results": None, "evaluations": [], "stopped_at": None}
    if state:
      if state.get("metric") != metric:
        raise ValueError(f"--best_metric={metric}: this --output_dir's best checkpoint was "
                         f"chosen by {state.get('metric')}; keep that metric or use a new "
                         "--output_dir.")
      self.state.update(state)

  def resumed_at(self, step):
    """Forgets evaluations after `step` (a run killed after evaluating and before its
    checkpoint redoes them); the best checkpoint itself is kept, whatever its step."""
    self.state["evaluations"] = [e for e in self.state["evaluations"] if e[0] <= step]
    if self.state["stopped_at"] is not None and self.state["stopped_at"] > step:
      self.state["stopped_at"] = None

  @property
  def best(self):
    return self.state["value"]

  @property
  def stopped(self):
    """Whether early stopping has ended the run."""
    return self.state["stopped_at"] is not None

  def since_best(self):
    """Evaluations made after the best one."""
    best = self.state["step"]
    return sum(1 for s, _ in self.state["evaluations"] if best is None or s > best)

  def add(self, step, results):
    """Records an evaluation at `step`; returns whether it is the new best."""
    value = metric_value(results, self.metric)
    self.state["evaluations"] = [e for e in self.state["evaluations"] if e[0] != step]
    self.state["evaluations"].append([step, value])
    improved = is_better(value, self.best, self.higher)
    if improved:  # numbers as JSON has them (numpy scalars are not JSON)
      self.state.update(step=step, value=value,
                        results={k: v if isinstance(v, int) else float(v)
                                 for k, v in results.items()})
    return improved

  def should_stop(self, step):
    """Whether `patience` evaluations in a row have not improved (0: never); records it."""
    if self.patience and self.since_best() >= self.patience:
      self.state["stopped_at"] = step
    return self.stopped
