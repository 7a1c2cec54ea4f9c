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
    batch, length, units = tf.shape(x)[0], tf.shape(x)[1], self.units
    running = tf.reduce_sum(tf.cast(lengths[None, :] > tf.range(length)[:, None], tf.int32),
                            axis=1)  # [T]: rows with a real step t
    zeros = tf.zeros(tf.stack([2, batch, units]), tf.float32)  # [2, B, U]

    # XLA (and TPUs) need static shapes: there every row runs every step, and padded
    # steps keep the state.
    xla = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())

    def cell(z, c):
      i, f, g, o = tf.split(z, 4, axis=-1)
      c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
      return tf.sigmoid(o) * tf.tanh(c), c

    def step(t, h, c, outputs):
      if xla:
        h_new, c_new = cell(inputs[t] + tf.matmul(h, recurrent), c)  # [2, B, U]
        real = (t < lengths)[None, :, None]
        h, c = tf.where(real, h_new, h), tf.where(real, c_new, c)
        return t + 1, h, c, outputs.write(t, tf.where(real, h, 0.0))
      n = running[t]
      h, c = h[:, :n], c[:, :n]  # [2, n, U]: finished rows are dropped for good
      h, c = cell(inputs[t][:, :n] + tf.matmul(h, recurrent), c)  # [2, n, U]
      return t + 1, h, c, outputs.write(t, tf.pad(h, [[0, 0], [0, batch - n], [0, 0]]))

    outputs = tf.TensorArray(tf.float32, size=length,
                             element_shape=[2, x.shape[0] if xla else None, units])
    _, _, _, outputs = tf.while_loop(
        lambda t, *_: t < length, step, (tf.constant(0), zeros, zeros, outputs),
        maximum_iterations=length,
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([2, None, units]),
                          tf.TensorShape([2, None, units]), tf.TensorShape(None)))
    outputs = tf.transpose(outputs.stack(), [1, 2, 0, 3])  # [2, B, T, U], zeros past the end
    forward = outputs[0]
    backward = tf.reverse_sequence(outputs[1], lengths, seq_axis=1, batch_axis=0)
    both = tf.concat([forward, backward], axis=-1)  # [B, T, 2U], rows longest first
    return tf.scatter_nd(order[:, None], both, tf.shape(both))

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (2 * self.units,)

  def get_config(self):
    return {**super().get_config(), "units": self.units}
