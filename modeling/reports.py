"""What training leaves for people to read: the step log, the CSV log, eval_results.txt, the curves PNG."""

import csv
import io
import numbers
import os
import time

import tensorflow as tf
from absl import logging

from data import files
from data.progress import format_duration


class CsvLog:
  """A CSV log, a row per call, kept across resumed runs: train_log.csv, eval_log.csv; a
  row replaces those of its step and later ones (written before a resume went back).

  Its columns are `step` and every value met so far, in the order first met (NER
  reports a type's figures once it predicts that type); a row leaves out what it
  did not report. A bucket has no append, so the rows are kept in memory (read once
  from an earlier run's file) and the file is rewritten whole at each row, all or
  nothing.
  """

  def __init__(self, path, start=None):
    self.path = path
    self.rows = None  # [{column: text}]; None until the earlier file is read
    # The step a resumed run goes on from: an earlier run's rows after it are of steps
    # that run lost, and go with the first new row.
    self.start = start

  def append(self, step, values):
    """Adds the row `step`, then each of `values` ({name: number}) to 6 significant digits."""
    if self.rows is None:
      self.rows = []
      if files.exists(self.path):
        text = files.read_bytes(self.path).decode("utf-8")
        self.rows = [row for row in csv.DictReader(io.StringIO(text, newline=""))
                     if self.start is None or int(row["step"]) <= self.start]
    # A resumed run logs again the steps after its checkpoint: the lost part's rows go.
    self.rows = [row for row in self.rows if int(row["step"]) < step]
    self.rows.append({"step": step, **{k: f"{v:.6g}" for k, v in values.items()}})
    columns = list(dict.fromkeys(k for row in self.rows for k in row))
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, columns, restval="")
    writer.writeheader()
    writer.writerows(self.rows)
    files.write_bytes(self.path, out.getvalue().encode("utf-8"))


class StepLog:
  """Averages training values between log points and reports them: the log line, TensorBoard
  scalars under output_dir/train and train_log.csv (files on the chief only)."""

  def __init__(self, output_dir, num_train_steps, sequences_per_step, step, chief):
    self.num_train_steps, self.sequences_per_step = num_train_steps, sequences_per_step
    self.writer = (tf.summary.create_file_writer(os.path.join(output_dir, "train"))
                   if chief else tf.summary.create_noop_writer())
    self.csv = CsvLog(os.path.join(output_dir, "train_log.csv"), step) if chief else None
    self.mark_step, self.mark_time = step, time.time()
    self.pending, self.pending_steps = {}, 0

  def add(self, totals, steps):
    """Adds {name: value summed over `steps` steps}."""
    self.pending = {k: self.pending.get(k, 0.0) + float(v) for k, v in totals.items()}
    self.pending_steps += steps

  def write(self, step):
    """Reports the means of the values added since the last report, with rates and ETA."""
    now = time.time()
    values = {k: v / self.pending_steps for k, v in self.pending.items()}
    rate = (step - self.mark_step) / max(now - self.mark_time, 1e-9)
    values["steps_per_second"] = rate
    values["sequences_per_second"] = rate * self.sequences_per_step
    remaining = (self.num_train_steps - step) / max(rate, 1e-9)
    parts = " ".join(f"{k} {v:.4g}" for k, v in values.items()
                     if k not in ("steps_per_second", "sequences_per_second"))
    logging.info("step %d/%d %s | %.2f steps/s, %.1f sequences/s | ETA %s", step,
                 self.num_train_steps, parts, rate, values["sequences_per_second"],
                 format_duration(remaining))
    with self.writer.as_default(step=step):
      for k, v in values.items():
        tf.summary.scalar(k, v)
    if self.csv is not None:
      self.csv.append(step, values)
    self.mark_step, self.mark_time = step, now
    self.pending, self.pending_steps = {}, 0


def write_eval_results(path, results):
  """The original's eval_results.txt: `key = value` lines, keys sorted, every value a
  number (readers parse each one as a float). TypeError for a value that is not one."""
  for key, value in results.items():
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
      raise TypeError(f"{path}: {key} = {value!r} is not a number.")
  with files.atomic_output(path) as f:
    for key in sorted(results):
      f.write(f"{key} = {results[key]}\n")


def plot_curves(csv_path, png_path, curves):
  """Saves a PNG with one panel per (column, title) in `curves`, against step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rows = {}
  for row in csv.DictReader(io.StringIO(files.read_bytes(csv_path).decode("utf-8"), newline="")):
    rows[int(row["step"])] = row
  steps = sorted(rows)
  fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6))
  for ax, (column, title) in zip(axes if len(curves) > 1 else [axes], curves):
    ax.plot(steps, [float(rows[s][column]) for s in steps])
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
  fig.tight_layout()
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=100)
  plt.close(fig)
  files.write_bytes(png_path, png.getvalue())
