"""GLUE metrics against scikit-learn and SciPy directly, hand-computed cases and edge cases."""

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics

from data import metrics
from helpers import assert_close

# float64 scores of a few counts: a handful of roundings.
FEW = 8


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_equal_sklearn(seed):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 2, 300)
  predictions = np.where(rng.random(300) < 0.7, labels, 1 - labels)
  # Exact: the same ratios of the same counts as scikit-learn computes them.
  assert metrics.accuracy(predictions, labels) == sklearn.metrics.accuracy_score(labels, predictions)
  assert metrics.f1(predictions, labels) == sklearn.metrics.f1_score(labels, predictions)
  assert metrics.matthews_corrcoef(predictions, labels) == sklearn.metrics.matthews_corrcoef(
      labels, predictions)


@pytest.mark.parametrize("seed", range(5))
def test_correlations_equal_scipy(seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=200)
  y = np.round(x + rng.normal(size=200), 1)  # rounded: ties for the ranks
  # float64, two implementations: means, deviations and three dot products of 200 terms,
  # relative to |r| <= 1.
  assert_close(metrics.pearson(x, y), scipy.stats.pearsonr(x, y)[0], "float64", 4 * 200, 1.0)
  assert_close(metrics.spearman(x, y), scipy.stats.spearmanr(x, y)[0], "float64", 4 * 200, 1.0)


def test_hand_computed_values():
  # labels 1 1 0 0 1, predictions 1 0 0 1 1: tp 2, tn 1, fp 1, fn 1.
  labels, predictions = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
  assert_close(metrics.accuracy(predictions, labels), 3 / 5, "float64", FEW)
  assert_close(metrics.f1(predictions, labels), 2 * 2 / (2 * 2 + 1 + 1), "float64", FEW)
  # (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (2 - 1) / sqrt(3*3*2*2) = 1/6
  assert_close(metrics.matthews_corrcoef(predictions, labels), 1 / 6, "float64", FEW)
  # Spearman with a tie: ranks of [1, 2, 2, 3] are [1, 2.5, 2.5, 4]; of [1, 3, 2, 4] are themselves.
  x, y = [1, 2, 2, 3], [1, 3, 2, 4]
  rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 3, 2, 4])
  dx, dy = rx - rx.mean(), ry - ry.mean()
  assert_close(metrics.spearman(x, y), (dx @ dy) / np.sqrt((dx @ dx) * (dy @ dy)), "float64", 16)
  # Deviations [-1, 0, 1] and [-7/3, -1/3, 8/3]: 5 / sqrt(2 * 114/9).
  assert_close(metrics.pearson([1, 2, 3], [2, 4, 7]), 15 / np.sqrt(228), "float64", 16)


def test_undefined_values_are_zero_without_warnings(recwarn):
  assert metrics.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant predictions
  assert metrics.matthews_corrcoef([1, 1], [1, 1]) == 0.0
  assert metrics.f1([0, 0, 0], [0, 0, 0]) == 0.0  # no positive predicted nor present
  assert metrics.f1([0, 0, 0], [1, 0, 0]) == 0.0
  assert metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
  assert metrics.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) == 0.0
  assert metrics.pearson([1.0], [2.0]) == 0.0
  assert not [w for w in recwarn if issubclass(w.category, (UserWarning, RuntimeWarning))]


def test_glue_metrics_per_task():
  labels, predictions = np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1])
  cola = metrics.glue_metrics("CoLA", predictions, labels)
  assert sorted(cola) == ["accuracy", "matthews_corrcoef"] and cola["accuracy"] == 0.75  # 3 / 4
  assert_close(cola["matthews_corrcoef"], 1 / np.sqrt(3), "float64", FEW)
  # Exact: 3 / 4, and 2 * 2 / (2 * 2 + 1) rounds to the same double as 0.8.
  assert metrics.glue_metrics("MRPC", predictions, labels) == {"accuracy": 0.75, "f1": 0.8}
  assert metrics.glue_metrics("rte", predictions, labels) == {"accuracy": 0.75}
  scores = metrics.glue_metrics("STS-B", [0.1, 0.4, 0.3], [1.0, 2.0, 3.0])
  assert sorted(scores) == ["pearson", "spearman"]
  assert_close(scores["pearson"], np.corrcoef([0.1, 0.4, 0.3], [1, 2, 3])[0, 1], "float64", 16)
  assert_close(scores["spearman"], 0.5, "float64", 16)
  with pytest.raises(ValueError, match="No examples to score for qqp"):
    metrics.glue_metrics("qqp", np.zeros(0), np.zeros(0))
