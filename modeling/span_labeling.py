"""Span labeling (SQuAD): start and end logits per token, and their loss."""

import tensorflow as tf
from keras import ops

from modeling import heads, lstm
from modeling.encoder import BertEncoder


class BertSpanLabeler(heads.TaskModel):
  """The given encoder + two logits per token (answer start and end), as for SQuAD.

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

  def __init__(self, encoder, bilstm_head=False, **kwargs):
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(encoder, **kwargs)
    self.bilstm = heads.bilstm(self.config) if bilstm_head else None
    self.span = heads.OutputLogits(2, self.config.initializer_range, name="squad",
                                   dtype=self.dtype_policy)

  def build(self, input_shape=None):
    super().build()
    width = self.config.hidden_size
    if self.bilstm is not None:
      self.bilstm.build((None, None, width))
      width = 2 * heads.bilstm_units(self.config)
    self.span.build((None, None, width))
    self.built = True

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    x = self.encoder(features, training=training, pack_tokens=pack_tokens,
                     blocked_attention=blocked_attention)["sequence_output"]  # [B, S, H]
    if self.bilstm is not None:
      x = heads.bilstm_over(self.bilstm, x, features, training)  # [B, S, 2u]
    logits = self.span(x, training=training)
    bias = (1.0 - ops.cast(features["input_mask"], "float32")) * -10000.0  # [B, S]
    return {"start_logits": logits[..., 0] + bias, "end_logits": logits[..., 1] + bias}

  def head_variable_map(self):
    names = heads.logits_names("cls/squad/", self.span)
    if self.bilstm is not None:
      names.update(lstm.named_variables(heads.BILSTM_PREFIX, self.bilstm))
    return names

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    if "cls/squad/output_weights" not in shapes:
      return None
    return cls(encoder, bilstm_head=f"{heads.BILSTM_PREFIX}/fw/kernel" in shapes)

  def get_config(self):
    return {**super().get_config(), "bilstm_head": self.bilstm is not None}


class SpanTask:
  """SQuAD: start and end logits per token; loss = mean of the two cross entropies."""

  def __init__(self, config, bilstm_head=False):
    self.config = config
    self.bilstm_head = bilstm_head

  def build_model(self, pack_tokens=False):
    """The built BertSpanLabeler on a new BertEncoder(config, pack_tokens)."""
    model = BertSpanLabeler(BertEncoder(self.config, pack_tokens), self.bilstm_head)
    model.build()
    return model

  def denominators(self, batch):
    return {"loss": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def numerators(self, model, batch, training):
    out = model(batch, training=training)
    start, end = batch["start_positions"], batch["end_positions"]
    loss = 0.5 * (tf.reduce_sum(heads.cross_entropy(out["start_logits"], start))
                  + tf.reduce_sum(heads.cross_entropy(out["end_logits"], end)))
    return ({"loss": loss},
            {"start_correct": tf.reduce_sum(heads.correct(out["start_logits"], start)),
             "end_correct": tf.reduce_sum(heads.correct(out["end_logits"], end))})

  def losses(self, sums, denominators):
    return sums["loss"] / denominators["loss"], {}

  def metric_values(self, metrics, denominators):
    return {"start_accuracy": ops.divide_no_nan(metrics["start_correct"], denominators["loss"]),
            "end_accuracy": ops.divide_no_nan(metrics["end_correct"], denominators["loss"])}
