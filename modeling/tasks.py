"""Training tasks: a model, its loss as sums over examples, and its metrics.

A task splits each loss into a numerator (a sum over the batch) and a
denominator that depends on the inputs only (a count or a weight sum). The
trainer sums denominators over the whole global batch (all micro-batches on
all replicas) before computing any gradient, so gradient accumulation and any
number of replicas give exactly the large-batch loss of the original.
"""

import tensorflow as tf
from keras import ops

from modeling import heads
from modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler


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
    sums = {"masked_lm": ops.sum(weights * heads.cross_entropy(mlm_logits, batch["masked_lm_ids"])),
            "next_sentence": ops.sum(heads.cross_entropy(nsp_logits, labels))}
    metrics = {"masked_lm_correct": ops.sum(weights * heads.correct(mlm_logits, batch["masked_lm_ids"])),
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
    values["objectives"] = ",".join(self.objectives)
    return values


class ClassificationTask:
  """Sentence (pair) classification, or regression with one output, on the pooled output.

  Loss: mean softmax cross entropy (mean squared error for regression) over
  the real examples (is_real_example = 1; padding examples weigh nothing).
  """

  def __init__(self, config, num_labels, regression=False):
    self.config = config
    self.num_labels = 1 if regression else num_labels
    self.regression = regression

  def build_model(self):
    model = BertClassifier(self.config, self.num_labels)
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


class SpanTask:
  """SQuAD: start and end logits per token; loss = mean of the two cross entropies."""

  def __init__(self, config):
    self.config = config

  def build_model(self):
    model = BertSpanLabeler(self.config)
    model.build()
    return model

  def denominators(self, batch):
    return {"loss": tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)}

  def numerators(self, model, batch, training):
    out = model(batch, training=training)
    start, end = batch["start_positions"], batch["end_positions"]
    loss = 0.5 * (tf.reduce_sum(heads.cross_entropy(out["start_logits"], start))
                  + tf.reduce_sum(heads.cross_entropy(out["end_logits"], end)))
    return ({"loss": loss}, {"start_correct": tf.reduce_sum(heads.correct(out["start_logits"], start)),
                             "end_correct": tf.reduce_sum(heads.correct(out["end_logits"], end))})

  def losses(self, sums, denominators):
    return sums["loss"] / denominators["loss"], {}

  def metric_values(self, metrics, denominators):
    return {"start_accuracy": ops.divide_no_nan(metrics["start_correct"], denominators["loss"]),
            "end_accuracy": ops.divide_no_nan(metrics["end_correct"], denominators["loss"])}
