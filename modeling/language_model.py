"""Left-to-right language modelling: the paper's "LTR & No NSP" pretraining (Table 5).

The model is the pretrainer without its next-sentence head (pretraining.BertPretrainer
with next_sentence=False) on a causal encoder (config.causal_attention): every
position predicts the token after it through the masked-LM head's transform
and the tied word embeddings, so the checkpoint keeps the original's
`cls/predictions/...` names.

It reads the records create_pretraining_data.py writes for masked LM: the task
first puts each masked position's original token back (`original_tokens`), so
the model sees and predicts the unmasked text. Position t predicts token t + 1
wherever both are real tokens: [CLS] predicts the first word, [SEP]s are
tokens like any other, and nothing is predicted past the last real token.
"""

import dataclasses
import math

from absl import logging
from keras import ops

from data.dynamic_masking import original_tokens  # also used by tests and benchmarks
from modeling.encoder import BertEncoder
from modeling.heads import correct, cross_entropy
from modeling.pretraining import BertPretrainer, PretrainingTask


def next_token_targets(input_ids, input_mask):
  """What each position predicts: position t the token at t + 1, where both are real.

  Args:
    input_ids, input_mask: int [B, S].
  Returns:
    (positions int32 [B, S - 1] (0 .. S - 2), labels int32 [B, S - 1],
    weights float32 [B, S - 1]: 1 where positions t and t + 1 are both real).
  """
  ids, mask = ops.cast(input_ids, "int32"), ops.cast(input_mask, "float32")
  batch, length = ops.shape(ids)[0], ops.shape(ids)[1]
  positions = ops.broadcast_to(ops.arange(length - 1, dtype="int32")[None, :],
                               (batch, length - 1))
  return positions, ids[:, 1:], mask[:, :-1] * mask[:, 1:]


def causal_config(config):
  """`config` with causal attention: the model --objective=ltr trains (and its saved config)."""
  return dataclasses.replace(config, causal_attention=True)


def check_objective(objective, next_sentence_weight, weight_given):
  """ValueError naming the flag when --next_sentence_weight does not fit --objective
  (weight_given: whether the flag was given at all)."""
  if not next_sentence_weight >= 0:
    raise ValueError(f"--next_sentence_weight={next_sentence_weight} must be 0 or more.")
  if objective == "ltr" and weight_given:
    raise ValueError("--next_sentence_weight applies to --objective=mlm; --objective=ltr "
                     "trains no next-sentence task.")


def check_options(do_train, num_train_steps, objective, next_sentence_weight, weight_given,
                  dynamic_masking, max_predictions_per_seq):
  """ValueError naming the run_pretraining.py flag that does not fit the others: training
  steps, check_objective, and what --dynamic_masking needs (its vocab, the ids of [MASK],
  [CLS] and [SEP], is required where the run's files are found)."""
  if do_train and num_train_steps < 1:
    raise ValueError(f"--num_train_steps={num_train_steps}: training needs at least 1.")
  check_objective(objective, next_sentence_weight, weight_given)
  if dynamic_masking and objective == "ltr":
    raise ValueError("--dynamic_masking masks words for --objective=mlm; --objective=ltr "
                     "predicts every next token and masks none.")
  if dynamic_masking and max_predictions_per_seq < 1:
    raise ValueError(f"--dynamic_masking with --max_predictions_per_seq="
                     f"{max_predictions_per_seq}: it needs at least 1 masked position.")


def objective_config(objective, config, config_file):
  """The config --objective trains: made causal for ltr; for mlm, ValueError naming
  `config_file` when it is causal (masked LM reads both sides)."""
  if objective == "ltr":
    return causal_config(config)
  if config.causal_attention:
    raise ValueError(f"--bert_config_file={config_file} has causal_attention "
                     "(a left-to-right model) but masked LM reads both sides: pass "
                     "--objective=ltr, or a config without causal_attention.")
  return config


def objective_task(objective, config, next_sentence_weight):
  """The task --objective trains: LanguageModelTask (ltr), or pretraining.PretrainingTask
  (mlm) with its next-sentence loss weighted by next_sentence_weight; logs the objectives."""
  task = (LanguageModelTask(config) if objective == "ltr"
          else PretrainingTask(config, next_sentence_weight))
  logging.info("Objectives trained: %s", ", ".join(task.objectives))
  return task


class LanguageModelTask:
  """Next-token prediction on a causal encoder; loss = mean cross entropy over the
  predicted positions of the global batch (next_token_targets).

  The pooler, which nothing reads, is frozen. Evaluation reports the loss,
  accuracy and perplexity (exp of the mean loss) of next-token prediction.
  """

  objectives = ("next_token",)
  curve = ("next_token_accuracy", "next-token accuracy")  # plotted beside the loss

  def __init__(self, config):
    if not config.causal_attention:
      raise ValueError("Left-to-right language modelling needs a config with "
                       "causal_attention true (run_pretraining.py --objective=ltr sets it).")
    self.config = config

  def build_model(self, pack_tokens=False):
    """The built BertPretrainer without next sentence on a new BertEncoder(config,
    pack_tokens)."""
    model = BertPretrainer(BertEncoder(self.config, pack_tokens), next_sentence=False)
    model.build()  # without next sentence: the pooler frozen (heads.TaskModel.build)
    return model

  def denominators(self, batch):
    mask = ops.cast(batch["input_mask"], "float32")
    return {"next_token": ops.sum(mask[:, :-1] * mask[:, 1:])}

  def numerators(self, model, batch, training):
    """(loss sums, metric sums) of a batch of pretraining records."""
    ids = original_tokens(batch)
    positions, labels, weights = next_token_targets(ids, batch["input_mask"])
    features = {"input_ids": ids, "input_mask": batch["input_mask"],
                "segment_ids": batch["segment_ids"], "masked_lm_positions": positions}
    logits = model(features, training=training)["masked_lm_logits"]  # [B, S - 1, V]
    return ({"next_token": ops.sum(weights * cross_entropy(logits, labels))},
            {"next_token_correct": ops.sum(weights * correct(logits, labels))})

  def losses(self, sums, denominators):
    """(total loss, dict of component losses) from global sums and denominators."""
    loss = ops.divide_no_nan(sums["next_token"], denominators["next_token"])
    return loss, {"next_token_loss": loss}

  def metric_values(self, metrics, denominators):
    return {"next_token_accuracy": ops.divide_no_nan(metrics["next_token_correct"],
                                                     denominators["next_token"])}

  def eval_results(self, sums, metrics, denominators, batch_losses):
    """Means over every predicted position evaluated, and the perplexity they give."""
    values = {k: float(v) for k, v in self.metric_values(metrics, denominators).items()}
    values["next_token_loss"] = float(ops.divide_no_nan(sums["next_token"],
                                                        denominators["next_token"]))
    values["perplexity"] = math.exp(values["next_token_loss"])
    values["loss"] = sum(batch_losses) / max(len(batch_losses), 1)
    return values
