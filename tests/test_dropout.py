"""layers.Dropout: masks from 16 random bits per value, their rate, scaling, independence
and gradient; and attention's dropout, whose 1 / (1 - rate) is folded into the values."""

import numpy as np
import pytest
import tensorflow as tf

from modeling import attention, layers
from modeling.encoder import TokenRows

RATE = 0.1
P = 6554 / 65536  # the rate applied: round(0.1 * 65536) / 65536
SCALE = 65536 / (65536 - 6554)


def _dropout(seed=None):
  return layers.Dropout(RATE, seed=seed, dtype="float32")


def test_rate_scale_and_expectation():
  """Dropped values are 0, kept ones x * 65536 / 58982 to float32's rounding, the drop
  rate is 6554 / 65536 and the output's mean is the input's."""
  x = tf.ones([2000, 1001])  # an odd count: the last 32-bit word serves one value
  out = _dropout(seed=1)(x, training=True).numpy()
  dropped = out == 0
  assert np.all((out == 0) | (out == np.float32(SCALE)))
  n = out.size
  # Sampling: n draws, standard deviation sqrt(P (1 - P) / n) = 2.1e-4; 5 of them.
  assert abs(dropped.mean() - P) < 5 * np.sqrt(P * (1 - P) / n)
  # The mean of n values, each 0 or SCALE: standard deviation SCALE * sqrt(P (1 - P) / n).
  assert abs(out.mean() - 1.0) < 5 * SCALE * np.sqrt(P * (1 - P) / n)


@pytest.mark.parametrize("offset", [0, 1])
def test_neighbouring_values_are_independent(offset):
  """The two halves of one 32-bit word (offset 0) and the last half of one word with the
  first of the next (offset 1) are dropped together as often as independent draws are,
  P^2 of pairs (with P = 0.1, a shared bit pattern would make it up to 0.1)."""
  out = _dropout(seed=2)(tf.ones([4_000_000]), training=True).numpy()
  dropped = out[offset:][:(out.size - offset) // 2 * 2].reshape(-1, 2) == 0
  both = np.mean(dropped[:, 0] & dropped[:, 1])
  pairs = dropped.shape[0]
  # Sampling: standard deviation sqrt(P^2 (1 - P^2) / pairs) = 7e-5; 5 of them.
  assert abs(both - P * P) < 5 * np.sqrt(P * P * (1 - P * P) / pairs)


def test_masks_follow_the_seed_and_change_every_call():
  x = tf.ones([64, 64])
  a, b = _dropout(seed=3), _dropout(seed=3)
  first = a(x, training=True).numpy()
  np.testing.assert_array_equal(first, b(x, training=True).numpy())
  assert np.any(first != a(x, training=True).numpy())
  np.testing.assert_array_equal(a(x, training=False).numpy(), x.numpy())


def test_gradient_is_the_mask_times_the_scale():
  x = tf.random.stateless_normal([300, 301], seed=[4, 5])
  layer = _dropout(seed=6)
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = layer(x, training=True)
  grad = tape.gradient(out, x).numpy()
  kept = out.numpy() != 0
  np.testing.assert_array_equal(grad, np.where(kept, np.float32(SCALE), 0.0))


def test_zero_out_keeps_16_bit_values_exactly():
  """Attention's dropout: dropped probabilities are 0, the others unchanged bit for bit
  in the compute dtype (no 16-bit scale)."""
  x = tf.cast(tf.random.stateless_uniform([500, 500], seed=[7, 8]) + 0.5, tf.bfloat16)
  out = _dropout(seed=9).zero_out(x, training=True)
  assert out.dtype == tf.bfloat16
  out, x = out.numpy().astype(np.float32), x.numpy().astype(np.float32)
  assert np.all((out == 0) | (out == x))
  assert abs((out == 0).mean() - P) < 5 * np.sqrt(P * (1 - P) / out.size)


def test_attention_dropout_is_unbiased():
  """With dropout's scale folded into the values, attention's training output averages to
  its inference output over masks (without the fold it would be 10% short)."""
  layer = attention.SelfAttention(8, 2, attention_dropout_rate=RATE, name="attention")
  layer.build((None, 8))
  mask = tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
  rows = TokenRows(mask, packed=False)
  x = tf.random.stateless_normal([10, 8], seed=[10, 11])
  bias = attention.attention_bias_from_mask(mask)
  want = layer(x, bias, rows=rows).numpy()
  draws = tf.function(lambda: tf.stack([layer(x, bias, rows=rows, training=True)
                                        for _ in range(50)]))
  samples = np.concatenate([draws().numpy() for _ in range(40)])  # 2,000 masks
  mean, spread = samples.mean(0), samples.std(0) / np.sqrt(len(samples))
  # Each output's mean over 2,000 draws against the exact value, 5 standard errors.
  assert np.all(np.abs(mean - want) < 5 * spread + 1e-6), np.abs(mean - want) / spread
