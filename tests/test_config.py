"""BertConfig: the original's fields and defaults, JSON round trips, Hugging Face configs."""

import json

import pytest

from modeling.config import BertConfig


def test_defaults_are_the_originals():
  c = BertConfig(vocab_size=99)
  assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size,
          c.hidden_act, c.hidden_dropout_prob, c.attention_probs_dropout_prob,
          c.max_position_embeddings, c.type_vocab_size, c.initializer_range) == (
              768, 12, 12, 3072, "gelu", 0.1, 0.1, 512, 16, 0.02)
  with pytest.raises(TypeError):
    BertConfig()  # vocab_size has no default


def test_json_round_trip_sorted_indent_two(tmp_path):
  c = BertConfig(vocab_size=99, hidden_size=37, num_attention_heads=1)
  text = c.to_json_string()
  assert text.endswith("}\n")
  d = json.loads(text)
  assert list(d) == sorted(d) and d["vocab_size"] == 99 and d["hidden_size"] == 37
  assert text.splitlines()[1].startswith('  "attention_probs_dropout_prob"')
  path = tmp_path / "bert_config.json"
  c.to_json_file(str(path))
  assert BertConfig.from_json_file(str(path)) == c


def test_unknown_keys_are_kept(tmp_path):
  released = {"attention_probs_dropout_prob": 0.1, "directionality": "bidi",
              "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
              "initializer_range": 0.02, "intermediate_size": 3072,
              "max_position_embeddings": 512, "num_attention_heads": 12,
              "num_hidden_layers": 12, "pooler_fc_size": 768, "type_vocab_size": 2,
              "vocab_size": 119547}
  c = BertConfig.from_dict(released)
  assert c.type_vocab_size == 2 and c.extra == {"directionality": "bidi", "pooler_fc_size": 768}
  assert json.loads(c.to_json_string()) == released


def test_reads_hugging_face_config(minilm_dir):
  c = BertConfig.from_json_file(f"{minilm_dir}/config.json")
  assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
          c.intermediate_size, c.type_vocab_size, c.hidden_act) == (
              30522, 384, 6, 12, 1536, 2, "gelu")
  assert "model_type" not in c.to_dict()
  tanh = BertConfig.from_dict({"model_type": "bert", "vocab_size": 10, "hidden_act": "gelu_new"})
  assert tanh.hidden_act == "gelu_tanh"
  with pytest.raises(ValueError, match="model_type 'roberta' is not BERT"):
    BertConfig.from_dict({"model_type": "roberta", "vocab_size": 10})


def test_invalid_values_name_the_field(tmp_path):
  with pytest.raises(ValueError, match="hidden_size \\(100\\) must be a multiple of num_attention_heads \\(12\\)"):
    BertConfig(vocab_size=10, hidden_size=100)
  with pytest.raises(ValueError, match="hidden_act must be one of"):
    BertConfig(vocab_size=10, hidden_act="swish")
  path = tmp_path / "bad.json"
  path.write_text("{not json")
  with pytest.raises(ValueError, match="bad.json is not valid JSON"):
    BertConfig.from_json_file(str(path))
  with pytest.raises(ValueError, match="Cannot read BERT config .*nope.json"):
    BertConfig.from_json_file(str(tmp_path / "nope.json"))
  path.write_text('{"hidden_size": 8}')
  with pytest.raises(ValueError, match="bad.json: BertConfig needs vocab_size"):
    BertConfig.from_json_file(str(path))
