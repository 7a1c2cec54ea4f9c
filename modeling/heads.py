"""The heads, the per-position losses and the task model every task builds on.

A batch's path from its records to its loss: data/pipeline.py gives a feature
dict; a task (modeling/pretraining.py, classification.py, span_labeling.py,
tagging.py, multiple_choice.py, language_model.py: each holds its model, its
loss and its metrics) calls its model (a TaskModel below: the BertEncoder of
modeling/encoder.py it is given, plus its heads) and turns the logits into loss sums.

Heads return float32 logits whatever the compute dtype, so losses and metrics
are always computed in float32. A task splits each loss into a numerator (a
sum over the batch) and a denominator that depends on the inputs only (a count
or a weight sum). modeling/training.py's Trainer sums denominators over the
whole global batch (all micro-batches on all replicas) before computing any
gradient, so gradient accumulation and any number of replicas give exactly
the large-batch loss of the original.
"""

import keras
import tensorflow as tf
from keras import ops

from modeling import layers, lstm
from modeling.encoder import BertEncoder


# --- Heads -------------------------------------------------------------------

class OutputLogits(keras.layers.Layer):
  """logits = x . output_weights^T + output_bias, weights stored [num_outputs, H].

  This is the layout of the original's `output_weights` variables (classifier,
  next sentence, SQuAD), so checkpoints map without transposes. The product runs
  in the layer's compute dtype (the task model's policy) like every other; the
  logits are returned in float32, for the losses.
  """

  def __init__(self, num_outputs, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.num_outputs = num_outputs
    self.initializer_range = initializer_range

  def build(self, input_shape):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(self.num_outputs, input_shape[-1]),
        initializer=layers.initializer(self.initializer_range))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.num_outputs,), initializer="zeros")

  def call(self, x, training=False):
    """[..., H] -> float32 [..., num_outputs]."""
    logits = layers.bias_add(ops.matmul(x, ops.transpose(self.output_weights)),
                             tf.cast(self.output_bias, x.dtype), training)
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
    # No input cast: the [B, S, H] sequence output is gathered at the masked positions
    # first, in float32; the transform then casts the gathered [B, P, H] rows, and call()
    # the embedding table.
    kwargs["autocast"] = False
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
        dtype="float32", autocast=False)

  def call(self, sequence_output, masked_lm_positions, embedding_table, training=False):
    """[B, S, H] output, int [B, P] positions, [V, H] table -> float32 [B, P, V]."""
    # tf.gather, not ops.take_along_axis, whose int64 index transposes make TensorFlow's
    # oneDNN rewriter log an error line.
    x = tf.gather(sequence_output, masked_lm_positions, batch_dims=1)  # [B, P, H]
    x = self.layer_norm(self.activation(self.transform(x, training=training), training=training),
                        training=training)
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


# --- Losses per position ----------------------------------------------------
# Every task sums them over a batch and divides by counts of the whole global
# batch.

def cross_entropy(logits, labels):
  """Softmax cross entropy per position: float32 [..., C] logits, int [...] labels ->
  float32 [...]."""
  return ops.sparse_categorical_crossentropy(ops.cast(labels, "int32"), logits, from_logits=True)


def correct(logits, labels):
  """1.0 where the highest logit is the label's (the first on ties), else 0.0: float32 [...]."""
  # tf.argmax, not keras.ops.argmax: Keras' takes several passes (it orders -0.0 before 0.0).
  predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")


def squared_error(predictions, targets):
  """(predictions - targets)^2 per example: float [B] each -> float32 [B]."""
  return ops.square(ops.cast(predictions, "float32") - ops.cast(targets, "float32"))


# --- The task model: the encoder, to which each task adds its heads --------

class TaskModel(keras.Model):
  """The BertEncoder it is given, to which subclasses add heads.

  Args:
    encoder: a BertEncoder, built or not (build() builds it if needed); the model
      holds this very object.
    **kwargs: Keras arguments but dtype: the model computes under its encoder's
      policy, so encoder and heads share one precision.

  get_config holds the encoder's config, from which from_config builds the encoder first.
  Every task model's call takes `pack_tokens` and `blocked_attention` besides
  `training`, and passes them to its encoder (BertEncoder says what each does).

  Each task model names its head variables for checkpoints
  (`head_variable_map`: original-style name -> variable; modeling/checkpoints.py
  adds the encoder's) and says, from a checkpoint's variable shapes, whether
  they hold its head (`for_head_variables`), so a converter can rebuild it.
  """

  uses_pooler = True  # False: the pooler is not in the model's outputs (may be absent from files)

  def __init__(self, encoder, **kwargs):
    super().__init__(dtype=encoder.dtype_policy, **kwargs)
    self.encoder = encoder
    self.config = encoder.config

  def build(self, input_shape=None):
    """Builds the encoder unless it came built; subclasses then build their heads. A model
    that does not read the pooler (uses_pooler False) freezes it: no gradient reaches it,
    and the optimizer then leaves it alone (no weight decay, no slots), as the original's,
    which skips variables without a gradient."""
    if not self.encoder.built:
      self.encoder.build()
    if not self.uses_pooler:
      self.encoder.pooler.trainable = False

  def head_variable_map(self):
    """{original-style name: variable} of the head (every variable the encoder does not own)."""
    raise NotImplementedError

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    """This model on `encoder` when `shapes` ({name: shape} of a checkpoint) hold its
    head variables, else None."""
    raise NotImplementedError

  def get_config(self):
    return {"encoder": self.encoder.get_config(), "name": self.name}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    return cls(BertEncoder.from_config(config.pop("encoder")), **config)


def logits_names(prefix, layer):
  """The original's names of an OutputLogits layer's variables."""
  return {f"{prefix}output_weights": layer.output_weights,
          f"{prefix}output_bias": layer.output_bias}


# --- The BiLSTM head (--bilstm_head): the paper's "+ BiLSTM" row of Table 5 ---

BILSTM_PREFIX = "bilstm"  # its checkpoint names: bilstm/fw/kernel, bilstm/bw/bias, ...


def bilstm_units(config):
  """Units per direction: half the hidden size, so the task layer still reads H values."""
  return max(1, config.hidden_size // 2)


def bilstm(config):
  """The --bilstm_head layer of `config`'s size, named for checkpoints."""
  return lstm.BidirectionalLSTM(bilstm_units(config), name=BILSTM_PREFIX)


def bilstm_over(bilstm, sequence_output, features, training):
  """The BiLSTM over float32 [B, S, H] sequence output -> float32 [B, S, 2 * units],
  padding skipped (see lstm.BidirectionalLSTM) and zero."""
  mask = features.get("input_mask")
  mask = ops.ones(ops.shape(sequence_output)[:2], "bool") if mask is None else \
      ops.cast(mask, "bool")
  x = bilstm(ops.cast(sequence_output, "float32"), mask=lstm.step_mask(mask),
             training=training)
  return x * ops.cast(mask, "float32")[..., None]
