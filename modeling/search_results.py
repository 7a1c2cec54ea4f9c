"""The results of a fine-tuning search: per-run rows, the per-configuration table, the choice.

A row is one run: {"learning_rate", "batch_size", "epochs", "seed", "run" (its
sub-directory's name), "status", "dev" {key: value from eval_results.txt},
"test" {key: value from test_results.txt, if the script wrote one}}.
A configuration is (learning_rate, batch_size, epochs); its statistics are
over the seeds whose run finished: mean, sample standard deviation (n - 1;
none for one run), min, max and the best run. Selection reads dev figures
only; test figures are written beside them and never looked at.
"""

import csv
import io
import json
import math
import re

import numpy as np

from data import files

CONFIG = ("learning_rate", "batch_size", "epochs")


def read_results(path):
  """A `key = value` results file (eval_results.txt) as {key: float}; {} when absent."""
  if not files.exists(path):
    return {}
  results = {}
  for line in files.read_bytes(path).decode("utf-8").splitlines():
    found = re.fullmatch(r"\s*(\S+)\s*=\s*(\S+)\s*", line)
    if found:
      try:
        results[found.group(1)] = float(found.group(2))
      except ValueError:
        pass
  return results


def _key(row):
  return tuple(row[k] for k in CONFIG)


def _best_index(values, higher):
  """The index of the best value (the first of equals); NaN is never best."""
  order = [(-v if higher else v, i) for i, v in enumerate(values) if not math.isnan(v)]
  return min(order)[1] if order else None


def table(rows, metric, higher=True):
  """Per configuration, in grid order: CONFIG values, runs, mean, std, min, max, best,
  best_seed (over the finished runs that report `metric`)."""
  groups = {}
  for row in rows:
    groups.setdefault(_key(row), [])
    if row["status"] == "done" and metric in row["dev"]:
      groups[_key(row)].append(row)
  out = []
  for key, done in groups.items():
    values = np.array([r["dev"][metric] for r in done], np.float64)
    entry = dict(zip(CONFIG, key), runs=len(done), mean=None, std=None, min=None, max=None,
                 best=None, best_seed=None)
    if len(done):
      best = _best_index(list(values), higher)
      entry.update(mean=float(values.mean()), min=float(values.min()), max=float(values.max()),
                   std=float(values.std(ddof=1)) if len(done) > 1 else None)
      if best is not None:
        entry.update(best=float(values[best]), best_seed=done[best]["seed"])
    out.append(entry)
  return out


def select(rows, metric, higher=True, mode="best_run"):
  """The chosen run's row, on dev only: best_run, the best single run; best_mean, the best
  run of the configuration with the best mean. None when no run reports `metric`."""
  done = [r for r in rows if r["status"] == "done" and metric in r["dev"]]
  if mode == "best_mean":
    configs = [c for c in table(rows, metric, higher) if c["runs"]]
    best = _best_index([c["mean"] for c in configs], higher)
    if best is None:
      return None
    done = [r for r in done if _key(r) == tuple(configs[best][k] for k in CONFIG)]
  elif mode != "best_run":
    raise ValueError(f"--select={mode}: expected best_run or best_mean.")
  best = _best_index([r["dev"][metric] for r in done], higher)
  return None if best is None else done[best]


def _number(value, digits=4):
  return "" if value is None else f"{value:.{digits}f}"


def table_markdown(entries, metric, higher=True, failed=(), unfinished=()):
  """table.md: one line per configuration; mean ± std over seeds, min, max, best; then the
  runs that failed and those not finished (stopped), which are in no line."""
  direction = "higher" if higher else "lower"
  lines = [f"# Fine-tuning search: dev {metric} ({direction} is better)", "",
           "| learning rate | batch size | epochs | runs | mean ± std | min | max | best "
           "(seed) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for e in entries:
    spread = f"{_number(e['mean'])} ± {_number(e['std'])}" if e["std"] is not None else (
        _number(e["mean"]) or "–")
    best = f"{_number(e['best'])} ({e['best_seed']})" if e["best"] is not None else "–"
    lines.append(f"| {e['learning_rate']:g} | {e['batch_size']} | {e['epochs']:g} | "
                 f"{e['runs']} | {spread} | {_number(e['min']) or '–'} | "
                 f"{_number(e['max']) or '–'} | {best} |")
  lines += ["", "std: sample standard deviation over the seeds (n - 1)."]
  if failed:
    lines += ["", "Failed runs (not in the table): " + ", ".join(failed) + "."]
  if unfinished:
    lines += ["", "Runs not finished (not in the table; they resume when the search is "
              "started again): " + ", ".join(unfinished) + "."]
  return "\n".join(lines) + "\n"


def _csv(header, rows):
  text = io.StringIO(newline="")
  writer = csv.writer(text)
  writer.writerow(header)
  writer.writerows(rows)
  return text.getvalue()


def table_csv(entries):
  header = [*CONFIG, "runs", "mean", "std", "min", "max", "best", "best_seed"]
  return _csv(header, [["" if e[k] is None else e[k] for k in header] for e in entries])


def runs_csv(rows):
  """runs.csv: every run, its seed, status and every dev (and test) figure it wrote."""
  dev = sorted({k for r in rows for k in r["dev"]})
  test = sorted({k for r in rows for k in r.get("test", {})})
  header = [*CONFIG, "seed", "run", "status", *dev, *(f"test:{k}" for k in test)]
  body = [[*(r[k] for k in CONFIG), r["seed"], r["run"], r["status"],
           *(r["dev"].get(k, "") for k in dev), *(r.get("test", {}).get(k, "") for k in test)]
          for r in rows]
  return _csv(header, body)


def selection_json(row, entries, metric, higher, mode, seeds):
  """selected.json: the chosen configuration and seed, with its dev figures (and test
  figures, reported only)."""
  config = next(e for e in entries if all(e[k] == row[k] for k in CONFIG))
  chosen = {"select": mode, "metric": metric, "higher_is_better": higher,
            **{k: row[k] for k in CONFIG}, "seed": row["seed"], "run": row["run"],
            "dev": row["dev"][metric], "dev_results": row["dev"],
            "configuration": {k: config[k] for k in ("runs", "mean", "std", "min", "max")},
            "seeds": list(seeds)}
  if row.get("test"):
    chosen["test_results"] = row["test"]
    chosen["test_note"] = "reported only: selection reads dev figures alone"
  return json.dumps(chosen, indent=1) + "\n"


def plot(entries, metric, path):
  """metric_vs_learning_rate.png: mean ± std against the learning rate, a line per batch
  size and epochs."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  lines = {}
  for e in entries:
    if e["mean"] is not None:
      lines.setdefault((e["batch_size"], e["epochs"]), []).append(e)
  for (batch, epochs), points in sorted(lines.items()):
    points.sort(key=lambda e: e["learning_rate"])
    ax.errorbar([e["learning_rate"] for e in points], [e["mean"] for e in points],
                yerr=[e["std"] or 0.0 for e in points], marker="o", capsize=3,
                label=f"batch {batch}, {epochs:g} epochs")
  ax.set_xscale("log")
  rates = sorted({e["learning_rate"] for e in entries})
  ax.set_xticks(rates, [f"{r:g}" for r in rates])
  ax.minorticks_off()
  ax.set_xlabel("learning rate")
  ax.set_ylabel(f"dev {metric} (mean ± std over seeds)")
  ax.grid(alpha=0.3)
  if lines:
    ax.legend(fontsize=8)
  fig.tight_layout()
  png = io.BytesIO()
  fig.savefig(png, format="png", dpi=100)
  plt.close(fig)
  files.write_bytes(path, png.getvalue())
