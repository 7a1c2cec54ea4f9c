"""Checkpoint I/O: the original's names, TF1/TF2/Hugging Face round trips, clear errors."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoint_paths, checkpoints, hf_checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.pretraining import BertPretrainer
from modeling.span_labeling import BertSpanLabeler
from helpers import assert_close, block_ops, randomize, random_features

SMALL = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=24, max_position_embeddings=20, type_vocab_size=2)


def original_pretraining_variables(V, H, L, I, T, P):
  """Names and shapes of the original run_pretraining graph (reference section e)."""
  names = {"bert/embeddings/word_embeddings": [V, H],
           "bert/embeddings/token_type_embeddings": [T, H],
           "bert/embeddings/position_embeddings": [P, H],
           "bert/embeddings/LayerNorm/beta": [H], "bert/embeddings/LayerNorm/gamma": [H]}
  for i in range(L):
    p = f"bert/encoder/layer_{i}/"
    for part in ("attention/self/query", "attention/self/key", "attention/self/value",
                 "attention/output/dense"):
      names[p + part + "/kernel"], names[p + part + "/bias"] = [H, H], [H]
    names[p + "intermediate/dense/kernel"], names[p + "intermediate/dense/bias"] = [H, I], [I]
    names[p + "output/dense/kernel"], names[p + "output/dense/bias"] = [I, H], [H]
    for ln in ("attention/output/LayerNorm", "output/LayerNorm"):
      names[p + ln + "/beta"], names[p + ln + "/gamma"] = [H], [H]
  names.update({"bert/pooler/dense/kernel": [H, H], "bert/pooler/dense/bias": [H],
                "cls/predictions/transform/dense/kernel": [H, H],
                "cls/predictions/transform/dense/bias": [H],
                "cls/predictions/transform/LayerNorm/beta": [H],
                "cls/predictions/transform/LayerNorm/gamma": [H],
                "cls/predictions/output_bias": [V],
                "cls/seq_relationship/output_weights": [2, H],
                "cls/seq_relationship/output_bias": [2]})
  return names


def test_bert_base_export_has_the_original_names_and_shapes(tmp_path):
  config = BertConfig(vocab_size=30522, type_vocab_size=2)
  model = BertPretrainer(BertEncoder(config))
  prefix = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path),
                                           config=config)
  written = dict(tf.train.list_variables(prefix))
  expected = original_pretraining_variables(30522, 768, 12, 3072, 2, 512)
  assert len(expected) == 206
  assert written == expected
  assert sum(int(np.prod(s)) for s in written.values()) == 110_106_428
  assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
  assert BertConfig.from_json_file(str(tmp_path / "bert_config.json")) == config


def _outputs(model, seed=0):
  f = random_features(np.random.default_rng(seed), 3, 10, SMALL.vocab_size)
  f["masked_lm_positions"] = np.array([[1, 2], [0, 3], [4, 1]])
  return model(f)


@pytest.mark.parametrize("fmt", ["tf1", "tf2"])
def test_round_trip_gives_identical_outputs(tmp_path, fmt):
  model = BertPretrainer(BertEncoder(SMALL))
  randomize(model, 1)
  if fmt == "tf1":
    path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path))
  else:
    path = checkpoints.save_tf2_checkpoint(model, str(tmp_path / "ckpt"))
  clone = BertPretrainer(BertEncoder(SMALL))
  ckpt = checkpoints.load_checkpoint(clone, path)
  assert ckpt.format == fmt
  a, b = _outputs(model), _outputs(clone)
  for key in a:
    # Exact: the same weights (copied bits) through the same program.
    np.testing.assert_array_equal(a[key], b[key])
  # A directory resolves to its latest checkpoint.
  assert checkpoint_paths.resolve_checkpoint(str(tmp_path))[0] == fmt


def test_reads_a_checkpoint_written_by_tf1_code(tmp_path):
  """Variables created and saved with tf.compat.v1, as the original did, plus Adam slots."""
  weights = randomize(BertPretrainer(BertEncoder(SMALL)), 2)
  graph = tf.Graph()
  with graph.as_default():
    for name, value in weights.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value))
      for slot in ("adam_m", "adam_v"):
        tf.compat.v1.get_variable(f"{name}/{slot}", initializer=tf.zeros(value.shape))
    tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      prefix = saver.save(sess, str(tmp_path / "bert_model.ckpt"))
  model = BertPretrainer(BertEncoder(SMALL))
  checkpoints.load_checkpoint(model, prefix)
  for name, var in checkpoints.variable_map(model).items():
    np.testing.assert_array_equal(var.numpy(), weights[name])  # exact: copied float32 bits


def _write_hugging_face(weights, directory, with_prefix):
  from safetensors.numpy import save_file
  tensors = {}
  for name, value in weights.items():
    key, transpose = hf_checkpoints.hf_name(name)
    if with_prefix and name.startswith("bert/"):
      key = "bert." + key
    tensors[key] = np.ascontiguousarray(value.T if transpose else value)
  tensors["bert.embeddings.position_ids" if with_prefix else "embeddings.position_ids"] = (
      np.arange(SMALL.max_position_embeddings)[None])
  if "cls/predictions/output_bias" in weights:
    tensors["cls.predictions.decoder.weight"] = weights["bert/embeddings/word_embeddings"]
  os.makedirs(directory, exist_ok=True)
  save_file(tensors, os.path.join(directory, "model.safetensors"))
  hf_config = {**SMALL.to_dict(), "model_type": "bert", "architectures": ["BertForPreTraining"],
               "layer_norm_eps": 1e-12}
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_config, f)


@pytest.mark.parametrize("model_class,with_prefix", [
    (BertPretrainer, True), (BertEncoder, False), (BertSpanLabeler, True)])
def test_reads_hugging_face_safetensors(tmp_path, model_class, with_prefix):
  make = lambda config: (BertEncoder(config) if model_class is BertEncoder
                         else model_class(BertEncoder(config)))
  weights = randomize(make(SMALL), 3)
  _write_hugging_face(weights, str(tmp_path / "hf"), with_prefix)
  config = checkpoints.find_config(str(tmp_path / "hf"))
  assert config == SMALL
  model = make(config)
  checkpoints.load_checkpoint(model, str(tmp_path / "hf"))
  for name, var in checkpoints.variable_map(model).items():
    np.testing.assert_array_equal(var.numpy(), weights[name])  # exact: copied (transposed) bits


def test_shape_mismatch_is_one_line_naming_variable_and_shapes(tmp_path):
  path = checkpoints.save_tf2_checkpoint(BertEncoder(SMALL), str(tmp_path / "ckpt"))
  bigger = BertConfig(**{**SMALL.to_dict(), "hidden_size": 32})
  with pytest.raises(ValueError) as err:
    checkpoints.load_checkpoint(BertEncoder(bigger), path)
  message = str(err.value)
  assert "\n" not in message
  small, wide = (checkpoints.variable_map(BertEncoder(c)) for c in (SMALL, bigger))
  count = sum(small[n].shape != wide[n].shape for n in small)  # all but intermediate biases
  assert (f"does not fit the model: shapes differ ({count}): bert/embeddings/word_embeddings "
          "([60, 16] in the checkpoint, [60, 32] in the model), ") in message
  assert message.endswith(f" and {count - 4} more.")
  # Another vocab size: the message says where the checkpoint's own config is.
  grown = BertConfig(**{**SMALL.to_dict(), "vocab_size": 64})
  with pytest.raises(ValueError, match=r"The checkpoint has 60 word rows, the model's config "
                     r"vocab_size 64: the bert_config.json and vocab.txt beside the checkpoint "
                     r"give the model as many\.$"):
    checkpoints.load_checkpoint(BertEncoder(grown), path)


def test_every_mismatch_is_named_on_one_line(tmp_path):
  """Two variables of the wrong shape, one missing and one extra: all four named."""
  encoder = BertEncoder(SMALL)
  weights = checkpoints.model_weights(encoder)
  weights["bert/pooler/dense/bias"] = np.zeros(3, "float32")
  weights["bert/embeddings/LayerNorm/gamma"] = np.ones(5, "float32")
  del weights["bert/encoder/layer_1/output/dense/bias"]
  weights["bert/encoder/layer_7/output/dense/bias"] = np.zeros(16, "float32")
  path = checkpoints.save_tf1_checkpoint(weights, str(tmp_path))
  with pytest.raises(ValueError) as err:
    checkpoints.load_checkpoint(BertEncoder(SMALL), path)
  assert str(err.value) == (
      f"Checkpoint {path} (tf1) does not fit the model: shapes differ (2): "
      "bert/embeddings/LayerNorm/gamma ([5] in the checkpoint, [16] in the model), "
      "bert/pooler/dense/bias ([3] in the checkpoint, [16] in the model); missing from the "
      "checkpoint (1): bert/encoder/layer_1/output/dense/bias; in the checkpoint but not in "
      "the model (1): bert/encoder/layer_7/output/dense/bias.")


def test_missing_layers_and_unexpected_layers_are_errors(tmp_path):
  path = checkpoints.save_tf2_checkpoint(BertEncoder(SMALL), str(tmp_path / "ckpt"))
  deeper = BertConfig(**{**SMALL.to_dict(), "num_hidden_layers": 3})
  # A block is 16 variables: the first 4 named, the rest counted.
  with pytest.raises(ValueError, match=r"model: missing from the checkpoint \(16\): "
                                       r"bert/encoder/layer_2/[^;]* and 12 more\.$"):
    checkpoints.load_checkpoint(BertEncoder(deeper), path)
  shallower = BertConfig(**{**SMALL.to_dict(), "num_hidden_layers": 1})
  with pytest.raises(ValueError, match=r"model: in the checkpoint but not in the model "
                                       r"\(16\): bert/encoder/layer_1/"):
    checkpoints.load_checkpoint(BertEncoder(shallower), path)


def test_fine_tuning_from_encoder_only_checkpoint(tmp_path, caplog):
  encoder = BertEncoder(SMALL)
  weights = randomize(encoder, 4)
  path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(encoder), str(tmp_path))
  with pytest.raises(ValueError, match=r"missing from the checkpoint \(2\): output_weights, "
                                       "output_bias"):
    checkpoints.load_checkpoint(BertClassifier(BertEncoder(SMALL), num_labels=3), path)
  classifier = BertClassifier(BertEncoder(SMALL), num_labels=3)
  classifier.build()
  fresh = classifier.classifier.output_weights.numpy()
  checkpoints.load_checkpoint(classifier, path, allow_new_heads=True)
  # Exact: the head keeps its initial values, the encoder gets copied bits.
  np.testing.assert_array_equal(classifier.classifier.output_weights.numpy(), fresh)
  np.testing.assert_array_equal(classifier.encoder.embedding_table.numpy(),
                                weights["bert/embeddings/word_embeddings"])


def test_pretraining_heads_are_skipped_when_fine_tuning(tmp_path):
  pretrainer = BertPretrainer(BertEncoder(SMALL))
  randomize(pretrainer, 5)
  path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(pretrainer), str(tmp_path))
  span = BertSpanLabeler(BertEncoder(SMALL))
  checkpoints.load_checkpoint(span, path, allow_new_heads=True)
  np.testing.assert_array_equal(span.encoder.pooler.kernel.numpy(),  # exact: copied bits
                                pretrainer.encoder.pooler.kernel.numpy())


def test_bad_paths_have_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="holds no checkpoint"):
    checkpoints.load_checkpoint(BertEncoder(SMALL), str(tmp_path))
  prefix = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(SMALL)),
                                           str(tmp_path / "ckpt"))
  with pytest.raises(ValueError, match="No bert_config.json or config.json beside"):
    checkpoints.find_config(prefix)
  (tmp_path / "notes.txt").write_text("not a checkpoint")
  with pytest.raises(ValueError, match=r"notes.txt is not a checkpoint: expected"):
    checkpoints.read_checkpoint(str(tmp_path / "notes.txt"))
  os.remove(prefix + ".index")
  with pytest.raises(ValueError, match=r"ckpt/bert_model.ckpt is incomplete: .*\.index is missing"):
    checkpoints.read_checkpoint(prefix)


@pytest.mark.parametrize("path", ["nothing", "nothing.safetensors", "no_dir/bert_model.ckpt"])
def test_a_missing_checkpoint_is_reported_as_missing(tmp_path, path):
  """Not as a missing bert_config.json or vocab.txt, as before."""
  missing = str(tmp_path / path)
  for read in (checkpoints.find_config, checkpoints.find_vocab, checkpoints.read_checkpoint):
    with pytest.raises(ValueError, match=f"^Checkpoint (file )?{re.escape(missing)} does not exist"):
      read(missing)


def _cut(path, keep=0.5):
  data = open(path, "rb").read()
  with open(path, "wb") as f:
    f.write(data[:int(len(data) * keep)])


@pytest.mark.parametrize("fmt,part", [("tf1", ".index"), ("tf1", ".data-00000-of-00001"),
                                      ("tf2", ".index"), ("tf2", ".data-00000-of-00001"),
                                      ("hf", "model.safetensors")])
def test_truncated_checkpoint_files_are_named(tmp_path, fmt, part):
  model = BertEncoder(SMALL)
  if fmt == "tf1":
    prefix = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path))
  elif fmt == "tf2":
    prefix = checkpoints.save_tf2_checkpoint(model, str(tmp_path / "model.ckpt"))
  else:
    prefix = str(tmp_path) + os.sep
    hf_checkpoints.save_hf_checkpoint(checkpoints.model_weights(model), str(tmp_path), SMALL)
  _cut(prefix + part)
  with pytest.raises(ValueError) as err:
    checkpoints.load_checkpoint(BertEncoder(SMALL), str(tmp_path))
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith(f"Checkpoint file {prefix + part} is truncated"), message


def test_minilm_is_read_from_its_package(minilm_dir):
  ckpt = checkpoints.read_checkpoint(minilm_dir)
  assert ckpt.format == "hf" and len(ckpt.weights) == 6 * 16 + 5 + 2
  assert ckpt.weights["bert/encoder/layer_0/intermediate/dense/kernel"].shape == (384, 1536)


# --- The real MiniLM checkpoint, checked without our name table ------------

def _minilm_expected(encoder):
  """Every key of all-MiniLM-L6-v2's model.safetensors -> (our Keras variable, transposed?).

  Written out from transformers' BertModel, independently of hf_checkpoints'
  table: torch Linear weights are [out, in], Keras kernels [in, out].
  """
  emb = encoder.embeddings
  expected = {
      "embeddings.word_embeddings.weight": (emb.word_embeddings, False),
      "embeddings.position_embeddings.weight": (emb.position_embeddings, False),
      "embeddings.token_type_embeddings.weight": (emb.token_type_embeddings, False),
      "embeddings.LayerNorm.weight": (emb.layer_norm.gamma, False),
      "embeddings.LayerNorm.bias": (emb.layer_norm.beta, False),
      "pooler.dense.weight": (encoder.pooler.kernel, True),
      "pooler.dense.bias": (encoder.pooler.bias, False),
  }
  for i, block in enumerate(encoder.blocks):
    linears = {"attention.self.query": block.attention.query,
               "attention.self.key": block.attention.key,
               "attention.self.value": block.attention.value,
               "attention.output.dense": block.attention.output_dense,
               "intermediate.dense": block.intermediate,
               "output.dense": block.output_dense}
    for key, layer in linears.items():
      expected[f"encoder.layer.{i}.{key}.weight"] = (layer.kernel, True)
      expected[f"encoder.layer.{i}.{key}.bias"] = (layer.bias, False)
    norms = {"attention.output.LayerNorm": block.attention_layer_norm,
             "output.LayerNorm": block.output_layer_norm}
    for key, layer in norms.items():
      expected[f"encoder.layer.{i}.{key}.weight"] = (layer.gamma, False)
      expected[f"encoder.layer.{i}.{key}.bias"] = (layer.beta, False)
  return expected


@pytest.fixture(scope="module")
def minilm_loaded(minilm_dir):
  """(encoder loaded through our reader, {key: array} read by safetensors itself)."""
  from safetensors.numpy import load_file
  encoder = BertEncoder(checkpoints.find_config(minilm_dir))
  checkpoints.load_checkpoint(encoder, minilm_dir)
  return encoder, load_file(os.path.join(minilm_dir, "model.safetensors"))


def test_every_minilm_tensor_lands_in_its_keras_variable(minilm_loaded):
  encoder, tensors = minilm_loaded
  expected = _minilm_expected(encoder)
  assert len(expected) == 6 * 16 + 7
  # The file holds exactly these, plus the position index buffer.
  assert set(tensors) == set(expected) | {"embeddings.position_ids"}
  # Each of our variables is filled by exactly one tensor.
  assert len({id(var) for var, _ in expected.values()}) == len(encoder.weights)
  for key, (var, transposed) in expected.items():
    value = tensors[key].T if transposed else tensors[key]
    assert tuple(var.shape) == value.shape, key
    np.testing.assert_array_equal(var.numpy(), value, err_msg=key)  # exact: copied bits


def _numpy_bert(t, ids, segments, mask, num_heads, eps=1e-12):
  """Reference forward pass in float64 from Hugging Face keys; returns (states, pooled).

  states[0] is the embedding output, states[i] block i's output, as in the paper;
  pooled is None when `t` has no pooler (the classes built without one).
  """
  from scipy.special import erf, softmax
  t = {k: v.astype(np.float64) for k, v in t.items()}

  def layer_norm(x, key):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * t[key + ".weight"] + t[key + ".bias"]

  def linear(x, key):
    return x @ t[key + ".weight"].T + t[key + ".bias"]

  batch, seq = ids.shape
  x = (t["embeddings.word_embeddings.weight"][ids]
       + t["embeddings.position_embeddings.weight"][np.arange(seq)][None]
       + t["embeddings.token_type_embeddings.weight"][segments])
  x = layer_norm(x, "embeddings.LayerNorm")
  hidden = x.shape[-1]
  size = hidden // num_heads
  blocked = (1.0 - mask[:, None, None, :]) * -10000.0  # [B, 1, 1, S], the original's bias
  states = [x]
  for i in range(len([k for k in t if k.endswith(".attention.self.query.weight")])):
    p = f"encoder.layer.{i}."
    split = lambda y: y.reshape(batch, seq, num_heads, size).transpose(0, 2, 1, 3)
    q, k, v = (split(linear(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
    probs = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + blocked, axis=-1)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    x = layer_norm(x + linear(context, p + "attention.output.dense"),
                   p + "attention.output.LayerNorm")
    h = linear(x, p + "intermediate.dense")
    h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))  # exact (erf) GELU
    x = layer_norm(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    states.append(x)
  pooled = np.tanh(linear(x[:, 0], "pooler.dense")) if "pooler.dense.weight" in t else None
  return states, pooled


def test_minilm_hidden_states_match_a_numpy_bert(minilm_loaded, minilm_vocab):
  """Every layer's output on padded sentences and a pair, against a float64 reference.

  Measured: at most 2e-6 on values up to 10 (float32 against float64).
  """
  from data import tokenization
  encoder, tensors = minilm_loaded
  tokenizer = tokenization.FullTokenizer(minilm_vocab, do_lower_case=True)
  pairs = [("A man is playing a guitar on the stage.", None),
           ("Quarterly revenue rose by 12 percent.", None),
           ("Where do penguins live?", "Most penguins live in the Southern Hemisphere."),
           ("Colourless green ideas sleep furiously", None)]
  seq = 24
  ids, segments, mask = (np.zeros((len(pairs), seq), np.int32) for _ in range(3))
  for row, (a, b) in enumerate(pairs):
    tokens = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
    second = tokenizer.tokenize(b) + ["[SEP]"] if b else []
    n = len(tokens) + len(second)
    ids[row, :n] = tokenizer.convert_tokens_to_ids(tokens + second)
    segments[row, len(tokens):n] = 1
    mask[row, :n] = 1
  assert mask.sum(1).min() < seq and segments.max() == 1  # padding and a second segment
  batch = {"input_ids": ids, "segment_ids": segments, "input_mask": mask}
  out = encoder(batch, training=False)
  ours = [out["embedding_output"]] + list(out["encoder_outputs"])
  states, pooled = _numpy_bert(tensors, ids, segments, mask, num_heads=12)
  assert len(ours) == len(states) == 7
  real = mask.astype(bool)
  # float32 against float64: the embeddings' LayerNorm (sums of 2 * 384), then each block;
  # the pooler (a sum of 384) relative to the hidden states it reads.
  ops = lambda blocks: 2 * 384 + blocks * block_ops(encoder.config, seq)
  for layer, (a, b) in enumerate(zip(ours, states)):
    assert_close(np.asarray(a)[real], b[real], "float32", ops(layer), what=f"hidden state {layer}")
  assert_close(out["pooled_output"], pooled, "float32", ops(6) + 384, np.abs(states[-1]).max(),
               what="pooled")


# --- Writing Hugging Face checkpoints --------------------------------------

def _safetensors_entries(path):
  """{key: (dtype, shape, raw bytes)} read with safetensors itself."""
  from safetensors import safe_open
  with safe_open(path, "np") as f:
    return {k: (str(v.dtype), v.shape, v.tobytes()) for k in f.keys() for v in [f.get_tensor(k)]}


_CONFIG_FIELDS = ("architectures", "model_type", "vocab_size", "hidden_size",
                  "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
                  "max_position_embeddings", "type_vocab_size", "initializer_range",
                  "layer_norm_eps", "pad_token_id", "position_embedding_type")


def test_minilm_to_tf1_and_back_to_hugging_face_is_byte_identical(minilm_dir, tmp_path):
  config = checkpoints.find_config(minilm_dir)
  encoder = BertEncoder(config)
  checkpoints.load_checkpoint(encoder, minilm_dir)
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(encoder), str(tmp_path / "tf1"),
                                  config)
  back = BertEncoder(checkpoints.find_config(str(tmp_path / "tf1")))
  assert checkpoints.load_checkpoint(back, str(tmp_path / "tf1")).format == "tf1"
  path = hf_checkpoints.save_hf_checkpoint(checkpoints.model_weights(back),
                                           str(tmp_path / "hf"), back.config)
  assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
  # Permissions as for any file we write (safetensors' own writer makes it owner-only).
  assert os.stat(path).st_mode == os.stat(tmp_path / "hf" / "config.json").st_mode
  original = _safetensors_entries(os.path.join(minilm_dir, "model.safetensors"))
  written = _safetensors_entries(path)
  # Every tensor but the position index buffer, which the released file carries and
  # transformers' save_pretrained no longer writes (nor needs: it is built from the config).
  assert sorted(written) == sorted(set(original) - {"embeddings.position_ids"})
  for key, (dtype, shape, data) in written.items():
    assert original[key][:2] == (dtype, shape), key
    assert original[key][2] == data, key
  with open(os.path.join(minilm_dir, "config.json")) as f:
    want = json.load(f)
  with open(tmp_path / "hf" / "config.json") as f:
    got = json.load(f)
  assert {k: got[k] for k in _CONFIG_FIELDS} == {k: want[k] for k in _CONFIG_FIELDS}


_ENCODER_KEYS = ({f"bert.embeddings.{n}.weight" for n in (
    "word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm")}
    | {"bert.embeddings.LayerNorm.bias"}
    | {f"bert.encoder.layer.{i}.{n}.{p}" for i in range(SMALL.num_hidden_layers)
       for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                 "attention.output.dense", "attention.output.LayerNorm",
                 "intermediate.dense", "output.dense", "output.LayerNorm")
       for p in ("weight", "bias")})
_POOLER_KEYS = {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}


@pytest.mark.parametrize("make,architecture,head_keys", [
    (lambda: BertPretrainer(BertEncoder(SMALL)), "BertForPreTraining",
     {"cls.predictions.bias", "cls.predictions.transform.dense.weight",
      "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.weight",
      "cls.predictions.transform.LayerNorm.bias", "cls.seq_relationship.weight",
      "cls.seq_relationship.bias"}),
    (lambda: BertClassifier(BertEncoder(SMALL), num_labels=3), "BertForSequenceClassification",
     {"classifier.weight", "classifier.bias"}),
    (lambda: BertSpanLabeler(BertEncoder(SMALL)), "BertForQuestionAnswering",
     {"qa_outputs.weight", "qa_outputs.bias"})])
def test_task_models_write_transformers_layouts(tmp_path, make, architecture, head_keys):
  model = make()
  weights = randomize(model, 6)
  hf_checkpoints.save_hf_checkpoint(weights, str(tmp_path), SMALL)
  entries = _safetensors_entries(str(tmp_path / "model.safetensors"))
  # transformers' QA model has no pooler: the file has none either (SQuAD never reads it).
  pooler = set() if architecture == "BertForQuestionAnswering" else _POOLER_KEYS
  assert set(entries) == _ENCODER_KEYS | pooler | head_keys
  # torch Linear weights are [out, in]: the intermediate kernel [H, I] is stored [I, H].
  assert entries["bert.encoder.layer.1.intermediate.dense.weight"][1] == (24, 16)
  with open(tmp_path / "config.json") as f:
    config = json.load(f)
  assert config["architectures"] == [architecture]
  if architecture == "BertForSequenceClassification":
    assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    assert entries["classifier.weight"][1] == (3, 16)
  clone = make()
  checkpoints.load_checkpoint(clone, str(tmp_path))
  for name, var in checkpoints.variable_map(clone).items():
    if architecture == "BertForQuestionAnswering" and name.startswith("bert/pooler/"):
      assert not np.array_equal(var.numpy(), weights[name])  # not in the file: fresh
    else:
      np.testing.assert_array_equal(var.numpy(), weights[name], err_msg=name)  # exact: copied


def test_a_file_without_pooler_starts_a_fine_tuned_pooler_fresh(tmp_path):
  """A QA export (no pooler) initialises a classifier, whose pooler then starts fresh as in
  transformers; loaded as a whole checkpoint (no new heads allowed), the gap is an error."""
  weights = randomize(BertSpanLabeler(BertEncoder(SMALL)), 8)
  hf_checkpoints.save_hf_checkpoint(weights, str(tmp_path), SMALL)
  classifier = BertClassifier(BertEncoder(SMALL), num_labels=3)
  classifier.build()
  fresh = {n: v.numpy().copy() for n, v in checkpoints.variable_map(classifier).items()}
  checkpoints.load_checkpoint(classifier, str(tmp_path), allow_new_heads=True)
  for name, var in checkpoints.variable_map(classifier).items():
    want = fresh[name] if name.startswith("bert/pooler/") or name in (
        "output_weights", "output_bias") else weights[name]
    np.testing.assert_array_equal(var.numpy(), want, err_msg=name)
  with pytest.raises(ValueError, match=r"model: missing from the checkpoint \(4\): "
                                       r"bert/pooler/dense/kernel, bert/pooler/dense/bias, "
                                       r"output_weights, output_bias\.$"):
    checkpoints.load_checkpoint(BertClassifier(BertEncoder(SMALL), num_labels=3), str(tmp_path))
  # A checkpoint with a pooler must hold it whole, even when fine-tuning.
  del weights["bert/pooler/dense/bias"]
  checkpoints.save_tf1_checkpoint(weights, str(tmp_path / "half"), SMALL)
  with pytest.raises(ValueError, match=r"model: missing from the checkpoint \(1\): "
                                       r"bert/pooler/dense/bias\.$"):
    checkpoints.load_checkpoint(BertClassifier(BertEncoder(SMALL), num_labels=3),
                                str(tmp_path / "half"), allow_new_heads=True)


def test_heads_without_a_transformers_layout_are_refused(tmp_path):
  from modeling.tagging import BertFeatureTagger
  weights = randomize(BertFeatureTagger(BertEncoder(SMALL), 3, [-1], "concat", 4), 7)
  with pytest.raises(ValueError, match="No Hugging Face BERT class holds cls/ner/lstm_0/bw/bias"):
    hf_checkpoints.save_hf_checkpoint(weights, str(tmp_path / "out"), SMALL)
  assert not (tmp_path / "out").exists()


def test_a_directory_holding_two_models_is_refused_naming_both(tmp_path):
  """An old model.safetensors beside a newer TF checkpoint was read in its place."""
  weights = checkpoints.model_weights(BertEncoder(SMALL))
  hf_checkpoints.save_hf_checkpoint(weights, str(tmp_path), SMALL)
  checkpoints.save_tf2_checkpoint(BertEncoder(SMALL), str(tmp_path / "ckpt-3"))  # a run's
  with pytest.raises(ValueError) as e:
    checkpoints.read_checkpoint(str(tmp_path))
  assert str(e.value) == (
      f"{tmp_path} holds two models, the Hugging Face model.safetensors and the TF checkpoint "
      f"ckpt-3: give the file or prefix you mean ({tmp_path / 'model.safetensors'} or "
      f"{tmp_path / 'ckpt-3'}).")
  os.remove(tmp_path / "checkpoint")  # Google's layout: the index alone marks it
  tf.io.gfile.rename(str(tmp_path / "ckpt-3.index"), str(tmp_path / "bert_model.ckpt.index"))
  with pytest.raises(ValueError, match=r"holds two models, .* and the TF checkpoint bert_model"):
    checkpoints.read_checkpoint(str(tmp_path))
  assert checkpoints.read_checkpoint(str(tmp_path / "model.safetensors")).format == "hf"


def test_each_writer_refuses_a_directory_holding_another_formats_model(tmp_path):
  """Writing tf1 (or tf2) into an hf directory, or hf into a tf1 or tf2 one, would make it
  name two models (a reader of the directory got the older one): refused, naming what is
  there, and the model there is kept whole (it may be the user's only copy)."""
  from modeling import conversion
  first, second = BertEncoder(SMALL), BertEncoder(SMALL)
  randomize(first, 1), randomize(second, 2)
  for old, new in (("hf", "tf1"), ("hf", "tf2"), ("tf1", "hf"), ("tf2", "hf")):
    out = tmp_path / f"{old}_{new}"
    conversion.write_checkpoint(first, str(out), old, SMALL)
    before = sorted(os.listdir(out))
    with pytest.raises(ValueError, match=("holds a Hugging Face model" if old == "hf" else
                                          "holds a TF checkpoint") + ".*name another directory"):
      conversion.write_checkpoint(second, str(out), new, SMALL)
    assert sorted(os.listdir(out)) == before, (old, new)
    got = checkpoints.read_checkpoint(str(out))
    assert got.format == old
    for name, value in checkpoints.model_weights(first).items():
      np.testing.assert_array_equal(got.weights[name], value)  # exact: copied bits
  for fmt in ("tf1", "tf2", "hf"):  # the same format again replaces its own model
    out = tmp_path / f"again_{fmt}"
    conversion.write_checkpoint(first, str(out), fmt, SMALL)
    conversion.write_checkpoint(second, str(out), fmt, SMALL)
    got = checkpoints.read_checkpoint(str(out))
    for name, value in checkpoints.model_weights(second).items():
      np.testing.assert_array_equal(got.weights[name], value)


def test_a_hugging_face_model_is_not_written_over_a_training_run(tmp_path):
  state = 'model_checkpoint_path: "ckpt-8"\nall_model_checkpoint_paths: "ckpt-8"\n'
  (tmp_path / "checkpoint").write_text(state)
  with pytest.raises(ValueError, match=r"holds a training run's checkpoints \(ckpt-8\)"):
    hf_checkpoints.save_hf_checkpoint(checkpoints.model_weights(BertEncoder(SMALL)),
                                      str(tmp_path), SMALL)
  assert os.listdir(tmp_path) == ["checkpoint"]


def _safetensors_bytes(entries):
  """A safetensors file built by hand: {key: (dtype name, shape, raw little-endian bytes)}."""
  import struct
  header, data = {}, b""
  for key, (dtype, shape, raw) in entries.items():
    header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data),
                                                                          len(data) + len(raw)]}
    data += raw
  text = json.dumps(header).encode()
  text += b" " * (-len(text) % 8)
  return struct.pack("<Q", len(text)) + text + data


def test_bfloat16_safetensors_are_read_exactly(tmp_path):
  """transformers saves a bfloat16 model's tensors as BF16, which numpy (and so safetensors'
  numpy reader) lacks: they are read as float32 of the same values, bit for bit."""
  weights = randomize(BertEncoder(SMALL), 4)
  entries, want = {}, {}
  for name, value in weights.items():
    bits = np.ascontiguousarray(value).view("<u4")
    top = (bits >> 16).astype("<u2")  # the bfloat16 of value, rounded toward zero
    want[name] = (top.astype("<u4") << 16).view("<f4")  # its float32: the low half zero
    key, transpose = hf_checkpoints.hf_name(name)
    top = top.T if transpose else top
    entries[key] = ("BF16", top.shape, np.ascontiguousarray(top).tobytes())
  (tmp_path / "model.safetensors").write_bytes(_safetensors_bytes(entries))
  model = BertEncoder(SMALL)
  checkpoints.load_checkpoint(model, str(tmp_path))
  assert any(not np.array_equal(want[n], weights[n]) for n in want)  # the values did change
  for name, var in checkpoints.variable_map(model).items():
    np.testing.assert_array_equal(var.numpy(), want[name])  # exact: the widening adds zeros


def test_an_untied_masked_lm_decoder_is_refused_naming_it(tmp_path):
  """A decoder that is not the word embeddings was dropped and the conversion 'succeeded'."""
  weights = randomize(BertPretrainer(BertEncoder(SMALL)), 5)
  _write_hugging_face(weights, str(tmp_path), with_prefix=True)  # decoder = the embeddings
  checkpoints.read_checkpoint(str(tmp_path))
  from safetensors.numpy import load_file, save_file
  tensors = load_file(str(tmp_path / "model.safetensors"))
  tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] * 2
  save_file(tensors, str(tmp_path / "model.safetensors"))
  with pytest.raises(ValueError) as e:
    checkpoints.read_checkpoint(str(tmp_path))
  assert str(e.value).startswith(
      f"Checkpoint file {tmp_path / 'model.safetensors'}: cls.predictions.decoder.weight "
      "differs from embeddings.word_embeddings.weight (an untied masked-LM decoder")
  assert "\n" not in str(e.value)


def test_tie_word_embeddings_false_is_not_copied_to_an_output_config():
  """Our decoder is the word embeddings: transformers, told false, would expect another."""
  config = BertConfig.from_dict({**SMALL.to_dict(), "model_type": "bert",
                                 "tie_word_embeddings": False})
  assert "tie_word_embeddings" not in config.to_dict()
  config.extra["tie_word_embeddings"] = False  # as an older bert_config.json may hold it
  assert "tie_word_embeddings" not in hf_checkpoints.hf_config(config, "BertForMaskedLM")


def test_a_sharded_hugging_face_model_is_read_whole(tmp_path):
  """From its directory or from any one shard (before: 'holds no checkpoint', or one shard's
  tensors and a list of missing ones)."""
  from safetensors.numpy import load_file, save_file
  weights = randomize(BertEncoder(SMALL), 6)
  _write_hugging_face(weights, str(tmp_path), with_prefix=False)
  tensors = load_file(str(tmp_path / "model.safetensors"))
  os.remove(tmp_path / "model.safetensors")
  keys = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": keys[::2],
            "model-00002-of-00002.safetensors": keys[1::2]}
  for shard, names in shards.items():
    save_file({k: tensors[k] for k in names}, str(tmp_path / shard))
  (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
      {"metadata": {}, "weight_map": {k: s for s, names in shards.items() for k in names}}))
  for path in (tmp_path, tmp_path / "model-00002-of-00002.safetensors"):
    got = checkpoints.read_checkpoint(str(path))
    assert got.path == str(tmp_path / "model.safetensors.index.json")
    assert sorted(got.weights) == sorted(weights)
    for name, value in weights.items():
      np.testing.assert_array_equal(got.weights[name], value)  # exact: copied bits


def test_pytorch_files_are_named_as_not_read(tmp_path):
  (tmp_path / "pytorch_model.bin").write_bytes(b"PK")
  message = (f"{tmp_path / 'pytorch_model.bin'} is a PyTorch file, which is not read: save the "
             "model as safetensors (transformers' save_pretrained(directory, "
             "safe_serialization=True)).")
  for path in (tmp_path, tmp_path / "pytorch_model.bin"):
    with pytest.raises(ValueError) as e:
      checkpoints.read_checkpoint(str(path))
    assert str(e.value) == message


def test_a_state_file_naming_a_prefix_elsewhere_says_so(tmp_path):
  """run_pretraining's output copied down from its bucket: the state file names gs://..."""
  checkpoints._write_tf1_bundle(checkpoints.model_weights(BertEncoder(SMALL)),
                                str(tmp_path / "model.ckpt-20"))
  elsewhere = "gs://bucket/pretrain_out/model.ckpt-20"
  (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{elsewhere}"\n')
  with pytest.raises(ValueError) as e:
    checkpoints.read_checkpoint(str(tmp_path))
  assert str(e.value) == (f"{tmp_path} holds no checkpoint: its 'checkpoint' file names "
                          f"{elsewhere}, which is not found; its prefix "
                          f"{tmp_path / 'model.ckpt-20'} is here: give that.")
  tf.io.gfile.rename(str(tmp_path / "model.ckpt-20.index"), str(tmp_path / "model.ckpt-5.index"))
  with pytest.raises(ValueError, match=r"which is not found; prefixes here: model.ckpt-5\.$"):
    checkpoints.read_checkpoint(str(tmp_path))


def test_a_hugging_face_model_of_another_type_is_refused_with_any_config(tmp_path):
  """With --bert_config_file given, a RoBERTa directory was read as BERT."""
  weights = checkpoints.model_weights(BertEncoder(SMALL))
  _write_hugging_face(weights, str(tmp_path), with_prefix=False)
  config = json.loads((tmp_path / "config.json").read_text())
  (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
  with pytest.raises(ValueError, match=r"config.json names model_type 'roberta': .* is not a "
                     "BERT checkpoint"):
    checkpoints.load_checkpoint(BertEncoder(SMALL), str(tmp_path))
