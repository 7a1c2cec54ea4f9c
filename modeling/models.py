"""Task models: the encoder plus the heads of pretraining, classification and SQuAD."""

import keras
from keras import ops

from modeling import heads
from modeling.encoder import BertEncoder, ConfiguredModel


class _TaskModel(ConfiguredModel):
  """Holds a BertEncoder built from `config`; subclasses add heads."""

  def __init__(self, config, **kwargs):
    super().__init__(config, **kwargs)
    self.encoder = BertEncoder(self.config, dtype=self.dtype_policy)


class BertPretrainer(_TaskModel):
  """Encoder + masked-LM head + next-sentence head.

  Call with the pretraining features (input_ids, input_mask, segment_ids,
  masked_lm_positions); returns masked_lm_logits float32 [B, P, V] and
  next_sentence_logits float32 [B, 2] (class 1 = random next sentence).
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(config, **kwargs)
    c = self.config
    self.masked_lm = heads.MaskedLMHead(
        c.vocab_size, c.hidden_size, c.hidden_act, c.initializer_range,
        name="predictions", dtype=self.dtype_policy)
    self.next_sentence = heads.OutputLogits(2, c.initializer_range, name="seq_relationship")

  def build(self, input_shape=None):
    self.encoder.build()
    self.masked_lm.build(None)
    self.next_sentence.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False):
    outputs = self.encoder(features, training=training)
    return {
        "masked_lm_logits": self.masked_lm(
            outputs["sequence_output"], features["masked_lm_positions"],
            self.encoder.embedding_table),
        "next_sentence_logits": self.next_sentence(outputs["pooled_output"]),
    }


class BertClassifier(_TaskModel):
  """Encoder + dropout(0.1) + dense on the pooled output.

  Returns logits float32 [B, num_labels]; with num_labels=1 (regression) the
  single column is the predicted score.
  """

  def __init__(self, config, num_labels, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(config, **kwargs)
    self.num_labels = num_labels
    self.dropout = keras.layers.Dropout(0.1, dtype="float32")
    self.classifier = heads.OutputLogits(num_labels, self.config.initializer_range,
                                         name="classifier")

  def build(self, input_shape=None):
    self.encoder.build()
    self.classifier.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False):
    pooled = self.encoder(features, training=training)["pooled_output"]
    return {"logits": self.classifier(self.dropout(pooled, training=training))}

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels}


class BertSpanLabeler(_TaskModel):
  """Encoder + two logits per token (answer start and end), as for SQuAD.

  Returns start_logits and end_logits, float32 [B, S] each. Padded positions
  (input_mask 0) get -10000 added, the attention mask's bias: the original let
  padding compete in the softmax and the n-best search, so its loss and
  candidate lists depended on how far a batch was padded; masked, a batch
  trimmed to its longest sequence gives the same loss and answers as one
  padded to max_seq_length.
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(config, **kwargs)
    self.span = heads.OutputLogits(2, self.config.initializer_range, name="squad")

  def build(self, input_shape=None):
    self.encoder.build()
    self.span.build((None, None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False):
    logits = self.span(self.encoder(features, training=training)["sequence_output"])
    bias = (1.0 - ops.cast(features["input_mask"], "float32")) * -10000.0  # [B, S]
    return {"start_logits": logits[..., 0] + bias, "end_logits": logits[..., 1] + bias}
