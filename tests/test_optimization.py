"""The original's schedule and AdamWeightDecay, and LAMB, against hand computations."""

import keras
import numpy as np
import pytest

from helpers import assert_close
from modeling import optimization

# A learning rate in float32 against float64: a product and a quotient of float32
# numbers, relative to the peak rate.
RATE_OPS = 4


def original_learning_rate(step, init_lr, total, warmup):
  """The original create_optimizer's learning rate at global_step `step`."""
  decayed = init_lr * (1.0 - min(step, total) / total)
  if warmup and step < warmup:
    return init_lr * step / warmup
  return decayed


def test_schedule_is_the_originals_including_the_jump():
  schedule = optimization.WarmupLinearDecay(1e-4, num_train_steps=1000, num_warmup_steps=100)
  for step in (0, 1, 50, 99, 100, 101, 500, 999, 1000, 1500):
    assert_close(float(schedule(step)), original_learning_rate(step, 1e-4, 1000, 100), "float32",
                 RATE_OPS, 1e-4, what=f"step {step}")
  assert float(schedule(0)) == 0.0  # exact: 0 * anything
  assert_close(float(schedule(99)), 0.99e-4, "float32", RATE_OPS, 1e-4)
  assert_close(float(schedule(100)), 0.9e-4, "float32", RATE_OPS, 1e-4)  # the jump
  no_warmup = optimization.WarmupLinearDecay(1.0, 10, 0)
  assert float(no_warmup(0)) == 1.0 and float(no_warmup(5)) == 0.5  # exact: 1 - 5 / 10


def _variable(name, value):
  v = keras.Variable(np.array(value, "float32"), name=name)
  return v


def test_adam_weight_decay_one_step_by_hand():
  w = _variable("kernel", [[0.5, -1.0], [2.0, 0.25]])
  b = _variable("bias", [0.1, -0.2])
  names = {w.path: "bert/encoder/layer_0/output/dense/kernel",
           b.path: "bert/encoder/layer_0/output/dense/bias"}
  opt = optimization.AdamWeightDecay(0.1, names=names)
  gw = np.array([[0.2, -0.4], [0.0, 1.0]], "float32")
  gb = np.array([0.3, -0.1], "float32")
  w0, b0 = w.numpy().copy(), b.numpy().copy()
  for step in range(2):
    opt.apply_gradients([(gw, w), (gb, b)])

  def by_hand(w, g, decay, one_minus_b1, one_minus_b2):
    """No bias correction; decay on the kernel only (its name has no "bias")."""
    m, v = np.zeros_like(w, "float64"), np.zeros_like(w, "float64")
    for _ in range(2):
      m = (1 - one_minus_b1) * m + one_minus_b1 * g
      v = (1 - one_minus_b2) * v + one_minus_b2 * g ** 2
      w = w - 0.1 * (m / (np.sqrt(v) + 1e-6) + decay * w)
    return w
  # TensorFlow's Adam kernel forms 1 - beta in float32 from float32 betas ...
  kernel = float(1 - np.float32(0.9)), float(1 - np.float32(0.999))
  # float32 against float64: two steps of about 10 roundings each (moments, square root,
  # quotient, decay, learning rate).
  assert_close(w.numpy(), by_hand(w0, gw, 0.01, *kernel), "float32", 20)
  assert_close(b.numpy(), by_hand(b0, gb, 0.0, *kernel), "float32", 20)
  # ... which moves the weights from the original's float64 coefficients, not by
  # rounding: 1 - float32(0.999) is 1.3e-5 below 0.001, so 1 / sqrt(v) is 6.4e-6 larger,
  # and the two updates (lr 0.1 times m / sqrt(v) = 3.2, then 4.3) move by up to 5e-6.
  np.testing.assert_allclose(w.numpy(), by_hand(w0, gw, 0.01, 0.1, 0.001), rtol=0, atol=1e-5)
  np.testing.assert_allclose(b.numpy(), by_hand(b0, gb, 0.0, 0.1, 0.001), rtol=0, atol=1e-5)


def test_adam_weight_decay_in_a_graph_equals_eager_in_any_float_dtype():
  import tensorflow as tf
  for dtype in ("float32", "float64"):
    results = []
    for graph in (False, True):
      w = keras.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], dtype), name="kernel")
      opt = optimization.AdamWeightDecay(0.1, names={w.path: "bert/pooler/dense/kernel"})
      g = tf.constant([[0.2, -0.4], [0.0, 1.0]], dtype)
      apply = lambda: opt.apply_gradients([(g, w)])
      for _ in range(2):
        tf.function(apply)() if graph else apply()
      results.append(w.numpy())
    assert results[1].dtype == dtype
    # Exact: the same elementwise operations in the same order, traced or eager.
    np.testing.assert_array_equal(results[0], results[1])


def test_layer_norm_is_excluded_from_decay():
  g = _variable("gamma", [1.0, 1.0])
  opt = optimization.AdamWeightDecay(0.1, names={g.path: "bert/embeddings/LayerNorm/gamma"})
  opt.apply_gradients([(np.zeros(2, "float32"), g)])
  np.testing.assert_array_equal(g.numpy(), [1.0, 1.0])  # zero gradient, no decay
  d = _variable("kernel", [1.0, 1.0])
  opt2 = optimization.AdamWeightDecay(0.1, names={d.path: "bert/pooler/dense/kernel"})
  opt2.apply_gradients([(np.zeros(2, "float32"), d)])
  assert_close(d.numpy(), [0.999, 0.999], "float32", 4)  # 1 - 0.1 * 0.01 * 1 in float32


def test_the_originals_adam_test():
  """The original's optimization_test: minimise MSE to x from w, lr 0.2, 100 steps."""
  w = _variable("w", [0.1, -0.2, -0.1])
  x = np.array([0.4, 0.2, -0.5], "float32")
  opt = optimization.AdamWeightDecay(0.2, weight_decay_rate=0.0)
  import tensorflow as tf
  for _ in range(100):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(x - w.value))
    opt.apply_gradients([(tape.gradient(loss, w.value), w)])
  # Not rounding: 100 steps converge to within the original test's own 1e-2.
  np.testing.assert_allclose(w.numpy(), x, rtol=1e-2, atol=1e-2)


def test_lamb_step_by_hand():
  w = _variable("kernel", [[0.5, -1.0], [2.0, 0.25]])
  opt = optimization.AdamWeightDecay(0.1, names={w.path: "bert/pooler/dense/kernel"}, lamb=True)
  g = np.array([[0.2, -0.4], [0.0, 1.0]], "float32")
  w0 = w.numpy().copy()
  opt.apply_gradients([(g, w)])
  m, v = 0.1 * g, 0.001 * g ** 2
  update = (m / 0.1) / (np.sqrt(v / 0.001) + 1e-6) + 0.01 * w0
  ratio = np.linalg.norm(w0) / np.linalg.norm(update)
  # float32 against float64: one step of about 10 roundings and two norms of 4 squares.
  assert_close(w.numpy(), w0 - 0.1 * ratio * update, "float32", 20)


def test_create_optimizer_names_its_choices():
  with pytest.raises(ValueError, match="--optimizer=sgd: expected adamw or lamb"):
    optimization.create_optimizer("sgd", 1e-4, 10, 1)
  lamb = optimization.create_optimizer("lamb", 1e-4, 10, 2)
  adamw = optimization.create_optimizer("adamw", 1e-4, 10, 2, names={"x": "y"})
  assert (lamb.lamb, lamb.name, adamw.lamb, adamw.name) == (True, "lamb", False,
                                                            "adam_weight_decay")
  assert adamw.names == {"x": "y"} and adamw.weight_decay_rate == 0.01
  for opt in (lamb, adamw):  # the original's schedule, read at the optimizer's step
    for step, want in ((0, 0.0), (1, 0.5e-4), (2, 0.8e-4), (5, 0.5e-4), (10, 0.0)):
      opt.iterations.assign(step)
      assert_close(float(opt.learning_rate), want, "float32", RATE_OPS, 1e-4)
