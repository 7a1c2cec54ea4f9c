"""The encoder's building blocks: activations, initializer, LayerNorm, dropout and dense
layers as the original sets them up, and the embeddings. Attention is in
modeling/attention.py; the transformer block, the encoder and the rows its dense layers
run on (TokenRows) in modeling/encoder.py.

Shape letters: B batch, S sequence length, H hidden size, R rows (B * S or T real tokens).

Mixed precision: matrix products run in the layer's compute dtype; LayerNorm, the
dropout of the residual stream and the residual sums that feed LayerNorm run in
float32, and each block hands float32 to the next. LayerNorm, GELU and dropout
have hand-written gradients: TensorFlow runs every elementwise op as its own pass
over memory, and these take fewer passes than autodiff of their forward ops.
"""

import math

import keras
import tensorflow as tf
from keras import ops

from modeling.config import LAYER_NORM_EPSILON


_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu(x):
  """The exact GELU, x * Phi(x) = x * 0.5 * (1 + erf(x / sqrt(2))): the form of the code
  released with Google's checkpoints (the original's later code uses gelu_tanh's).

  Written as one expression in x's dtype, the form TensorFlow's graph rewriter
  (grappler's remapper, with oneDNN) folds into the matrix product before it, bias
  and GELU computed on the product's float32 accumulator and rounded once; unfused
  (another device, an input that is not a product's), a 16-bit x computes in 16 bits.
  Keras' gelu computes the same through erfc, twice as slow on CPUs."""
  return 0.5 * x * (1.0 + tf.math.erf(x * _SQRT_HALF))


@tf.custom_gradient
def _gelu_for_training(x):
  """_gelu computed in float32 whatever x's dtype, and its slope
  d/dx x Phi(x) = Phi(x) + x phi(x) with it, kept in x's dtype for the gradient, which is
  then one multiply. Autodiff of the expression takes three times as many passes over the
  [tokens, intermediate] activations, the largest of a layer."""
  if x.dtype in (tf.bfloat16, tf.float16) and x.shape.rank and x.shape[-1] is not None:
    y, slope = _gelu_and_slope_compiled(x)
  else:
    y, slope = _gelu_and_slope(x)
  return y, backward_scoped(lambda dy: dy * slope)


def _gelu_and_slope(x):
  """(GELU of x, its slope), computed in float32, both in x's dtype."""
  xf = tf.cast(x, tf.float32)
  cdf = 0.5 + 0.5 * tf.math.erf(xf * _SQRT_HALF)
  slope = cdf + xf * tf.exp(tf.square(xf) * -0.5) * _INV_SQRT_2PI
  return tf.cast(xf * cdf, x.dtype), tf.cast(slope, x.dtype)


# A 16-bit x's GELU and slope in training run as one XLA program: its casts, erf and exp in
# one pass, where TensorFlow's kernels make a dozen, half the time at a BERT layer's size
# (float32, which has no casts, was slower that way on CPUs: docs/performance.md). XLA
# builds a program per input shape, so the rows are padded to a multiple of
# GELU_ROW_MULTIPLE: a batch of a new length reuses the program of its multiple (each
# compiled once, in 40-100 ms on a CPU) rather than compiling its own. A shape known when
# traced (fixed-shape steps, and every step under XLA or on TPUs) is compiled as it is.
GELU_ROW_MULTIPLE = 256
_xla_gelu_and_slope = tf.function(_gelu_and_slope, jit_compile=True, autograph=False,
                                  reduce_retracing=True)


def _gelu_and_slope_compiled(x):
  """_gelu_and_slope(x) by _xla_gelu_and_slope, unknown rows padded to GELU_ROW_MULTIPLE."""
  if x.shape.is_fully_defined():
    return _xla_gelu_and_slope(x)
  flat = tf.reshape(x, [-1, x.shape[-1]])
  rows = tf.shape(flat)[0]
  y, slope = _xla_gelu_and_slope(tf.pad(flat, [[0, (-rows) % GELU_ROW_MULTIPLE], [0, 0]]))
  return tf.reshape(y[:rows], tf.shape(x)), tf.reshape(slope[:rows], tf.shape(x))


def get_activation(name):
  """Maps a config activation name to a function of (tensor, training) -> tensor of the
  input's dtype.

  GELU, the one the released models use, computes in training in float32 with its own
  gradient (_gelu_for_training); at inference in the form the matrix product before it
  absorbs (_gelu). The others compute in float32: 16-bit transcendental functions are
  slow on CPUs and less accurate everywhere.
  """
  activations = {
      "gelu_tanh": lambda x: keras.activations.gelu(x, approximate=True),
      "relu": keras.activations.relu,
      "tanh": keras.activations.tanh,
      "linear": lambda x: x,
  }
  if name == "gelu":
    return lambda x, training=False: _gelu_for_training(x) if training else _gelu(x)
  if name not in activations:
    raise ValueError(f"Unknown activation {name!r}; expected gelu, {', '.join(activations)}.")
  fn = activations[name]
  return lambda x, training=False: ops.cast(fn(ops.cast(x, "float32")), x.dtype)


def initializer(stddev):
  """The original's weight initializer: truncated normal with `stddev`."""
  return keras.initializers.TruncatedNormal(stddev=stddev)


class LayerNorm(keras.layers.LayerNormalization):
  """LayerNorm over the last axis in float32 (Keras' variables gamma and beta), with a
  hand-written gradient in training.

  Keras' LayerNormalization is a dozen TensorFlow ops and autodiff roughly doubles
  them; here the forward takes six passes over x and the gradient seven
  (y = xhat gamma + beta, xhat = (x - mean) / sqrt(var + eps);
  dx = (g - mean(g) - xhat mean(g xhat)) / sqrt(var + eps) with g = dy gamma):
  a BERT-Base LayerNorm of 4,096 tokens, forward and backward, 8.5 ms against 12.5.
  At inference a large x takes one fused normalization (_layer_norm_for_inference).
  """

  def __init__(self, epsilon=LAYER_NORM_EPSILON, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(epsilon=epsilon, **kwargs)

  def call(self, x, training=False):
    """float [..., H] -> float32 [..., H]."""
    x = tf.cast(x, tf.float32)
    gamma, beta = tf.convert_to_tensor(self.gamma.value), tf.convert_to_tensor(self.beta.value)
    if training:
      return _layer_norm_for_training(x, gamma, beta, self.epsilon)
    return _layer_norm_for_inference(x, gamma, beta, self.epsilon)


# At inference a LayerNorm of at least this many values runs as one fused normalization.
FUSED_LAYER_NORM_SIZE = 1 << 17


def _layer_norm_for_inference(x, gamma, beta, epsilon):
  """LayerNorm's forward. A large x (FUSED_LAYER_NORM_SIZE values or more, chosen when
  traced if x's size is known, else at run time) is normalized by one FusedBatchNormV3
  that takes its rows as the channels of an NCHW image (oneDNN's batch normalization on
  CPUs: one op where the elementwise form makes six passes): 1.8x faster at 512 rows of
  width 384, 3-4x at 4,096; a small x by the elementwise ops, whose fixed cost is lower
  (benchmarks/investigations/layer_norm.py). Both normalize with the rows' own mean and
  biased variance, in float32."""
  def elementwise():
    xhat, _ = _normalized(x, epsilon)
    return xhat * gamma + beta

  def fused():
    width = x.shape[-1]
    rows = tf.size(x) // width
    y = tf.raw_ops.FusedBatchNormV3(
        x=tf.reshape(x, [1, rows, width, 1]), scale=tf.ones([rows]), offset=tf.zeros([rows]),
        mean=tf.zeros([0]), variance=tf.zeros([0]), epsilon=epsilon, data_format="NCHW",
        is_training=True)[0]
    return tf.reshape(y, tf.shape(x)) * gamma + beta
  if x.shape[-1] is None:  # no rows to make channels of
    return elementwise()
  if x.shape.is_fully_defined():
    return fused() if x.shape.num_elements() >= FUSED_LAYER_NORM_SIZE else elementwise()
  return tf.cond(tf.size(x) >= FUSED_LAYER_NORM_SIZE, fused, elementwise)


def _normalized(x, epsilon):
  """(x - mean) / sqrt(var + eps) over the last axis, and that 1 / sqrt(var + eps)."""
  centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
  inverse = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
  return centered * inverse, inverse


@tf.custom_gradient
def _layer_norm_for_training(x, gamma, beta, epsilon):
  xhat, inverse = _normalized(x, epsilon)

  def grad(dy):
    rows = tuple(range(len(dy.shape) - 1))
    g = dy * gamma
    dx = inverse * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                    - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
    return dx, tf.reduce_sum(dy * xhat, axis=rows), tf.reduce_sum(dy, axis=rows), None
  return xhat * gamma + beta, backward_scoped(grad)


def layer_norm(name):
  """A LayerNorm that computes and returns float32 whatever the policy."""
  return LayerNorm(name=name)


class Dropout(keras.layers.Dropout):
  """Keras' Dropout (its rate and seed generator), computing in float32, with masks drawn
  from 16 random bits per value.

  A value is dropped when its 16 bits, read as an integer, fall below
  round(rate * 65536): a rate exact to 1 / 65536 (0.1 drops 6554 / 65536 =
  0.100006), and kept values are scaled by 65536 / (65536 - that), so the
  expectation is exactly the input's. Each 32-bit word of TensorFlow's Philox
  generator serves two values, which halves the generator's time, most of
  dropout's (a [32, 12, 128, 128] mask: 10.8 ms from float32 uniforms on 2 CPU
  cores, 5.4 ms). The halves of a Philox word are as independent as any two of its
  bits; tests/test_dropout.py checks the rate, the scaling and the independence of
  neighbouring values.
  """

  def call(self, inputs, training=False):
    """float32 x -> x with values dropped, the rest scaled by 1 / (1 - rate)."""
    if not (training and self.rate > 0):
      return inputs
    keep = self._keep(inputs)
    return _times(inputs, tf.where(keep, tf.constant(keep_scale(self.rate), inputs.dtype),
                                   tf.zeros([], inputs.dtype)))

  def zero_out(self, x, training=False):
    """x (any float dtype) with the dropped values zeroed and the rest left as they are:
    the caller applies 1 / (1 - rate) where it costs nothing (SelfAttention folds it
    into the values)."""
    if not (training and self.rate > 0):
      return x
    return _times(x, tf.cast(self._keep(x), x.dtype))

  def _keep(self, x):
    """bool, shaped as x: True for the values kept."""
    seed = self.seed_generator.next()
    seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)  # as Keras does
    n = tf.size(x)
    words = tf.random.stateless_uniform([(n + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:n]
    return tf.reshape(halves >= _drop_threshold(self.rate), tf.shape(x))


def _drop_threshold(rate):
  """The 16-bit values below which a value is dropped."""
  return int(round(rate * 65536))


def keep_scale(rate):
  """1 / P(kept), with the rate Dropout really applies."""
  return 65536.0 / (65536 - _drop_threshold(rate))


@tf.custom_gradient
def _times(x, m):
  """x * m, with m's gradient left out (a mask) and x's taken as dy * m, the mask reused."""
  return x * m, backward_scoped(lambda dy: (dy * m, None))


def float32_dropout(rate):
  """Dropout computing in float32 whatever the policy (16-bit inputs are cast first):
  1 / (1 - rate) rounded to 16 bits would scale every kept value too little."""
  return Dropout(rate, dtype="float32")


def bias_add(x, bias, training=False):
  """x [..., C] plus bias [C], as tf.nn.bias_add (which oneDNN fuses into the product
  before it). In training, a bfloat16 x's bias gradient, the sum of the upstream
  gradient's rows, is taken by tf.reduce_sum, which sums bfloat16 in float32 and rounds
  once: TensorFlow's BiasAddGrad (2.20, CPU) sums bfloat16 rows in bfloat16, and 4,096
  rows of ones then add up to 256 (benchmarks/investigations/bias_gradient.py)."""
  if training and x.dtype == tf.bfloat16:
    return _bias_add_summed_in_float32(x, bias)
  return tf.nn.bias_add(x, bias)


@tf.custom_gradient
def _bias_add_summed_in_float32(x, bias):
  def grad(dy):
    return dy, tf.reduce_sum(tf.reshape(dy, [-1, tf.shape(dy)[-1]]), axis=0, name="bias_sum")
  return tf.nn.bias_add(x, bias), backward_scoped(grad)


def backward_scoped(grad):
  """A custom gradient's function `grad`, run under the name scope TensorFlow gives the
  gradients of the ops traced where it is made ("gradient_tape/" and that scope): its ops
  would otherwise land at the top of the graph, where profiles and the precision census
  cannot tell their layer."""
  scope = tf.get_current_name_scope()
  scope = f"gradient_tape/{scope}/" if scope else "gradient_tape/"

  def run(*upstream):
    with tf.name_scope(scope):
      return grad(*upstream)
  return run


class Dense(keras.layers.Dense):
  """Keras' Dense, its bias added by bias_add (a float32 sum for the bias gradient in
  bfloat16 training)."""

  def call(self, inputs, training=False):
    x = ops.matmul(inputs, self.kernel)
    if self.bias is not None:
      x = bias_add(x, tf.cast(self.bias, x.dtype), training)
    return self.activation(x) if self.activation is not None else x


def dense(units, initializer_range, name, dtype=None, activation=None):
  """A Dense layer with the original's initializers (kernel [in, out])."""
  return Dense(
      units, name=name, dtype=dtype, activation=activation,
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

  def call(self, input_ids, segment_ids, position_ids, training=False):
    """int [R] token ids, segment ids and positions of rows (TokenRows) -> float32 [R, H]."""
    x = (ops.take(self.word_embeddings, input_ids, axis=0)
         + ops.take(self.token_type_embeddings, segment_ids, axis=0)
         + ops.take(self.position_embeddings, position_ids, axis=0))
    x = self.layer_norm(ops.cast(x, "float32"), training=training)
    return self.dropout(x, training=training)

  def get_config(self):
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "dropout_rate": self.dropout_rate}
