"""A bidirectional LSTM whose steps do only the recurrent product.

Keras' LSTM outside cuDNN multiplies each step's input by the kernel inside
the time loop: many small matmuls. Here every real position's input
projection (both directions) is one large matmul before the loop, and each
step does one batched product of both directions' states with their
recurrent kernels. The variables, their shapes and the gate order (i, f, c,
o) are Keras' LSTM's, so weights move between the two unchanged.
"""

import keras
import tensorflow as tf
from keras import ops
from tensorflow.python.ops import control_flow_util

DIRECTIONS = ("fw", "bw")


class BidirectionalLSTM(keras.layers.Layer):
  """Float32 [B, T, D] and a bool mask [B, T] -> float32 [B, T, 2 * units] (forward, backward).

  The mask marks each row's real steps, which come first (right padding).
  Padded steps output zeros and do not touch the state, as in Keras' masked
  bidirectional LSTM, so each real position gets what its unpadded sequence
  gives it; no work is spent on them. Variables per
  direction: kernel [D, 4U], recurrent_kernel [U, 4U], bias [4U] (the forget
  block starts at one).
  """

  def __init__(self, units, **kwargs):
    kwargs.setdefault("dtype", "float32")
    super().__init__(**kwargs)
    self.units = units
    self.supports_masking = True  # takes the mask; passes none on (padding is zeros)

  def build(self, input_shape):
    width, units = input_shape[-1], self.units
    self.weights_by_direction = {}
    for direction in DIRECTIONS:
      kernel = self.add_weight(name=f"{direction}_kernel", shape=(width, 4 * units),
                               initializer="glorot_uniform")
      recurrent = self.add_weight(name=f"{direction}_recurrent_kernel",
                                  shape=(units, 4 * units), initializer="orthogonal")
      bias = self.add_weight(
          name=f"{direction}_bias", shape=(4 * units,),
          initializer=lambda shape, dtype=None: tf.concat(
              [tf.zeros([units]), tf.ones([units]), tf.zeros([2 * units])], 0))
      self.weights_by_direction[direction] = {"kernel": kernel, "recurrent_kernel": recurrent,
                                              "bias": bias}
    self.built = True

  def _tensors(self):
    return {d: {k: tf.convert_to_tensor(v) for k, v in named.items()}
            for d, named in self.weights_by_direction.items()}

  def _projections(self, x, mask):
    """Both directions' input projections plus bias at every real position: [B, T, 8U]
    (zeros at masked positions, which never reach the state)."""
    w = self._tensors()
    kernel = tf.concat([w["fw"]["kernel"], w["bw"]["kernel"]], axis=1)  # [D, 8U]
    bias = tf.concat([w["fw"]["bias"], w["bw"]["bias"]], axis=0)  # [8U]
    positions = tf.where(mask)  # int64 [N, 2]: only real positions are multiplied
    rows = tf.matmul(tf.gather_nd(x, positions), kernel) + bias  # [N, 8U]
    shape = tf.concat([tf.shape(mask, out_type=tf.int64), [8 * self.units]], 0)
    return tf.scatter_nd(positions, rows, shape)

  def call(self, x, mask=None, training=False):
    x = tf.cast(x, tf.float32)
    if mask is None:
      mask = tf.ones(tf.shape(x)[:2], tf.bool)
    mask = tf.cast(mask, tf.bool)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)  # [B]
    # Longest rows first: at step t the rows still running are the first count(length > t),
    # so each step multiplies only those (no work on padding).
    order = tf.argsort(lengths, direction="DESCENDING", stable=True)  # [B]
    lengths = tf.gather(lengths, order)
    projected = tf.gather(self._projections(x, mask), order)  # [B, T, 8U]
    fw, bw = tf.split(projected, 2, axis=-1)  # [B, T, 4U] each
    # The backward direction reads each row's real steps in reverse, also from step 0.
    bw = tf.reverse_sequence(bw, lengths, seq_axis=1, batch_axis=0)
    inputs = tf.transpose(tf.stack([fw, bw]), [2, 0, 1, 3])  # [T, 2, B, 4U]
    w = self._tensors()
    recurrent = tf.stack([w["fw"]["recurrent_kernel"], w["bw"]["recurrent_kernel"]])  # [2, U, 4U]
    length, units = tf.shape(x)[1], self.units
    running = tf.reduce_sum(tf.cast(lengths[None, :] > tf.range(length)[:, None], tf.int32),
                            axis=1)  # [T]: rows with a real step t
    # XLA (and TPUs) need static shapes: there every row runs every step, and padded
    # steps keep the state.
    xla = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())

    if xla:
      outputs = _recurrence_static(inputs, recurrent, lengths, units)
    else:
      outputs = _recurrence(inputs, recurrent, running, units)  # [T, 2, B, U]
    outputs = tf.transpose(outputs, [1, 2, 0, 3])  # [2, B, T, U], zeros past the end
    forward = outputs[0]
    backward = tf.reverse_sequence(outputs[1], lengths, seq_axis=1, batch_axis=0)
    both = tf.concat([forward, backward], axis=-1)  # [B, T, 2U], rows longest first
    return tf.scatter_nd(order[:, None], both, tf.shape(both))

  def compute_mask(self, inputs, mask=None):
    return None

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (2 * self.units,)

  def get_config(self):
    return {**super().get_config(), "units": self.units}


def _cell(z, c):
  """One LSTM step from the summed products z [.., 4U] (gates i, f, c, o) and the cell c:
  (h, c, the four activated gates side by side)."""
  i, f, g, o = tf.split(z, 4, axis=-1)
  i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
  c = f * c + i * g
  return o * tf.tanh(c), c, tf.concat([i, f, g, o], axis=-1)


def _recurrence_static(inputs, recurrent, lengths, units):
  """Every row at every step (static shapes, for XLA): [T, 2, B, 4U] -> h [T, 2, B, U];
  a row's state passes unchanged over its padded steps, which output zeros."""
  length, batch = tf.shape(inputs)[0], inputs.shape[2]

  def step(t, h, c, outputs):
    h_new, c_new, _ = _cell(inputs[t] + tf.matmul(h, recurrent), c)  # [2, B, U]
    real = (t < lengths)[None, :, None]
    h, c = tf.where(real, h_new, h), tf.where(real, c_new, c)
    return t + 1, h, c, outputs.write(t, tf.where(real, h, 0.0))

  zeros = tf.zeros(tf.stack([2, tf.shape(inputs)[2], units]), tf.float32)
  outputs = tf.TensorArray(tf.float32, size=length, element_shape=[2, batch, units])
  _, _, _, outputs = tf.while_loop(lambda t, *_: t < length, step,
                                   (tf.constant(0), zeros, zeros, outputs),
                                   maximum_iterations=length)
  return outputs.stack()


def _recurrence(inputs, recurrent, running, units):
  """Rows sorted longest first; at step t only the first running[t] rows compute.

  inputs [T, 2, B, 4U] (both directions' input products plus bias), recurrent
  [2, U, 4U] -> h [T, 2, B, U], zeros past each row's end. The gradient is
  written out (as cuDNN does) rather than left to the loop's automatic one:
  the backward loop carries only the state gradients, and the recurrent
  kernel's gradient is one product over all steps after it, instead of a
  [2, U, 4U] sum per step.
  """
  length, batch = tf.shape(inputs)[0], tf.shape(inputs)[2]

  def pad(x):  # [2, n, ...] -> [2, B, ...] with zero rows
    return tf.pad(x, [[0, 0], [0, batch - tf.shape(x)[1]], [0, 0]])

  @tf.custom_gradient
  def run(inputs, recurrent):
    def step(t, h, c, hs, cs, gates):
      n = running[t]
      h, c = h[:, :n], c[:, :n]  # [2, n, U]: finished rows are dropped for good
      h, c, g = _cell(inputs[t][:, :n] + tf.matmul(h, recurrent), c)
      return t + 1, h, c, hs.write(t, pad(h)), cs.write(t, pad(c)), gates.write(t, pad(g))

    zeros = tf.zeros(tf.stack([2, batch, units]), tf.float32)
    arrays = [tf.TensorArray(tf.float32, size=length, element_shape=[2, None, w])
              for w in (units, units, 4 * units)]
    _, _, _, hs, cs, gates = tf.while_loop(
        lambda t, *_: t < length, step, (tf.constant(0), zeros, zeros, *arrays),
        maximum_iterations=length,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([2, None, units]),
                          tf.TensorShape([2, None, units]), *[tf.TensorShape(None)] * 3))
    hs, cs, gates = hs.stack(), cs.stack(), gates.stack()  # [T, 2, B, .]

    def grad(upstream):  # upstream: d loss / d h, [T, 2, B, U]
      transposed = tf.transpose(recurrent, [0, 2, 1])  # [2, 4U, U]
      previous_c = tf.concat([tf.zeros_like(cs[:1]), cs[:-1]], axis=0)  # c_{t-1}, [T, 2, B, U]

      def back(t, dh, dc, dz):
        n = running[t]
        i, f, g, o = tf.split(gates[t][:, :n], 4, axis=-1)
        tanh_c = tf.tanh(cs[t][:, :n])
        dh = upstream[t][:, :n] + dh[:, :n]
        dc = dc[:, :n] + dh * o * (1.0 - tanh_c * tanh_c)
        d = tf.concat([dc * g * i * (1.0 - i), dc * previous_c[t][:, :n] * f * (1.0 - f),
                       dc * i * (1.0 - g * g), dh * tanh_c * o * (1.0 - o)], axis=-1)
        # The state gradients for step t - 1, which runs these n rows and maybe more.
        return t - 1, pad(tf.matmul(d, transposed)), pad(dc * f), dz.write(t, pad(d))

      zeros = tf.zeros(tf.stack([2, batch, units]), tf.float32)
      dz = tf.TensorArray(tf.float32, size=length, element_shape=[2, None, 4 * units])
      _, _, _, dz = tf.while_loop(
          lambda t, *_: t >= 0, back, (length - 1, zeros, zeros, dz),
          maximum_iterations=length,
          shape_invariants=(tf.TensorShape([]), tf.TensorShape([2, None, units]),
                            tf.TensorShape([2, None, units]), tf.TensorShape(None)))
      dz = dz.stack()  # [T, 2, B, 4U]: the gradient of each step's summed products
      # Every step's h_{t-1} (zeros before the first) against its dz, in one product.
      previous_h = tf.concat([tf.zeros_like(hs[:1]), hs[:-1]], axis=0)  # [T, 2, B, U]
      flat_h = tf.reshape(tf.transpose(previous_h, [1, 0, 2, 3]), [2, -1, units])
      flat_dz = tf.reshape(tf.transpose(dz, [1, 0, 2, 3]), [2, -1, 4 * units])
      return dz, tf.matmul(flat_h, flat_dz, transpose_a=True)  # [2, U, 4U]

    return hs, grad

  return run(inputs, recurrent)


def step_mask(input_mask):
  """int/bool [B, S] mask -> bool [B, S] for a BidirectionalLSTM: the mask, with position 0
  counted as real in rows that have no real token.

  cuDNN's LSTM kernel (used by Keras on a GPU outside XLA) fails on a sequence
  of length 0, and prediction files are padded with all-padding rows; their
  outputs are discarded (and zeroed by the callers), and the other rows are
  untouched.
  """
  real = ops.cast(input_mask, "bool")
  empty = ops.logical_not(ops.any(real, axis=1, keepdims=True))  # [B, 1]
  first = ops.arange(ops.shape(real)[1])[None, :] == 0  # [1, S]
  return ops.logical_or(real, ops.logical_and(empty, first))


def named_variables(prefix, bilstm):
  """{`prefix`/fw|bw/kernel|recurrent_kernel|bias: variable} of a BidirectionalLSTM."""
  return {f"{prefix}/{direction}/{var}": variable
          for direction, named in bilstm.weights_by_direction.items()
          for var, variable in named.items()}
