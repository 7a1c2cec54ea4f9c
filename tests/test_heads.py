"""Heads, their per-position losses and every task's loss, against hand computations."""

import keras
import numpy as np
import pytest
import scipy.special
import tensorflow as tf

from modeling import checkpoints, classification, heads, pretraining, span_labeling
from modeling.multiple_choice import MultipleChoiceTask
from modeling.tagging import TaggingTask
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.pretraining import BertPretrainer
from modeling.span_labeling import BertSpanLabeler
from helpers import assert_close, block_ops, randomize, random_features

# A log-softmax over a few float32 logits and a mean: under 16 roundings (exp and log
# within an ulp or two each), the float32 rounding of the logits included.
LOSS_OPS = 16

CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=20, max_position_embeddings=12, type_vocab_size=2)


def test_cross_entropy_and_correct_per_position():
  # Logits [0, ln 3] give probabilities [1/4, 3/4].
  logits = np.array([[0.0, np.log(3.0)], [0.0, np.log(3.0)], [2.0, 2.0]], "float32")
  labels = np.array([1, 0, 1])
  assert_close(heads.cross_entropy(logits, labels),  # float32 against float64
               [-np.log(0.75), -np.log(0.25), np.log(2.0)], "float32", LOSS_OPS)
  np.testing.assert_array_equal(heads.correct(logits, labels), [1.0, 0.0, 0.0])  # ties: first
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype("float32")  # [B, P, V], as the masked LM's
  ids = rng.integers(0, 7, size=(2, 3))
  keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
  # float32 both, two log-softmax implementations over 7 logits.
  assert_close(heads.cross_entropy(logits, ids), keras_loss(ids, logits), "float32", LOSS_OPS)
  # Exact: 0/1 from comparisons, and squares of small integers.
  np.testing.assert_array_equal(heads.correct(logits, ids), logits.argmax(-1) == ids)
  np.testing.assert_array_equal(heads.squared_error(np.array([1.0, 2.0]), np.array([0, 4])),
                                [1.0, 4.0])


def _fixed(**outputs):
  """A stand-in model returning fixed outputs, so a task's loss can be computed by hand."""
  return lambda batch, training: {k: tf.constant(v, tf.float32) for k, v in outputs.items()}


def _loss(task, model, batch):
  sums, metrics = task.numerators(model, batch, training=False)
  denominators = task.denominators(batch)
  loss, _ = task.losses(sums, denominators)
  return float(loss), {k: float(v) for k, v in task.metric_values(metrics, denominators).items()}


def test_task_losses_by_hand():
  q = np.log(3.0)  # logits [0, q]: probabilities [1/4, 3/4]
  # Classification: the padding example (is_real_example 0) weighs nothing.
  batch = {"label_ids": np.array([1, 0, 1]), "is_real_example": np.array([1, 1, 0])}
  loss, metrics = _loss(classification.ClassificationTask(CONFIG, 2), _fixed(logits=[[0, q]] * 3),
                        batch)
  # float32 against float64, here and below.
  assert_close(loss, -(np.log(0.75) + np.log(0.25)) / 2, "float32", LOSS_OPS)
  assert metrics == {"accuracy": 0.5}  # exact: 1 / 2
  # Multiple choice: the same loss over each question's choices.
  loss, _ = _loss(MultipleChoiceTask(CONFIG), _fixed(logits=[[0, q, 0], [q, 0, 0]]),
                  {"label_ids": np.array([1, 2]), "is_real_example": np.array([1, 1])})
  assert_close(loss, -(np.log(3 / 5) + np.log(1 / 5)) / 2, "float32", LOSS_OPS)
  # Regression: mean squared error over the real examples.
  loss, metrics = _loss(classification.ClassificationTask(CONFIG, 1, regression=True),
                        _fixed(logits=[[1.0], [2.0], [9.0]]),
                        {"label_ids": np.array([0.0, 4.0, 0.0]), "is_real_example": [1, 1, 0]})
  assert loss == 2.5 and metrics == {}  # exact: (1 + 4) / 2
  # Span: the mean of the start and end cross entropies.
  loss, metrics = _loss(span_labeling.SpanTask(CONFIG),
                        _fixed(start_logits=[[0, q], [0, q]], end_logits=[[0, q], [q, 0]]),
                        {"input_ids": np.zeros((2, 2)), "start_positions": np.array([1, 0]),
                         "end_positions": np.array([1, 1])})
  assert_close(loss, 0.5 * (-(np.log(0.75) + np.log(0.25)) / 2 - (np.log(0.75) + np.log(0.25)) / 2),
               "float32", LOSS_OPS)
  assert metrics == {"start_accuracy": 0.5, "end_accuracy": 0.5}
  # Tagging: sum(w * nll) / sum(w) over the tokens.
  loss, metrics = _loss(TaggingTask(CONFIG, 2), _fixed(logits=[[[0, q], [0, q], [0, q]]]),
                        {"label_ids": np.array([[1, 0, 0]]), "label_weights": [[1.0, 1.0, 0.0]]})
  assert_close(loss, -(np.log(0.75) + np.log(0.25)) / 2, "float32", LOSS_OPS)
  assert metrics == {"accuracy": 0.5}
  # Pretraining: masked LM sum(w * nll) / (sum(w) + 1e-5), plus the next-sentence mean.
  batch = {"masked_lm_weights": np.array([[1.0, 0.0]]), "masked_lm_ids": np.array([[1, 0]]),
           "next_sentence_labels": np.array([[0]]), "input_ids": np.zeros((1, 4))}
  loss, metrics = _loss(pretraining.PretrainingTask(CONFIG),
                        _fixed(masked_lm_logits=[[[0, q], [0, q]]], next_sentence_logits=[[0, q]]),
                        batch)
  assert_close(loss, -np.log(0.75) / (1 + 1e-5) - np.log(0.25), "float32", LOSS_OPS)
  assert metrics == {"masked_lm_accuracy": 1.0, "next_sentence_accuracy": 0.0}


def _layer_norm(x, gamma, beta):
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * gamma + beta


def test_pretrainer_heads_follow_the_original_formulas():
  model = BertPretrainer(BertEncoder(CONFIG))
  w = randomize(model, 2)
  f = random_features(np.random.default_rng(3), 2, 9, CONFIG.vocab_size)
  f["masked_lm_positions"] = np.array([[0, 3, 5], [8, 1, 1]])
  out = model(f)
  seq = model.encoder(f)["sequence_output"].numpy().astype("float64")
  pooled = model.encoder(f)["pooled_output"].numpy().astype("float64")
  x = np.take_along_axis(seq, f["masked_lm_positions"][..., None], axis=1)
  x = x @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"]
  x = 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))  # exact gelu
  x = _layer_norm(x, w["cls/predictions/transform/LayerNorm/gamma"],
                  w["cls/predictions/transform/LayerNorm/beta"])
  mlm = x @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  # float32 against float64 from the same hidden states: the transform (a sum of 16),
  # LayerNorm (2 * 16) and the decoder (16); next sentence: a sum of 16.
  assert_close(out["masked_lm_logits"], mlm, "float32", 4 * 16)
  nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
  assert_close(out["next_sentence_logits"], nsp, "float32", 16)


def test_classifier_and_span_heads():
  clf = BertClassifier(BertEncoder(CONFIG), num_labels=3)
  w = randomize(clf, 4)
  f = random_features(np.random.default_rng(5), 2, 7, CONFIG.vocab_size)
  enc = clf.encoder(f)
  pooled = enc["pooled_output"].numpy().astype("float64")
  # float32 against float64 from the same pooled output: a sum of 16.
  assert_close(clf(f)["logits"], pooled @ w["output_weights"].T + w["output_bias"], "float32", 16)
  span = BertSpanLabeler(BertEncoder(CONFIG))
  w = randomize(span, 6)
  enc = span.encoder(f)["sequence_output"].numpy().astype("float64")
  logits = enc @ w["cls/squad/output_weights"].T + w["cls/squad/output_bias"]
  out = span(f)
  padding = -10000.0 * (1 - np.asarray(f["input_mask"]))  # padding never wins
  assert padding.min() < 0
  real = f["input_mask"].astype(bool)
  for i, name in enumerate(("start_logits", "end_logits")):
    want = logits[..., i] + padding
    # float32 against float64: at real positions a sum of 16; at padding the rounding
    # of adding -10000 (ulp 1e-3), the logit's own error far below it.
    assert_close(np.asarray(out[name])[real], want[real], "float32", 16, what=name)
    assert_close(np.asarray(out[name])[~real], want[~real], "float32", 2, what=name)


@pytest.mark.parametrize("make", [lambda: BertPretrainer(BertEncoder(CONFIG)),
                                  lambda: BertClassifier(BertEncoder(CONFIG), num_labels=5),
                                  lambda: BertSpanLabeler(BertEncoder(CONFIG))])
def test_task_models_round_trip_config(make):
  """A model rebuilt from its get_config has the same variables and, given the same
  weights, computes the same outputs (a config that lost a head or a size would not)."""
  model = make()
  weights = randomize(model, 3)
  clone = type(model).from_config(model.get_config())
  clone.build()
  assert clone.get_config() == model.get_config()
  table = checkpoints.variable_map(clone)
  assert {n: v.shape for n, v in table.items()} == {n: w.shape for n, w in weights.items()}
  for name, var in table.items():
    var.assign(weights[name])
  f = random_features(np.random.default_rng(4), 2, 6, CONFIG.vocab_size)
  if isinstance(model, BertPretrainer):
    f["masked_lm_positions"] = np.array([[1, 2], [3, 4]])
  got, want = clone(f), model(f)
  assert sorted(got) == sorted(want)
  for key in want:
    # float32, the same weights through 1 block and a head (sums of up to 40: the
    # masked LM's vocabulary); a lost head or size would not compute at all.
    assert_close(got[key], want[key], "float32", block_ops(CONFIG, 6) + 2 * 40, what=key)


def test_a_task_model_holds_the_encoder_it_is_given():
  """The encoder given (built already: no second copy of its variables) is the model's, the
  model computes under its policy, and get_config keeps the encoder's settings."""
  encoder = BertEncoder(CONFIG, pack_tokens=True, dtype="mixed_bfloat16")
  encoder.build()
  model = BertClassifier(encoder, num_labels=3)
  model.build()
  assert model.encoder is encoder and model.config is encoder.config
  assert model.dtype_policy.name == "mixed_bfloat16"
  assert model.classifier.compute_dtype == "bfloat16"
  names = checkpoints.variable_map(model)
  assert all(names[n] is v for n, v in checkpoints.variable_map(encoder).items())
  assert len(model.trainable_variables) == len(encoder.trainable_variables) + 2  # the head's two
  clone = BertClassifier.from_config(model.get_config())
  assert clone.encoder is not encoder and clone.encoder.pack_tokens
  assert clone.encoder.dtype_policy.name == clone.dtype_policy.name == "mixed_bfloat16"


@pytest.mark.bfloat16
def test_mixed_precision_heads_return_float32_close_to_float32():
  full = BertPretrainer(BertEncoder(CONFIG))
  w = randomize(full, 8)
  half = BertPretrainer(BertEncoder(CONFIG, dtype="mixed_bfloat16"))
  half.build()
  for name, var in checkpoints.variable_map(half).items():
    var.assign(w[name])
  f = random_features(np.random.default_rng(7), 2, 6, CONFIG.vocab_size)
  f["masked_lm_positions"] = np.array([[1, 2], [3, 4]])
  got, want = half(f), full(f)
  assert half.encoder.blocks[0].attention.query.compute_dtype == "bfloat16"
  for key in ("masked_lm_logits", "next_sentence_logits"):
    assert got[key].dtype == "float32"
    # bfloat16 against float32: 1 block, then the pooler or the masked LM's transform
    # and decoder (two dense layers of 4 bfloat16 roundings, and an activation).
    assert_close(got[key], want[key], "bfloat16", block_ops(CONFIG, 6, "bfloat16") + 2 * 4 + 1,
                 what=key)
  # The heads did compute in bfloat16: far from float32's rounding.
  assert not np.allclose(got["masked_lm_logits"], want["masked_lm_logits"], atol=1e-6, rtol=0)
  assert half.masked_lm.output_bias.dtype == "float32"


def test_lstm_mask_makes_rows_without_a_real_token_one_token_long():
  from modeling import lstm
  mask = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
  np.testing.assert_array_equal(lstm.step_mask(mask),  # booleans
                                [[True, True, False], [True, False, False], [True, False, False]])


@pytest.mark.parametrize("make", [lambda: span_labeling.SpanTask(CONFIG, bilstm_head=True),
                                  lambda: classification.ClassificationTask(CONFIG, 3,
                                                                            bilstm_head=True),
                                  lambda: TaggingTask(CONFIG, 4, feature_based=True,
                                                      lstm_units=6)])
def test_an_all_padding_row_leaves_the_bilstm_models_finite_and_other_rows_alone(make):
  """Prediction files are padded with rows of no real token (cuDNN's LSTM refuses a
  sequence of length 0): such a row gives finite outputs, and the real rows the values
  they have without it."""
  model = make().build_model()
  randomize(model, 3)
  real = random_features(np.random.default_rng(4), 2, 8, CONFIG.vocab_size)
  padded = {k: np.concatenate([v, np.zeros_like(v[:1])]) for k, v in real.items()}
  alone, together = model(real), model(padded)
  # float32, batches of 2 and 3 rows (other orders): 1 block, then an LSTM over 8 steps
  # whose gates sum up to 4 concatenated layers and the state.
  ops = block_ops(CONFIG, 8) + 8 * 5 * CONFIG.hidden_size
  for key, value in together.items():
    assert np.all(np.isfinite(value)), key
    assert_close(value[:2], alone[key], "float32", ops, what=key)


def test_a_model_that_never_reads_the_pooler_leaves_it_out_of_training():
  """The original's optimizer skips variables without a gradient; ours trains
  trainable_variables, so a model whose outputs do not read the pooler freezes it (else
  weight decay alone would shrink it, step by step, in the saved checkpoint)."""
  from modeling.language_model import LanguageModelTask
  pooler = {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
  causal = BertConfig.from_dict({**CONFIG.to_dict(), "causal_attention": True})
  for task, reads_pooler in (
      (classification.ClassificationTask(CONFIG, 3), True),
      (classification.ClassificationTask(CONFIG, 3, bilstm_head=True), False),
      (MultipleChoiceTask(CONFIG), True),
      (span_labeling.SpanTask(CONFIG), False),
      (TaggingTask(CONFIG, 5), False),
      (pretraining.PretrainingTask(CONFIG), True),
      (pretraining.PretrainingTask(CONFIG, next_sentence_weight=0.0), False),
      (LanguageModelTask(causal), False)):
    model = task.build_model()
    names = checkpoints.model_weights(model)  # the original's names, every variable
    trained = {name for name, variable in checkpoints.variable_map(model).items()
               if any(variable is v for v in model.trainable_variables)}
    assert pooler <= set(names), type(task)
    assert (pooler <= trained) == reads_pooler and (pooler & trained) in (set(), pooler), (
        type(task).__name__, reads_pooler)
