"""The official GLUE metrics, computed by scikit-learn and SciPy.

Where a metric is undefined (constant predictions or labels for Matthews,
Pearson or Spearman; no positive prediction nor label for F1) it is 0, as
scikit-learn already does for Matthews and F1 with zero_division=0; SciPy's
NaN for the correlations is turned into 0 the same way.
"""

import warnings

import numpy as np
import scipy.special
import scipy.stats
import sklearn.metrics


def accuracy(predictions, labels):
  """Fraction of equal entries."""
  return float(sklearn.metrics.accuracy_score(labels, predictions))


def f1(predictions, labels, positive=1):
  """F1 of the positive class (MRPC, QQP); 0 when it is never predicted nor present."""
  return float(sklearn.metrics.f1_score(labels, predictions, pos_label=positive,
                                        average="binary", zero_division=0))


def matthews_corrcoef(predictions, labels):
  """Matthews correlation (CoLA); 0 when undefined."""
  with warnings.catch_warnings():  # one class only: sklearn warns, then returns 0
    warnings.simplefilter("ignore", UserWarning)
    return float(sklearn.metrics.matthews_corrcoef(labels, predictions))


def _correlation(function, x, y):
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
    return 0.0  # undefined; SciPy would warn and give NaN
  return float(function(x, y).statistic)


def pearson(x, y):
  """Pearson correlation (STS-B); 0 when undefined."""
  return _correlation(scipy.stats.pearsonr, x, y)


def spearman(x, y):
  """Spearman rank correlation (STS-B), ties at their average rank; 0 when undefined."""
  return _correlation(scipy.stats.spearmanr, x, y)


def glue_metrics(task_name, predictions, labels):
  """The task's official metrics, keyed as in eval_results.txt (without 'eval_').

  Raises ValueError when there is nothing to score.
  """
  if len(predictions) == 0:
    raise ValueError(f"No examples to score for {task_name}.")
  name = task_name.lower()
  if name == "sts-b":
    return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions, labels)}
  values = {"accuracy": accuracy(predictions, labels)}
  if name == "cola":
    values["matthews_corrcoef"] = matthews_corrcoef(predictions, labels)
  if name in ("mrpc", "qqp"):
    values["f1"] = f1(predictions, labels)
  return values


def cross_entropy(logits, labels):
  """Mean negative log-likelihood of integer `labels` [N] under softmax(`logits` [N, C])."""
  log_probs = scipy.special.log_softmax(np.asarray(logits, np.float64), axis=-1)
  return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def mean_squared_error(predictions, labels):
  """Mean of (prediction - label)^2: the regression loss."""
  return float(np.mean((np.asarray(predictions, np.float64) - labels) ** 2))


def classifier_results(task_name, is_regression, logits, labels, prefix):
  """{prefix + "loss", prefix + each glue_metrics key} of logits [N, C] against labels [N]:
  regression scores logit 0 (loss: mean squared error), classes the argmax (cross entropy)."""
  if is_regression:
    predictions = logits[:, 0]
    loss = mean_squared_error(predictions, labels)
  else:
    predictions = logits.argmax(-1)
    loss = cross_entropy(logits, labels)
  scores = glue_metrics(task_name, predictions, labels)
  return {prefix + "loss": loss, **{prefix + k: v for k, v in scores.items()}}
