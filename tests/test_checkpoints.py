"""Checkpoint I/O: the original's names, TF1/TF2/Hugging Face round trips, clear errors."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from helpers import randomize, random_features

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
  model = BertPretrainer(config)
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
  model = BertPretrainer(SMALL)
  randomize(model, 1)
  if fmt == "tf1":
    path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path))
  else:
    path = checkpoints.save_tf2_checkpoint(model, str(tmp_path / "ckpt"))
  clone = BertPretrainer(SMALL)
  ckpt = checkpoints.load_checkpoint(clone, path)
  assert ckpt.format == fmt
  a, b = _outputs(model), _outputs(clone)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])
  # A directory resolves to its latest checkpoint.
  assert checkpoints.resolve_checkpoint(str(tmp_path))[0] == fmt


def test_reads_a_checkpoint_written_by_tf1_code(tmp_path):
  """Variables created and saved with tf.compat.v1, as the original did, plus Adam slots."""
  weights = randomize(BertPretrainer(SMALL), 2)
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
  model = BertPretrainer(SMALL)
  checkpoints.load_checkpoint(model, prefix)
  for name, var in checkpoints.variable_map(model).items():
    np.testing.assert_array_equal(var.numpy(), weights[name])


def _write_hugging_face(weights, directory, with_prefix):
  from safetensors.numpy import save_file
  tensors = {}
  for name, value in weights.items():
    key, transpose = checkpoints.hf_name(name)
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
  weights = randomize(model_class(SMALL), 3)
  _write_hugging_face(weights, str(tmp_path / "hf"), with_prefix)
  config = checkpoints.find_config(str(tmp_path / "hf"))
  assert config == SMALL
  model = model_class(config)
  checkpoints.load_checkpoint(model, str(tmp_path / "hf"))
  for name, var in checkpoints.variable_map(model).items():
    np.testing.assert_array_equal(var.numpy(), weights[name])


def test_shape_mismatch_is_one_line_naming_variable_and_shapes(tmp_path):
  path = checkpoints.save_tf2_checkpoint(BertEncoder(SMALL), str(tmp_path / "ckpt"))
  bigger = BertConfig(**{**SMALL.to_dict(), "hidden_size": 32})
  with pytest.raises(ValueError) as err:
    checkpoints.load_checkpoint(BertEncoder(bigger), path)
  message = str(err.value)
  assert "\n" not in message
  assert ("bert/embeddings/word_embeddings is [60, 16] in the checkpoint but [60, 32] "
          "in the model (and ") in message


def test_missing_layers_and_unexpected_layers_are_errors(tmp_path):
  path = checkpoints.save_tf2_checkpoint(BertEncoder(SMALL), str(tmp_path / "ckpt"))
  deeper = BertConfig(**{**SMALL.to_dict(), "num_hidden_layers": 3})
  with pytest.raises(ValueError, match="bert/encoder/layer_2/.* is missing from the checkpoint"):
    checkpoints.load_checkpoint(BertEncoder(deeper), path)
  shallower = BertConfig(**{**SMALL.to_dict(), "num_hidden_layers": 1})
  with pytest.raises(ValueError, match="bert/encoder/layer_1/.* is in the checkpoint but not in the model"):
    checkpoints.load_checkpoint(BertEncoder(shallower), path)


def test_fine_tuning_from_encoder_only_checkpoint(tmp_path, caplog):
  encoder = BertEncoder(SMALL)
  weights = randomize(encoder, 4)
  path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(encoder), str(tmp_path))
  with pytest.raises(ValueError, match="output_weights is missing from the checkpoint"):
    checkpoints.load_checkpoint(BertClassifier(SMALL, num_labels=3), path)
  classifier = BertClassifier(SMALL, num_labels=3)
  classifier.build()
  fresh = classifier.classifier.output_weights.numpy()
  checkpoints.load_checkpoint(classifier, path, allow_new_heads=True)
  np.testing.assert_array_equal(classifier.classifier.output_weights.numpy(), fresh)
  np.testing.assert_array_equal(classifier.encoder.embedding_table.numpy(),
                                weights["bert/embeddings/word_embeddings"])


def test_pretraining_heads_are_skipped_when_fine_tuning(tmp_path):
  pretrainer = BertPretrainer(SMALL)
  randomize(pretrainer, 5)
  path = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(pretrainer), str(tmp_path))
  span = BertSpanLabeler(SMALL)
  checkpoints.load_checkpoint(span, path, allow_new_heads=True)
  np.testing.assert_array_equal(span.encoder.pooler.kernel.numpy(),
                                pretrainer.encoder.pooler.kernel.numpy())


def test_bad_paths_have_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="No checkpoint at .*nothing: expected .*nothing.index"):
    checkpoints.load_checkpoint(BertEncoder(SMALL), str(tmp_path / "nothing"))
  with pytest.raises(ValueError, match="holds no checkpoint"):
    checkpoints.load_checkpoint(BertEncoder(SMALL), str(tmp_path))
  with pytest.raises(ValueError, match="No bert_config.json or config.json beside"):
    checkpoints.find_config(str(tmp_path))


def test_minilm_is_read_from_its_package(minilm_dir):
  ckpt = checkpoints.read_checkpoint(minilm_dir)
  assert ckpt.format == "hf" and len(ckpt.weights) == 6 * 16 + 5 + 2
  assert ckpt.weights["bert/encoder/layer_0/intermediate/dense/kernel"].shape == (384, 1536)
