"""Multi-head self-attention: the batched product, and the same in cache-sized blocks
for inference.

Shape letters: B batch, S key positions, Q query positions, H hidden size, N heads,
D = H / N head size, T real tokens of a packed batch (layers.PackedTokens).
"""

import math

import keras
import tensorflow as tf
from keras import ops

from modeling import layers

# The original's additive attention bias for padded positions.
_MASK_BIAS = -10000.0

# Inference attention in blocks (blocked_attention): scores of one head for this many
# query-key pairs at most per block (4 MB in float32, within a CPU core's share of cache).
BLOCK_SCORES = 1 << 20


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
    make = lambda name: layers.dense(hidden_size, initializer_range, name, dtype=self.dtype_policy)
    self.query = make("query")
    self.key = make("key")
    self.value = make("value")
    self.output_dense = make("dense")
    self.dropout = layers.float32_dropout(attention_dropout_rate)

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
      context = blocked_attention(q, k, v, attention_bias, scale,
                                  lengths=None if packed is None else packed.lengths,
                                  trim_queries=packed_queries)
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


def blocked_attention(q, k, v, bias, scale, block_scores=None, lengths=None,
                      trim_queries=False):
  """SelfAttention's attention at inference, computed in blocks that fit a CPU's cache.

  Without XLA each op of attention makes a full pass over the scores [B, N, Q, S]: on 16
  windows of 384 tokens, 113 MB, five times per layer. Here each head of a block of
  examples is attended alone, with at most block_scores (default BLOCK_SCORES) query-key
  pairs per head, so its scores stay in cache from one op to the next
  (benchmarks/investigations/attention_blocks.py; docs/serving.md).

  lengths: optional int [B], each row's length: its keys past it are padding (which the
  bias masks). Rows are then grouped by length and each block attends over its longest
  row's keys alone, so a short row in a long batch costs its own length, not the batch's
  (the windows of SQuAD contexts vary from a few dozen tokens to 384). trim_queries: the
  queries are the key positions themselves (Q = S, a packed batch's layout); queries past
  a block's longest row are then padding too, skipped (their outputs are zeros).

  The outputs are the batched product's up to float rounding, except, with trim_queries,
  at padded queries, which packed callers drop, and, with lengths, in rows of length 0
  (every key masked), which attend to key 0 alone where the batched product averages all
  values: the same only when the padded values are zeros, as in a packed batch. A batch of
  no rows gives no rows. Dynamic shapes and a while loop: not for XLA or training.
  """
  block_scores = BLOCK_SCORES if block_scores is None else block_scores
  batch, num_queries, num_keys = tf.shape(q)[0], tf.shape(q)[1], tf.shape(k)[1]
  if lengths is None:
    order, longest = None, tf.fill([batch], num_keys)
  else:  # shortest first; a block's longest row is its last
    longest = tf.clip_by_value(tf.cast(lengths, tf.int32), 1, num_keys)
    order = tf.argsort(longest, stable=True)
    longest = tf.gather(longest, order)

  def body(first, i, out):
    # As many rows as fit: a block ending at row e costs (rows) x (queries) x (keys) of e.
    keys = longest[first:]
    queries = keys if trim_queries else num_queries
    cost = (tf.range(1, batch - first + 1, dtype=tf.int64) * tf.cast(queries, tf.int64)
            * tf.cast(keys, tf.int64))
    rows = tf.maximum(tf.reduce_sum(tf.cast(cost <= block_scores, tf.int32)), 1)
    n = keys[rows - 1]
    m = n if trim_queries else num_queries
    if order is None:
      take = lambda t: t[first:first + rows]
    else:
      take = lambda t: tf.gather(t, order[first:first + rows])
    block = _attend_per_head(take(q)[:, :m], take(k)[:, :n], take(v)[:, :n],
                             take(bias)[:, :, :m, :n], scale)  # [rows, m, N, D]
    block = tf.pad(block, [[0, 0], [0, num_queries - m], [0, 0], [0, 0]])
    return first + rows, i + 1, out.write(i, block)
  empty = tf.TensorArray(q.dtype, size=0, dynamic_size=True, infer_shape=False,
                         element_shape=tf.TensorShape([None]).concatenate(q.shape[1:]))
  _, _, out = tf.while_loop(lambda first, *_: first < batch, body,
                            [tf.constant(0), tf.constant(0), empty], parallel_iterations=2)
  # An empty batch writes no block, and an empty TensorArray cannot be concatenated.
  out = tf.cond(batch > 0, out.concat, lambda: tf.zeros_like(q))
  return out if order is None else tf.gather(out, tf.math.invert_permutation(order))


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
