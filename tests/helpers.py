"""Small shared test utilities, and the tolerances of numeric comparisons."""

import math
import os

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


# Significand bits, the implicit leading one included.
_SIGNIFICAND_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def unit_roundoff(dtype):
  """u = 2**-p for a p-bit significand: the largest relative error of rounding one
  number to `dtype` (half its machine epsilon). float32 2**-24 = 6.0e-8, float16
  2**-11 = 4.9e-4, bfloat16 2**-8 = 3.9e-3."""
  return 2.0 ** -_SIGNIFICAND_BITS[str(dtype)]


def rounding_tolerance(dtype, ops, scale):
  """The largest difference allowed between two computations of the same numbers that
  differ only in rounding: 2 * sqrt(ops) * unit_roundoff(dtype) * scale.

  dtype: the type whose rounding separates them: float32 for two float32 summation
    orders (another CPU's blocking, batch layout, XLA's fusion) or float32 against a
    float64 reference; bfloat16 or float16 for a mixed-precision path against float32
    (its products accumulate in float32, but each matrix product's inputs and output
    round to 16 bits).
  ops: how many roundings in `dtype` accumulate into one compared value along its
    path: for float32 the terms of every sum it goes through (a sum of n terms: n), for
    a 16-bit path its 16-bit roundings; block_ops counts a transformer block's.
  scale: the magnitude of the numbers involved, normally the largest |reference|;
    where the summed terms are larger than their sum (a result near zero), theirs.

  Why sqrt(ops): rounding errors of either sign add like a random walk, so n of them
  stay within about sqrt(n) * u of the magnitude with overwhelming probability
  (Higham & Mary, "A new approach to probabilistic rounding error analysis", 2019);
  layers add fresh errors and LayerNorm keeps carried ones from growing, so layers
  count like terms. The worst-case bound n * u assumes every error has the same sign,
  which real sums never approach; on MiniLM's 6 blocks it would pass errors of
  3e-3 * scale in float32 and 1.3 * scale in bfloat16, blind to bugs.
  The factor 2: each computation lies within sqrt(ops) * u * scale of the exact value.

  Measured on MiniLM (6 layers, widths 384 and 1536, max |output| 5.6): float32 under
  oneDNN's AVX2 and SSE4.1 blockings, and with sequential and reversed sums, is within
  8.6e-7 * scale of float64, a twentieth of the bound for 6 blocks (1.9e-5); its
  mixed_bfloat16 path is within 7.5e-3 * scale of float64 (pooled output 1.6e-2),
  a thirteenth (a seventh) of the bound for 6 blocks (0.10; 7 with the pooler, 0.11).
  A missing attention mask moves the outputs by 0.23 * scale (pooled output 0.63).

  Outside this model: weights after optimizer steps. Adam divides each gradient by its
  running magnitude (plus 1e-6), so the rounding noise of a gradient that is zero in
  exact arithmetic (the attention key bias: softmax ignores a constant added to every
  score) becomes an update of up to lr * 0.1 / 1e-6 times that noise. Such comparisons
  cannot take a bound from the arithmetic (see `adam_step`).
  """
  return 2.0 * math.sqrt(ops) * unit_roundoff(dtype) * scale


def adam_step(lr):
  """The largest first update AdamWeightDecay (beta_1 0.9, beta_2 0.999) gives a weight:
  lr * (1 - beta_1) / sqrt(1 - beta_2) = 3.16 * lr, whatever the gradient's size.

  The unit of comparisons after training. Two runs that differ only in rounding (another
  summation order: batch widths, replicas, workers, CPUs) do not stay within
  rounding_tolerance once Adam has stepped: a gradient that is zero in exact arithmetic
  is pure rounding noise n, which Adam turns into updates of about lr * 0.1 * n / 1e-6,
  and n depends on the summation order and on magnitudes inside the backward pass that
  no test controls; the weights' differences then feed every later gradient. No bound
  follows from the arithmetic, so such a test states its tolerance as a small fraction
  of adam_step(lr): far above that noise, far below what a real difference in training
  does (another batch, a padded or dropped token, a wrong mask change the gradients
  themselves, and with them updates of this size).
  """
  return lr * 0.1 / math.sqrt(0.001)


def block_ops(config, seq_length, dtype="float32"):
  """Roundings in `dtype` along one value's path through a transformer block of
  `config` (a BertConfig) on `seq_length` positions, for rounding_tolerance's ops.

  float32: the terms of its sums: query projection (H), attention scores (H / N),
  softmax and context (S each), output projection (H), LayerNorm's mean and variance
  (2H), intermediate (H) and output (I) projections, LayerNorm (2H). 16-bit (mixed
  precision, float32 sums): each of the six dense layers on the path rounds its input,
  its weights, its product and the bias sum (24), and the scores, probabilities,
  context and activation round once each (4).
  """
  if str(dtype) != "float32":
    return 28
  h = config.hidden_size
  return 7 * h + config.intermediate_size + 2 * seq_length + h // config.num_attention_heads


def assert_close(got, want, dtype, ops, scale=None, what="value"):
  """Asserts |got - want| <= rounding_tolerance(dtype, ops, scale) everywhere.

  scale defaults to max |want| (0 asks for equality); an array gives each value its
  own magnitude. The message gives the largest error, where it is and the bound. With
  $TOLERANCE_LOG set, appends
  "what, dtype, ops, error, bound" to that file (tests/cpu_matrix.sh reports the
  largest error / bound ratio per instruction set).
  """
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  assert got.shape == want.shape, (what, got.shape, want.shape)
  if scale is None:
    scale = float(np.abs(want).max(initial=0.0))
  bound = np.broadcast_to(rounding_tolerance(dtype, ops, np.asarray(scale, np.float64)),
                          want.shape)
  errors = np.abs(got - want)
  errors = np.where(np.isnan(errors), np.inf, errors)  # NaN in either one fails
  at = np.unravel_index(np.argmax(errors - bound), errors.shape) if errors.size else ()
  error, limit = (float(errors[at]), float(bound[at])) if errors.size else (0.0, 0.0)
  _log(what, dtype, ops, error, limit)
  if not error <= limit:
    raise AssertionError(
        f"{what}: |got - want| = {error:.3g} at {tuple(int(i) for i in at)} (got "
        f"{got[at]:.8g}, want {want[at]:.8g}) > {limit:.3g} = 2 * sqrt({ops}) * "
        f"u({dtype}) * {limit / rounding_tolerance(dtype, ops, 1.0):.3g}")


def _log(what, dtype, ops, error, bound):
  if os.environ.get("TOLERANCE_LOG"):
    with open(os.environ["TOLERANCE_LOG"], "a") as log:
      log.write(f"{what}\t{dtype}\t{ops}\t{error:.3g}\t{bound:.3g}\n")


def assert_same_numbers(got, want, dtype="float32", ops=1, scale=None, what="value", tol=None):
  """Asserts two parsed JSON values equal: same structure and strings, every number
  within rounding_tolerance(dtype, ops, scale) (reported as assert_close does).

  For files computed on different devices, replica counts or batch layouts, whose
  floats differ in the last digits (summation order), never in kind. scale defaults
  to the largest |number| in `want`; pass the logits' magnitude where a file also
  holds larger numbers that are exact (scores of texts, counts). tol: an absolute
  tolerance instead, for files outside the rounding model (after training).
  """
  numbers = []  # (where, got, want)
  _same_structure(got, want, what, numbers)
  if scale is None:
    scale = max((abs(w) for _, _, w in numbers), default=0.0)
  bound = rounding_tolerance(dtype, ops, scale) if tol is None else tol
  where, g, w = max(numbers, key=lambda n: abs(n[1] - n[2]), default=(what, 0, 0))
  _log(what, dtype if tol is None else "absolute", ops, abs(g - w), bound)
  assert abs(g - w) <= bound, (
      f"{where}: got {g!r}, want {w!r}, off by {abs(g - w):.3g} > {bound:.3g}"
      + ("" if tol is not None else f" = 2 * sqrt({ops}) * u({dtype}) * {scale:.3g}"))


def _same_structure(got, want, where, numbers):
  """Asserts equal structure and strings; appends the pairs of numbers to `numbers`."""
  if isinstance(want, dict):
    assert isinstance(got, dict) and got.keys() == want.keys(), where
    for key in want:
      _same_structure(got[key], want[key], f"{where}[{key!r}]", numbers)
  elif isinstance(want, list):
    assert isinstance(got, list) and len(got) == len(want), where
    for i, (g, w) in enumerate(zip(got, want)):
      _same_structure(g, w, f"{where}[{i}]", numbers)
  elif isinstance(want, (int, float)) and not isinstance(want, bool):
    assert isinstance(got, (int, float)) and not isinstance(got, bool), (where, got, want)
    numbers.append((where, got, want))
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
