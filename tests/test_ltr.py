"""Table 5's models: causal attention, the left-to-right objective, the LTR sentence
representation and the BiLSTM head (issue 24)."""

import json
import math

import numpy as np
import pytest
import scipy.special
import tensorflow as tf

from helpers import (assert_close, block_ops, randomize, random_features, read_eval_results,
                     rounding_tolerance)
from modeling import (attention, checkpoints, classification, heads, language_model,
                      pretraining, span_labeling, tagging)
from modeling.config import BertConfig
from modeling.encoder import BertEncoder, last_real_positions

TINY = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=32, type_vocab_size=2,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
CAUSAL = language_model.causal_config(TINY)


def _batch(rng, vocab_size, batch=4, seq=12):
  """Random right-padded features, one row all padding (as prediction files are padded)."""
  f = random_features(rng, batch, seq, vocab_size)
  f["input_mask"][-1] = f["input_ids"][-1] = f["segment_ids"][-1] = 0
  return f


def _minilm_causal(minilm_dir):
  config = language_model.causal_config(checkpoints.find_config(minilm_dir))
  encoder = BertEncoder(config)
  checkpoints.load_checkpoint(encoder, minilm_dir)
  return encoder


def _tiny_causal(_):
  encoder = BertEncoder(CAUSAL)
  randomize(encoder, 3)
  return encoder


def _outputs(encoder, f, pack_tokens=False):
  out = encoder(f, pack_tokens=pack_tokens)
  return [np.asarray(out["embedding_output"])] + [np.asarray(x) for x in out["encoder_outputs"]]


# --- Causal attention ---------------------------------------------------------------

@pytest.mark.parametrize("make", [_tiny_causal, _minilm_causal], ids=["tiny", "minilm"])
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_a_later_token_changes_no_earlier_position(minilm_dir, make, packed):
  encoder = make(minilm_dir)
  vocab = encoder.config.vocab_size
  rng = np.random.default_rng(5)
  f = _batch(rng, vocab, seq=20)
  f["input_mask"][0] = f["input_ids"][0] > -1  # one row without padding
  lengths = f["input_mask"].sum(1)
  changed = {k: v.copy() for k, v in f.items()}
  cut = [int(rng.integers(1, n)) if n > 1 else 0 for n in lengths]  # the changed position
  for row, j in enumerate(cut[:-1]):
    changed["input_ids"][row, j] = (f["input_ids"][row, j] + 1 + row) % vocab
  before, after = _outputs(encoder, f, packed), _outputs(encoder, changed, packed)
  for layer, (a, b) in enumerate(zip(before, after)):
    for row, j in enumerate(cut[:-1]):
      # Equal in exact arithmetic, and in float32 too (a later key weighs exp(-10000) = 0):
      # at most float32 orders through the blocks, relative to the layer's values.
      assert_close(b[row, :j], a[row, :j], "float32",
                   2 * encoder.config.hidden_size + layer * block_ops(encoder.config, 20),
                   np.abs(a).max(), what=f"layer {layer}")
      assert np.abs(b[row, j] - a[row, j]).max() > 1e-3, (layer, row)  # the token itself: O(1)
  # The same weights attending both ways: earlier positions do see the change.
  encoder.config.causal_attention = False
  try:
    a, b = _outputs(encoder, f, packed)[-1], _outputs(encoder, changed, packed)[-1]
  finally:
    encoder.config.causal_attention = True
  assert all(np.abs(b[row, :j] - a[row, :j]).max() > 1e-3 for row, j in enumerate(cut[:-1]))


def test_causal_bias_combines_the_padding_mask():
  bias = np.asarray(attention.attention_bias_from_mask(np.array([[1, 1, 1, 0]]), causal=True))
  allowed = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]])
  assert bias.shape == (1, 1, 4, 4)
  np.testing.assert_array_equal(bias[0, 0], (1 - allowed) * -10000.0)  # exact: 0/1 times -10000
  np.testing.assert_array_equal(last_real_positions(np.array([[1, 1, 1, 0], [0, 0, 0, 0],
                                                            [1, 1, 1, 1]])), [2, 0, 3])


@pytest.mark.parametrize("make", [_tiny_causal, _minilm_causal], ids=["tiny", "minilm"])
def test_causal_pooled_output_reads_the_last_real_token(minilm_dir, make):
  """pooled_output = tanh(dense(h[last real])), on the full and the pooled-only paths,
  padded and packed; it depends on the last token, and is finite on an all-padding row."""
  encoder = make(minilm_dir)
  f = _batch(np.random.default_rng(8), encoder.config.vocab_size, seq=16)
  full = encoder(f)
  last = f["input_mask"].sum(1) - 1
  last[-1] = 0
  h = np.asarray(full["sequence_output"])[np.arange(len(last)), last]
  kernel, bias = encoder.pooler.kernel.numpy(), encoder.pooler.bias.numpy()
  config, hidden = encoder.config, encoder.config.hidden_size
  # float32 against float64 from the same hidden states: a sum of H, relative to them.
  assert_close(full["pooled_output"], np.tanh(h.astype("float64") @ kernel + bias), "float32",
               hidden, np.abs(h).max())
  for packed in (False, True):
    short = encoder(f, pooled_only=True, pack_tokens=packed)
    rows = slice(None, -1 if packed else None)  # packed, a padding row is what zeros give
    # float32, other shapes through every block (packed) or the last (padded), then
    # the pooler; relative to the hidden states.
    ops = config.num_hidden_layers * block_ops(config, 16) + hidden
    assert_close(short["pooled_output"][rows], full["pooled_output"][rows], "float32", ops,
                 np.abs(h).max())
    assert_close(short["sequence_output"][rows, 0], h[rows], "float32", ops)
    assert np.isfinite(short["pooled_output"]).all()
  changed = {k: v.copy() for k, v in f.items()}
  changed["input_ids"][0, last[0]] = (f["input_ids"][0, last[0]] + 1) % encoder.config.vocab_size
  # The last token moves the pooled output by O(0.1), far beyond rounding.
  assert np.abs(encoder(changed)["pooled_output"][0] - full["pooled_output"][0]).max() > 1e-4
  assert np.isfinite(full["pooled_output"]).all()


def test_causal_multiple_choice_scores_each_choice_at_its_last_token():
  from modeling import multiple_choice
  model = multiple_choice.BertMultipleChoice(BertEncoder(CAUSAL))
  model.build()
  randomize(model, 9)
  flat = _batch(np.random.default_rng(9), 50, batch=6, seq=10)
  last = np.maximum(flat["input_mask"].sum(1) - 1, 0)
  h = np.asarray(model.encoder(flat)["sequence_output"])[np.arange(6), last]  # [6, H]
  w = checkpoints.model_weights(model)
  pooled = np.tanh(h.astype("float64") @ w["bert/pooler/dense/kernel"]
                   + w["bert/pooler/dense/bias"])
  want = pooled @ w["cls/multiple_choice/output_weights"].T + w["cls/multiple_choice/output_bias"]
  got = model({k: v.reshape(2, 3, 10) for k, v in flat.items()})["logits"]
  # float32 against float64 from the same hidden states (which the model computes on
  # [2, 3, 10] rather than [6, 10]: float32 orders through 2 blocks), then the pooler
  # and the classifier (sums of 16); relative to the hidden states.
  assert_close(got, want.reshape(2, 3), "float32", 2 * block_ops(CAUSAL, 10) + 2 * 16,
               np.abs(h).max())


def test_causal_encoder_compiles_with_xla_at_fixed_shapes():
  encoder = _tiny_causal(None)
  f = _batch(np.random.default_rng(2), 50)
  compiled = tf.function(lambda x: encoder(x, pooled_only=True), jit_compile=True)
  for pooled_only, fn in ((True, compiled), (False, tf.function(encoder, jit_compile=True))):
    want = encoder(f, pooled_only=pooled_only)
    got = fn(f)
    # float32, XLA's fusions and orders through 2 blocks and the pooler (a sum of 16),
    # relative to the hidden states.
    ops = 2 * block_ops(CAUSAL, 12) + 16
    scale = np.abs(want["sequence_output"]).max()
    assert_close(got["pooled_output"], want["pooled_output"], "float32", ops, scale)
    assert_close(got["sequence_output"], want["sequence_output"], "float32", ops)


# --- The config field ------------------------------------------------------------------

def test_config_without_the_field_loads_the_original_encoder(minilm_dir, tmp_path):
  """MiniLM's config.json has no causal_attention: the HF golden values of test_encoder
  still come out, the saved config gains no key, and an explicit false is the same model."""
  config = checkpoints.find_config(minilm_dir)
  assert config.causal_attention is False and "causal_attention" not in config.to_dict()
  encoder = BertEncoder(config)
  checkpoints.load_checkpoint(encoder, minilm_dir)
  from data.tokenization import FullTokenizer
  tokenizer = FullTokenizer(f"{minilm_dir}/vocab.txt")
  ids = tokenizer.convert_tokens_to_ids(
      ["[CLS]"] + tokenizer.tokenize("The quick brown fox jumps over the lazy dog.") + ["[SEP]"])
  f = {"input_ids": np.array([ids]), "input_mask": np.ones((1, len(ids)), "int32"),
       "segment_ids": np.zeros((1, len(ids)), "int32")}
  out = encoder(f)
  # As test_encoder's golden values: float32 (PyTorch's orders) through 6 blocks and the
  # pooler, relative to the hidden states; printed to 6 decimals (5e-7).
  tol = rounding_tolerance("float32", 6 * block_ops(config, len(ids)) + 384,
                           np.abs(out["sequence_output"]).max()) + 5e-7
  np.testing.assert_allclose(out["sequence_output"][0, 0, :5],
                             [0.046444, 0.338062, 0.208205, 0.646797, -0.19571], rtol=0, atol=tol)
  np.testing.assert_allclose(out["pooled_output"][0, :5],
                             [-0.066271, 0.028093, 0.070613, 0.116599, -0.015158],
                             rtol=0, atol=tol)
  # A released bert_config.json round-trips byte for byte; the field appears only when true.
  released = {"vocab_size": 99, "hidden_size": 8, "num_attention_heads": 2,
              "directionality": "bidi"}
  text = BertConfig.from_dict(released).to_json_string()
  assert "causal_attention" not in text
  assert BertConfig.from_dict(json.loads(text)) == BertConfig.from_dict(
      {**released, "causal_attention": False})
  causal = language_model.causal_config(BertConfig.from_dict(released))
  causal.to_json_file(str(tmp_path / "c.json"))
  assert json.loads((tmp_path / "c.json").read_text())["causal_attention"] is True
  assert BertConfig.from_json_file(str(tmp_path / "c.json")).causal_attention is True
  with pytest.raises(ValueError, match="causal_attention must be true or false, got 'yes'"):
    BertConfig.from_dict({**released, "causal_attention": "yes"})
  # transformers spells it is_decoder, both ways.
  from modeling import hf_checkpoints
  assert BertConfig.from_dict({"model_type": "bert", "vocab_size": 9,
                               "is_decoder": True}).causal_attention
  hf = hf_checkpoints.hf_config(causal, "BertModel")
  assert hf["is_decoder"] is True and "causal_attention" not in hf


# --- The LTR objective -------------------------------------------------------------------

MASK = 4


def _records(rng, batch=3, seq=10, predictions=3):
  """Pretraining features with [MASK] written over some tokens of the text `text`."""
  text = rng.integers(5, 50, size=(batch, seq)).astype("int32")
  lengths = np.array([seq, seq - 3, 4][:batch])
  mask = (np.arange(seq) < lengths[:, None]).astype("int32")
  text[:, 0] = 2
  text[np.arange(batch), lengths - 1] = 3
  text *= mask
  positions = np.zeros((batch, predictions), "int32")
  weights = np.zeros((batch, predictions), "float32")
  for row, n in enumerate(lengths):
    chosen = np.sort(rng.choice(np.arange(1, n - 1), size=min(predictions, n - 2) - 1,
                                replace=False))
    positions[row, :len(chosen)], weights[row, :len(chosen)] = chosen, 1.0
  ids = text.copy()
  ids[np.arange(batch)[:, None], positions] = np.where(weights > 0, MASK, ids[
      np.arange(batch)[:, None], positions])
  ids[0, positions[0, 0]] = 7  # a random replacement, as the generator writes one in ten
  return text, {"input_ids": ids, "input_mask": mask, "segment_ids": (np.arange(seq) > 4) * mask,
                "masked_lm_positions": positions,
                "masked_lm_ids": text[np.arange(batch)[:, None], positions] * (weights > 0),
                "masked_lm_weights": weights, "next_sentence_labels": np.zeros((batch, 1))}


def test_original_tokens_put_the_masked_text_back():
  text, batch = _records(np.random.default_rng(0))
  assert (batch["input_ids"] != text).any()
  np.testing.assert_array_equal(language_model.original_tokens(batch), text)
  # Padding entries (position 0, id 0, weight 0) leave [CLS] alone; by hand:
  by_hand = {"input_ids": np.array([[2, 4, 9, 4, 3, 0]]),
             "masked_lm_positions": np.array([[3, 1, 0]]),
             "masked_lm_ids": np.array([[11, 12, 0]]),
             "masked_lm_weights": np.array([[1.0, 1.0, 0.0]])}
  np.testing.assert_array_equal(language_model.original_tokens(by_hand), [[2, 12, 9, 11, 3, 0]])


def test_next_token_loss_by_hand():
  """The task's loss, accuracy and perplexity against numpy on the restored text: position t
  predicts token t + 1 where both are real, through the tied masked-LM head."""
  text, batch = _records(np.random.default_rng(1))
  task = language_model.LanguageModelTask(CAUSAL)
  model = task.build_model()
  randomize(model, 4)
  sums, metrics = task.numerators(model, batch, training=False)
  denominators = task.denominators(batch)
  loss, parts = task.losses(sums, denominators)

  seq = np.asarray(model.encoder({"input_ids": text, "input_mask": batch["input_mask"],
                                  "segment_ids": batch["segment_ids"]})["sequence_output"])
  seq = seq.astype("float64")
  w = checkpoints.model_weights(model)
  x = seq @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"]
  x = 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))
  x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
  x = x * w["cls/predictions/transform/LayerNorm/gamma"] + w["cls/predictions/transform/LayerNorm/beta"]
  logits = x @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  logp = scipy.special.log_softmax(logits[:, :-1], -1)  # [B, S - 1, V]
  labels = text[:, 1:]
  weights = batch["input_mask"][:, :-1] * batch["input_mask"][:, 1:]
  nll = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
  assert weights.sum() == (batch["input_mask"].sum(1) - 1).sum() == float(
      denominators["next_token"])
  want = (weights * nll).sum() / weights.sum()
  # float32 against float64 from the same hidden states (up to float32 orders through 2
  # blocks): the head's transform, LayerNorm and decoder (4 * 16), a log-softmax over 50,
  # and the mean over the tokens.
  ops = 2 * block_ops(CAUSAL, text.shape[1]) + 4 * 16 + 50 + int(weights.sum())
  assert_close(float(loss), want, "float32", ops)
  assert_close(float(parts["next_token_loss"]), want, "float32", ops)
  accuracy = (weights * (logp.argmax(-1) == labels)).sum() / weights.sum()
  values = task.eval_results(sums, metrics, denominators, [float(loss)])
  assert_close(values["next_token_accuracy"], accuracy, "float32", 1)  # counts: one division
  # exp turns the loss's absolute error into a relative one: the loss's bound at the
  # scale loss * perplexity, and exp's own rounding.
  assert_close(values["perplexity"], math.exp(want), "float32", ops + 2, want * math.exp(want))
  assert sorted(values) == ["loss", "next_token_accuracy", "next_token_loss", "perplexity"]
  assert task.objectives == ("next_token",)
  # No next-sentence head; the names stay the original's.
  assert not any(n.startswith("cls/seq_relationship") for n in w)
  assert not model.encoder.pooler.trainable
  with pytest.raises(ValueError, match="causal_attention"):
    language_model.LanguageModelTask(TINY)


def test_ltr_step_compiles_with_xla_at_fixed_shapes():
  _, batch = _records(np.random.default_rng(2))
  task = language_model.LanguageModelTask(CAUSAL)
  model = task.build_model()
  want = task.numerators(model, batch, training=False)
  got = tf.function(lambda b: task.numerators(model, b, training=False), jit_compile=True)(batch)
  # float32, XLA's fusions and orders: 2 blocks, the head (4 * 16), a log-softmax over
  # 50, and the sum over the batch's 32 * 4 tokens.
  assert_close(got[0]["next_token"], want[0]["next_token"], "float32",
               2 * block_ops(CAUSAL, batch["input_ids"].shape[1]) + 4 * 16 + 50 + 4 * 32)
  # Exact: a count of argmax hits (no logit is within rounding of a tie here).
  np.testing.assert_array_equal(got[1]["next_token_correct"], want[1]["next_token_correct"])


def test_restored_records_are_the_corpus_text(ltr_files):
  """Records from the generator (masks and all) read back as runs of the corpus's tokens."""
  d, vocab_file, records, _ = ltr_files
  from data import tokenization
  from test_pretraining_data import read_records
  r = read_records([records], L, P)
  tokenizer = tokenization.FullTokenizer(vocab_file)
  restored = np.asarray(language_model.original_tokens(r))
  mask_id = tokenizer.vocab["[MASK]"]
  assert (r["input_ids"] == mask_id).sum() > 100 and not (restored == mask_id).any()
  stream = " " + " ".join(str(i) for line in open(d / "corpus.txt")
                          for i in tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))) + " "
  sep = tokenizer.vocab["[SEP]"]
  for row, n in zip(restored, r["input_mask"].sum(1)):
    tokens = list(row[1:n])  # A [SEP] B [SEP]; B is empty at a document's end
    first = tokens.index(sep)
    assert first > 0
    for part in (tokens[:first], tokens[first + 1:-1]):
      assert not part or " " + " ".join(map(str, part)) + " " in stream


# --- The BiLSTM head ----------------------------------------------------------------

def _numpy_lstm(x, kernel, recurrent, bias):
  """Keras' LSTM (gates i, f, c, o; sigmoid and tanh) over x [T, D] -> [T, units]."""
  units = recurrent.shape[0]
  h, c, out = np.zeros(units), np.zeros(units), []
  sig = scipy.special.expit
  for step in x:
    i, f, g, o = np.split(step @ kernel + h @ recurrent + bias, 4)
    c = sig(f) * c + sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(c)
    out.append(h)
  return np.array(out)


def _numpy_bilstm(sequence, mask, w):
  """Forward and backward LSTMs over each row's real tokens, zeros at padding: [B, S, 2u]."""
  units = w["bilstm/fw/recurrent_kernel"].shape[0]
  out = np.zeros(sequence.shape[:2] + (2 * units,))
  for row, n in enumerate(mask.sum(1)):
    if n:
      x = sequence[row, :n]
      fw = _numpy_lstm(x, *(w[f"bilstm/fw/{v}"] for v in ("kernel", "recurrent_kernel", "bias")))
      bw = _numpy_lstm(x[::-1], *(w[f"bilstm/bw/{v}"]
                                  for v in ("kernel", "recurrent_kernel", "bias")))[::-1]
      out[row, :n] = np.concatenate([fw, bw], -1)
  return out


@pytest.mark.parametrize("config", [TINY, CAUSAL], ids=["bidirectional", "causal"])
def test_bilstm_heads_by_hand(config):
  """Names and shapes, and the logits against numpy LSTMs over the real tokens: at every
  position for SQuAD, from each direction's final output for the classifier."""
  f = _batch(np.random.default_rng(3), 50)
  span = span_labeling.SpanTask(config, bilstm_head=True).build_model()
  classifier = classification.ClassificationTask(config, 3, bilstm_head=True).build_model()
  units = heads.bilstm_units(config)
  assert units == 8
  for model, prefix in ((span, "cls/squad/"), (classifier, "")):
    randomize(model, 6)
    w = checkpoints.model_weights(model)
    shapes = {n: w[n].shape for n in w if not n.startswith("bert/")}
    assert shapes == {f"{prefix}output_weights": (2 if prefix else 3, 2 * units),
                      f"{prefix}output_bias": (2 if prefix else 3,),
                      **{f"bilstm/{d}/{v}": s for d in ("fw", "bw") for v, s in (
                          ("kernel", (16, 4 * units)), ("recurrent_kernel", (units, 4 * units)),
                          ("bias", (4 * units,)))}}
    rebuilt = type(model).for_head_variables(BertEncoder(config), {n: w[n].shape for n in w})
    assert rebuilt.bilstm is not None and rebuilt.get_config() == model.get_config()
    sequence = np.asarray(model.encoder(f)["sequence_output"]).astype("float64")
    hidden = _numpy_bilstm(sequence, f["input_mask"], w)
    logits = lambda x: x @ w[f"{prefix}output_weights"].T + w[f"{prefix}output_bias"]
    # float32 against float64 from the same hidden states: LSTMs over up to 12 steps,
    # each gate a sum of 16 inputs and 8 state values, then the output layer (16).
    ops = 12 * (16 + 8) + 16
    if model is span:
      out = span(f)
      real = f["input_mask"] > 0
      assert_close(np.asarray(out["start_logits"])[real], logits(hidden)[real][:, 0], "float32",
                   ops)
      assert_close(np.asarray(out["end_logits"])[real], logits(hidden)[real][:, 1], "float32", ops)
    else:  # the final output of each direction: forward at the last real token, backward at 0
      last = np.maximum(f["input_mask"].sum(1) - 1, 0)
      ends = np.concatenate([hidden[np.arange(len(last)), last, :units], hidden[:, 0, units:]], -1)
      assert_close(classifier(f)["logits"], logits(ends), "float32", ops)
  assert not classifier.encoder.pooler.trainable and not classifier.uses_pooler


def test_bilstm_head_gradients():
  """Every BiLSTM variable gets a gradient, and it matches finite differences."""
  f = _batch(np.random.default_rng(4), 50)
  task = classification.ClassificationTask(TINY, 3, bilstm_head=True)
  model = task.build_model()
  randomize(model, 7, scale=0.3)
  f.update(label_ids=np.array([0, 2, 1, 0]), is_real_example=np.array([1, 1, 1, 0]))

  def loss():
    sums, _ = task.numerators(model, f, training=False)
    return task.losses(sums, task.denominators(f))[0]

  names = checkpoints.variable_map(model)
  bilstm = {n: v for n, v in names.items() if n.startswith("bilstm/")}
  with tf.GradientTape() as tape:
    value = loss()
  grads = dict(zip(bilstm, tape.gradient(value, list(bilstm.values()))))
  assert len(grads) == 6 and all(np.abs(g).max() > 1e-6 for g in grads.values()), grads.keys()
  for name in ("bilstm/fw/kernel", "bilstm/bw/recurrent_kernel", "bilstm/bw/bias"):
    var, grad = bilstm[name], np.asarray(grads[name])
    index = np.unravel_index(np.abs(grad).argmax(), grad.shape)
    eps, start = 1e-2, var.numpy()
    moved = []
    for sign in (1, -1):
      nudged = start.copy()
      nudged[index] += sign * eps
      var.assign(nudged)
      moved.append(float(loss()))
    var.assign(start)
    # Not rounding: a central difference with step 1e-2 is off by the loss's third
    # derivative times 1e-4 / 6, a few percent of the gradient at most here.
    np.testing.assert_allclose((moved[0] - moved[1]) / (2 * eps), grad[index], rtol=2e-2,
                               err_msg=name)


def test_bilstm_heads_compile_with_xla_at_fixed_shapes():
  f = _batch(np.random.default_rng(5), 50)
  for model in (span_labeling.SpanTask(CAUSAL, True).build_model(),
                classification.ClassificationTask(CAUSAL, 2, bilstm_head=True).build_model()):
    want = model(f)
    got = tf.function(lambda x: model(x), jit_compile=True)(f)
    # The output layer's initial weights (stddev 0.02) make logits of sums of 16 small
    # terms that may cancel: relative to the largest value it reaches from LSTM outputs
    # in [-1, 1], not to the logits it happens to give.
    w = checkpoints.model_weights(model)
    kernel, bias = (next(v for n, v in w.items() if n.endswith(end))
                    for end in ("output_weights", "output_bias"))
    scale = (np.abs(kernel).sum(-1) + np.abs(bias)).max()
    for key in want:
      # float32, XLA's fusions and orders: 2 blocks, the LSTMs (12 steps of sums of 16 + 8)
      # and the output layer; span logits at padding sit at -10000 (its ulp 1e-3), so
      # checked at the real positions only.
      real = f["input_mask"] > 0 if want[key].shape == f["input_mask"].shape else slice(None)
      assert_close(np.asarray(got[key])[real], np.asarray(want[key])[real], "float32",
                   2 * block_ops(CAUSAL, 12) + 12 * (16 + 8) + 16, scale, what=key)


# --- The scripts --------------------------------------------------------------------

L, P = 32, 5
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "in", "park", "hello", "world", "zebra",
         "where", "is", "film", "was", "very", "and", "plot", "good", "great", "bad", "awful",
         "ran", "saw", "big", "small", "red", "blue", "tree"]


@pytest.fixture(scope="module")
def ltr_files(tmp_path_factory):
  """A corpus, its vocab, generator records (masks included) and a tiny config."""
  import random
  from conftest import write_vocab
  from data.pretraining import generation, instances
  d = tmp_path_factory.mktemp("ltr")
  vocab = write_vocab(d / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?",
                                        "!"] + WORDS)
  rng = random.Random(4)
  lines = []
  for _ in range(30):
    lines += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) + " ."
              for _ in range(rng.randint(4, 16))] + [""]
  (d / "corpus.txt").write_text("\n".join(lines) + "\n")
  records = str(d / "train.tfrecord")
  generation.generate_exact([str(d / "corpus.txt")], [records], vocab, True,
                            instances.GenerationConfig(L, P, 0.15, 0.1, False, 2,
                                                       next_sentence=False), 1)
  config = BertConfig(vocab_size=len(WORDS) + 8, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                      type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  return d, vocab, records, config


@pytest.fixture(scope="module")
def ltr_export(ltr_files, tmp_path_factory):
  """run_pretraining.py --objective=ltr: a few steps, evaluated and exported."""
  from scripts import run_script
  d, vocab, records, _ = ltr_files
  out = tmp_path_factory.mktemp("ltr_run")
  run_script("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
             f"--input_file={records}", f"--output_dir={out}", "--objective=ltr", "--do_train",
             "--do_eval", f"--max_seq_length={L}", f"--max_predictions_per_seq={P}",
             "--train_batch_size=8", "--num_train_steps=6", "--num_warmup_steps=1",
             "--learning_rate=1e-3", "--max_eval_steps=3", "--seed=1", f"--vocab_file={vocab}")
  return out


@pytest.mark.slow
def test_pretraining_script_writes_a_causal_checkpoint(ltr_files, ltr_export):
  from scripts import last_error_line, run_script
  d, vocab, records, config = ltr_files
  values = read_eval_results(ltr_export / "eval_results.txt")  # numbers only
  assert list(values) == ["global_step", "loss", "next_token_accuracy", "next_token_loss",
                          "perplexity"]
  # float64: exp of the loss as written (repr round-trips), exp's own rounding only.
  assert_close(float(values["perplexity"]), math.exp(float(values["next_token_loss"])),
               "float64", 2)
  assert float(values["next_token_loss"]) < math.log(config.vocab_size)  # it learned something
  saved = json.loads((ltr_export / "export" / "bert_config.json").read_text())
  assert saved == {**config.to_dict(), "causal_attention": True}
  names = set(checkpoints.read_checkpoint(str(ltr_export / "export")).weights)
  assert "cls/predictions/output_bias" in names
  assert not any(n.startswith("cls/seq_relationship") for n in names)
  from cli import run_identity
  assert json.loads((ltr_export / "run.json").read_text()) == {
      "objective": "ltr", "next_sentence_weight": 1.0, "optimizer": "adamw",
      **run_identity.vocab_entry(str(vocab)), "objectives": ["next_token"]}
  from modeling import conversion  # convert_checkpoint.py's reading: every variable placed
  _, model = conversion.load_for_conversion(str(ltr_export / "export"),
                                            checkpoints.find_config(str(ltr_export / "export")))
  assert isinstance(model, pretraining.BertPretrainer) and model.next_sentence is None
  assert model.encoder.config.causal_attention
  proc = run_script("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
                    f"--input_file={records}", f"--output_dir={ltr_export}", "--do_eval",
                    f"--max_seq_length={L}", f"--max_predictions_per_seq={P}", "--objective=mlm",
                    expect_ok=False)
  assert last_error_line(proc) == (
      f"error: --output_dir={ltr_export} holds a model trained with objective 'ltr', not 'mlm'; "
      "it would be reused. Pass --objective=ltr to use it, or a new --output_dir to start "
      "afresh.")
  proc = run_script("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
                    f"--input_file={records}", f"--output_dir={d / 'x'}", "--do_train",
                    "--objective=ltr", "--next_sentence_weight=0", expect_ok=False)
  assert last_error_line(proc).startswith("error: --next_sentence_weight applies to "
                                          "--objective=mlm")


@pytest.mark.slow
def test_classifier_fine_tunes_the_causal_encoder(ltr_files, ltr_export, tmp_path):
  """run_classifier.py from the LTR export: its test predictions are those of the causal
  model read at the last token, not of the same weights attending both ways."""
  from data import features, tokenization
  from scripts import last_error_line, run_script
  _, vocab, _, _ = ltr_files
  import random
  rng = random.Random(2)
  sentence = lambda label: " ".join(rng.choice(WORDS[:12]) for _ in range(rng.randint(2, 8))) + \
      " " + ("good" if label else "awful")
  data = tmp_path / "sst2"
  data.mkdir()
  for split, n in (("train", 64), ("dev", 8)):
    rows = [f"{sentence(i % 2)}\t{i % 2}" for i in range(n)]
    (data / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
  tests = [sentence(i % 2) for i in range(10)]
  (data / "test.tsv").write_text("index\tsentence\n" + "".join(
      f"{i}\t{t}\n" for i, t in enumerate(tests)))
  out = tmp_path / "out"
  args = [f"--data_dir={data}", "--task_name=SST-2", f"--init_checkpoint={ltr_export / 'export'}",
          f"--output_dir={out}", "--max_seq_length=16", "--seed=3"]
  run_script("run_classifier.py", *args, "--do_train", "--do_predict", "--train_batch_size=16",
             "--num_train_epochs=1", "--learning_rate=1e-3", "--predict_batch_size=4")
  record = json.loads((out / "run.json").read_text())
  assert record["causal_attention"] is True and record["bilstm_head"] is False
  probabilities = np.loadtxt(out / "test_results.tsv")
  tokenizer = tokenization.FullTokenizer(vocab)
  batch = features.pad_batch([features.pack_pair(tokenizer, t, None, 16) for t in tests], 16)
  config = checkpoints.find_config(str(ltr_export / "export"))
  assert config.causal_attention

  def logits(config):
    model = classification.BertClassifier(BertEncoder(config), 2)
    checkpoints.load_checkpoint(model, str(out))
    return model(batch)["logits"].numpy()
  want = logits(config)
  # float32, the script's batches of 4 against one of 10: 2 blocks, the pooler and the
  # classifier (sums of 32); a probability moves by at most twice its logits' change,
  # hence four times the roundings, relative to the logits.
  assert_close(probabilities, scipy.special.softmax(want, -1), "float32",
               4 * (2 * block_ops(config, 16) + 2 * 32), np.abs(want).max())
  bidirectional = BertConfig.from_dict({**config.to_dict(), "causal_attention": False})
  # Attending both ways moves the probabilities by O(0.1).
  assert np.abs(scipy.special.softmax(logits(bidirectional), -1) - probabilities).max() > 1e-3
  proc = run_script("run_classifier.py", *args, "--do_predict", "--bilstm_head", expect_ok=False)
  assert last_error_line(proc) == (
      f"error: --output_dir={out} holds a model trained with bilstm_head False, not True; it "
      "would be reused. Pass --bilstm_head=False to use it, or a new --output_dir to start "
      "afresh.")


@pytest.mark.slow
def test_squad_fine_tunes_the_causal_encoder_with_the_bilstm_head(ltr_export, tmp_path):
  from scripts import run_script
  rng = np.random.default_rng(6)
  paragraphs = []
  for i in range(24):
    words = list(rng.choice(WORDS[:11], size=int(rng.integers(5, 12))))
    words.insert(int(rng.integers(0, len(words))), "zebra")
    context = " ".join(words) + " ."
    paragraphs.append({"context": context, "qas": [{
        "id": f"q{i}", "question": "where is the zebra ?",
        "answers": [{"text": "zebra", "answer_start": context.index("zebra")}]}]})
  path = tmp_path / "squad.json"
  path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                           "paragraphs": paragraphs}]}))
  out = tmp_path / "out"
  run_script("run_squad.py", f"--init_checkpoint={ltr_export / 'export'}", f"--output_dir={out}",
             f"--train_file={path}", f"--predict_file={path}", "--do_train", "--do_predict",
             "--bilstm_head", "--max_seq_length=32", "--doc_stride=16", "--max_query_length=8",
             "--train_batch_size=8", "--num_train_epochs=1", "--learning_rate=1e-3", "--seed=2")
  record = json.loads((out / "run.json").read_text())
  assert record["causal_attention"] is True and record["bilstm_head"] is True
  assert len(json.loads((out / "predictions.json").read_text())) == 24
  weights = checkpoints.read_checkpoint(str(out)).weights
  config = checkpoints.find_config(str(ltr_export / "export"))
  model = span_labeling.BertSpanLabeler.for_head_variables(
      BertEncoder(config), {n: v.shape for n, v in weights.items()})
  assert model.bilstm is not None and model.encoder.config.causal_attention
  checkpoints.load_checkpoint(model, str(out))  # every variable in place, shapes equal
  assert weights["bilstm/fw/kernel"].shape == (32, 64)  # hidden 32 -> 16 units x 4 gates


@pytest.mark.slow
def test_extract_features_reads_the_causal_encoder(ltr_files, ltr_export, tmp_path):
  """extract_features.py from the LTR export: two lines sharing their first words get the
  same features there (no position sees a later token), and differ after."""
  from scripts import run_script
  _, vocab, _, config = ltr_files
  text = tmp_path / "input.txt"
  text.write_text("the cat sat on the mat .\nthe cat sat on a big red tree in the park .\n")
  out = tmp_path / "features.jsonl"
  run_script("extract_features.py", f"--input_file={text}", f"--output_file={out}",
             f"--init_checkpoint={ltr_export / 'export'}", f"--vocab_file={vocab}",
             "--layers=-1", f"--max_seq_length={L}")
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  vectors = [np.array([t["layers"][0]["values"] for t in line["features"]]) for line in lines]
  tokens = [[t["token"] for t in line["features"]] for line in lines]
  assert tokens[0][:5] == tokens[1][:5] == ["[CLS]", "the", "cat", "sat", "on"]
  # Equal in exact arithmetic (later keys weigh exp(-10000) = 0); two rows of a batch may
  # be summed in other orders: float32 through 2 blocks, printed to 6 decimals (5e-7).
  tol = rounding_tolerance("float32", 2 * block_ops(config, L), np.abs(vectors[0]).max())
  np.testing.assert_allclose(vectors[0][:5], vectors[1][:5], rtol=0, atol=tol + 5e-7)
  assert np.abs(vectors[0][5:7] - vectors[1][5:7]).max() > 1e-3  # later tokens: O(0.1)


@pytest.mark.slow
def test_ner_fine_tunes_the_causal_encoder(ltr_files, ltr_export, tmp_path):
  """run_ner.py from the LTR export: its run is recorded as causal and its test tags are
  the causal tagger's, word by word."""
  from data import features, tokenization
  from scripts import run_script
  _, vocab, _, _ = ltr_files
  import random
  rng = random.Random(5)
  entities = {"cat": "B-PER", "dog": "B-PER", "park": "B-LOC", "tree": "B-LOC"}

  def conll(n):
    sentences = [[rng.choice(WORDS[:16]) for _ in range(rng.randint(3, 9))] for _ in range(n)]
    text = "".join("".join(f"{w} {entities.get(w, 'O')} 0\n" for w in s) + "\n"
                   for s in sentences)
    return sentences, text
  data = tmp_path / "conll"
  data.mkdir()
  for split, n in (("train", 48), ("valid", 8)):
    (data / f"{split}.txt").write_text(conll(n)[1])
  tests, text = conll(20)
  (data / "test.txt").write_text(text)
  out = tmp_path / "out"
  run_script("run_ner.py", f"--data_dir={data}", f"--init_checkpoint={ltr_export / 'export'}",
             f"--output_dir={out}", "--max_seq_length=16", "--doc_stride=8",
             "--nodocument_context", "--do_train", "--do_predict", "--train_batch_size=16",
             "--num_train_epochs=8", "--learning_rate=5e-3", "--seed=3")
  assert json.loads((out / "run.json").read_text())["causal_attention"] is True
  labels = (out / "label_list.txt").read_text().split()
  predicted = [line.split()[-1] for line in (out / "test_predictions.txt").read_text().splitlines()
               if line.strip()]
  tokenizer = tokenization.FullTokenizer(vocab)
  batch = features.pad_batch([features.pack_pair(tokenizer, " ".join(s), None, 16)
                              for s in tests], 16)
  config = checkpoints.find_config(str(ltr_export / "export"))

  def tags(causal):
    model = tagging.BertTagger(BertEncoder(
        BertConfig.from_dict({**config.to_dict(), "causal_attention": causal})), len(labels))
    checkpoints.load_checkpoint(model, str(out))
    best = model(batch)["logits"].numpy().argmax(-1)
    return [labels[best[i, j + 1]] for i, s in enumerate(tests) for j in range(len(s))]
  # The tags hang on each word itself, so both readings learn them; the run record says
  # which encoder was built (the classifier and SWAG tests tell the two apart by value).
  assert len(set(predicted)) == 3 and predicted == tags(True)


@pytest.mark.slow
def test_swag_fine_tunes_the_causal_encoder(ltr_files, ltr_export, tmp_path):
  """run_swag.py from the LTR export: each choice is scored at its last real token by the
  causal model."""
  from data import swag, tokenization
  from modeling.multiple_choice import BertMultipleChoice
  from scripts import run_script
  from test_swag import HEADER, _row, _write_csv
  _, vocab, _, _ = ltr_files
  import random
  rng = random.Random(8)
  words = lambda: " ".join(rng.choice(WORDS[:14]) for _ in range(rng.randint(1, 4)))
  rows = lambda n: [_row(i, words(), words(), [words() for _ in range(4)], rng.randint(0, 3))
                    for i in range(n)]
  data = tmp_path / "swag"
  data.mkdir()
  _write_csv(data / "train.csv", rows(32))
  _write_csv(data / "val.csv", rows(8))
  _write_csv(data / "test.csv", [row[:-1] for row in rows(9)], HEADER[:-1])
  out = tmp_path / "out"
  run_script("run_swag.py", f"--data_dir={data}", f"--init_checkpoint={ltr_export / 'export'}",
             f"--output_dir={out}", "--max_seq_length=24", "--do_train", "--do_predict",
             "--train_batch_size=8", "--num_train_epochs=1", "--learning_rate=1e-3",
             "--predict_batch_size=4", "--seed=2")
  assert json.loads((out / "run.json").read_text())["causal_attention"] is True
  probabilities = np.loadtxt(out / "test_results.tsv")
  examples = swag.read_examples(str(data / "test.csv"), require_labels=False)
  arrays = swag.feature_arrays(examples, tokenization.FullTokenizer(vocab), 24, 4)
  batch = {k: tf.constant(arrays[k]) for k in ("input_ids", "input_mask", "segment_ids")}
  config = checkpoints.find_config(str(ltr_export / "export"))

  def logits(causal):
    model = BertMultipleChoice(BertEncoder(
        BertConfig.from_dict({**config.to_dict(), "causal_attention": causal})))
    checkpoints.load_checkpoint(model, str(out))
    return model(batch)["logits"].numpy()
  want = logits(True)
  # float32, the script's batches of 4 against one of 9: 2 blocks, the pooler and the
  # classifier (sums of 32); a probability moves by at most twice its logits' change,
  # hence four times the roundings, relative to the logits.
  assert_close(probabilities, scipy.special.softmax(want, -1), "float32",
               4 * (2 * block_ops(config, 24) + 2 * 32), np.abs(want).max())
  # Attending both ways moves the probabilities by O(0.1).
  assert np.abs(scipy.special.softmax(logits(False), -1) - probabilities).max() > 1e-3
