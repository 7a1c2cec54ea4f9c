"""The heads, the models they make with the encoder, and their losses.

A batch's path from its records to its loss: data/pipeline.py gives a feature
dict; a task here (PretrainingTask, ClassificationTask, SpanTask) calls its
model (BertPretrainer, BertClassifier, BertSpanLabeler: modeling/encoder.py's
BertEncoder plus the heads below) and turns the logits into loss sums.

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

from modeling import layers
from modeling.encoder import BertEncoder, ConfiguredModel


# --- Heads -------------------------------------------------------------------

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


# --- Losses per position ----------------------------------------------------
# The tasks below (and tagging.py's, multiple_choice.py's) sum them over a
# batch and divide by counts of the whole global batch.

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


# --- Task models: the encoder plus heads ----------------------------------

class _TaskModel(ConfiguredModel):
  """Holds a BertEncoder built from `config`; subclasses add heads.

  Each task model names its head variables for checkpoints
  (`head_variable_map`: original-style name -> variable; modeling/checkpoints.py
  adds the encoder's) and says, from a checkpoint's variable shapes, whether
  they hold its head (`for_head_variables`), so a converter can rebuild it.
  """

  uses_pooler = True  # False: the pooler is not in the model's outputs (may be absent from files)

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    self.encoder = BertEncoder(self.config, dtype=self.dtype_policy)

  def head_variable_map(self):
    """{original-style name: variable} of the head (every variable the encoder does not own)."""
    raise NotImplementedError

  @classmethod
  def for_head_variables(cls, config, shapes):
    """This model for `config` when `shapes` ({name: shape} of a checkpoint) hold its
    head variables, else None."""
    raise NotImplementedError


def _logits_names(prefix, layer):
  """The original's names of an OutputLogits layer's variables."""
  return {f"{prefix}output_weights": layer.output_weights,
          f"{prefix}output_bias": layer.output_bias}


class BertPretrainer(_TaskModel):
  """Encoder + masked-LM head + next-sentence head.

  Call with the pretraining features (input_ids, input_mask, segment_ids,
  masked_lm_positions); returns masked_lm_logits float32 [B, P, V] and
  next_sentence_logits float32 [B, 2] (class 1 = random next sentence).
  With next_sentence=False (the left-to-right model of
  modeling/language_model.py) there is no next-sentence head or logits.
  """

  def __init__(self, config, next_sentence=True, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(config, **kwargs)
    c = self.config
    self.masked_lm = MaskedLMHead(
        c.vocab_size, c.hidden_size, c.hidden_act, c.initializer_range,
        name="predictions", dtype=self.dtype_policy)
    self.next_sentence = (OutputLogits(2, c.initializer_range, name="seq_relationship")
                          if next_sentence else None)

  def build(self, input_shape=None):
    self.encoder.build()
    self.masked_lm.build(None)
    if self.next_sentence is not None:
      self.next_sentence.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False):
    outputs = self.encoder(features, training=training)
    logits = {"masked_lm_logits": self.masked_lm(
        outputs["sequence_output"], features["masked_lm_positions"],
        self.encoder.embedding_table)}
    if self.next_sentence is not None:
      logits["next_sentence_logits"] = self.next_sentence(outputs["pooled_output"])
    return logits

  def head_variable_map(self):
    mlm = self.masked_lm
    names = {"cls/predictions/transform/dense/kernel": mlm.transform.kernel,
             "cls/predictions/transform/dense/bias": mlm.transform.bias,
             "cls/predictions/transform/LayerNorm/gamma": mlm.layer_norm.gamma,
             "cls/predictions/transform/LayerNorm/beta": mlm.layer_norm.beta,
             "cls/predictions/output_bias": mlm.output_bias}
    if self.next_sentence is not None:
      names.update(_logits_names("cls/seq_relationship/", self.next_sentence))
    return names

  @classmethod
  def for_head_variables(cls, config, shapes):
    if "cls/predictions/output_bias" not in shapes:
      return None
    return cls(config, next_sentence="cls/seq_relationship/output_weights" in shapes)

  def get_config(self):
    return {**super().get_config(), "next_sentence": self.next_sentence is not None}


# --- The BiLSTM head (--bilstm_head): the paper's "+ BiLSTM" row of Table 5 ---

BILSTM_PREFIX = "bilstm"  # its checkpoint names: bilstm/fw/kernel, bilstm/bw/bias, ...


def bilstm_units(config):
  """Units per direction: half the hidden size, so the task layer still reads H values."""
  return max(1, config.hidden_size // 2)


def bilstm_over(bilstm, sequence_output, features, training):
  """The BiLSTM over float32 [B, S, H] sequence output -> float32 [B, S, 2 * units],
  padding skipped (see layers.bidirectional_lstm) and zero."""
  mask = features.get("input_mask")
  mask = ops.ones(ops.shape(sequence_output)[:2], "bool") if mask is None else \
      ops.cast(mask, "bool")
  x = bilstm(ops.cast(sequence_output, "float32"), mask=mask, training=training)
  return x * ops.cast(mask, "float32")[..., None]


class BertClassifier(_TaskModel):
  """Encoder + dropout(0.1) + dense on the pooled output.

  Returns logits float32 [B, num_labels]; with num_labels=1 (regression) the
  single column is the predicted score. The pooled output reads [CLS], or the
  last real token for a causal (left-to-right) encoder.

  bilstm_head: a randomly initialised bidirectional LSTM (bilstm_units per
  direction) runs over the sequence output, and each direction's final output
  (the forward one at the last real token, the backward one at [CLS]), both
  having read the whole input, feeds the dropout and dense layer instead of
  the pooled output (the pooler is then unused). At one position alone, one
  direction would have read a single token and its recurrent weights would
  never train.
  """

  def __init__(self, config, num_labels, bilstm_head=False, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(config, **kwargs)
    self.num_labels = num_labels
    self.dropout = layers.float32_dropout(0.1)
    self.bilstm = (layers.bidirectional_lstm(bilstm_units(self.config), BILSTM_PREFIX)
                   if bilstm_head else None)
    self.uses_pooler = not bilstm_head
    self.classifier = OutputLogits(num_labels, self.config.initializer_range, name="classifier")

  def build(self, input_shape=None):
    self.encoder.build()
    width = self.config.hidden_size
    if self.bilstm is not None:
      self.bilstm.build((None, None, width))
      width = 2 * bilstm_units(self.config)
    self.classifier.build((None, width))
    self.built = True

  def call(self, features, training=False):
    if self.bilstm is None:
      pooled = self.encoder(features, training=training, pooled_only=True)["pooled_output"]
    else:
      sequence = self.encoder(features, training=training)["sequence_output"]
      x = bilstm_over(self.bilstm, sequence, features, training)  # [B, S, 2u]
      mask = features.get("input_mask", ops.ones_like(features["input_ids"]))
      last = layers.last_real_positions(mask)[:, None, None]  # [B, 1, 1]
      units = bilstm_units(self.config)
      pooled = ops.concatenate([ops.take_along_axis(x[..., :units], last, axis=1)[:, 0],
                                x[:, 0, units:]], axis=-1)  # [B, 2u]
    return {"logits": self.classifier(self.dropout(pooled, training=training))}

  def head_variable_map(self):
    names = _logits_names("", self.classifier)  # the original's root-level names
    if self.bilstm is not None:
      names.update(layers.bidirectional_lstm_variables(BILSTM_PREFIX, self.bilstm))
    return names

  @classmethod
  def for_head_variables(cls, config, shapes):
    if "output_weights" not in shapes:
      return None
    return cls(config, num_labels=shapes["output_weights"][0],
               bilstm_head=f"{BILSTM_PREFIX}/fw/kernel" in shapes)

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels,
            "bilstm_head": self.bilstm is not None}


class BertSpanLabeler(_TaskModel):
  """Encoder + two logits per token (answer start and end), as for SQuAD.

  Returns start_logits and end_logits, float32 [B, S] each. Padded positions
  (input_mask 0) get -10000 added, the attention mask's bias: the original let
  padding compete in the softmax and the n-best search, so its loss and
  candidate lists depended on how far a batch was padded; masked, a batch
  trimmed to its longest sequence gives the same loss and answers as one
  padded to max_seq_length.

  bilstm_head: a randomly initialised bidirectional LSTM (bilstm_units per
  direction) runs over the sequence output before the span logits.
  """

  uses_pooler = False

  def __init__(self, config, bilstm_head=False, **kwargs):
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(config, **kwargs)
    self.bilstm = (layers.bidirectional_lstm(bilstm_units(self.config), BILSTM_PREFIX)
                   if bilstm_head else None)
    self.span = OutputLogits(2, self.config.initializer_range, name="squad")

  def build(self, input_shape=None):
    self.encoder.build()
    width = self.config.hidden_size
    if self.bilstm is not None:
      self.bilstm.build((None, None, width))
      width = 2 * bilstm_units(self.config)
    self.span.build((None, None, width))
    self.built = True

  def call(self, features, training=False):
    x = self.encoder(features, training=training)["sequence_output"]  # [B, S, H]
    if self.bilstm is not None:
      x = bilstm_over(self.bilstm, x, features, training)  # [B, S, 2u]
    logits = self.span(x)
    bias = (1.0 - ops.cast(features["input_mask"], "float32")) * -10000.0  # [B, S]
    return {"start_logits": logits[..., 0] + bias, "end_logits": logits[..., 1] + bias}

  def head_variable_map(self):
    names = _logits_names("cls/squad/", self.span)
    if self.bilstm is not None:
      names.update(layers.bidirectional_lstm_variables(BILSTM_PREFIX, self.bilstm))
    return names

  @classmethod
  def for_head_variables(cls, config, shapes):
    if "cls/squad/output_weights" not in shapes:
      return None
    return cls(config, bilstm_head=f"{BILSTM_PREFIX}/fw/kernel" in shapes)

  def get_config(self):
    return {**super().get_config(), "bilstm_head": self.bilstm is not None}


# --- Tasks: a model, its loss as sums over examples, and its metrics -------

class PretrainingTask:
  """Masked LM + next sentence, with the original's losses.

  masked_lm_loss = sum(w * nll) / (sum(w) + 1e-5); next_sentence_loss = mean
  cross entropy; loss = masked_lm_loss + next_sentence_weight * next_sentence_loss
  (the original's sum at the default weight 1). Weight 0 trains masked LM only
  (the paper's "No NSP"): the next-sentence head and the pooler, which feed
  only it, are frozen, so weight decay cannot move them either, and no
  next-sentence figures are reported.
  """

  def __init__(self, config, next_sentence_weight=1.0):
    if next_sentence_weight < 0:
      raise ValueError(f"--next_sentence_weight={next_sentence_weight} must not be negative.")
    self.config = config
    self.next_sentence_weight = next_sentence_weight
    self.objectives = ("masked_lm", "next_sentence") if next_sentence_weight else ("masked_lm",)

  def build_model(self):
    model = BertPretrainer(self.config)
    model.build()
    if not self.next_sentence_weight:  # no gradient reaches them: keep them out of training
      model.next_sentence.trainable = False
      model.encoder.pooler.trainable = False
    return model

  def denominators(self, batch):
    weights = ops.cast(batch["masked_lm_weights"], "float32")
    return {"masked_lm": ops.sum(weights),
            "next_sentence": ops.cast(ops.shape(batch["input_ids"])[0], "float32")}

  def numerators(self, model, batch, training):
    """(loss sums, metric sums) of a batch."""
    out = model(batch, training=training)
    weights = ops.cast(batch["masked_lm_weights"], "float32")
    labels = ops.reshape(batch["next_sentence_labels"], [-1])
    mlm_logits, nsp_logits = out["masked_lm_logits"], out["next_sentence_logits"]
    sums = {"masked_lm": ops.sum(weights * cross_entropy(mlm_logits, batch["masked_lm_ids"])),
            "next_sentence": ops.sum(cross_entropy(nsp_logits, labels))}
    metrics = {"masked_lm_correct": ops.sum(weights * correct(mlm_logits, batch["masked_lm_ids"])),
               "next_sentence_correct": ops.sum(correct(nsp_logits, labels))}
    return sums, metrics

  def losses(self, sums, denominators):
    """(total loss, dict of component losses) from global sums and denominators."""
    mlm = sums["masked_lm"] / (denominators["masked_lm"] + 1e-5)
    if not self.next_sentence_weight:
      return mlm, {"masked_lm_loss": mlm}
    nsp = sums["next_sentence"] / denominators["next_sentence"]
    # Weight 1 multiplies exactly, so the default loss and gradients are the original's.
    loss = mlm + self.next_sentence_weight * nsp
    return loss, {"masked_lm_loss": mlm, "next_sentence_loss": nsp}

  def metric_values(self, metrics, denominators):
    """Accuracies from summed metrics and denominators (of the trained objectives)."""
    values = {"masked_lm_accuracy": ops.divide_no_nan(metrics["masked_lm_correct"],
                                                      denominators["masked_lm"])}
    if self.next_sentence_weight:
      values["next_sentence_accuracy"] = ops.divide_no_nan(metrics["next_sentence_correct"],
                                                           denominators["next_sentence"])
    return values

  def eval_results(self, sums, metrics, denominators, batch_losses):
    """The original's eval metrics: weighted means over all positions and examples."""
    values = self.metric_values(metrics, denominators)
    values["masked_lm_loss"] = ops.divide_no_nan(sums["masked_lm"], denominators["masked_lm"])
    if self.next_sentence_weight:
      values["next_sentence_loss"] = ops.divide_no_nan(sums["next_sentence"],
                                                       denominators["next_sentence"])
    values = {k: float(v) for k, v in values.items()}
    values["loss"] = sum(batch_losses) / max(len(batch_losses), 1)
    values["objectives"] = ",".join(self.objectives)
    return values


class ClassificationTask:
  """Sentence (pair) classification, or regression with one output, on the pooled output.

  Loss: mean softmax cross entropy (mean squared error for regression) over
  the real examples (is_real_example = 1; padding examples weigh nothing).
  bilstm_head: see BertClassifier; the pooler, which nothing reads then, is frozen.
  """

  def __init__(self, config, num_labels, regression=False, bilstm_head=False):
    self.config = config
    self.num_labels = 1 if regression else num_labels
    self.regression = regression
    self.bilstm_head = bilstm_head

  def build_model(self):
    model = BertClassifier(self.config, self.num_labels, self.bilstm_head)
    model.build()
    if self.bilstm_head:  # no gradient reaches it: keep weight decay off it too
      model.encoder.pooler.trainable = False
    return model

  def denominators(self, batch):
    return {"loss": tf.reduce_sum(tf.cast(batch["is_real_example"], tf.float32))}

  def numerators(self, model, batch, training):
    logits = model(batch, training=training)["logits"]
    real = tf.cast(batch["is_real_example"], tf.float32)
    if self.regression:
      error = squared_error(logits[:, 0], batch["label_ids"])
      return {"loss": tf.reduce_sum(real * error)}, {}
    labels = batch["label_ids"]
    return ({"loss": tf.reduce_sum(real * cross_entropy(logits, labels))},
            {"correct": tf.reduce_sum(real * correct(logits, labels))})

  def losses(self, sums, denominators):
    loss = sums["loss"] / denominators["loss"]
    return loss, {}

  def metric_values(self, metrics, denominators):
    if self.regression:
      return {}
    return {"accuracy": ops.divide_no_nan(metrics["correct"], denominators["loss"])}


class SpanTask:
  """SQuAD: start and end logits per token; loss = mean of the two cross entropies."""

  def __init__(self, config, bilstm_head=False):
    self.config = config
    self.bilstm_head = bilstm_head

  def build_model(self):
    model = BertSpanLabeler(self.config, self.bilstm_head)
    model.build()
    return model

  def denominators(self, batch):
    return {"loss": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def numerators(self, model, batch, training):
    out = model(batch, training=training)
    start, end = batch["start_positions"], batch["end_positions"]
    loss = 0.5 * (tf.reduce_sum(cross_entropy(out["start_logits"], start))
                  + tf.reduce_sum(cross_entropy(out["end_logits"], end)))
    return ({"loss": loss}, {"start_correct": tf.reduce_sum(correct(out["start_logits"], start)),
                             "end_correct": tf.reduce_sum(correct(out["end_logits"], end))})

  def losses(self, sums, denominators):
    return sums["loss"] / denominators["loss"], {}

  def metric_values(self, metrics, denominators):
    return {"start_accuracy": ops.divide_no_nan(metrics["start_correct"], denominators["loss"]),
            "end_accuracy": ops.divide_no_nan(metrics["end_correct"], denominators["loss"])}
