"""Pretraining: the encoder with the masked-LM and next-sentence heads, and their losses.

The original's `get_masked_lm_output` and `get_next_sentence_output` as one
model (BertPretrainer) and one task (PretrainingTask) for modeling/training.py.
"""

import tensorflow as tf
from keras import ops

from modeling import heads
from modeling.encoder import BertEncoder


class BertPretrainer(heads.TaskModel):
  """The given encoder + masked-LM head + next-sentence head.

  Call with the pretraining features (input_ids, input_mask, segment_ids,
  masked_lm_positions); returns masked_lm_logits float32 [B, P, V] and
  next_sentence_logits float32 [B, 2] (class 1 = random next sentence).
  With next_sentence=False (the left-to-right model of
  modeling/language_model.py) there is no next-sentence head or logits.
  """

  def __init__(self, encoder, next_sentence=True, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(encoder, **kwargs)
    c = self.config
    self.masked_lm = heads.MaskedLMHead(
        c.vocab_size, c.hidden_size, c.hidden_act, c.initializer_range,
        name="predictions", dtype=self.dtype_policy)
    self.next_sentence = (heads.OutputLogits(2, c.initializer_range, name="seq_relationship",
                                             dtype=self.dtype_policy)
                          if next_sentence else None)
    self.uses_pooler = next_sentence  # only the next-sentence head reads it

  def build(self, input_shape=None):
    super().build()
    self.masked_lm.build(None)
    if self.next_sentence is not None:
      self.next_sentence.build((None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    outputs = self.encoder(features, training=training, pack_tokens=pack_tokens,
                           blocked_attention=blocked_attention)
    logits = {"masked_lm_logits": self.masked_lm(
        outputs["sequence_output"], features["masked_lm_positions"],
        self.encoder.embedding_table, training=training)}
    if self.next_sentence is not None:
      logits["next_sentence_logits"] = self.next_sentence(outputs["pooled_output"],
                                                          training=training)
    return logits

  def head_variable_map(self):
    mlm = self.masked_lm
    names = {"cls/predictions/transform/dense/kernel": mlm.transform.kernel,
             "cls/predictions/transform/dense/bias": mlm.transform.bias,
             "cls/predictions/transform/LayerNorm/gamma": mlm.layer_norm.gamma,
             "cls/predictions/transform/LayerNorm/beta": mlm.layer_norm.beta,
             "cls/predictions/output_bias": mlm.output_bias}
    if self.next_sentence is not None:
      names.update(heads.logits_names("cls/seq_relationship/", self.next_sentence))
    return names

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    if "cls/predictions/output_bias" not in shapes:
      return None
    return cls(encoder, next_sentence="cls/seq_relationship/output_weights" in shapes)

  def get_config(self):
    return {**super().get_config(), "next_sentence": self.next_sentence is not None}


@tf.function(jit_compile=True, autograph=False)
def masked_lm_terms(logits, ids):
  """heads.cross_entropy and heads.correct of the masked-LM logits, in one XLA function.

  float32 [B, P, V] logits, int [B, P] ids -> (cross entropy, 1.0 where the
  first highest logit is the id's): two float32 [B, P]. XLA fuses the passes
  over the vocabulary, forward and backward; on CPUs TensorFlow's softmax
  cross-entropy kernel and Keras' argmax (four extra passes that rewrite -0.0)
  took a third of a small model's step.
  """
  ids = tf.cast(ids, tf.int32)
  picked = tf.gather(logits, ids[..., None], batch_dims=2)[..., 0]  # [B, P]
  nll = tf.reduce_logsumexp(logits, axis=-1) - picked
  predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return nll, tf.cast(tf.equal(predicted, ids), tf.float32)


class PretrainingTask:
  """Masked LM + next sentence, with the original's losses.

  masked_lm_loss = sum(w * nll) / (sum(w) + 1e-5); next_sentence_loss = mean
  cross entropy; loss = masked_lm_loss + next_sentence_weight * next_sentence_loss
  (the original's sum at the default weight 1). Weight 0 trains masked LM only
  (the paper's "No NSP"): the next-sentence head and the pooler, which feed
  only it, are frozen, so weight decay cannot move them either, and no
  next-sentence figures are reported.
  """

  curve = ("masked_lm_accuracy", "masked LM accuracy")  # plotted beside the loss

  def __init__(self, config, next_sentence_weight=1.0):
    if next_sentence_weight < 0:
      raise ValueError(f"--next_sentence_weight={next_sentence_weight} must not be negative.")
    self.config = config
    self.next_sentence_weight = next_sentence_weight
    self.objectives = ("masked_lm", "next_sentence") if next_sentence_weight else ("masked_lm",)

  def build_model(self, pack_tokens=False):
    """The built BertPretrainer on a new BertEncoder(config, pack_tokens)."""
    model = BertPretrainer(BertEncoder(self.config, pack_tokens))
    model.build()
    if not self.next_sentence_weight:  # no gradient reaches them: keep them out of training
      model.next_sentence.trainable = False
      model.encoder.pooler.trainable = False  # it reads the pooler, but to no loss
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
    mlm_nll, mlm_correct = masked_lm_terms(mlm_logits, batch["masked_lm_ids"])
    sums = {"masked_lm": ops.sum(weights * mlm_nll),
            "next_sentence": ops.sum(heads.cross_entropy(nsp_logits, labels))}
    metrics = {"masked_lm_correct": ops.sum(weights * mlm_correct),
               "next_sentence_correct": ops.sum(heads.correct(nsp_logits, labels))}
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
    return values
