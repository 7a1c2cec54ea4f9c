"""Keras layers of the BERT encoder: embeddings, self-attention, transformer block.

Shape letters: B batch, S sequence length, H hidden size, N attention heads,
D = H / N head size, I intermediate size.

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

# The original's additive attention bias for padded positions.
_MASK_BIAS = -10000.0

# Inference attention in blocks (blocked_attention): scores of one head for this many
# query-key pairs at most per block (4 MB in float32, within a CPU core's share of cache).
BLOCK_SCORES = 1 << 20


def get_activation(name):
  """Maps a config activation name to a function of a tensor.

  The function computes in float32 and returns the input's dtype: 16-bit
  transcendental functions are slow on CPUs and less accurate everywhere.
  """
  activations = {
      "gelu": lambda x: keras.activations.gelu(x, approximate=False),
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


class SelfAttention(keras.layers.Layer):
  """Multi-head scaled dot-product self-attention with an output projection.

  Only padded *key* positions are masked, by adding -10000 to their scores,
  exactly as the original does; padded query rows are computed as usual.
  """

  def __init__(self, hidden_size, num_attention_heads, initializer_range=0.02,
               attention_dropout_rate=0.1, **kwargs):
    kwargs["autocast"] = False  # the float32 bias must reach the softmax as is
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.initializer_range = initializer_range
    self.attention_dropout_rate = attention_dropout_rate
    self.head_size = hidden_size // num_attention_heads
    make = lambda name: dense(hidden_size, initializer_range, name, dtype=self.dtype_policy)
    self.query = make("query")
    self.key = make("key")
    self.value = make("value")
    self.output_dense = make("dense")
    self.dropout = float32_dropout(attention_dropout_rate)

  def build(self, input_shape):
    for layer in (self.query, self.key, self.value, self.output_dense):
      layer.build(input_shape)

  def call(self, x, attention_bias, training=False, queries=None, packed=None, blocked=False):
    """x [B, S, H], float32 bias [B, 1, 1 or Q, S] -> [B, Q, H] in compute dtype.

    queries: the rows [B, Q, H] whose outputs are wanted (default x itself,
    Q = S); keys and values always come from all of x.
    packed: a PackedTokens when x holds only the real tokens' rows [T, H].
      Keys and values are projected from those rows and put back in place for
      the attention (zeros at padding, which the bias masks); without
      `queries` the output is [T, H] too.
    blocked: at inference, attend in cache-sized blocks (blocked_attention).
    """
    packed_queries = packed is not None and queries is None
    heads = lambda t: _split_last(t, self.num_attention_heads, self.head_size)
    q = heads(self.query(x if queries is None else queries))  # [T or B, (Q,) N, D]
    k, v = heads(self.key(x)), heads(self.value(x))  # [T or B, (S,) N, D]
    if packed is not None:
      k, v = packed.pad(k), packed.pad(v)  # [B, S, N, D]
      q = packed.pad(q) if packed_queries else q
    scale = 1.0 / math.sqrt(self.head_size)
    if blocked and not training:
      context = blocked_attention(q, k, v, attention_bias, scale)
    else:
      scores = ops.einsum("bsnd,btnd->bnst", q, k)  # [B, N, Q, S]
      probs = ops.softmax(ops.cast(scores, "float32") * scale + attention_bias, axis=-1)
      probs = ops.cast(self.dropout(probs, training=training), self.compute_dtype)
      context = ops.einsum("bnst,btnd->bsnd", probs, v)  # [B, Q, N, D]
    if packed_queries:
      context = packed.pack(context)  # [T, N, D]
    return self.output_dense(_join_last(context, self.hidden_size))

  def get_config(self):
    return {**super().get_config(), "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "initializer_range": self.initializer_range,
            "attention_dropout_rate": self.attention_dropout_rate}


def _attend_per_head(q, k, v, bias, scale):
  """softmax(q k^T * scale + bias) v of q [B, Q, N, D], k and v [B, S, N, D] and float32 bias
  [B, 1, 1 or Q, S], as SelfAttention computes it (scores in float32), one head at a time:
  each head's scores [B, Q, S] are 1/N of all heads' and stay in cache from the product to
  the softmax to the second product. Returns [B, Q, N, D]."""
  q = tf.transpose(q, [2, 0, 1, 3])  # [N, B, Q, D]
  k = tf.transpose(k, [2, 0, 3, 1])  # [N, B, D, S]
  v = tf.transpose(v, [2, 0, 1, 3])  # [N, B, S, D]
  bias = bias[:, 0]  # [B, 1 or Q, S]
  out = []
  for n in range(q.shape[0]):
    scores = tf.cast(tf.matmul(q[n], k[n]), tf.float32) * scale + bias
    out.append(tf.matmul(tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype), v[n]))
  return tf.stack(out, axis=2)  # [B, Q, N, D]


def blocked_attention(q, k, v, bias, scale, block_scores=None):
  """SelfAttention's attention at inference, computed in blocks that fit a CPU's cache.

  Without XLA each op of attention makes a full pass over the scores [B, N, Q, S]: on 16
  windows of 384 tokens, 113 MB, five times per layer. Here each head of a block of
  examples is attended alone, with at most block_scores (default BLOCK_SCORES) query-key
  pairs per head, so its scores stay in cache from one op to the next
  (benchmarks/investigations/attention_blocks.py; docs/serving.md). The outputs are the
  batched product's up to float rounding. Dynamic shapes and a while loop: not for XLA or
  training.
  """
  block_scores = BLOCK_SCORES if block_scores is None else block_scores
  rows = tf.maximum(block_scores // (tf.shape(q)[1] * tf.shape(k)[1]), 1)  # examples per block
  blocks = (tf.shape(q)[0] + rows - 1) // rows

  def body(i, out):
    at = slice(i * rows, (i + 1) * rows)
    return i + 1, out.write(i, _attend_per_head(q[at], k[at], v[at], bias[at], scale))
  empty = tf.TensorArray(q.dtype, size=blocks, infer_shape=False,
                         element_shape=tf.TensorShape([None]).concatenate(q.shape[1:]))
  _, out = tf.while_loop(lambda i, _: i < blocks, body, [tf.constant(0), empty],
                         parallel_iterations=2)
  return out.concat()


def _split_last(t, *dims):
  """t [..., prod(dims)] -> [..., *dims]. Written with -1 for an unknown leading size where
  there is one, so the graph holds no shape arithmetic (the packed layout's [T, H])."""
  return ops.reshape(t, _leading(t, 1) + dims)


def _join_last(t, size):
  """t [..., a, b] -> [..., size] (size = a * b)."""
  return ops.reshape(t, _leading(t, 2) + (size,))


def _leading(t, trailing):
  """The shape of t without its last `trailing` axes, for a reshape: static sizes, with -1
  in place of at most one unknown one (several unknown: read at run time)."""
  shape = tuple(t.shape[:-trailing])
  if sum(d is None for d in shape) <= 1:
    return tuple(-1 if d is None else d for d in shape)
  return tuple(ops.shape(t)[:-trailing])


class TransformerBlock(keras.layers.Layer):
  """A post-LayerNorm transformer layer: attention, add & norm, MLP, add & norm."""

  def __init__(self, hidden_size, num_attention_heads, intermediate_size,
               hidden_act="gelu", initializer_range=0.02, dropout_rate=0.1,
               attention_dropout_rate=0.1, **kwargs):
    kwargs["autocast"] = False  # keep the float32 residual stream float32
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.dropout_rate = dropout_rate
    self.attention_dropout_rate = attention_dropout_rate
    self.attention = SelfAttention(
        hidden_size, num_attention_heads, initializer_range,
        attention_dropout_rate, name="attention", dtype=self.dtype_policy)
    self.attention_layer_norm = layer_norm("attention_LayerNorm")
    self.activation = get_activation(hidden_act)
    self.intermediate = dense(intermediate_size, initializer_range, "intermediate",
                              dtype=self.dtype_policy)
    self.output_dense = dense(hidden_size, initializer_range, "output", dtype=self.dtype_policy)
    self.output_layer_norm = layer_norm("output_LayerNorm")
    self.dropout = float32_dropout(dropout_rate)

  def build(self, input_shape):
    self.attention.build(input_shape)
    self.attention_layer_norm.build(input_shape)
    self.intermediate.build(input_shape)
    self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
    self.output_layer_norm.build(input_shape)

  def call(self, x, attention_bias, training=False, query_positions=None, packed=None,
           blocked=False):
    """float32 [B, S, H] and bias [B, 1, 1 or S, S] -> float32 [B, S, H].

    query_positions: int [B, Q]: compute only the outputs at these positions
    ([B, Q, H]), with the bias rows of those queries ([B, 1, 1 or Q, S]);
    every position still serves as key and value, so those rows are what the
    full layer gives them.
    packed: a PackedTokens when x holds only the real tokens' rows [T, H]; the
    output is then [T, H] (or [B, Q, H] with query_positions).
    blocked: at inference, attention in cache-sized blocks (blocked_attention).
    """
    if query_positions is None:
      queries = None
    else:
      padded = x if packed is None else packed.pad(x)
      queries = ops.take_along_axis(padded, query_positions[:, :, None], axis=1)  # [B, Q, H]
    attended = self.attention(x, attention_bias, training=training, queries=queries,
                              packed=packed, blocked=blocked)
    queries = x if queries is None else queries
    attended = self.dropout(ops.cast(attended, "float32"), training=training)
    x = self.attention_layer_norm(attended + queries)
    y = self.activation(self.intermediate(x))  # [B, S, I]
    y = self.dropout(ops.cast(self.output_dense(y), "float32"), training=training)  # [B, S, H]
    return self.output_layer_norm(y + x)

  def get_config(self):
    return {**super().get_config(), "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "initializer_range": self.initializer_range,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate}


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
  what computing the padding gives them, up to float rounding.
  """

  def __init__(self, input_mask):
    self.positions = tf.where(tf.not_equal(input_mask, 0))  # int64 [T, 2]: (row, position)
    self.shape = tf.shape(input_mask, out_type=tf.int64)  # [B, S]
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


def attention_bias_from_mask(input_mask, causal=False):
  """int/bool [B, S] mask (1 = real token) -> float32 additive bias [B, 1, 1, S].

  causal: query i also may not see keys after i; the bias is then [B, 1, S, S]
  (row i: the padding mask times "key <= i").
  """
  mask = ops.cast(input_mask, "float32")[:, None, None, :]  # [B, 1, 1, S]
  if causal:
    positions = tf.range(tf.shape(input_mask)[1])
    earlier = tf.cast(positions[None, :] <= positions[:, None], "float32")  # [S, S]: key <= query
    mask = mask * earlier[None, None]  # [B, 1, S, S]
  return (1.0 - mask) * _MASK_BIAS


def last_real_positions(input_mask):
  """int [B, S] mask -> int32 [B]: each row's last real position (0 for an all-padding row)."""
  mask = ops.cast(input_mask, "int32")
  positions = ops.arange(ops.shape(mask)[1], dtype="int32")
  return ops.max(mask * positions[None, :], axis=1)
