"""Evaluation during training: the dev log, the best checkpoint and early stopping.

Trainer.train calls a PeriodicEvaluation every `every` steps and at the last
step, between two device calls, so the training steps themselves run as
without it. Each call evaluates the model as it is (with the script's own
--do_eval code), appends the results to --output_dir/eval_log.csv and to
TensorBoard under --output_dir/eval, and, when the chosen metric improves,
replaces --output_dir/best/ whole: the model's weights and step
(TrainState.weights_checkpoint), bert_config.json, vocab.txt and best.json.
best.json also records every evaluation's value, so a resumed run goes on
with exactly the best and the patience count it had. The Trainer saves its
regular checkpoint right after each evaluation: a run killed later resumes
past it, one killed in between redoes the steps and the evaluation.

The runner (cli/runner.py) checks the flags with check_options before any work,
makes the hook with during_training, and loads best/ with load_best for
--use_best_checkpoint.
"""

import json
import os
import time

import tensorflow as tf
from absl import logging

from data import files
from modeling import checkpoints, reports, selection

BEST_DIR = "best"
BEST_JSON = "best.json"
EVAL_LOG = "eval_log.csv"


def read_best(output_dir):
  """best/best.json of `output_dir` as a dict, or None when there is none."""
  path = os.path.join(output_dir, BEST_DIR, BEST_JSON)
  if not files.exists(path):
    return None
  try:
    return json.loads(files.read_bytes(path).decode("utf-8"))
  except (OSError, ValueError) as e:
    raise ValueError(f"Cannot read {path}: {e}") from None


def chosen_metric(best_metric, default_metric, output_dir):
  """The metric a run keeps its best checkpoint by: --best_metric when given, else the one
  output_dir's best/ was chosen by (a run from before a default changed goes on as it
  began), else the script's default."""
  if best_metric:
    return best_metric
  recorded = (read_best(output_dir) or {}).get("metric")
  return recorded or default_metric


def recover_best(output_dir):
  """Puts back output_dir/best when a run was killed between publish_dir's two renames (the
  old best/ renamed aside, the new one not yet in): the newest complete temporary copy
  (best.json and the checkpoint it names) becomes best/. Returns its former path, or None
  when best/ is there or no copy is complete. Only for the chief, before it writes."""
  best = os.path.join(output_dir, BEST_DIR)
  if files.exists(best):
    return None
  complete = []
  for path in files.leftovers(best):
    try:
      state = json.loads(files.read_bytes(os.path.join(path, BEST_JSON)).decode("utf-8"))
      prefix = os.path.join(path, state["checkpoint"])
    except (OSError, ValueError, KeyError, TypeError):
      continue  # killed while being filled
    if files.exists(prefix + ".index") and files.exists(os.path.join(path, "checkpoint")):
      steps = [e[0] for e in state.get("evaluations") or []]
      complete.append((max(steps, default=-1), len(steps), path))
  if not complete:
    return None
  path = max(complete)[2]  # the one that has seen the latest evaluation
  files.publish_dir(path, best, last=("checkpoint", BEST_JSON))
  return path


def best_checkpoint(output_dir):
  """(prefix of the best checkpoint, its best.json) in output_dir/best; ValueError if none."""
  state = read_best(output_dir)
  if not state or not state.get("checkpoint"):
    raise ValueError(f"--use_best_checkpoint: {os.path.join(output_dir, BEST_DIR)} holds no "
                     "best checkpoint; train with --eval_every_steps or --eval_every_epochs "
                     "first.")
  return os.path.join(output_dir, BEST_DIR, state["checkpoint"]), state


class PeriodicEvaluation:
  """The hook Trainer.train calls: evaluate, log, keep the best, maybe stop.

  Args:
    every: steps between evaluations (the last step is always evaluated).
    evaluate: callable() -> {metric: number} of the model as it is (global_step included).
    tracker: modeling/selection.Tracker, with the state read_best() gave (resuming).
    output_dir: --output_dir.
    config, vocab_file: copied into best/ so that it reads as a checkpoint directory.
    chief: whether this worker writes the shared outputs.
  """

  def __init__(self, every, evaluate, tracker, output_dir, config, vocab_file=None,
               chief=True):
    self.every, self.evaluate, self.tracker = every, evaluate, tracker
    self.output_dir, self.config, self.vocab_file, self.chief = (output_dir, config,
                                                                 vocab_file, chief)
    self.csv = reports.CsvLog(os.path.join(output_dir, EVAL_LOG)) if chief else None
    self.writer = (tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
                   if chief else tf.summary.create_noop_writer())

  def start(self, step):
    """Called once the run is positioned at `step` (resumed or fresh)."""
    self.tracker.resumed_at(step)
    if self.tracker.stopped:
      logging.info("Early stopping ended this run at step %d; not training further.",
                   self.tracker.state["stopped_at"])

  @property
  def stopped(self):
    return self.tracker.stopped

  def due(self, step, last_step):
    return step % self.every == 0 or step == last_step

  def __call__(self, state, step):
    """Evaluates at `step` (state: the TrainState); returns whether training should stop."""
    start = time.time()
    results = self.evaluate()
    values = {k: float(v) for k, v in sorted(results.items()) if k != "global_step"}
    improved = self.tracker.add(step, results)
    value = self.tracker.state["evaluations"][-1][1]
    best = ("no best yet" if self.tracker.best is None else
            f"best {self.tracker.best:.6g} at step {self.tracker.state['step']}")
    logging.info("Evaluation at step %d: %s; %s %.6g%s (%.1f s)", step,
                 " ".join(f"{k} {v:.4g}" for k, v in values.items()), self.tracker.metric,
                 value, ", the best so far" if improved else f" ({best})", time.time() - start)
    stop = self.tracker.should_stop(step)
    if stop:
      logging.info("Early stopping at step %d: %s has not improved in %d evaluations (%s).",
                   step, self.tracker.metric, self.tracker.patience, best)
    if self.chief:
      self.csv.append(step, values)
      with self.writer.as_default(step=step):
        for k, v in values.items():
          tf.summary.scalar(k, v)
      self.writer.flush()
    self._save(state, step, improved)
    return stop

  def _save(self, state, step, improved):
    """Writes best/ whole when `improved` (best.json alone otherwise); the chief only."""
    directory = os.path.join(self.output_dir, BEST_DIR)
    if improved:
      self.tracker.state["checkpoint"] = f"ckpt-{step}"
    text = json.dumps(self.tracker.state, indent=1)
    if not self.chief:
      return
    if not improved:
      files.makedirs(directory)
      with files.atomic_output(os.path.join(directory, BEST_JSON)) as f:
        f.write(text)
      return
    with files.atomic_dir(directory, last=("checkpoint", BEST_JSON)) as tmp:
      files.makedirs(tmp)
      prefix = state.weights_checkpoint().write(os.path.join(tmp, f"ckpt-{step}"))
      with files.atomic_output(os.path.join(tmp, "checkpoint")) as f:
        f.write(f'model_checkpoint_path: "{os.path.basename(prefix)}"\n')
      checkpoints.write_config_and_vocab(tmp, self.config, self.vocab_file)
      with files.atomic_output(os.path.join(tmp, BEST_JSON)) as f:
        f.write(text)


def every_steps(eval_every_steps, eval_every_epochs, steps_per_epoch):
  """Steps between evaluations from the two flags (0: off), at least 1; 0 when both are off."""
  if eval_every_steps:
    return eval_every_steps
  if eval_every_epochs:
    return max(1, int(eval_every_epochs * steps_per_epoch))
  return 0



def check_options(every_steps, every_epochs, best_metric, patience, use_best, do_train,
                  dev_given, dev_flag, output_dir, default_metric=None):
  """ValueError naming the flag when the flags of evaluation during training, the best
  checkpoint and early stopping disagree with each other or with the run's --do_* flags.

  every_steps, every_epochs, best_metric, patience, use_best: --eval_every_steps,
  --eval_every_epochs, --best_metric, --early_stopping_patience,
  --use_best_checkpoint; dev_given: the value of the flag `dev_flag` that makes the
  script read the dev data evaluation scores (--do_eval; run_squad: --do_predict);
  default_metric: the script's headline metric, which --best_metric defaults to. A resumed
  run keeps the metric its best checkpoint (output_dir/best/best.json) was chosen by
  (chosen_metric); a --best_metric given against it is refused.
  """
  if every_steps and every_epochs:
    raise ValueError("Give --eval_every_steps or --eval_every_epochs, not both.")
  during = bool(every_steps or every_epochs)
  name = "--eval_every_steps" if every_steps else "--eval_every_epochs"
  if during and not do_train:
    raise ValueError(f"{name} evaluates during training: it needs --do_train.")
  if during and not dev_given:
    raise ValueError(f"{name} needs --{dev_flag}: it scores the dev data that --{dev_flag} "
                     "reads.")
  if not during:
    for flag, value in (("best_metric", best_metric), ("early_stopping_patience", patience)):
      if value:
        raise ValueError(f"--{flag} needs --eval_every_steps or --eval_every_epochs.")
    if use_best and do_train:
      raise ValueError("--use_best_checkpoint with --do_train needs --eval_every_steps or "
                       "--eval_every_epochs (they choose the best checkpoint).")
  if use_best and not do_train:
    best_checkpoint(output_dir)  # ValueError when there is none
  if during:  # refused now, not once the data is converted and run.json rewritten
    selection.Tracker(chosen_metric(best_metric, default_metric, output_dir),
                      state=read_best(output_dir))


def during_training(every, evaluate, metric, patience, output_dir, config, vocab_file=None,
                    chief=True):
  """The PeriodicEvaluation that evaluates every `every` steps (0: None), keeping the best
  by `metric` with `patience` (see PeriodicEvaluation and selection.Tracker); logs it."""
  if not every:
    return None
  tracker = selection.Tracker(metric, patience=patience, state=read_best(output_dir))
  logging.info("Evaluating on dev every %d steps and at the last; the best %s (%s is "
               "better) is kept in %s.", every, tracker.metric,
               "higher" if tracker.higher else "lower", os.path.join(output_dir, BEST_DIR))
  return PeriodicEvaluation(every, evaluate, tracker, output_dir, config, vocab_file, chief)


def load_best(train_state, output_dir):
  """--use_best_checkpoint: `train_state` (a TrainState) takes the weights and step of
  output_dir/best."""
  prefix, state = best_checkpoint(output_dir)
  train_state.load_weights(prefix)
  logging.info("Using the best checkpoint %s: step %d, %s = %.6g.", prefix, state["step"],
               state["metric"], state["value"])
