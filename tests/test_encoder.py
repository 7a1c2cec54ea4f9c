"""BertEncoder against tf-models-official and the real MiniLM checkpoint, plus its contracts."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.common import model_garden
from modeling import attention, checkpoints, layers
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from helpers import (assert_close, block_ops, randomize, random_features, rounding_tolerance,
                     unit_roundoff)


def _model_garden_encoder(config, weights):
  """tf-models-official's BertEncoderV2 (tf_keras) holding `weights` (original names)."""
  mg = model_garden.encoder(config, dropout=False)
  zeros = tf.zeros((1, 4), tf.int32)
  mg(dict(input_word_ids=zeros, input_mask=zeros + 1, input_type_ids=zeros))
  return model_garden.assign(mg, weights)


@pytest.mark.parametrize("seed,layers_,hidden,heads,act", [
    (0, 2, 32, 4, "gelu"), (1, 3, 48, 6, "relu"), (2, 1, 64, 2, "gelu_tanh")])
def test_matches_model_garden_bert_encoder_v2(seed, layers_, hidden, heads, act):
  config = BertConfig(vocab_size=97, hidden_size=hidden, num_hidden_layers=layers_,
                      num_attention_heads=heads, intermediate_size=hidden * 2 + 3,
                      hidden_act=act, max_position_embeddings=40, type_vocab_size=3)
  ours = BertEncoder(config)
  weights = randomize(ours, seed)
  if act == "gelu_tanh":  # Model Garden spells the tanh form as a callable
    import tf_keras
    config_for_mg = BertConfig(**{**config.to_dict(), "hidden_act": "gelu"})
    mg = _model_garden_encoder(config_for_mg, weights)
    for block in mg.transformer_layers:
      block._intermediate_activation_layer = tf_keras.layers.Activation(
          lambda x: tf_keras.activations.gelu(x, approximate=True))
  else:
    mg = _model_garden_encoder(config, weights)
  f = random_features(np.random.default_rng(seed), batch=5, seq=17, vocab_size=97,
                      type_vocab_size=3)
  got = ours(f)
  want = mg(dict(input_word_ids=f["input_ids"], input_mask=f["input_mask"],
                 input_type_ids=f["segment_ids"]))
  # float32 both, other kernels and summation orders, through every block and the
  # pooler (a sum of H), relative to the hidden states.
  ops = layers_ * block_ops(config, 17) + hidden
  scale = np.abs(want["sequence_output"]).max()
  assert_close(got["sequence_output"], want["sequence_output"], "float32", ops, what="sequence")
  assert_close(got["pooled_output"], want["pooled_output"], "float32", ops, scale, what="pooled")
  for i, (a, b) in enumerate(zip(got["encoder_outputs"], want["encoder_outputs"])):
    assert_close(a, b, "float32", ops, what=f"layer {i}")


def _minilm_features(tokenizer, text_a, text_b=None):
  a = tokenizer.tokenize(text_a)
  b = tokenizer.tokenize(text_b) if text_b else []
  tokens = ["[CLS]"] + a + ["[SEP]"] + (b + ["[SEP]"] if b else [])
  segments = [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0)
  ids = tokenizer.convert_tokens_to_ids(tokens)
  return {"input_ids": np.array([ids]), "input_mask": np.ones((1, len(ids)), "int32"),
          "segment_ids": np.array([segments])}


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  from data.tokenization import FullTokenizer
  encoder = BertEncoder(checkpoints.find_config(minilm_dir))
  checkpoints.load_checkpoint(encoder, minilm_dir)
  return encoder, FullTokenizer(f"{minilm_dir}/vocab.txt")


def test_minilm_golden_values(minilm):
  """Values computed by the Hugging Face PyTorch implementation of the same checkpoint."""
  encoder, tokenizer = minilm

  def tol(out):
    # float32 both (PyTorch's summation orders) through 6 blocks and the pooler, relative
    # to the hidden states; printed to 6 decimals (5e-7).
    ops = 6 * block_ops(encoder.config, out["sequence_output"].shape[1]) + 384
    return rounding_tolerance("float32", ops, np.abs(out["sequence_output"]).max()) + 5e-7

  out = encoder(_minilm_features(tokenizer, "The quick brown fox jumps over the lazy dog."))
  np.testing.assert_allclose(out["sequence_output"][0, 0, :5],
                             [0.046444, 0.338062, 0.208205, 0.646797, -0.19571],
                             rtol=0, atol=tol(out))
  np.testing.assert_allclose(out["pooled_output"][0, :5],
                             [-0.066271, 0.028093, 0.070613, 0.116599, -0.015158],
                             rtol=0, atol=tol(out))
  out = encoder(_minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps."))
  np.testing.assert_allclose(out["sequence_output"][0, 0, :5],
                             [0.185509, 0.024034, 0.271306, 0.401282, -0.046628],
                             rtol=0, atol=tol(out))


def test_minilm_padding_does_not_change_real_positions(minilm):
  encoder, tokenizer = minilm
  f = _minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps.")
  n = f["input_ids"].shape[1]
  padded = {k: np.pad(v, ((0, 0), (0, 7))) for k, v in f.items()}
  padded["input_ids"][0, n:] = 2000  # garbage behind the mask must not matter
  a = encoder(f)["sequence_output"]
  b = encoder(padded)["sequence_output"][:, :n]
  # float32, two batch shapes (other blockings) through 6 blocks.
  assert_close(b, a, "float32", 6 * block_ops(encoder.config, n + 7))


def test_minilm_pooled_only_gives_the_full_pooled_output(minilm):
  """The classifier's path (last layer on [CLS] only) against the whole last layer."""
  encoder, tokenizer = minilm
  f = _minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps.")
  full, short = encoder(f), encoder(f, pooled_only=True)
  assert short["sequence_output"].shape == (1, 1, 384)
  # float32: only the last block and the pooler (a sum of 384) run on other shapes;
  # relative to the hidden states the pooler reads.
  ops = block_ops(encoder.config, f["input_ids"].shape[1])
  scale = np.abs(full["sequence_output"]).max()
  assert_close(short["pooled_output"], full["pooled_output"], "float32", ops + 384, scale)
  assert_close(short["sequence_output"], full["sequence_output"][:, :1], "float32", ops)
  # Exact: the first five layers are the same program on the same shapes.
  np.testing.assert_array_equal(short["encoder_outputs"][4], full["encoder_outputs"][4])


def _encoder_without_dropout(seed):
  """A random 3-layer encoder whose gradients can be compared (no dropout)."""
  config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
  encoder = BertEncoder(config)
  randomize(encoder, seed)
  return encoder


def test_pooled_only_gives_the_same_gradients():
  """Without dropout, a loss on the pooled output has the same gradient either way."""
  encoder = _encoder_without_dropout(5)
  f = random_features(np.random.default_rng(1), 4, 12, 50)
  weights = tf.constant(np.random.default_rng(2).normal(size=32), tf.float32)

  def gradients(pooled_only):
    with tf.GradientTape() as tape:
      pooled = encoder(f, training=True, pooled_only=pooled_only)["pooled_output"]
      loss = tf.reduce_sum(tf.sin(pooled) * weights)
    return [tf.convert_to_tensor(g) for g in tape.gradient(loss, encoder.trainable_variables)]

  full, short = gradients(False), gradients(True)
  assert len(full) == len(short) == len(encoder.trainable_variables)
  # float32, the last block on other shapes: forward and backward through 3 blocks, and
  # weight gradients summed over the batch's 48 positions; relative to the largest
  # gradient (a variable's own may be a sum that cancels).
  ops = 2 * 3 * block_ops(encoder.config, 12) + 48
  scale = max(np.abs(g).max() for g in full)
  for variable, a, b in zip(encoder.trainable_variables, full, short):
    assert_close(b, a, "float32", ops, scale, what=variable.path)


def _small_encoder(dtype=None):
  config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64,
                      max_position_embeddings=16, type_vocab_size=2)
  encoder = BertEncoder(config, dtype=dtype)
  randomize(encoder, 3)
  return encoder


def test_dropout_follows_training_flag():
  encoder = _small_encoder()
  f = random_features(np.random.default_rng(0), 2, 8, 50)
  # Exact: the same program on the same input, without dropout.
  np.testing.assert_array_equal(encoder(f)["sequence_output"], encoder(f)["sequence_output"])
  # Dropout zeroes a tenth of the values: O(1) changes, far beyond allclose's 1e-5.
  assert not np.allclose(encoder(f, training=True)["sequence_output"],
                         encoder(f)["sequence_output"])


def test_xla_matches_eager():
  encoder = _small_encoder()
  f = random_features(np.random.default_rng(1), 3, 12, 50)
  jitted = tf.function(lambda x: encoder(x), jit_compile=True)
  # float32, XLA's fusions and orders through 2 blocks.
  assert_close(jitted(f)["sequence_output"], encoder(f)["sequence_output"], "float32",
               2 * block_ops(encoder.config, 12))


@pytest.mark.bfloat16
def test_bfloat16_policy_keeps_float32_islands():
  full = _small_encoder()
  mixed = _small_encoder(dtype="mixed_bfloat16")
  f = random_features(np.random.default_rng(2), 3, 12, 50)
  got = mixed(f)
  assert got["sequence_output"].dtype == "float32" and got["pooled_output"].dtype == "float32"
  block = mixed.blocks[0]
  assert block.attention.query.compute_dtype == "bfloat16"
  assert block.attention_layer_norm.compute_dtype == "float32"
  assert mixed.embeddings.word_embeddings.dtype == "float32"
  # bfloat16 against float32 through 2 blocks.
  assert_close(got["sequence_output"], full(f)["sequence_output"], "bfloat16",
               2 * block_ops(mixed.config, 12, "bfloat16"))


def test_get_config_round_trips():
  encoder = _small_encoder()
  clone = BertEncoder.from_config(encoder.get_config())
  assert clone.config == encoder.config
  for layer in (encoder.embeddings, encoder.blocks[0], encoder.blocks[0].attention):
    rebuilt = type(layer).from_config(layer.get_config())
    assert rebuilt.get_config() == layer.get_config()


def test_embedding_output_and_layer_outputs():
  encoder = _small_encoder()
  f = random_features(np.random.default_rng(4), 2, 6, 50)
  out = encoder(f)
  assert len(out["encoder_outputs"]) == 2
  # Exact: the same tensor.
  np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
  emb = encoder.embeddings
  value = lambda v: v.numpy().astype("float64")
  x = (value(emb.word_embeddings)[f["input_ids"]]
       + value(emb.token_type_embeddings)[f["segment_ids"]] + value(emb.position_embeddings)[:6])
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  x = (x - mean) / np.sqrt(var + 1e-12) * value(emb.layer_norm.gamma) + value(emb.layer_norm.beta)
  # float32 against float64: three terms, then LayerNorm's sums of 32.
  assert_close(out["embedding_output"], x, "float32", 3 + 2 * 32)


def test_gelu_is_the_exact_erf_form():
  """x * Phi(x) against float64, on both sides of 0 and in the tails; the tanh form
  misses it by far more than the rounding bound."""
  x = np.linspace(-8, 8, 4001).astype(np.float32)
  want = np.array([float(v) * 0.5 * math.erfc(-float(v) / math.sqrt(2.0)) for v in x])
  got = np.asarray(layers.get_activation("gelu")(tf.constant(x)))
  # x / sqrt(2), erf (a few ulps), 1 + erf, the two products: each error is a few ulps of
  # 1 times x, so each value is bounded at its own scale max(|x|, 1).
  assert_close(got, want, "float32", 8, np.maximum(np.abs(x), 1.0), what="gelu")
  tanh = np.asarray(layers.get_activation("gelu_tanh")(tf.constant(x)))
  assert np.abs(tanh - want).max() > 1e-4


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape,traced", [
    ((300, 48), False), ((2, 37, 48), True), ((2 * layers.GELU_ROW_MULTIPLE, 48), True),
    ((1, 1, 48), True)])
def test_16_bit_gelu_in_training_and_its_gradient(shape, traced, dtype, monkeypatch):
  """GELU in training on a 16-bit input runs as one XLA program (over rows padded to a
  multiple of GELU_ROW_MULTIPLE where they are unknown when traced); its output and its
  gradient dy * slope, slope = Phi(x) + x phi(x), against float64: each is the float32
  computation rounded once to 16 bits."""
  programs = []
  compiled = layers._xla_gelu_and_slope
  monkeypatch.setattr(layers, "_xla_gelu_and_slope", lambda x: programs.append(x) or compiled(x))
  x64 = np.resize(np.linspace(-8, 8, 4001), shape)
  x = tf.cast(tf.constant(x64, tf.float32), dtype)
  dy = tf.cast(tf.random.stateless_uniform(shape, [1, 2], 0.5, 2.0), dtype)
  x64, dy64 = x.numpy().astype(np.float64), dy.numpy().astype(np.float64)  # as 16 bits hold them
  cdf = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0)))(x64)
  want_y = x64 * cdf
  want_dx = dy64 * (cdf + x64 * np.exp(-x64 ** 2 / 2) / math.sqrt(2 * math.pi))

  def gelu_and_gradient(x, dy):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layers.get_activation("gelu")(x, training=True)
    return y, tape.gradient(y, x, output_gradients=dy)
  if traced:
    spec = tf.TensorSpec([None] * (len(shape) - 1) + [shape[-1]], dtype)
    gelu_and_gradient = tf.function(gelu_and_gradient, input_signature=[spec, spec])
  y, dx = gelu_and_gradient(x, dy)
  assert len(programs) == 1 and y.dtype == dx.dtype == dtype and y.shape == dx.shape == shape
  # The output: float32 steps (erf, the products and sums: a few ulps each, at the scale
  # max(|x|, 1) of their terms), then one rounding to 16 bits, at most u |value|. The
  # gradient: the slope so computed and rounded, times dy in 16 bits: two roundings, and
  # the float32 steps' error scaled by |dy|. No bound depends on the CPU's instructions.
  u = unit_roundoff(dtype)
  steps = lambda ops: rounding_tolerance("float32", ops, np.maximum(np.abs(x64), 1.0))
  for got, want, bound in ((y, want_y, u * np.abs(want_y) + steps(8)),
                           (dx, want_dx, 2 * u * np.abs(want_dx) + steps(12) * np.abs(dy64))):
    error = np.abs(got.numpy().astype(np.float64) - want)
    assert np.all(error <= bound), (float(error.max()), float((error / bound).max()))


def test_attention_bias_masks_only_keys():
  bias = attention.attention_bias_from_mask(np.array([[1, 1, 0]]))
  assert bias.shape == (1, 1, 1, 3)
  # Exact: (1 - mask) * -10000 with a 0/1 mask is exact in float32.
  np.testing.assert_array_equal(np.asarray(bias)[0, 0, 0], [0.0, 0.0, -10000.0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape,perm", [
    ([2, 5, 3, 4, 8], [2, 0, 3, 1, 4]), ([2, 3, 5, 6], [0, 2, 1, 3]),
    ([2, 3, 5, 7], [0, 2, 1, 3])])  # 7 16-bit values (14 bytes) a row: tf.transpose's path
def test_attention_transpose_is_tf_transpose(dtype, shape, perm):
  """attention.transpose moves the same bits as tf.transpose, forward and backward, in a graph
  of unknown sizes, through the float64 view where a row's bytes allow it."""
  x = tf.cast(tf.random.stateless_normal(shape, [1, 2]), dtype)
  upstream = tf.cast(tf.random.stateless_normal(tf.transpose(x, perm).shape, [3, 4]), dtype)
  spec = tf.TensorSpec([None] * (len(shape) - 1) + shape[-1:], dtype)

  @tf.function(input_signature=[spec])
  def run(t):
    with tf.GradientTape() as tape:
      tape.watch(t)
      y = attention.transpose(t, perm, tf.shape(t))
      loss = tf.reduce_sum(tf.cast(y * upstream, "float32"))
    return y, tape.gradient(loss, t)
  got, grad = run(x)
  assert got.shape == tf.transpose(x, perm).shape
  bits = lambda t: tf.bitcast(t, tf.int16 if t.dtype.size == 2 else tf.int32).numpy()  # noqa: E731
  np.testing.assert_array_equal(bits(got), bits(tf.transpose(x, perm)))
  np.testing.assert_array_equal(bits(grad), bits(tf.transpose(upstream, np.argsort(perm))))
  moved = [op.get_attr("T") for op in run.get_concrete_function().graph.get_operations()
           if op.type == "Transpose"]  # forward and backward
  assert moved == [tf.float64 if shape[-1] * x.dtype.size % 8 == 0 else x.dtype] * 2


def test_attention_transpose_of_known_size_takes_the_view_up_to_its_limit(monkeypatch):
  """Sizes known when traced: the float64 view up to VIEW_TRANSPOSE_SIZE values, oneDNN's
  kernel (a float32 Transpose) beyond; the values the same either way."""
  x = tf.random.stateless_normal([2, 3, 5, 8], [1, 2])
  for limit, kernel in ((240, tf.float64), (239, tf.float32)):  # x holds 240 values
    monkeypatch.setattr(attention, "VIEW_TRANSPOSE_SIZE", limit)  # read when traced
    run = tf.function(lambda t: attention.transpose(t, [0, 2, 1, 3], tf.shape(t)))
    np.testing.assert_array_equal(run(x).numpy(), tf.transpose(x, [0, 2, 1, 3]).numpy())
    moved = [op.get_attr("T") for op in run.get_concrete_function(x).graph.get_operations()
             if op.type == "Transpose"]
    assert moved == [kernel]


@pytest.mark.parametrize("rows", [3, 400])
@pytest.mark.parametrize("known", [True, False])
def test_inference_layer_norm_against_float64(rows, known, monkeypatch):
  """LayerNorm at inference, in both forms (elementwise below FUSED_LAYER_NORM_SIZE values,
  one fused normalization from there; the size known when traced or only at run time),
  against float64, on rows whose mean is large beside their spread."""
  monkeypatch.setattr(layers, "FUSED_LAYER_NORM_SIZE", 1000)  # 3 rows: elementwise; 400: fused
  norm = layers.LayerNorm()
  norm.build((None, 384))
  rng = np.random.default_rng(5)
  norm.gamma.assign(rng.normal(1.0, 0.1, 384).astype("float32"))
  norm.beta.assign(rng.normal(0.0, 0.1, 384).astype("float32"))
  x = (rng.normal(0.0, 1.0, (rows, 384)) * rng.uniform(0.5, 4.0, (rows, 1))
       + rng.uniform(-8.0, 8.0, (rows, 1))).astype("float32")
  spec = tf.TensorSpec([rows if known else None, 384], tf.float32)
  got = tf.function(lambda t: norm(t), input_signature=[spec])(x).numpy()
  x64 = x.astype(np.float64)
  want = ((x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12)
          * norm.gamma.numpy() + norm.beta.numpy())
  # The mean's and the variance's sums of 384 terms, relative to the output's size; the
  # fused form takes the variance from the sums of x and of x^2, whose rounding is relative
  # to mean^2 + variance, so the bound grows by 1 + mean^2 / variance (up to 257 here).
  growth = 1 + (x64.mean(-1) ** 2 / x64.var(-1)).max()
  assert_close(got, want, "float32", 2 * 384, np.abs(want).max() * growth, what="layer norm")


def _minilm_batch(tokenizer):
  """Four sequences padded to 40: three lengths and one all-padding row (a padding example)."""
  rows = [_minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps."),
          _minilm_features(tokenizer, "A dog."),
          _minilm_features(tokenizer, " ".join(["fox"] * 38))]
  batch = {k: np.zeros((4, 40), "int32") for k in rows[0]}
  for i, row in enumerate(rows):
    for k, v in row.items():
      batch[k][i, :v.shape[1]] = v[0]
  batch["input_ids"][:, 39] = 2000  # garbage behind the mask must not matter
  return batch


@pytest.mark.parametrize("policy", ["float32",
                                    pytest.param("mixed_bfloat16", marks=pytest.mark.bfloat16)])
def test_minilm_packed_tokens_give_the_padded_outputs(minilm_dir, policy, monkeypatch):
  """Layers on the real tokens only, and attention in blocks (as the exports run them):
  every output at real positions as the padded computation gives it, zeros at padding,
  in float32 and bfloat16. The bfloat16 layouts are compared with float32's padded
  outputs: two bfloat16 computations round apart wherever a float32 sum lands on the
  other side of a bfloat16 rounding boundary."""
  from data.tokenization import FullTokenizer
  config = checkpoints.find_config(minilm_dir)
  encoder = BertEncoder(config, dtype=policy)
  checkpoints.load_checkpoint(encoder, minilm_dir)
  reference = encoder
  if policy != "float32":
    reference = BertEncoder(config)
    checkpoints.load_checkpoint(reference, minilm_dir)
  f = _minilm_batch(FullTokenizer(f"{minilm_dir}/vocab.txt"))
  real = f["input_mask"][:, :, None].astype(bool)
  # float32: two layouts' summation orders; mixed_bfloat16 against float32: its
  # bfloat16 roundings. Embeddings are float32 either way (LayerNorm's sums of 384).
  dtype = "float32" if policy == "float32" else "bfloat16"
  per_layer = block_ops(config, 40, dtype)
  for pooled_only in (False, True):
    want = reference(f, pooled_only=pooled_only)
    outputs = {"padded": encoder(f, pooled_only=pooled_only)} if policy != "float32" else {}
    outputs["packed"] = encoder(f, pooled_only=pooled_only, pack_tokens=True)
    # Attention in blocks of at most 40 x 40 pairs: unpacked, 4 blocks of one example;
    # packed (cut to lengths), the 3 shorter rows in one block, the longest alone;
    # pooled_only's last layer (1 query row) in one block.
    monkeypatch.setattr(attention, "BLOCK_SCORES", 40 * 40)
    outputs["packed, blocked"] = encoder(f, pooled_only=pooled_only, pack_tokens=True,
                                         blocked_attention=True)
    outputs["blocked"] = encoder(f, pooled_only=pooled_only, blocked_attention=True)
    for layout, got in outputs.items():
      close = lambda a, b, ops, name: assert_close(
          np.where(real[:, :a.shape[1]], a, 0), np.where(real[:, :b.shape[1]], b, 0),
          dtype, ops, what=f"{layout} {name} pooled_only={pooled_only}")
      assert_close(np.where(real, got["embedding_output"], 0),
                   np.where(real, want["embedding_output"], 0), "float32", 2 * 384,
                   what=f"{layout} embedding_output")
      close(got["sequence_output"], want["sequence_output"], 6 * per_layer, "sequence_output")
      for i, (a, b) in enumerate(zip(got["encoder_outputs"], want["encoder_outputs"])):
        close(a, b, (i + 1) * per_layer, f"layer {i}")
      # The pooler counts as a seventh block; row 3 is all padding.
      assert_close(got["pooled_output"][:3], want["pooled_output"][:3], dtype, 7 * per_layer,
                   what=f"{layout} pooled_output")
      assert np.isfinite(got["pooled_output"]).all()
    packed = outputs["packed"]
    for name in ("embedding_output", "sequence_output"):
      if not (pooled_only and name == "sequence_output"):  # that one is [CLS] rows only
        # Exact: padded positions are zeros put in place, never computed.
        np.testing.assert_array_equal(np.where(real, 0, packed[name]), 0, err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.bfloat16)])
@pytest.mark.parametrize("few", [True, False])
def test_attend_equals_attention_in_float64(few, dtype, causal, monkeypatch):
  """Attention at inference (attention.attend) against float64 NumPy, with padded keys,
  fewer queries than keys and a bias of padding only [B, 1, 1, S] or one per query
  [B, 1, Q, S]: in TensorFlow's own kernels (few scores) and in the batched products
  (many), at known sizes (the path chosen when traced: BatchMatMulV3 in the graph only for
  few scores) and at unknown ones (chosen at run time)."""
  monkeypatch.setattr(attention, "FEW_SCORES", 10 ** 6 if few else 0)
  rng = np.random.default_rng(8)
  as_dtype = lambda t: np.asarray(tf.cast(tf.cast(t, dtype), tf.float64))  # exact in dtype
  q, k, v = (as_dtype(rng.normal(size=(3, 4, n, 8))) for n in (5, 9, 9))  # B, N, Q or S, D
  bias = np.where(np.arange(9) < np.array([9, 1, 4])[:, None], 0.0, -10000.0)[:, None, None]
  if causal:  # query i also sees keys up to i + 3 only
    bias = bias + np.where(np.arange(9) <= np.arange(5)[:, None] + 3, 0.0, -10000.0)
  scores = np.einsum("bnqd,bnsd->bnqs", q, k) * 0.35 + bias
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  want = np.einsum("bnqs,bnsd->bnqd", probs / probs.sum(-1, keepdims=True), v)
  args = [tf.constant(t, dtype) for t in (q, k, v, bias)]
  call = lambda *a: attention.attend(*a, 0.35)
  unknown = [tf.TensorSpec([None, None, None, 8], dtype)] * 3 + [
      tf.TensorSpec([None, 1, None, None], dtype)]
  known = tf.function(call).get_concrete_function(*args)
  types = {op.type for op in known.graph.get_operations()}
  assert ("BatchMatMulV3" in types) == few and ("BatchMatMulV2" in types) != few
  for got in (tf.function(call, input_signature=unknown)(*args), known(*args)):
    got = np.asarray(tf.cast(got, tf.float64))
    if dtype == "float32":  # scores (D terms), softmax and context (S each)
      assert_close(got, want, "float32", 8 + 9 + 9)
    elif few:  # float32 inside, one rounding to bfloat16 at the end
      assert_close(got, want, "bfloat16", 1)
    else:  # scores, their scale and bias, probabilities and context each rounded; a score's
      # rounding (u |score|) moves the output by up to that times |v|, hence that scale
      scores_v = np.abs(np.einsum("bnqd,bnsd->bnqs", q, k) * 0.35).max() * np.abs(v).max()
      assert_close(got, want, "bfloat16", 4, max(np.abs(want).max(), scores_v))


@pytest.mark.parametrize("lengths", [None, "keys", "keys and queries"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_scores", [2 * 7 * 9, 10 ** 6])  # blocks of 2 rows; one block
def test_blocked_attention_equals_attention_in_float64(block_scores, causal, lengths):
  """Attention in cache-sized blocks (any number of them, the last one short) against
  attention written out in float64 NumPy, with padded keys, fewer queries than keys and a
  padding-only bias [B, 1, 1, S] or one per query [B, 1, Q, S] (a causal encoder's), at
  unknown sizes as the exports trace it and at known ones. Given the rows' lengths, rows
  are grouped by length and blocks cut to their longest row's keys (and queries, when the
  queries are the positions)."""
  rng = np.random.default_rng(5)
  queries = 9 if lengths == "keys and queries" else 7
  q, k, v = (rng.normal(size=(6, n, 4, 8)) for n in (queries, 9, 9))  # B, Q or S, N, D
  length = np.array([9, 1, 4, 9, 2, 6])  # unsorted, a full row among them
  bias = np.where(np.arange(9) < length[:, None], 0.0, -10000.0)[:, None, None, :]
  if causal:  # query i also sees keys up to i + 2 only
    bias = bias + np.where(np.arange(9) <= np.arange(queries)[:, None] + 2, 0.0, -10000.0)
  scores = np.einsum("bsnd,btnd->bnst", q, k) * 0.35 + bias
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  want = np.einsum("bnst,btnd->bsnd", probs / probs.sum(-1, keepdims=True), v)
  # Past a row's length its queries are padding, which packed callers drop: not compared.
  real = (np.arange(queries)[None, :, None, None] < length[:, None, None, None]) | (
      lengths != "keys and queries")
  heads_first = lambda t: t.transpose(0, 2, 1, 3)  # [B, N, Q or S, D], as attention calls it
  args = [tf.constant(t, tf.float32) for t in (heads_first(q * 0.35), heads_first(k),
                                               heads_first(v), bias)]
  options = {} if lengths is None else {"lengths": tf.constant(length),
                                        "trim_queries": lengths == "keys and queries"}
  blocked = lambda *a: attention.blocked_attention(*a, block_scores, **options)
  unknown = [tf.TensorSpec([None, 4, None, 8], tf.float32)] * 3 + [
      tf.TensorSpec([None, 1, None, None], tf.float32)]  # heads and head size are the model's
  for got in (tf.function(blocked, input_signature=unknown)(*args), tf.function(blocked)(*args)):
    # float32 roundings of one output: q, k and v's own (3), scores (D terms), softmax and
    # context (S each).
    got = heads_first(np.asarray(got))
    assert_close(np.where(real, got, 0), np.where(real, want, 0), "float32", 3 + 8 + 9 + 9)
  # A batch of no rows (unknown sizes, as the exports trace it) gives no rows.
  if lengths is not None:
    options["lengths"] = options["lengths"][:0]
  got = tf.function(blocked, input_signature=unknown)(*(a[:0] for a in args))
  assert got.shape == (0, 4, queries, 8)


def test_packed_tokens_give_the_same_gradients():
  """Without dropout, losses on the pooled output and on real positions have the same
  gradients packed or padded, for every variable, inside a graph of unknown length."""
  encoder = _encoder_without_dropout(6)
  f = random_features(np.random.default_rng(3), 5, 12, 50)
  f["input_mask"][4] = f["input_ids"][4] = f["segment_ids"][4] = 0  # an all-padding row
  weights = tf.constant(np.random.default_rng(4).normal(size=32), tf.float32)
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in f}

  def gradients(batch, pack_tokens):
    with tf.GradientTape() as tape:
      out = encoder(batch, training=True, pack_tokens=pack_tokens)
      real = tf.cast(batch["input_mask"], tf.float32)[:, :, None]
      loss = (tf.reduce_sum(tf.sin(out["pooled_output"][:4]) * weights)
              + tf.reduce_sum(tf.cos(out["sequence_output"]) * real * weights))
    return [tf.convert_to_tensor(g) for g in tape.gradient(loss, encoder.trainable_variables)]

  padded = tf.function(lambda b: gradients(b, False), input_signature=[spec])(f)
  packed = tf.function(lambda b: gradients(b, True), input_signature=[spec])(f)
  # float32, other shapes: forward and backward through 3 blocks, and weight gradients
  # summed over the batch's 60 positions; relative to the largest gradient (a
  # variable's own may be a sum that cancels).
  ops = 2 * 3 * block_ops(encoder.config, 12) + 60
  scale = max(np.abs(g).max() for g in padded)
  for variable, a, b in zip(encoder.trainable_variables, padded, packed):
    assert_close(b, a, "float32", ops, scale, what=variable.path)
  assert np.abs(padded[0]).max() > 0


def test_packed_batch_of_padding_rows_alone():
  """A batch whose every row is padding (the filler of a last prediction batch, on a
  replica that gets no real example) has no rows to pack: the classifier's path
  (pooled_only) gives finite outputs of the batch's shape."""
  encoder = _encoder_without_dropout(7)
  f = {k: np.zeros((3, 12), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in f}
  pooled = tf.function(lambda b: encoder(b, pooled_only=True, pack_tokens=True)["pooled_output"],
                       input_signature=[spec])(f)
  assert pooled.shape == (3, 32) and np.all(np.isfinite(pooled))


def test_trainer_packs_tokens_only_where_shapes_may_vary():
  from modeling import training
  config = training.TrainConfig(output_dir="", num_train_steps=1, global_batch_size=8)
  default = tf.distribute.get_strategy()
  tpu = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)
  assert training.packs_tokens(config, default)
  assert not training.packs_tokens(config, tpu)
  assert not training.packs_tokens(dataclasses.replace(config, jit_compile=True), default)
  assert not training.packs_tokens(dataclasses.replace(config, pack_tokens=False), default)


def test_bfloat16_dropout_keeps_the_rate():
  """Under mixed_bfloat16 the residual stream's dropouts compute in float32, so kept
  values are scaled by 1 / (1 - rate) unrounded (16 bits would scale 1 / 0.9 to
  1.109375, 0.16% short); attention's dropout only zeroes values (the scale is folded
  into the values' weights)."""
  mixed = _small_encoder(dtype="mixed_bfloat16")
  dropouts = [mixed.embeddings.dropout] + [b.dropout for b in mixed.blocks]
  assert all(d.compute_dtype == "float32" for d in dropouts)
  kept = mixed.blocks[0].dropout(tf.ones([4000, 1000]), training=True)
  # Sampling: 4e6 unseeded draws, standard deviation sqrt(0.1 * 0.9 / 4e6) = 1.5e-4, so
  # 8e-4 is 5.3 of them.
  assert abs(float(tf.reduce_mean(tf.cast(kept == 0, tf.float32))) - 0.1) < 8e-4
  # float32: 65536 / (65536 - 6554), the scale of the rate applied (6554 / 65536), in one
  # rounding; 1 / 0.9 differs from it by 6.7e-6 relative, 1.109375 by 1.6e-3.
  assert_close(float(tf.reduce_max(kept)), 65536 / (65536 - 6554), "float32", 1)


def test_packed_layers_add_no_shape_arithmetic_to_the_graph():
  """In the real-token layout every reshape has static sizes: a graph of unknown batch and
  length holds the same number of shape-reading operations for 1 layer as for 4."""
  def shape_ops(layers_count):
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=layers_count,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=16)
    encoder = BertEncoder(config, pack_tokens=True)
    spec = {k: tf.TensorSpec([None, None], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}
    graph = tf.function(lambda f: encoder(f, pooled_only=True)["pooled_output"],
                        input_signature=[spec]).get_concrete_function().graph
    return sum(op.type in ("Shape", "StridedSlice", "Pack") for op in graph.get_operations())

  assert shape_ops(1) == shape_ops(4)
