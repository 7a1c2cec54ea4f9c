"""data/graph_ops.py against NumPy."""

import numpy as np
import tensorflow as tf

from data import graph_ops


def test_swap_axes_is_the_transpose():
  """Ints, bools and floats, empty sides included, at shapes known and unknown when traced."""
  rng = np.random.default_rng(0)
  arrays = [rng.integers(-9, 9, (3, 5)).astype(np.int32), rng.random((4, 1)) < 0.5,
            rng.normal(size=(2, 7)), np.zeros((0, 3), np.int64), np.zeros((2, 0), np.float32)]
  for x in arrays:
    unknown = tf.function(graph_ops.swap_axes,
                          input_signature=[tf.TensorSpec([None, None], tf.as_dtype(x.dtype))])
    for got in (graph_ops.swap_axes(tf.constant(x)), unknown(tf.constant(x))):
      assert got.dtype == tf.as_dtype(x.dtype) and got.shape == x.T.shape
      np.testing.assert_array_equal(got.numpy(), x.T)
