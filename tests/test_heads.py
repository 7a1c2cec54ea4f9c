"""Heads and losses against direct numpy computations of the original's formulas."""

import numpy as np
import pytest
import scipy.special

from modeling import heads
from modeling.config import BertConfig
from modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from helpers import randomize, random_features

CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=20, max_position_embeddings=12, type_vocab_size=2)


def test_masked_lm_loss_is_weighted_mean_with_epsilon():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype("float32")
  ids = np.array([[1, 2, 0], [6, 0, 0]])
  weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "float32")
  nll = -np.take_along_axis(scipy.special.log_softmax(logits, -1), ids[..., None], -1)[..., 0]
  want = (weights * nll).sum() / (weights.sum() + 1e-5)
  np.testing.assert_allclose(heads.masked_lm_loss(logits, ids, weights), want, rtol=1e-6)


def test_classification_regression_and_span_losses():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(4, 3)).astype("float32")
  labels = np.array([0, 2, 1, 2])
  want = -scipy.special.log_softmax(logits, -1)[np.arange(4), labels].mean()
  np.testing.assert_allclose(heads.classification_loss(logits, labels), want, rtol=1e-6)
  np.testing.assert_allclose(heads.regression_loss(np.array([1.0, 2.0]), np.array([0.0, 4.0])),
                             2.5, rtol=1e-6)
  start, end = rng.normal(size=(2, 5)).astype("float32"), rng.normal(size=(2, 5)).astype("float32")
  sp, ep = np.array([1, 4]), np.array([2, 4])
  want = 0.5 * (-scipy.special.log_softmax(start, -1)[[0, 1], sp].mean()
                - scipy.special.log_softmax(end, -1)[[0, 1], ep].mean())
  np.testing.assert_allclose(heads.span_loss(start, end, sp, ep), want, rtol=1e-6)


def _layer_norm(x, gamma, beta):
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * gamma + beta


def test_pretrainer_heads_follow_the_original_formulas():
  model = BertPretrainer(CONFIG)
  w = randomize(model, 2)
  f = random_features(np.random.default_rng(3), 2, 9, CONFIG.vocab_size)
  f["masked_lm_positions"] = np.array([[0, 3, 5], [8, 1, 1]])
  out = model(f)
  seq = model.encoder(f)["sequence_output"].numpy()
  pooled = model.encoder(f)["pooled_output"].numpy()
  x = np.take_along_axis(seq, f["masked_lm_positions"][..., None], axis=1)
  x = x @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"]
  x = 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))  # exact gelu
  x = _layer_norm(x, w["cls/predictions/transform/LayerNorm/gamma"],
                  w["cls/predictions/transform/LayerNorm/beta"])
  mlm = x @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  np.testing.assert_allclose(out["masked_lm_logits"], mlm, atol=1e-4)
  nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
  np.testing.assert_allclose(out["next_sentence_logits"], nsp, atol=1e-5)


def test_classifier_and_span_heads():
  clf = BertClassifier(CONFIG, num_labels=3)
  w = randomize(clf, 4)
  f = random_features(np.random.default_rng(5), 2, 7, CONFIG.vocab_size)
  enc = clf.encoder(f)
  np.testing.assert_allclose(
      clf(f)["logits"], enc["pooled_output"].numpy() @ w["output_weights"].T + w["output_bias"],
      atol=1e-5)
  span = BertSpanLabeler(CONFIG)
  w = randomize(span, 6)
  enc = span.encoder(f)["sequence_output"].numpy()
  logits = enc @ w["cls/squad/output_weights"].T + w["cls/squad/output_bias"]
  out = span(f)
  padding = -10000.0 * (1 - np.asarray(f["input_mask"]))  # padding never wins
  assert padding.min() < 0
  np.testing.assert_allclose(out["start_logits"], logits[..., 0] + padding, atol=1e-3)
  np.testing.assert_allclose(out["end_logits"], logits[..., 1] + padding, atol=1e-3)


@pytest.mark.parametrize("make", [lambda: BertPretrainer(CONFIG),
                                  lambda: BertClassifier(CONFIG, num_labels=5),
                                  lambda: BertSpanLabeler(CONFIG)])
def test_task_models_round_trip_config(make):
  model = make()
  clone = type(model).from_config(model.get_config())
  assert clone.get_config() == model.get_config()


def test_mixed_precision_heads_return_float32():
  model = BertPretrainer(CONFIG, dtype="mixed_bfloat16")
  f = random_features(np.random.default_rng(7), 2, 6, CONFIG.vocab_size)
  f["masked_lm_positions"] = np.array([[1, 2], [3, 4]])
  out = model(f)
  assert out["masked_lm_logits"].dtype == "float32"
  assert out["next_sentence_logits"].dtype == "float32"
  assert model.masked_lm.output_bias.dtype == "float32"
