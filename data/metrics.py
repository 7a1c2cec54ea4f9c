"""The official GLUE metrics, on numpy arrays."""

import numpy as np


def accuracy(predictions, labels):
  """Fraction of equal entries."""
  return float(np.mean(np.asarray(predictions) == np.asarray(labels)))


def f1(predictions, labels, positive=1):
  """F1 of the positive class (MRPC, QQP); 0 when it is never predicted nor present."""
  p, t = np.asarray(predictions) == positive, np.asarray(labels) == positive
  tp = np.sum(p & t)
  denominator = np.sum(p) + np.sum(t)
  return float(2 * tp / denominator) if denominator else 0.0


def matthews_corrcoef(predictions, labels):
  """Matthews correlation of binary predictions (CoLA); 0 when undefined."""
  p, t = np.asarray(predictions).astype(bool), np.asarray(labels).astype(bool)
  tp, tn = float(np.sum(p & t)), float(np.sum(~p & ~t))
  fp, fn = float(np.sum(p & ~t)), float(np.sum(~p & t))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y):
  """Pearson correlation (STS-B)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x * x).sum() * (y * y).sum())
  return float((x * y).sum() / denominator) if denominator else 0.0


def _ranks(x):
  """Ranks from 1, ties sharing their average rank."""
  x = np.asarray(x)
  order = np.argsort(x, kind="mergesort")
  ranks = np.empty(len(x), np.float64)
  sorted_x = x[order]
  start = 0
  for end in range(1, len(x) + 1):
    if end == len(x) or sorted_x[end] != sorted_x[start]:
      ranks[order[start:end]] = (start + end + 1) / 2.0
      start = end
  return ranks


def spearman(x, y):
  """Spearman rank correlation (STS-B): Pearson of average ranks."""
  return pearson(_ranks(x), _ranks(y))


def glue_metrics(task_name, predictions, labels):
  """The task's official metrics, keyed as in eval_results.txt (without 'eval_')."""
  name = task_name.lower()
  if name == "sts-b":
    return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
  values = {"accuracy": accuracy(predictions, labels)}
  if name == "cola":
    values["matthews_corrcoef"] = matthews_corrcoef(predictions, labels)
  if name in ("mrpc", "qqp"):
    values["f1"] = f1(predictions, labels)
  return values
