"""Hugging Face BERT checkpoints: the name table, and safetensors reading and writing.

One table (`hf_name`) maps each original (TF1) variable name to its Hugging
Face key and says whether the array is transposed; reading and writing both
use it. Layouts follow transformers' BertModel (encoder keys without a prefix)
and its task models (`bert.` before encoder keys, then the head):
BertForPreTraining, BertLMHeadModel / BertForMaskedLM (the masked-LM head alone, on
a causal or bidirectional encoder), BertForSequenceClassification,
BertForQuestionAnswering, BertForTokenClassification and BertForMultipleChoice. The
sequence classification, token classification and multiple choice classes name
their heads alike (`classifier.*`, weights of one layout), so reading tells
them apart by the `architectures` entry of the config.json beside the weights. An
export holds exactly the keys transformers' save_pretrained writes for its class:
no pooler for the classes built without one, no tied decoder, no position_ids
buffer. Only numpy and safetensors are needed; no torch.
"""

import json
import os
import re

import numpy as np
from absl import logging

from data import files, path_checks, text_decoding
from modeling import checkpoint_paths
from modeling.config import LAYER_NORM_EPSILON

# --- The name table --------------------------------------------------------

_HF_ENCODER = {
    "bert/embeddings/word_embeddings": "embeddings.word_embeddings.weight",
    "bert/embeddings/token_type_embeddings": "embeddings.token_type_embeddings.weight",
    "bert/embeddings/position_embeddings": "embeddings.position_embeddings.weight",
    "bert/embeddings/LayerNorm/gamma": "embeddings.LayerNorm.weight",
    "bert/embeddings/LayerNorm/beta": "embeddings.LayerNorm.bias",
    "bert/pooler/dense/kernel": "pooler.dense.weight",
    "bert/pooler/dense/bias": "pooler.dense.bias",
}
# Per transformers class: our head variables -> its keys. A model's head must
# be exactly one of these sets. Our `output_weights` are stored [C, H], as
# torch keeps a Linear's weight, so only the `/kernel` entries transpose.
_HF_HEADS = {
    "BertModel": {},
    "BertForPreTraining": {
        "cls/predictions/transform/dense/kernel": "cls.predictions.transform.dense.weight",
        "cls/predictions/transform/dense/bias": "cls.predictions.transform.dense.bias",
        "cls/predictions/transform/LayerNorm/gamma": "cls.predictions.transform.LayerNorm.weight",
        "cls/predictions/transform/LayerNorm/beta": "cls.predictions.transform.LayerNorm.bias",
        "cls/predictions/output_bias": "cls.predictions.bias",
        "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
        "cls/seq_relationship/output_bias": "cls.seq_relationship.bias"},
    "BertForSequenceClassification": {"output_weights": "classifier.weight",
                                      "output_bias": "classifier.bias"},
    "BertForQuestionAnswering": {"cls/squad/output_weights": "qa_outputs.weight",
                                 "cls/squad/output_bias": "qa_outputs.bias"},
    "BertForTokenClassification": {"cls/ner/output_weights": "classifier.weight",
                                   "cls/ner/output_bias": "classifier.bias"},
    "BertForMultipleChoice": {"cls/multiple_choice/output_weights": "classifier.weight",
                              "cls/multiple_choice/output_bias": "classifier.bias"},
}
# The masked-LM head alone (run_pretraining --objective=ltr's model): transformers'
# BertLMHeadModel when the encoder is causal (config.json's is_decoder), else
# BertForMaskedLM; the same keys either way.
_MLM_ONLY = {n: k for n, k in _HF_HEADS["BertForPreTraining"].items()
             if n.startswith("cls/predictions/")}
_HF_HEADS["BertLMHeadModel"] = _HF_HEADS["BertForMaskedLM"] = _MLM_ONLY
# Keys shared by several classes: the config's architecture decides; a file
# without one reads as a sentence classifier (transformers' default use).
_SHARED_HEAD_KEYS = ("classifier.weight", "classifier.bias")
_DEFAULT_CLASSIFIER = "BertForSequenceClassification"
_CLASSIFIER_CLASSES = ("BertForSequenceClassification", "BertForTokenClassification",
                       "BertForMultipleChoice")
_HF_BLOCK_SUFFIXES = {
    "attention/self/query": "attention.self.query",
    "attention/self/key": "attention.self.key",
    "attention/self/value": "attention.self.value",
    "attention/output/dense": "attention.output.dense",
    "attention/output/LayerNorm": "attention.output.LayerNorm",
    "intermediate/dense": "intermediate.dense",
    "output/dense": "output.dense",
    "output/LayerNorm": "output.LayerNorm",
}
_HF_PARAMS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
# A buffer of position indices, which older transformers saved: no variable of ours.
# Read past; never written (save_pretrained writes none either).
_HF_SKIPPED = ("embeddings.position_ids",)
# The masked-LM decoder, which our model (as the original) ties to the word embeddings and
# to cls.predictions.bias: a file may hold copies, read past when bitwise equal; an untied
# decoder (tie_word_embeddings false) is refused, as no variable of ours can hold it.
_TIED_DECODER = {"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
                 "cls.predictions.decoder.bias": "cls.predictions.bias"}
# The classes that build their BertModel without a pooler: their files hold
# none (transformers would report one as unexpected), and none of their tasks
# reads it.
_NO_POOLER = ("BertForQuestionAnswering", "BertForTokenClassification", "BertLMHeadModel",
              "BertForMaskedLM")
_POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
# Our activation names -> transformers' (gelu_new is the tanh approximation).
_TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu",
                     "tanh": "tanh", "linear": "linear"}


def hf_name(name):
  """(Hugging Face key, transpose?) for an original variable name.

  Encoder keys are given without the `bert.` prefix that task models add.
  torch Linear weights are stored [out, in], ours [in, out]: kernels transpose.
  Raises KeyError for a name with no Hugging Face counterpart.
  """
  if name in _HF_ENCODER:
    return _HF_ENCODER[name], name.endswith("/kernel")
  for heads in _HF_HEADS.values():
    if name in heads:
      return heads[name], name.endswith("/kernel")
  m = re.fullmatch(r"bert/encoder/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)", name)
  if m is None or m.group(2) not in _HF_BLOCK_SUFFIXES:
    raise KeyError(f"No Hugging Face name for {name}.")
  key = f"encoder.layer.{m.group(1)}.{_HF_BLOCK_SUFFIXES[m.group(2)]}.{_HF_PARAMS[m.group(3)]}"
  return key, m.group(3) == "kernel"


def _original_names(num_layers, architecture=None):
  """Every original name the tables know, for a model of `num_layers` blocks; the
  `classifier.*` keys are `architecture`'s head (a sentence classifier's if not one
  of the classes sharing them)."""
  owner = architecture if architecture in _CLASSIFIER_CLASSES else _DEFAULT_CLASSIFIER
  names = list(_HF_ENCODER)
  for name, heads in _HF_HEADS.items():
    names += [n for n, key in heads.items()
              if key not in _SHARED_HEAD_KEYS or name == owner]
  for i in range(num_layers):
    for suffix in _HF_BLOCK_SUFFIXES:
      params = ("gamma", "beta") if suffix.endswith("LayerNorm") else ("kernel", "bias")
      names += [f"bert/encoder/layer_{i}/{suffix}/{p}" for p in params]
  return names


# --- Reading ---------------------------------------------------------------

# safetensors dtypes -> numpy (little-endian, as the format stores them). BF16, which
# numpy lacks, is read as its 16 bits and widened to float32 exactly (`_widen_bf16`).
_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                 "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2",
                 "U8": "u1", "BOOL": "?"}


def _widen_bf16(data):
  """float32 array of bfloat16 values (raw little-endian bytes): each is the top half of
  the float32 with the same value, so the widening is exact."""
  return (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")


def _load_tensors(path):
  """{key: array} of a safetensors file, or of every shard a sharded model's index json
  lists; ValueError naming the file if unreadable."""
  if path.endswith(".index.json"):
    return _load_shards(path)
  import safetensors
  try:  # read whole through data/files.py (safetensors' own reader takes local paths only)
    views = safetensors.deserialize(files.read_bytes(path))
  except (safetensors.SafetensorError, OSError) as e:
    raise ValueError(f"Checkpoint file {path} is truncated or not a safetensors file "
                     f"({e}).") from e
  tensors = {}
  for key, view in views:
    if view["dtype"] == "BF16":
      value = _widen_bf16(view["data"])
    elif view["dtype"] in _NUMPY_DTYPES:
      value = np.frombuffer(view["data"], _NUMPY_DTYPES[view["dtype"]])
    else:
      raise ValueError(f"Checkpoint file {path}: {key} is of dtype {view['dtype']}, which is "
                       f"not read (only {', '.join(['BF16', *_NUMPY_DTYPES])}).")
    tensors[key] = value.reshape(view["shape"])
  return tensors


def _load_shards(index):
  """{key: array} of the shards that `index` (model.safetensors.index.json) lists."""
  try:
    weight_map = json.loads(text_decoding.read_text(index))["weight_map"]
    shards = sorted(set(weight_map.values()))
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"{index} is not a safetensors index (a json with a weight_map): "
                     f"{e!r}.") from e
  tensors = {}
  for shard in shards:
    shard = os.path.join(os.path.dirname(index), shard)
    if not files.exists(shard):
      raise ValueError(f"Checkpoint file {shard}, listed in {index}, does not exist.")
    tensors.update(_load_tensors(shard))
  missing = sorted(set(weight_map) - set(tensors))
  if missing:
    raise ValueError(f"{index} lists {len(missing)} tensor(s) its shards lack: "
                     f"{', '.join(missing[:4])}.")
  return tensors


def _drop_tied_decoder(tensors, path):
  """Removes the masked-LM decoder's copies of tied tensors from `tensors` (keys without
  `bert.`); ValueError naming the one that is not a copy."""
  for key, tied in _TIED_DECODER.items():
    value = tensors.pop(key, None)
    if value is None:
      continue
    if tied not in tensors and key.endswith(".bias"):
      tensors[tied] = value  # the bias saved under the decoder's name only
      continue
    other = tensors.get(tied)
    if other is None or value.shape != other.shape or value.tobytes() != other.tobytes():
      raise ValueError(f"Checkpoint file {path}: {key} differs from {tied} (an untied masked-LM "
                       "decoder, tie_word_embeddings false); our model ties the two, so it has no "
                       "place for it.")


def read_safetensors(path, architecture=None):
  """Hugging Face safetensors -> {original name: array}; unknown keys kept as `<hf>key`.

  `architecture`: the transformers class named in the config.json beside the
  file, which says whose head `classifier.*` is (see `architecture_beside`).
  """
  tensors = {}
  for key, value in _load_tensors(path).items():
    key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key))  # old exports
    key = key[len("bert."):] if key.startswith("bert.") else key
    if key not in _HF_SKIPPED:
      tensors[key] = value
  _drop_tied_decoder(tensors, path)
  layers = [int(m.group(1)) for m in map(re.compile(r"encoder\.layer\.(\d+)\.").match, tensors) if m]
  weights = {}
  for name in _original_names(max(layers, default=-1) + 1, architecture):
    key, transpose = hf_name(name)
    if key in tensors:
      value = tensors.pop(key)
      weights[name] = value.T if transpose else value
  weights.update({f"<hf>{key}": value for key, value in tensors.items()})
  return weights


def architecture_beside(path):
  """The transformers class named by the config.json beside safetensors file `path`, or None.

  Raises:
    ValueError: that config.json names a model_type other than BERT's.
  """
  config = os.path.join(os.path.dirname(path), "config.json")
  if not files.exists(config):
    return None
  try:
    d = json.loads(text_decoding.read_text(config))
    model_type, architectures = d.get("model_type", "bert"), d.get("architectures")
  except (ValueError, AttributeError):
    return None  # not ours to judge here: the config is read (and checked) on its own
  if model_type != "bert":
    raise ValueError(f"{config} names model_type {model_type!r}: {path} is not a BERT "
                     "checkpoint, whatever config is given.")
  return architectures[0] if isinstance(architectures, list) and architectures else None


# --- Writing ---------------------------------------------------------------

def _architecture(weights, causal=False):
  """The transformers class whose layout `weights` (original names) fill.

  `causal`: the encoder attends to earlier tokens only (a masked-LM head alone
  is then BertLMHeadModel's). Raises ValueError naming every head variable no
  class holds (as the feature-based tagger's BiLSTM), or those a class lacks.
  """
  heads = {n for n in weights if not n.startswith("bert/")}
  if heads == set(_MLM_ONLY):
    return "BertLMHeadModel" if causal else "BertForMaskedLM"
  for architecture, table in _HF_HEADS.items():
    if heads == set(table):
      return architecture
  closest, table = max(_HF_HEADS.items(), key=lambda item: len(heads & set(item[1])))
  unplaced = sorted(heads - set(table))
  if not unplaced:
    raise ValueError(f"The head is {closest}'s without {', '.join(sorted(set(table) - heads))}"
                     "; Hugging Face has no class for it.")
  raise ValueError(f"No Hugging Face BERT class holds {', '.join(unplaced)}; the format holds "
                   "the encoder alone or with the pretraining, masked-LM, sequence classification, "
                   "question answering, token classification or multiple choice head. "
                   "Convert to tf1 or tf2 instead.")


def to_hf_tensors(weights, causal=False):
  """{original name: array} -> ({Hugging Face key: array}, architecture name).

  The keys are exactly those of the architecture: the question answering,
  token classification and masked-LM-only classes have no pooler, so ours
  (which those tasks never read) is left out, and said so in the log; read
  back, the pooler then keeps a fresh initialisation.
  """
  architecture = _architecture(weights, causal)
  prefix = "" if architecture == "BertModel" else "bert."
  left_out = [n for n in _POOLER if n in weights] if architecture in _NO_POOLER else []
  if left_out:
    logging.info("%s has no pooler: %s left out of the export (the task never reads them).",
                 architecture, " and ".join(left_out))
  tensors = {}
  for name, value in weights.items():
    if name in left_out:
      continue
    try:
      key, transpose = hf_name(name)
    except KeyError as e:
      raise ValueError(f"{e.args[0]} ({architecture} has no such variable).") from e
    key = prefix + key if name.startswith("bert/") else key
    tensors[key] = np.ascontiguousarray(value.T if transpose else value)
  return tensors, architecture


def hf_config(config, architecture, num_labels=None, labels=None):
  """Hugging Face config.json dict for a BertConfig and a transformers class name.

  With num_labels, id2label and label2id name the classes: `labels` (a list of
  num_labels names) or LABEL_0, LABEL_1, ...
  """
  if config.hidden_act not in _TO_HF_ACTIVATION:
    raise ValueError(f"hidden_act {config.hidden_act!r} has no Hugging Face name.")
  # Our masked-LM decoder is the word embeddings: a tie_word_embeddings false read
  # from an input's config.json would have transformers load a decoder not written.
  d = {k: v for k, v in config.to_dict().items()
       if k not in ("id2label", "label2id", "tie_word_embeddings")}
  if d.pop("causal_attention", False):  # transformers' spelling of a causal BertModel
    d["is_decoder"] = True
  d.setdefault("pad_token_id", 0)
  d.update(architectures=[architecture], model_type="bert",
           hidden_act=_TO_HF_ACTIVATION[config.hidden_act],
           layer_norm_eps=LAYER_NORM_EPSILON, position_embedding_type="absolute")
  if num_labels is not None:
    names = list(labels) if labels else [f"LABEL_{i}" for i in range(num_labels)]
    d["id2label"] = {str(i): name for i, name in enumerate(names)}
    d["label2id"] = {name: i for i, name in enumerate(names)}
  return d


def _write_safetensors(tensors, path):
  """Writes under a temporary name, renamed once complete."""
  from safetensors import numpy as st_numpy
  # Serialised in memory and written by Python, so the file gets the usual
  # permissions (safetensors' own writer leaves it readable by its owner only).
  data = st_numpy.save(tensors, metadata={"format": "pt"})  # transformers needs "format"
  with files.atomic_output(path, "wb") as f:
    f.write(data)


# The classes whose config.json counts the labels, and the head variable whose rows are them.
_LABEL_ROWS = {"BertForSequenceClassification": "output_weights",
               "BertForTokenClassification": "cls/ner/output_weights"}


def save_hf_checkpoint(weights, output_dir, config, vocab_file=None, labels=None,
                       extra_files=None):
  """Writes `weights` ({original name: array}) as a Hugging Face model directory.

  `labels`: names of a classifier's or tagger's classes for config.json
  (as run_ner.py's label_list.txt); default LABEL_0, LABEL_1, ...

  output_dir receives `config.json`, `vocab.txt` (when given), extra_files
  (files.write_extra_files) and then
  `model.safetensors`, each written under a temporary name and renamed; the
  weights go last, so a directory with model.safetensors is complete.
  Returns the path of model.safetensors.
  Raises:
    ValueError: a head with no Hugging Face layout, an unwritable output_dir, or
      one holding a TF checkpoint (a training run's or a converted one: nothing is
      removed, the directory would name two models).
  """
  tensors, architecture = to_hf_tensors(weights, config.causal_attention)
  num_labels = (weights[_LABEL_ROWS[architecture]].shape[0]
                if architecture in _LABEL_ROWS else None)
  if labels and len(labels) != num_labels:
    raise ValueError(f"{len(labels)} label names for a head of {num_labels} classes.")
  path_checks.ensure_writable_dir(output_dir, "output directory")
  # A directory holding a TF checkpoint is refused (it would name two models); an older
  # export's marker goes first.
  checkpoint_paths.check_no_other_model(output_dir, "hf")
  files.remove_marker(os.path.join(output_dir, checkpoint_paths.HF_FILE))
  files.remove_marker(os.path.join(output_dir, checkpoint_paths.HF_SHARD_INDEX))
  with files.atomic_output(os.path.join(output_dir, "config.json")) as f:
    json.dump(hf_config(config, architecture, num_labels, labels), f, indent=2, sort_keys=True)
    f.write("\n")
  if vocab_file:
    with files.open_file(vocab_file, "rb") as src, \
        files.atomic_output(os.path.join(output_dir, "vocab.txt"), "wb") as f:
      f.write(src.read())
  files.write_extra_files(output_dir, extra_files)
  path = os.path.join(output_dir, "model.safetensors")
  _write_safetensors(tensors, path)
  return path
