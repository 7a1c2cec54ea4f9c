"""BertEncoder against tf-models-official and the real MiniLM checkpoint, plus its contracts."""

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints, layers
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from helpers import randomize, random_features


def _model_garden_encoder(config, weights):
  """tf-models-official's BertEncoderV2 (tf_keras) holding `weights` (original names)."""
  from official.nlp.modeling import networks
  h, n = config.hidden_size, config.num_attention_heads
  mg = networks.BertEncoderV2(
      vocab_size=config.vocab_size, hidden_size=h, num_layers=config.num_hidden_layers,
      num_attention_heads=n, max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size, inner_dim=config.intermediate_size,
      inner_activation=config.hidden_act,
      output_dropout=0.0, attention_dropout=0.0)
  zeros = tf.zeros((1, 4), tf.int32)
  mg(dict(input_word_ids=zeros, input_mask=zeros + 1, input_type_ids=zeros))
  fixed = {"word_embeddings/embeddings": "bert/embeddings/word_embeddings",
           "position_embedding/embeddings": "bert/embeddings/position_embeddings",
           "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
           "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
           "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
           "pooler_transform/kernel": "bert/pooler/dense/kernel",
           "pooler_transform/bias": "bert/pooler/dense/bias"}
  block = {"self_attention/query": "attention/self/query",
           "self_attention/key": "attention/self/key",
           "self_attention/value": "attention/self/value",
           "self_attention/attention_output": "attention/output/dense",
           "self_attention_layer_norm": "attention/output/LayerNorm",
           "intermediate": "intermediate/dense", "output": "output/dense",
           "output_layer_norm": "output/LayerNorm"}
  for var in mg.weights:
    path = var.name.split("/", 1)[1].rsplit(":", 1)[0]
    if path in fixed:
      name = fixed[path]
    else:
      m = re.fullmatch(r"transformer/(layer_\d+)/(.+)/(kernel|bias|gamma|beta)", path)
      name = f"bert/encoder/{m[1]}/{block[m[2]]}/{m[3]}"
    # Model Garden keeps attention kernels per head ([H, N, D], [N, D, H]).
    var.assign(np.reshape(weights[name], var.shape))
  return mg


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
  np.testing.assert_allclose(got["sequence_output"], want["sequence_output"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5, rtol=0)
  for a, b in zip(got["encoder_outputs"], want["encoder_outputs"]):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


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
  out = encoder(_minilm_features(tokenizer, "The quick brown fox jumps over the lazy dog."))
  np.testing.assert_allclose(out["sequence_output"][0, 0, :5],
                             [0.046444, 0.338062, 0.208205, 0.646797, -0.19571], atol=1e-4)
  np.testing.assert_allclose(out["pooled_output"][0, :5],
                             [-0.066271, 0.028093, 0.070613, 0.116599, -0.015158], atol=1e-4)
  out = encoder(_minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps."))
  np.testing.assert_allclose(out["sequence_output"][0, 0, :5],
                             [0.185509, 0.024034, 0.271306, 0.401282, -0.046628], atol=1e-4)


def test_minilm_padding_does_not_change_real_positions(minilm):
  encoder, tokenizer = minilm
  f = _minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps.")
  n = f["input_ids"].shape[1]
  padded = {k: np.pad(v, ((0, 0), (0, 7))) for k, v in f.items()}
  padded["input_ids"][0, n:] = 2000  # garbage behind the mask must not matter
  a = encoder(f)["sequence_output"]
  b = encoder(padded)["sequence_output"][:, :n]
  np.testing.assert_allclose(a, b, atol=2e-5)


def test_minilm_pooled_only_gives_the_full_pooled_output(minilm):
  """The classifier's path (last layer on [CLS] only) against the whole last layer."""
  encoder, tokenizer = minilm
  f = _minilm_features(tokenizer, "Who jumps?", "The quick brown fox jumps.")
  full, short = encoder(f), encoder(f, pooled_only=True)
  assert short["sequence_output"].shape == (1, 1, 384)
  np.testing.assert_allclose(short["pooled_output"], full["pooled_output"], atol=1e-6)
  np.testing.assert_allclose(short["sequence_output"], full["sequence_output"][:, :1], atol=1e-6)
  np.testing.assert_allclose(short["encoder_outputs"][4], full["encoder_outputs"][4], atol=0)


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
  for variable, a, b in zip(encoder.trainable_variables, full, short):
    np.testing.assert_allclose(b, a, atol=1e-5, err_msg=variable.path)


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
  np.testing.assert_array_equal(encoder(f)["sequence_output"], encoder(f)["sequence_output"])
  assert not np.allclose(encoder(f, training=True)["sequence_output"],
                         encoder(f)["sequence_output"])


def test_xla_matches_eager():
  encoder = _small_encoder()
  f = random_features(np.random.default_rng(1), 3, 12, 50)
  jitted = tf.function(lambda x: encoder(x), jit_compile=True)
  np.testing.assert_allclose(jitted(f)["sequence_output"], encoder(f)["sequence_output"],
                             atol=1e-5)


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
  np.testing.assert_allclose(got["sequence_output"], full(f)["sequence_output"], atol=0.1)


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
  np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
  table = encoder.embedding_table.numpy()
  emb = encoder.embeddings
  x = (table[f["input_ids"]] + emb.token_type_embeddings.numpy()[f["segment_ids"]]
       + emb.position_embeddings.numpy()[:6])
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  x = (x - mean) / np.sqrt(var + 1e-12) * emb.layer_norm.gamma.numpy() + emb.layer_norm.beta.numpy()
  np.testing.assert_allclose(out["embedding_output"], x, atol=1e-5)


def test_attention_bias_masks_only_keys():
  bias = layers.attention_bias_from_mask(np.array([[1, 1, 0]]))
  assert bias.shape == (1, 1, 1, 3)
  np.testing.assert_array_equal(np.asarray(bias)[0, 0, 0], [0.0, 0.0, -10000.0])


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


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_minilm_packed_tokens_give_the_padded_outputs(minilm_dir, policy):
  """Layers on the real tokens only: every output at real positions as the padded
  computation gives it, zeros at padding, in float32 and bfloat16."""
  from data.tokenization import FullTokenizer
  encoder = BertEncoder(checkpoints.find_config(minilm_dir), dtype=policy)
  checkpoints.load_checkpoint(encoder, minilm_dir)
  f = _minilm_batch(FullTokenizer(f"{minilm_dir}/vocab.txt"))
  real = f["input_mask"][:, :, None].astype(bool)
  for pooled_only in (False, True):
    padded = encoder(f, pooled_only=pooled_only)
    encoder.pack_tokens = True
    packed = encoder(f, pooled_only=pooled_only)
    encoder.pack_tokens = False
    tol = 1e-5 if policy == "float32" else 2e-2
    for name in ("embedding_output", "sequence_output"):
      rows = real[:, :packed[name].shape[1]]
      np.testing.assert_allclose(np.where(rows, packed[name], 0), np.where(rows, padded[name], 0),
                                 atol=tol, err_msg=name)
      if not (pooled_only and name == "sequence_output"):  # that one is [CLS] rows only
        np.testing.assert_array_equal(np.where(rows, 0, packed[name]), 0, err_msg=name)
    for i, (a, b) in enumerate(zip(padded["encoder_outputs"], packed["encoder_outputs"])):
      rows = real[:, :b.shape[1]]
      np.testing.assert_allclose(np.where(rows, b, 0), np.where(rows, a, 0), atol=tol,
                                 err_msg=f"layer {i}")
    np.testing.assert_allclose(packed["pooled_output"][:3], padded["pooled_output"][:3], atol=tol)
    assert np.isfinite(packed["pooled_output"]).all()


def test_packed_tokens_give_the_same_gradients():
  """Without dropout, losses on the pooled output and on real positions have the same
  gradients packed or padded, for every variable, inside a graph of unknown length."""
  encoder = _encoder_without_dropout(6)
  f = random_features(np.random.default_rng(3), 5, 12, 50)
  f["input_mask"][4] = f["input_ids"][4] = f["segment_ids"][4] = 0  # an all-padding row
  weights = tf.constant(np.random.default_rng(4).normal(size=32), tf.float32)
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in f}

  def gradients(batch):
    with tf.GradientTape() as tape:
      out = encoder(batch, training=True)
      real = tf.cast(batch["input_mask"], tf.float32)[:, :, None]
      loss = (tf.reduce_sum(tf.sin(out["pooled_output"][:4]) * weights)
              + tf.reduce_sum(tf.cos(out["sequence_output"]) * real * weights))
    return [tf.convert_to_tensor(g) for g in tape.gradient(loss, encoder.trainable_variables)]

  padded = tf.function(gradients, input_signature=[spec])(f)
  encoder.pack_tokens = True
  packed = tf.function(gradients, input_signature=[spec])(f)
  for variable, a, b in zip(encoder.trainable_variables, padded, packed):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=variable.path)
  assert np.abs(padded[0]).max() > 0


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
  """Under mixed_bfloat16 every dropout computes in float32, so a rate of 0.1 drops 10%
  (a 16-bit dropout draws 16-bit uniforms and drops 10.16%)."""
  mixed = _small_encoder(dtype="mixed_bfloat16")
  dropouts = [mixed.embeddings.dropout] + [d for b in mixed.blocks
                                           for d in (b.dropout, b.attention.dropout)]
  assert all(d.compute_dtype == "float32" for d in dropouts)
  kept = mixed.blocks[0].dropout(tf.ones([4000, 1000]), training=True)
  assert abs(float(tf.reduce_mean(tf.cast(kept == 0, tf.float32))) - 0.1) < 8e-4
  np.testing.assert_allclose(float(tf.reduce_max(kept)), 1 / 0.9, rtol=1e-6)


def test_packed_layers_add_no_shape_arithmetic_to_the_graph():
  """In the real-token layout every reshape has static sizes: a graph of unknown batch and
  length holds the same number of shape-reading operations for 1 layer as for 4."""
  def shape_ops(layers_count):
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=layers_count,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=16)
    encoder = BertEncoder(config)
    encoder.pack_tokens = True
    spec = {k: tf.TensorSpec([None, None], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}
    graph = tf.function(lambda f: encoder(f, pooled_only=True)["pooled_output"],
                        input_signature=[spec]).get_concrete_function().graph
    return sum(op.type in ("Shape", "StridedSlice", "Pack") for op in graph.get_operations())

  assert shape_ops(1) == shape_ops(4)
