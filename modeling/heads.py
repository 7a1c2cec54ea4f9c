"""Task heads on top of BertEncoder outputs, and the per-position losses of every task.

Heads return float32 logits whatever the compute dtype, so losses and
metrics are always computed in float32.
"""

import keras
from keras import ops

from modeling import layers


class OutputLogits(keras.layers.Layer):
  """logits = x . output_weights^T + output_bias, weights stored [num_outputs, H].

  This is the layout of the original's `output_weights` variables (classifier,
  next sentence, SQuAD), so checkpoints map without transposes. The layer is
  small and always computes in float32.
  """

  def __init__(self, num_outputs, initializer_range=0.02, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.num_outputs = num_outputs
    self.initializer_range = initializer_range

  def build(self, input_shape):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(self.num_outputs, input_shape[-1]),
        initializer=layers.initializer(self.initializer_range))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.num_outputs,), initializer="zeros")

  def call(self, x):
    """[..., H] -> float32 [..., num_outputs]."""
    logits = ops.matmul(x, ops.transpose(self.output_weights)) + self.output_bias
    return ops.cast(logits, "float32")

  def get_config(self):
    return {**super().get_config(), "num_outputs": self.num_outputs,
            "initializer_range": self.initializer_range}


class MaskedLMHead(keras.layers.Layer):
  """Masked-LM head: dense + activation + LayerNorm, then the tied word embeddings.

  The decoder is the encoder's embedding table, passed at call time so the
  weight exists once; the head owns only the transform and `output_bias`.
  """

  def __init__(self, vocab_size, hidden_size, hidden_act="gelu",
               initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.activation = layers.get_activation(hidden_act)
    self.transform = layers.dense(hidden_size, initializer_range, "transform",
                                  dtype=self.dtype_policy)
    self.layer_norm = layers.layer_norm("transform_LayerNorm")

  def build(self, input_shape):
    self.transform.build((None, self.hidden_size))
    self.layer_norm.build((None, self.hidden_size))
    # Added to float32 logits, so it is never cast down.
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.vocab_size,), initializer="zeros",
        autocast=False)

  def call(self, sequence_output, masked_lm_positions, embedding_table):
    """[B, S, H] output, int [B, P] positions, [V, H] table -> float32 [B, P, V]."""
    x = ops.take_along_axis(sequence_output, masked_lm_positions[:, :, None], axis=1)  # [B, P, H]
    x = self.layer_norm(self.activation(self.transform(x)))
    batch, predictions = ops.shape(x)[0], ops.shape(x)[1]
    table = ops.cast(embedding_table, self.compute_dtype)
    # One [B*P, H] x [H, V] product: its gradient for the table is one matmul too.
    x = ops.reshape(ops.cast(x, self.compute_dtype), (-1, self.hidden_size))
    logits = ops.matmul(x, ops.transpose(table))  # [B*P, V]
    logits = ops.cast(logits, "float32") + self.output_bias
    return ops.reshape(logits, (batch, predictions, self.vocab_size))

  def get_config(self):
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size, "hidden_act": self.hidden_act,
            "initializer_range": self.initializer_range}


# The losses, per position. Tasks (modeling/tasks.py, tagging.py) sum them
# over a batch and divide by counts of the whole global batch, so gradient
# accumulation and replicas give exactly the large batch's loss.

def cross_entropy(logits, labels):
  """Softmax cross entropy per position: float32 [..., C] logits, int [...] labels -> float32 [...]."""
  return ops.sparse_categorical_crossentropy(ops.cast(labels, "int32"), logits, from_logits=True)


def correct(logits, labels):
  """1.0 where the highest logit is the label's (the first on ties), else 0.0: float32 [...]."""
  predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
  return ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")


def squared_error(predictions, targets):
  """(predictions - targets)^2 per example: float [B] each -> float32 [B]."""
  return ops.square(ops.cast(predictions, "float32") - ops.cast(targets, "float32"))
