"""Multi-head self-attention: the batched product, and the same in cache-sized blocks
for inference.

Shape letters: B batch, S key positions, Q query positions, H hidden size, N heads,
D = H / N head size, R rows of the dense layers (encoder.TokenRows: B * S, or the T real
tokens of a packed batch).
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


# attend: attention at inference over at most this many scores runs in TensorFlow's own
# kernels rather than oneDNN's.
FEW_SCORES = 1 << 14

# attention.transpose's view is for tensors of at most this many values where their size is
# known when traced; larger ones move faster in oneDNN's kernel (bfloat16 the most).
VIEW_TRANSPOSE_SIZE = 1 << 18


def transpose(x, perm, shape, view=True):
  """tf.transpose(x, perm), for a perm that keeps the last axis last; with `view`, in
  TensorFlow's own kernel. shape: x's shape, an int tensor the caller has (no shape read).

  On CPUs the scripts' oneDNN setting puts oneDNN's transpose in tf.transpose's place,
  which sets up a reorder at every call: 35-85 us on one request's attention heads, most of
  it that setup. The same bytes viewed as float64 (a type oneDNN leaves to TensorFlow) move
  in 5-20 us; on large bfloat16 batches TensorFlow's kernel is the slower one, up to 1.6x
  (benchmarks/investigations/transposes.py; docs/serving.md), so an x of a size known when
  traced takes the view only up to VIEW_TRANSPOSE_SIZE values. Exact, gradient included.
  tf.transpose itself without `view`, for rows whose bytes are not a multiple of 8, and on
  TPUs.
  """
  width = x.shape[-1]
  group = 8 // x.dtype.size if x.dtype.is_floating and x.dtype.size < 8 else 0
  if x.shape.is_fully_defined():
    view = view and x.shape.num_elements() <= VIEW_TRANSPOSE_SIZE
  if (not view or not group or width is None or width % group or perm[-1] != len(perm) - 1
      or isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)):
    return tf.transpose(x, perm)
  words = tf.constant([1] * (len(perm) - 1) + [group], shape.dtype)  # [..., width / group]
  inverse = [perm.index(i) for i in range(len(perm))]

  def moved(t, t_shape, order):
    as_words = tf.reshape(tf.bitcast(tf.reshape(t, [-1, group]), tf.float64), t_shape // words)
    out = tf.reshape(tf.bitcast(tf.transpose(as_words, order), t.dtype),
                     tf.gather(t_shape, order))
    out.set_shape([t.shape[i] for i in order])
    return out

  @tf.custom_gradient
  def run(t):  # a bitcast has no gradient; a transpose's is the inverse transpose
    return moved(t, shape, perm), layers.backward_scoped(
        lambda dy: moved(dy, tf.gather(shape, perm), inverse))
  return run(x)


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

  The query, key and value projections run as one matrix product. In training
  1 / sqrt(D) is folded into the query's weights and dropout's 1 / (1 - rate) into
  the value's (dropout then only zeroes probabilities), so that neither factor costs a
  pass over the [B, N, Q, S] scores, forward or backward. At inference the scores are
  q k^T * (1 / sqrt(D)) + bias, a form TensorFlow's remapper turns into one oneDNN
  product with the scale and the mask's add as post-ops (benchmarks/investigations/
  attention_scale.py: a pass over the scores fewer, 0.5-0.7 ms a layer on 32 x 128);
  attention in blocks scales q instead (blocked_attention), and a single request's few
  scores skip oneDNN (attend).
  Scores, softmax and probabilities are in the compute dtype (the softmax sums in
  float32 inside its kernel, and TensorFlow's 16-bit sums accumulate in float32); each
  weight is cast to it once per call.
  """

  def __init__(self, hidden_size, num_attention_heads, initializer_range=0.02,
               attention_dropout_rate=0.1, **kwargs):
    kwargs["autocast"] = False  # the weights are cast once, after the folds above
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
    self.dropout = layers.Dropout(attention_dropout_rate)
    self.joined_kernel = self.joined_bias = None  # store_joined_weights (serving)

  def build(self, input_shape):
    for layer in (self.query, self.key, self.value, self.output_dense):
      layer.build((None, self.hidden_size))

  def call(self, x, attention_bias, rows, training=False, queries=None, blocked=False):
    """Rows x [R, H] (float32 or the compute dtype) and bias [B, 1, 1 or Q, S] in the
    compute dtype -> rows [R, H] in the compute dtype.

    rows: the encoder.TokenRows that puts x's rows in [B, S] place.
    queries: [B, Q, H], the rows whose outputs are wanted (default: x itself, Q = S);
      keys and values always come from all of x. The output is then [B * Q, H].
    blocked: at inference, attend in cache-sized blocks (blocked_attention).
    """
    n, d, h = self.num_attention_heads, self.head_size, self.hidden_size
    own_queries = queries is None
    kernel, bias = self._joined_weights(training)  # [H, 3H], [3H]: query, key, value
    if not own_queries:  # keys and values only
      kernel, bias = kernel[:, h:], bias[h:]
    count = kernel.shape[1] // h
    projected = self._product(x, kernel, bias, training)
    projected = tf.reshape(projected, [-1, count, n, d])  # [R, P, N, D]
    # One request or a small batch at inference: the transposes in TensorFlow's kernel.
    view = not (training or blocked)
    heads = tf.unstack(transpose(rows.pad(projected), [2, 0, 3, 1, 4],
                                 rows.padded_shape((count, n, d)), view))  # P x [B, N, S, D]
    if own_queries:
      q, k, v = heads
    else:
      k, v = heads
      kernel, bias = self._joined_weights(training)
      q = self._product(tf.reshape(queries, [-1, h]), kernel[:, :h], bias[:h], training)
      q_shape = tf.concat([tf.shape(queries)[:2], [n, d]], 0)
      q = transpose(tf.reshape(q, q_shape), [0, 2, 1, 3], q_shape, view)  # [B, N, Q, D]
    scale = 1.0 / math.sqrt(d)  # at inference; training folds it into the query's weights
    if training:
      probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) + attention_bias, axis=-1)
      context = tf.matmul(self.dropout.zero_out(probs, training=True), v)  # [B, N, Q, D]
    elif blocked:
      context = _called_apart(blocked_attention)(
          q, k, v, attention_bias, lengths=rows.lengths,
          trim_queries=own_queries and rows.packed, scale=scale)
    else:
      context = attend(q, k, v, attention_bias, scale, rows.pairs)  # Q <= S
    # [B, Q, N, D] (the perm is its own inverse: context's shape is that of its output).
    context = transpose(context, [0, 2, 1, 3], tf.gather(
        rows.padded_shape((n, d)) if own_queries else q_shape, [0, 2, 1, 3]), view)
    if own_queries:
      context = tf.reshape(rows.pack(context), [-1, self.hidden_size])  # [R, H]
    else:
      context = tf.reshape(context, [-1, self.hidden_size])  # [B * Q, H]
    return self.output_dense(context, training=training)

  def _joined_weights(self, training):
    """The query, key and value kernels side by side [H, 3H] and biases [3H], in training
    the query's times 1 / sqrt(D) and, with dropout, the value's times dropout's
    1 / (1 - rate), in the compute dtype: joined from the stored weights at each call
    (each weight cast once), or, at inference, the copy store_joined_weights kept."""
    if not training:
      if self.joined_kernel is not None:
        return self.joined_kernel, self.joined_bias
      kernel, bias = self._joined()
    else:
      kernel, bias = self._joined(1.0 / math.sqrt(self.head_size), layers.keep_scale(
          self.attention_dropout_rate) if self.attention_dropout_rate > 0 else 1.0)
    return tf.cast(kernel, self.compute_dtype), tf.cast(bias, self.compute_dtype)

  def _joined(self, queries=1.0, values=1.0):
    """The joined kernel and bias in the variables' dtype (the queries' times `queries`,
    the values' times `values`)."""
    factors = ((self.query, queries), (self.key, 1.0), (self.value, values))
    scaled = lambda w, f: w if f == 1.0 else w * f
    kernel = tf.concat([scaled(dense.kernel, f) for dense, f in factors], axis=1)
    bias = tf.concat([scaled(dense.bias, f) for dense, f in factors], axis=0)
    return kernel, bias

  def store_joined_weights(self, source=None):
    """For serving: keeps the inference weights of _joined_weights, joined from `source`'s
    weights (a SelfAttention of this shape whose variables are float32, as training keeps
    them; default this layer) and rounded once to the compute dtype, as variables, so
    that inference neither joins nor casts them per call. Training ignores them."""
    kernel, bias = (source or self)._joined()
    kernel, bias = tf.cast(kernel, self.compute_dtype), tf.cast(bias, self.compute_dtype)
    if self.joined_kernel is not None:  # a later call: new values
      self.joined_kernel.assign(kernel)
      self.joined_bias.assign(bias)
      return
    # TensorFlow variables: a built Keras layer takes no new Keras state.
    self.joined_kernel = tf.Variable(kernel, trainable=False, name="joined_kernel")
    self.joined_bias = tf.Variable(bias, trainable=False, name="joined_bias")

  def _product(self, x, kernel, bias, training):
    """x [R, H] times kernel plus bias, in the compute dtype: [R, kernel's columns]."""
    return layers.bias_add(tf.matmul(tf.cast(x, self.compute_dtype), kernel), bias, training)

  def get_config(self):
    return {**super().get_config(), "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "initializer_range": self.initializer_range,
            "attention_dropout_rate": self.attention_dropout_rate}


def attend(q, k, v, bias, scale, pairs=None):
  """softmax(q k^T * scale + bias) v at inference: q [B, N, Q, D], k and v [B, N, S, D],
  bias [B, 1, 1 or Q, S] and the output [B, N, Q, D] in q's dtype; scale a Python float;
  pairs: optional int64 B x Q x S (or a bound on it) where the caller has it, else read
  from q's and k's shapes.

  Most inputs take the batched products and softmax, which TensorFlow's oneDNN rewriter
  turns into oneDNN kernels (the first product with the scale and bias as post-ops). Each
  of those hands its work to the thread pool at every call, which at a single request's
  size costs more than the arithmetic (the same 16-token softmax took 15 to 55 us in
  oneDNN's verbose log). Inputs of at most FEW_SCORES scores (B x N x Q x S; with 12 heads a
  request of up to 32 tokens as the exports pad it, or five rows of 16) take TensorFlow's own
  kernels instead, in float32: the products in BatchMatMulV3, which the rewriter leaves
  alone, the softmax written out.
  MiniLM served at 1 x 16 to 1 x 36 tokens: 3-19% faster than with oneDNN's kernels; from
  1 x 40, and for batches of several rows at 12,288 scores, oneDNN's were as fast or faster
  (benchmarks/investigations/few_scores.py). Chosen when traced where the sizes are known,
  else at run time (a tf.cond, a few microseconds).
  """
  def batched():
    scores = tf.matmul(q, k, transpose_b=True) * tf.constant(scale, q.dtype)
    probs = tf.nn.softmax(scores + bias, axis=-1)
    return tf.matmul(probs, v)

  def few():
    f32 = lambda t: tf.cast(t, tf.float32)
    scores = tf.raw_ops.BatchMatMulV3(x=f32(q), y=f32(k), Tout=tf.float32, adj_y=True)
    scores = scores * scale + f32(bias)
    exp = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
    probs = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
    return tf.cast(tf.raw_ops.BatchMatMulV3(x=probs, y=f32(v), Tout=tf.float32), q.dtype)
  if q.shape[:3].is_fully_defined() and k.shape[2] is not None:  # known when traced
    return few() if q.shape[:3].num_elements() * k.shape[2] <= FEW_SCORES else batched()
  if pairs is None:
    pairs = tf.reduce_prod(tf.gather(tf.shape(q, out_type=tf.int64), [0, 2])) * tf.shape(
        k, out_type=tf.int64)[2]
  heads = q.shape[1] if q.shape[1] is not None else tf.shape(q, out_type=tf.int64)[1]
  return tf.cond(pairs * heads <= FEW_SCORES, few, batched)


def _called_apart(fn):
  """fn, inside a traced function, as a function of its own that the graph calls rather than
  inlines. The exports choose at run time between the model as is and the packed model that
  attends in blocks (export.served_outputs, a tf.cond); TensorFlow lowers the choice to
  Switch and Merge, and every node of the branch not taken still passes the dead signal on.
  Blocked attention's while loops are most of the packed branch's nodes; as call nodes,
  single requests, which never take that branch, run faster and packed batches as fast
  (docs/serving.md#one-request-at-a-time). The whole branch apart would lose more than it
  saves: in a function of its own TensorFlow no longer sees the variables' shapes or their
  values as constant (no fused LayerNorm, no converted oneDNN weights)."""
  if not tf.inside_function():
    return fn
  return tf.function(fn, experimental_attributes={"_noinline": True})


def _attend_per_head(q, k, v, bias):
  """softmax(q k^T + bias) v of q [B, N, Q, D], k and v [B, N, S, D] and bias
  [B, 1, 1 or Q, S] (q already scaled), scores in float32, one head at a time: each
  head's scores [B, Q, S] are 1/N of all heads' and stay in cache from the product to
  the softmax to the second product. Returns [B, N, Q, D]."""
  bias = tf.cast(bias[:, 0], tf.float32)  # [B, 1 or Q, S]
  out = []
  for h in range(q.shape[1]):
    scores = tf.cast(tf.matmul(q[:, h], k[:, h], transpose_b=True), tf.float32) + bias
    out.append(tf.matmul(tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype), v[:, h]))
  return tf.stack(out, axis=1)  # [B, N, Q, D]


def blocked_attention(q, k, v, bias, block_scores=None, lengths=None, trim_queries=False,
                      scale=None):
  """SelfAttention's attention at inference, computed in blocks that fit a CPU's cache.

  q [B, N, Q, D], k and v [B, N, S, D], bias [B, 1, 1 or Q, S], scale: the scores'
  factor, applied to q (default 1: q already scaled; the per-head products with the scale
  and the bias as post-ops were slower on padded bfloat16 batches); returns [B, N, Q, D].

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
  if scale is not None:  # on q: a pass over [B, N, Q, D], not over each block's scores
    q = q * tf.cast(scale, q.dtype)
  batch, num_queries, num_keys = tf.shape(q)[0], tf.shape(q)[2], tf.shape(k)[2]
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
    block = _attend_per_head(take(q)[:, :, :m], take(k)[:, :, :n], take(v)[:, :, :n],
                             take(bias)[:, :, :m, :n])  # [rows, N, m, D]
    block = tf.pad(block, [[0, 0], [0, 0], [0, num_queries - m], [0, 0]])
    return first + rows, i + 1, out.write(i, block)
  empty = tf.TensorArray(q.dtype, size=0, dynamic_size=True, infer_shape=False,
                         element_shape=tf.TensorShape([None]).concatenate(q.shape[1:]))
  _, _, out = tf.while_loop(lambda first, *_: first < batch, body,
                            [tf.constant(0), tf.constant(0), empty], parallel_iterations=2)
  # An empty batch writes no block, and an empty TensorArray cannot be concatenated.
  out = tf.cond(batch > 0, out.concat, lambda: tf.zeros_like(q))
  return out if order is None else tf.gather(out, tf.math.invert_permutation(order))
