"""tf-models-official (Model Garden), the independent implementation the tests and
benchmarks set ours against: its BERT encoder in our config's shape, holding weights given
under the original's names."""

import re

import numpy as np

# Model Garden's variable paths (below the model's own name) -> the original's names.
_FIXED = {"word_embeddings/embeddings": "bert/embeddings/word_embeddings",
          "position_embedding/embeddings": "bert/embeddings/position_embeddings",
          "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
          "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
          "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
          "pooler_transform/kernel": "bert/pooler/dense/kernel",
          "pooler_transform/bias": "bert/pooler/dense/bias",
          "cls/predictions/output_bias/bias": "cls/predictions/output_bias"}
_BLOCK = {"self_attention/query": "attention/self/query",
          "self_attention/key": "attention/self/key",
          "self_attention/value": "attention/self/value",
          "self_attention/attention_output": "attention/output/dense",
          "self_attention_layer_norm": "attention/output/LayerNorm",
          "intermediate": "intermediate/dense", "output": "output/dense",
          "output_layer_norm": "output/LayerNorm"}
_LAYER = re.compile(r"transformer/(layer_\d+)/(.+)/(kernel|bias|gamma|beta)")


def encoder(config, dropout=True):
  """Model Garden's BertEncoderV2 (tf_keras) in the shape of `config` (a BertConfig), not
  yet built; dropout=False sets both dropout rates to 0."""
  from official.nlp.modeling import networks
  return networks.BertEncoderV2(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size, inner_dim=config.intermediate_size,
      inner_activation=config.hidden_act,
      output_dropout=config.hidden_dropout_prob if dropout else 0.0,
      attention_dropout=config.attention_probs_dropout_prob if dropout else 0.0)


def original_name(path):
  """The original's name of a Model Garden variable `path` (the model's own name left out).
  Paths outside the encoder (the masked-LM head's cls/predictions/...) are the original's
  names already."""
  if path in _FIXED:
    return _FIXED[path]
  m = _LAYER.fullmatch(path)
  return f"bert/encoder/{m[1]}/{_BLOCK[m[2]]}/{m[3]}" if m else path


def assign(model, weights):
  """Gives a built Model Garden model (a BertEncoderV2, or a BertPretrainerV2 over one)
  `weights`, {original name: array}; returns the model."""
  for var in model.weights:
    name = original_name(var.name.split("/", 1)[1].rsplit(":", 1)[0])
    # Model Garden keeps attention kernels per head ([H, N, D], [N, D, H]).
    var.assign(np.reshape(weights[name], var.shape))
  return model
