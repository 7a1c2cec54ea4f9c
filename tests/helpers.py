"""Small shared test utilities."""

import re

import numpy as np

from modeling import checkpoints


def randomize(model, seed=0, scale=0.2):
  """Gives every variable (LayerNorm and biases included) random values; returns them."""
  rng = np.random.default_rng(seed)
  weights = {}
  for name, var in checkpoints.variable_map(model).items():
    value = rng.normal(0.0, scale, var.shape).astype("float32")
    if name.endswith("/gamma"):
      value += 1.0
    var.assign(value)
    weights[name] = value
  return weights


def random_features(rng, batch, seq, vocab_size, type_vocab_size=2, min_len=2):
  """Random ids with trailing padding of random length and random segments."""
  lengths = rng.integers(min_len, seq + 1, size=batch)
  mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
  ids = rng.integers(0, vocab_size, size=(batch, seq)).astype("int32") * mask
  segments = rng.integers(0, type_vocab_size, size=(batch, seq)).astype("int32") * mask
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def assert_same_numbers(got, want, tol=1e-6, where="value"):
  """Asserts two parsed JSON values equal: same structure and strings, numbers within `tol`.

  For files computed on different devices, replica counts or batch layouts,
  whose floats may differ in the last digits (summation order), never in kind.
  """
  if isinstance(want, dict):
    assert isinstance(got, dict) and got.keys() == want.keys(), where
    for key in want:
      assert_same_numbers(got[key], want[key], tol, f"{where}[{key!r}]")
  elif isinstance(want, list):
    assert isinstance(got, list) and len(got) == len(want), where
    for i, (g, w) in enumerate(zip(got, want)):
      assert_same_numbers(g, w, tol, f"{where}[{i}]")
  elif isinstance(want, (int, float)) and not isinstance(want, bool):
    assert isinstance(got, (int, float)) and abs(got - want) <= tol, (where, got, want)
  else:
    assert got == want, (where, got, want)


def read_eval_results(path):
  """eval_results.txt (or a script's other *_results.txt) as {key: float}.

  Asserts the original's form, which readers parse line by line: every line
  `key = number`, the keys sorted.
  """
  results = {}
  for line in open(path).read().splitlines():
    found = re.fullmatch(r"(\S+) = (\S+)", line)
    assert found, f"{path}: {line!r} is not `key = value`"
    try:
      results[found.group(1)] = float(found.group(2))
    except ValueError:
      raise AssertionError(f"{path}: {line!r}: the value is not a number") from None
  assert list(results) == sorted(results), f"{path}: keys not sorted"
  return results
