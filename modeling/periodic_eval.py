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
"""

import csv
import io
import json
import os
import time

import tensorflow as tf
from absl import logging

from data import files
from modeling import checkpoints

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


def best_checkpoint(output_dir):
  """(prefix of the best checkpoint, its best.json) in output_dir/best; ValueError if none."""
  state = read_best(output_dir)
  if not state or not state.get("checkpoint"):
    raise ValueError(f"--use_best_checkpoint: {os.path.join(output_dir, BEST_DIR)} holds no "
                     "best checkpoint; train with --eval_every_steps or --eval_every_epochs "
                     "first.")
  return os.path.join(output_dir, BEST_DIR, state["checkpoint"]), state


class EvalLog:
  """eval_log.csv: a row per evaluation, kept across resumed runs. Its columns are every
  metric met so far (NER reports a type's figures once it is predicted): the file is
  rewritten whole, all or nothing, each time."""

  def __init__(self, path):
    self.path, self.rows = path, None

  def append(self, step, values):
    if self.rows is None:
      self.rows = []
      if files.exists(self.path):
        text = files.read_bytes(self.path).decode("utf-8")
        self.rows = list(csv.DictReader(io.StringIO(text, newline="")))
    self.rows.append({"step": step, **{k: f"{v:.6g}" for k, v in values.items()}})
    columns = list(dict.fromkeys(k for row in self.rows for k in row))
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, columns, restval="")
    writer.writeheader()
    writer.writerows(self.rows)
    with files.atomic_output(self.path, newline="") as f:
      f.write(out.getvalue())


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
    self.csv = EvalLog(os.path.join(output_dir, EVAL_LOG)) if chief else None
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

