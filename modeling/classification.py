"""Sentence (pair) classification and regression: the classifier model and its task."""

import tensorflow as tf
from keras import ops

from modeling import heads, layers, lstm
from modeling.encoder import BertEncoder, last_real_positions


class BertClassifier(heads.TaskModel):
  """The given encoder + dropout(0.1) + dense on the pooled output.

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

  def __init__(self, encoder, num_labels, bilstm_head=False, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(encoder, **kwargs)
    self.num_labels = num_labels
    self.dropout = layers.float32_dropout(0.1)
    self.bilstm = heads.bilstm(self.config) if bilstm_head else None
    self.uses_pooler = not bilstm_head
    self.classifier = heads.OutputLogits(num_labels, self.config.initializer_range,
                                         name="classifier", dtype=self.dtype_policy)

  def build(self, input_shape=None):
    super().build()
    width = self.config.hidden_size
    if self.bilstm is not None:
      self.bilstm.build((None, None, width))
      width = 2 * heads.bilstm_units(self.config)
    self.classifier.build((None, width))
    self.built = True

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    if self.bilstm is None:
      pooled = self.encoder(features, training=training, pooled_only=True,
                            pack_tokens=pack_tokens,
                            blocked_attention=blocked_attention)["pooled_output"]
    else:
      sequence = self.encoder(features, training=training, pack_tokens=pack_tokens,
                              blocked_attention=blocked_attention)["sequence_output"]
      x = heads.bilstm_over(self.bilstm, sequence, features, training)  # [B, S, 2u]
      mask = features.get("input_mask", ops.ones_like(features["input_ids"]))
      last = last_real_positions(mask)  # [B]
      units = heads.bilstm_units(self.config)
      pooled = ops.concatenate([tf.gather(x[..., :units], last, batch_dims=1),
                                x[:, 0, units:]], axis=-1)  # [B, 2u]
    return {"logits": self.classifier(self.dropout(pooled, training=training), training=training)}

  def head_variable_map(self):
    names = heads.logits_names("", self.classifier)  # the original's root-level names
    if self.bilstm is not None:
      names.update(lstm.named_variables(heads.BILSTM_PREFIX, self.bilstm))
    return names

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    if "output_weights" not in shapes:
      return None
    return cls(encoder, num_labels=shapes["output_weights"][0],
               bilstm_head=f"{heads.BILSTM_PREFIX}/fw/kernel" in shapes)

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels,
            "bilstm_head": self.bilstm is not None}


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

  def build_model(self, pack_tokens=False):
    """The built BertClassifier on a new BertEncoder(config, pack_tokens)."""
    model = BertClassifier(BertEncoder(self.config, pack_tokens), self.num_labels,
                           self.bilstm_head)
    model.build()
    return model

  def denominators(self, batch):
    return {"loss": tf.reduce_sum(tf.cast(batch["is_real_example"], tf.float32))}

  def numerators(self, model, batch, training):
    logits = model(batch, training=training)["logits"]
    real = tf.cast(batch["is_real_example"], tf.float32)
    if self.regression:
      error = heads.squared_error(logits[:, 0], batch["label_ids"])
      return {"loss": tf.reduce_sum(real * error)}, {}
    labels = batch["label_ids"]
    return ({"loss": tf.reduce_sum(real * heads.cross_entropy(logits, labels))},
            {"correct": tf.reduce_sum(real * heads.correct(logits, labels))})

  def losses(self, sums, denominators):
    loss = sums["loss"] / denominators["loss"]
    return loss, {}

  def metric_values(self, metrics, denominators):
    if self.regression:
      return {}
    return {"accuracy": ops.divide_no_nan(metrics["correct"], denominators["loss"])}
