"""Training tasks: a model, its loss as sums over examples, and its metrics.

A task splits each loss into a numerator (a sum over the batch) and a
denominator that depends on the inputs only (a count or a weight sum). The
trainer sums denominators over the whole global batch (all micro-batches on
all replicas) before computing any gradient, so gradient accumulation and any
number of replicas give exactly the large-batch loss of the original.
"""

import tensorflow as tf
from keras import ops

from modeling.models import BertPretrainer


def _nll(logits, labels):
  """Per-position negative log likelihood: float32 [..., C] logits, int [...] labels."""
  return tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.cast(labels, tf.int32), logits=logits)


def _correct(logits, labels):
  return tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32)),
                 tf.float32)


class PretrainingTask:
  """Masked LM + next sentence, with the original's losses.

  masked_lm_loss = sum(w * nll) / (sum(w) + 1e-5); next_sentence_loss = mean
  cross entropy; loss = their sum.
  """

  def __init__(self, config):
    self.config = config

  def build_model(self):
    model = BertPretrainer(self.config)
    model.build()
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
    sums = {"masked_lm": ops.sum(weights * _nll(mlm_logits, batch["masked_lm_ids"])),
            "next_sentence": ops.sum(_nll(nsp_logits, labels))}
    metrics = {"masked_lm_correct": ops.sum(weights * _correct(mlm_logits, batch["masked_lm_ids"])),
               "next_sentence_correct": ops.sum(_correct(nsp_logits, labels))}
    return sums, metrics

  def losses(self, sums, denominators):
    """(total loss, dict of component losses) from global sums and denominators."""
    mlm = sums["masked_lm"] / (denominators["masked_lm"] + 1e-5)
    nsp = sums["next_sentence"] / denominators["next_sentence"]
    return mlm + nsp, {"masked_lm_loss": mlm, "next_sentence_loss": nsp}

  def metric_values(self, metrics, denominators):
    """Accuracies from summed metrics and denominators."""
    return {"masked_lm_accuracy": ops.divide_no_nan(metrics["masked_lm_correct"],
                                                    denominators["masked_lm"]),
            "next_sentence_accuracy": ops.divide_no_nan(metrics["next_sentence_correct"],
                                                        denominators["next_sentence"])}

  def eval_results(self, sums, metrics, denominators, batch_losses):
    """The original's eval metrics: weighted means over all positions and examples."""
    values = self.metric_values(metrics, denominators)
    values["masked_lm_loss"] = ops.divide_no_nan(sums["masked_lm"], denominators["masked_lm"])
    values["next_sentence_loss"] = ops.divide_no_nan(sums["next_sentence"],
                                                     denominators["next_sentence"])
    values = {k: float(v) for k, v in values.items()}
    values["loss"] = sum(batch_losses) / max(len(batch_losses), 1)
    return values
