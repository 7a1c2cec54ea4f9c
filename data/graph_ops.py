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


def window_spans(lengths, max_pieces, doc_stride, empty_window=False):
  """data/windows.doc_spans in graph ops, for N sequences at once.

  lengths: int64 [N] pieces per sequence; max_pieces: int64 [N] or a scalar, the most
  pieces a window holds; doc_stride: pieces between window starts. Returns int64
  (sequence [F], begin [F], length [F]): each window's sequence, first piece within it and
  length, in order. An empty sequence gets no window, or one of length 0 with
  `empty_window`.
  """
  max_pieces = tf.broadcast_to(tf.cast(max_pieces, tf.int64), tf.shape(lengths, tf.int64))
  step = tf.minimum(max_pieces, doc_stride)
  count = tf.where(lengths <= max_pieces, tf.ones_like(lengths),
                   (lengths - max_pieces + step - 1) // step + 1)
  if not empty_window:
    count = tf.where(tf.equal(lengths, 0), tf.zeros_like(count), count)  # [N]
  sequence = tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), count)  # [F]
  begin = tf.ragged.range(count).flat_values * tf.gather(step, sequence)
  length = tf.minimum(tf.gather(lengths, sequence) - begin, tf.gather(max_pieces, sequence))
  return sequence, begin, length


def max_context_owner(first_piece, length, num_pieces):
  """data/windows.max_context_windows in graph ops, over pieces numbered 0..num_pieces-1.

  first_piece, length: int64 [F] each window's first piece and length. Returns int64
  (owner [num_pieces]: the window where each piece has the most context, the first best
  on ties; piece [E]: the piece at each position of each window, window after window).
  """
  num_windows = tf.size(length, out_type=tf.int64)
  window = tf.repeat(tf.range(num_windows), length)  # [E]
  offset = tf.ragged.range(length).flat_values  # [E] position in the window
  window_length = tf.gather(length, window)
  score = (tf.cast(tf.minimum(offset, window_length - 1 - offset), tf.float64)
           + 0.01 * tf.cast(window_length, tf.float64))
  piece = tf.gather(first_piece, window) + offset
  best = tf.math.unsorted_segment_max(score, piece, num_pieces)
  owner = tf.math.unsorted_segment_min(
      tf.where(score >= tf.gather(best, piece), window, num_windows), piece, num_pieces)
  return owner, piece
