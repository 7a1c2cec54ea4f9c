"""Tensor operations that several graph modules share."""

import tensorflow as tf


def swap_axes(x):
  """x [M, N] as [N, M], by a gather. tf.transpose would do, but a transpose of ints or
  bools makes TensorFlow's oneDNN graph rewriter log an error line once per process
  ("oneDNN supports DT_INT32 only on platforms with AVX-512", on CPUs that have it too)."""
  rows, columns = tf.shape(x)[0], tf.shape(x)[1]
  r = tf.range(rows * columns)
  return tf.reshape(tf.gather(tf.reshape(x, [-1]), r % rows * columns + r // rows),
                    [columns, rows])
