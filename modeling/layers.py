"""The encoder's building blocks: activations, initializer, LayerNorm, dropout and dense
layers as the original sets them up, the embeddings, the bidirectional LSTM helpers,
and the packing of a batch's real tokens. Attention is in modeling/attention.py, the
transformer block and encoder in modeling/encoder.py.

Shape letters: B batch, S sequence length, H hidden size, T real tokens.

Mixed precision: matrix products run in the layer's compute dtype; softmax,
dropout, LayerNorm and the residual sums that feed LayerNorm run in float32,
and each block hands float32 to the next.
"""

import math

import keras
import tensorflow as tf
from keras import ops

from modeling import lstm
from modeling.config import LAYER_NORM_EPSILON


def _gelu(x):
  """The exact GELU, x * Phi(x), written as the original's first release wrote it:
  x * 0.5 * (1 + erf(x / sqrt(2))). Keras' gelu computes the same through erfc, which
  takes twice as long on CPUs (one GELU of [4096, 1536]: 19 ms against 10)."""
  return x * (0.5 * (1.0 + tf.math.erf(x / math.sqrt(2.0))))


def get_activation(name):
  """Maps a config activation name to a function of a tensor.

  The function computes in float32 and returns the input's dtype: 16-bit
  transcendental functions are slow on CPUs and less accurate everywhere.
  """
  activations = {
      "gelu": _gelu,
      "gelu_tanh": lambda x: keras.activations.gelu(x, approximate=True),
      "relu": keras.activations.relu,
      "tanh": keras.activations.tanh,
      "linear": lambda x: x,
  }
  if name not in activations:
    raise ValueError(f"Unknown activation {name!r}; expected one of {', '.join(activations)}.")
  fn = activations[name]
  return lambda x: ops.cast(fn(ops.cast(x, "float32")), x.dtype)


def initializer(stddev):
  """The original's weight initializer: truncated normal with `stddev`."""
  return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(name):
  """A LayerNorm that computes and returns float32 whatever the policy."""
  return keras.layers.LayerNormalization(
      epsilon=LAYER_NORM_EPSILON, name=name, dtype="float32")


def float32_dropout(rate):
  """Dropout computing in float32 whatever the policy (the model casts 16-bit values
  first). Keras' 16-bit dropout draws 16-bit uniforms, which drop 10.16% of values
  for a rate of 0.1, and scales by 1 / 0.9 rounded to 16 bits."""
  return keras.layers.Dropout(rate, dtype="float32")


def dense(units, initializer_range, name, dtype=None):
  """A Dense layer with the original's initializers (kernel [in, out])."""
  return keras.layers.Dense(
      units, name=name, dtype=dtype,
      kernel_initializer=initializer(initializer_range), bias_initializer="zeros")


class BertEmbeddings(keras.layers.Layer):
  """Word + token type + absolute position embeddings, then LayerNorm and dropout."""

  def __init__(self, vocab_size, hidden_size, max_position_embeddings,
               type_vocab_size, initializer_range=0.02, dropout_rate=0.1, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    self.dropout_rate = dropout_rate
    self.layer_norm = layer_norm("LayerNorm")
    self.dropout = float32_dropout(dropout_rate)

  def build(self, input_shape):
    def table(name, rows):
      return self.add_weight(name=name, shape=(rows, self.hidden_size),
                             initializer=initializer(self.initializer_range))
    self.word_embeddings = table("word_embeddings", self.vocab_size)
    self.token_type_embeddings = table("token_type_embeddings", self.type_vocab_size)
    self.position_embeddings = table("position_embeddings", self.max_position_embeddings)
    self.layer_norm.build(tuple(input_shape) + (self.hidden_size,))

  def call(self, input_ids, segment_ids, training=False, position_ids=None):
    """int [B, S] ids and segment ids -> float32 [B, S, H].

    With position_ids (int [T]), the ids are [T] tokens at those positions
    (the real tokens of a batch, see PackedTokens) and the output is [T, H].
    """
    if position_ids is None:
      positions = self.position_embeddings[None, :ops.shape(input_ids)[1]]
    else:
      positions = ops.take(self.position_embeddings, position_ids, axis=0)
    x = (ops.take(self.word_embeddings, input_ids, axis=0)
         + ops.take(self.token_type_embeddings, segment_ids, axis=0)
         + positions)
    x = self.layer_norm(ops.cast(x, "float32"))
    return self.dropout(x, training=training)

  def get_config(self):
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "dropout_rate": self.dropout_rate}


def bidirectional_lstm(units, name):
  """A bidirectional LSTM computing in float32: [B, S, D] and a bool mask [B, S] ->
  float32 [B, S, 2 * units], the forward and backward outputs side by side.

  Masked (padded) steps are skipped: each direction's state passes over them
  unchanged, so real positions get what the unpadded sequence gives them.
  Keras' LSTM variables and gate order (see modeling/lstm.py).
  """
  return lstm.BidirectionalLSTM(units, name=name)


def lstm_mask(input_mask):
  """int/bool [B, S] mask -> bool [B, S] for bidirectional_lstm: the mask, with position 0
  counted as real in rows that have no real token.

  cuDNN's LSTM kernel (used by Keras on a GPU outside XLA) fails on a sequence
  of length 0, and prediction files are padded with all-padding rows; their
  outputs are discarded (and zeroed by the callers), and the other rows are
  untouched.
  """
  mask = ops.cast(input_mask, "bool")
  empty = ops.logical_not(ops.any(mask, axis=1, keepdims=True))  # [B, 1]
  first = ops.arange(ops.shape(mask)[1])[None, :] == 0  # [1, S]
  return ops.logical_or(mask, ops.logical_and(empty, first))


def bidirectional_lstm_variables(prefix, bilstm):
  """{`prefix`/fw|bw/kernel|recurrent_kernel|bias: variable} of a bidirectional_lstm."""
  return {f"{prefix}/{direction}/{var}": variable
          for direction, named in bilstm.weights_by_direction.items()
          for var, variable in named.items()}


class PackedTokens:
  """The real tokens of a padded batch, for running dense layers on them alone.

  Every dense layer, LayerNorm and dropout of the encoder works row by row,
  and padded rows never reach a real one (attention masks them as keys), so
  the encoder can carry only the T real rows between layers ([T, H], batch
  after batch, in position order) and put them back in place ([B, S, H],
  zeros at padding) where attention needs the batch layout. On short
  sentences in long batches that skips most of the work; real positions get
  what computing the padding gives them, up to float rounding. `lengths` gives
  each row's last real position + 1, where attention in blocks stops.
  """

  def __init__(self, input_mask):
    real = tf.not_equal(input_mask, 0)
    self.positions = tf.where(real)  # int64 [T, 2]: (row, position)
    self.shape = tf.shape(input_mask, out_type=tf.int64)  # [B, S]
    self.lengths = tf.reduce_max(  # int32 [B]: past a row's last real position, only padding
        tf.where(real, tf.range(1, tf.shape(input_mask)[1] + 1)[None, :], 0), axis=1)
    self._padded_shapes = {}  # trailing sizes -> [B, S, ...], made once per call

  def pack(self, padded):
    """[B, S, ...] -> the real tokens' rows [T, ...]."""
    return tf.gather_nd(padded, self.positions)

  def pad(self, rows):
    """[T, ...] -> [B, S, ...] with zeros at padding."""
    trailing = tuple(rows.shape[1:])
    if None in trailing:
      return tf.scatter_nd(self.positions, rows,
                           tf.concat([self.shape, tf.shape(rows, out_type=tf.int64)[1:]], 0))
    if trailing not in self._padded_shapes:
      self._padded_shapes[trailing] = tf.concat(
          [self.shape, tf.constant(trailing, tf.int64)], 0)
    return tf.scatter_nd(self.positions, rows, self._padded_shapes[trailing])


def last_real_positions(input_mask):
  """int [B, S] mask -> int32 [B]: each row's last real position (0 for an all-padding row)."""
  mask = ops.cast(input_mask, "int32")
  positions = ops.arange(ops.shape(mask)[1], dtype="int32")
  return ops.max(mask * positions[None, :], axis=1)
