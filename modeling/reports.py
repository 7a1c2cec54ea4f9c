"""What training leaves for people to read: the CSV log, eval_results.txt, the curves PNG."""

import csv

from data import files


class CsvLog:
  """Appends logged values to a CSV (kept across resumed runs, for the plots)."""

  def __init__(self, path):
    self.path = path

  def append(self, step, values):
    new = not files.exists(self.path)
    with open(self.path, "a", newline="") as f:
      w = csv.writer(f)
      if new:
        w.writerow(["step", *values])
      w.writerow([step, *(f"{v:.6g}" for v in values.values())])


def write_eval_results(path, results):
  """The original's eval_results.txt: `key = value` lines, keys sorted."""
  with files.atomic_output(path) as f:
    for key in sorted(results):
      f.write(f"{key} = {results[key]}\n")


def plot_curves(csv_path, png_path, curves):
  """Saves a PNG with one panel per (column, title) in `curves`, against step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rows = {}
  with open(csv_path) as f:
    for row in csv.DictReader(f):
      rows[int(row["step"])] = row  # a resumed run may repeat steps: keep the last
  steps = sorted(rows)
  fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6))
  for ax, (column, title) in zip(axes if len(curves) > 1 else [axes], curves):
    ax.plot(steps, [float(rows[s][column]) for s in steps])
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
  fig.tight_layout()
  tmp = files.temporary_name(png_path) + ".png"
  fig.savefig(tmp, dpi=100)
  plt.close(fig)
  files.rename(tmp, png_path)
