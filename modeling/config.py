"""BertConfig: the model hyper-parameters, under the original bert_config.json keys."""

import copy
import dataclasses
import json

# Activation names a config may use: "gelu" is the exact erf form, "gelu_tanh"
# the tanh approximation.
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "tanh", "linear")

# Hugging Face spellings of the same activations, translated on reading.
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh",
                   "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu", "tanh": "tanh"}
# Hugging Face config.json keys that describe nothing our model needs.
_HF_IGNORED = frozenset([
    "architectures", "model_type", "transformers_version", "_name_or_path",
    "gradient_checkpointing", "use_cache", "pad_token_id", "torch_dtype",
    "classifier_dropout", "position_embedding_type", "layer_norm_eps",
    "id2label", "label2id", "add_cross_attention",
    "bos_token_id", "eos_token_id", "output_past", "tie_word_embeddings"])
LAYER_NORM_EPSILON = 1e-12


@dataclasses.dataclass
class BertConfig:
  """Hyper-parameters of a BERT encoder; field names equal bert_config.json keys.

  Unknown keys read from a file are kept in `extra` and written back, so a
  released config round-trips unchanged.

  causal_attention (added): each token attends to itself and the tokens before
  it only, as in a left-to-right language model (run_pretraining.py
  --objective=ltr writes it). It is written only when true, so the config of
  a bidirectional model stays the original's and a file without the key loads
  the original (bidirectional) encoder.
  """
  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 16
  initializer_range: float = 0.02
  causal_attention: bool = False
  extra: dict = dataclasses.field(default_factory=dict, repr=False)

  def __post_init__(self):
    self.validate()

  def validate(self):
    """Raises ValueError naming the field when a value is unusable."""
    for name in ("vocab_size", "hidden_size", "num_hidden_layers",
                 "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}.")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"BertConfig.hidden_size ({self.hidden_size}) must be a multiple of "
          f"num_attention_heads ({self.num_attention_heads}).")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"BertConfig.hidden_act must be one of {', '.join(ACTIVATIONS)}; "
                       f"got {self.hidden_act!r}.")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)}.")
    if not isinstance(self.causal_attention, bool):
      raise ValueError("BertConfig.causal_attention must be true or false, got "
                       f"{self.causal_attention!r}.")

  @classmethod
  def from_dict(cls, d):
    """Builds a config from a bert_config.json or Hugging Face config.json dict."""
    d = dict(d)
    if "model_type" in d or "architectures" in d:
      d = _from_hugging_face(d)
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    if "vocab_size" not in d:
      raise ValueError("BertConfig needs vocab_size.")
    known = {k: v for k, v in d.items() if k in names}
    return cls(**known, extra={k: v for k, v in d.items() if k not in names})

  @classmethod
  def from_json_file(cls, path):
    """Reads a bert_config.json (or a Hugging Face BERT config.json)."""
    from data import files  # local, gs:// and other file systems alike
    try:
      with files.open_file(path, "r") as f:
        d = json.load(f)
    except OSError as e:
      raise ValueError(f"Cannot read BERT config {path}: {e}") from e
    except json.JSONDecodeError as e:
      raise ValueError(f"BERT config {path} is not valid JSON: {e}") from e
    try:
      return cls.from_dict(d)
    except (TypeError, ValueError) as e:
      raise ValueError(f"BERT config {path}: {e}") from e

  def to_dict(self):
    """Returns all keys, unknown ones included, as a plain dict (causal_attention
    only when true)."""
    d = {f.name: copy.deepcopy(getattr(self, f.name))
         for f in dataclasses.fields(self) if f.name != "extra"}
    if not self.causal_attention:  # the original's keys only, for a bidirectional model
      del d["causal_attention"]
    d.update(copy.deepcopy(self.extra))
    return d

  def to_json_string(self):
    """JSON text with sorted keys and indent 2, as the original writes it."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def to_json_file(self, path):
    """Writes to_json_string() to `path`."""
    from data import files
    with files.atomic_output(path) as f:
      f.write(self.to_json_string())


def _from_hugging_face(d):
  """Translates a Hugging Face BERT config.json dict to bert_config.json keys."""
  model_type = d.get("model_type", "bert")
  if model_type != "bert":
    raise ValueError(f"model_type {model_type!r} is not BERT.")
  if d.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError("only absolute position embeddings are supported, got "
                     f"position_embedding_type={d['position_embedding_type']!r}.")
  eps = d.get("layer_norm_eps", LAYER_NORM_EPSILON)
  if abs(eps - LAYER_NORM_EPSILON) > 1e-15:
    raise ValueError(f"layer_norm_eps={eps} is not supported; BERT uses {LAYER_NORM_EPSILON}.")
  act = d.get("hidden_act", "gelu")
  if act not in _HF_ACTIVATIONS:
    raise ValueError(f"hidden_act {act!r} is not supported.")
  out = {k: v for k, v in d.items() if k not in _HF_IGNORED and k != "is_decoder"}
  out["hidden_act"] = _HF_ACTIVATIONS[act]
  if d.get("is_decoder"):  # transformers' BertModel then masks attention causally
    out["causal_attention"] = True
  return out
