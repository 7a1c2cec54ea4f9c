"""Checkpoint I/O: the name table and readers/writers for three formats.

Formats, detected from the path:
  tf1:  Google's original name-based checkpoints (bert_model.ckpt), variables
        named as in the original (`bert/encoder/layer_0/...`).
  hf:   Hugging Face BERT weights in safetensors (a directory holding
        model.safetensors, or the file itself), read with numpy only; its
        name table, reader and writer live in modeling/hf_checkpoints.py.
  tf2:  our own object-based tf.train.Checkpoint, whose `model` entry maps the
        original names to variables (see `NamedVariables`).

Every reader returns {original name: numpy array}; `load_checkpoint` assigns
such a dict to a model through `variable_map`, the one table from original
names to our variables. Which checkpoint and format a path names is
modeling/checkpoint_paths.py's.
"""

import dataclasses
import os
import re

import tensorflow as tf
from absl import logging

from data import files, path_checks
from modeling import checkpoint_paths, hf_checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder

# --- The name table --------------------------------------------------------

# Per transformer block: original name suffix -> (sublayer path, variable).
_BLOCK_VARIABLES = (
    ("attention/self/query", ("attention", "query")),
    ("attention/self/key", ("attention", "key")),
    ("attention/self/value", ("attention", "value")),
    ("attention/output/dense", ("attention", "output_dense")),
    ("intermediate/dense", ("intermediate",)),
    ("output/dense", ("output_dense",)),
)
_BLOCK_LAYER_NORMS = (
    ("attention/output/LayerNorm", "attention_layer_norm"),
    ("output/LayerNorm", "output_layer_norm"),
)


def _dense(prefix, layer):
  return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _layer_norm(prefix, layer):
  return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def _encoder_map(encoder):
  emb = encoder.embeddings
  names = {
      "bert/embeddings/word_embeddings": emb.word_embeddings,
      "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
      "bert/embeddings/position_embeddings": emb.position_embeddings,
      **_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm),
  }
  for i, block in enumerate(encoder.blocks):
    prefix = f"bert/encoder/layer_{i}"
    for suffix, path in _BLOCK_VARIABLES:
      layer = block
      for attr in path:
        layer = getattr(layer, attr)
      names.update(_dense(f"{prefix}/{suffix}", layer))
    for suffix, attr in _BLOCK_LAYER_NORMS:
      names.update(_layer_norm(f"{prefix}/{suffix}", getattr(block, attr)))
  names.update(_dense("bert/pooler/dense", encoder.pooler))
  return names


def variable_map(model):
  """Original (TF1) variable name -> our variable, for any of our models.

  Builds the model first if needed. The encoder's names are exactly those of
  the original code (`bert/...`); a task model names its head variables
  itself (`head_variable_map`): `cls/predictions/...` and
  `cls/seq_relationship/...` for pretraining, root-level `output_weights` /
  `output_bias` for the classifier, `cls/squad/...` for SQuAD,
  `cls/multiple_choice/...` for multiple choice and `cls/ner/...` for tagging.
  """
  if not model.built:
    model.build()
  if isinstance(model, BertEncoder):
    return _encoder_map(model)
  if not hasattr(model, "head_variable_map"):
    raise TypeError(f"No checkpoint name table for {type(model).__name__}.")
  names = _encoder_map(model.encoder)
  for name, var in model.head_variable_map().items():
    if name.startswith("bert/") or name in names:
      raise TypeError(f"{type(model).__name__} names a head variable {name}, an encoder name.")
    names[name] = var
  return names


def is_head_variable(name):
  """True for variables that belong to a task head rather than the encoder."""
  return not name.startswith("bert/")


# --- Reading ---------------------------------------------------------------

_TF2_PREFIX = "model/by_name/"
_TF2_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_TF1_SKIPPED = re.compile(r"(.*/adam_[mv]|global_step|.*/(Adam|Adam_1|Momentum))$")


class NamedVariables(tf.Module):
  """A trackable {name: variable} dict whose checkpoint keys are the names.

  Our checkpoints' `model` entry is NamedVariables(variable_map(model)): the
  model's variables under their original names.
  """

  def __init__(self, by_name, name="named_variables"):
    super().__init__(name=name)
    self.by_name = dict(by_name)


@dataclasses.dataclass
class Checkpoint:
  """Weights read from a checkpoint, under original (TF1) names."""
  path: str
  format: str  # "tf1", "tf2" or "hf"
  weights: dict


def _unescape(name):
  # tf.train.Checkpoint escapes "/" as ".S" and "." as "..".
  return re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), name)


def read_checkpoint(path):
  """Reads any supported checkpoint into a `Checkpoint` of original names -> arrays.

  Raises:
    ValueError: one line naming a missing, truncated or corrupt file.
  """
  fmt, path = checkpoint_paths.resolve_checkpoint(path)
  if fmt == "hf":
    return Checkpoint(path, fmt, hf_checkpoints.read_safetensors(
        path, hf_checkpoints.architecture_beside(path)))
  reader = checkpoint_paths.open_bundle(path)
  weights = {}
  try:
    for key in reader.get_variable_to_shape_map():
      if fmt == "tf1":
        if not _TF1_SKIPPED.fullmatch(key):
          weights[key] = reader.get_tensor(key)
      elif key.startswith(_TF2_PREFIX) and key.endswith(_TF2_SUFFIX):
        weights[_unescape(key[len(_TF2_PREFIX):-len(_TF2_SUFFIX)])] = reader.get_tensor(key)
  except (tf.errors.OpError, IndexError) as e:
    # A data file cut short raises IndexError ("Read less bytes than requested").
    data = ", ".join(checkpoint_paths.data_files(path)) or f"{path}.data-*"
    raise ValueError(f"Checkpoint file {data} is truncated or corrupt "
                     f"({checkpoint_paths.first_line(e)}).") from e
  if not weights:
    raise ValueError(f"Checkpoint {path} holds no BERT variables.")
  return Checkpoint(path, fmt, weights)


# --- Loading into a model --------------------------------------------------

def _shape(x):
  return "[" + ", ".join(str(d) for d in x) + "]"


def _listing(what, items, shown=4):
  """'what (n): the first `shown` items and k more' for an error line; None for no items."""
  more = f" and {len(items) - shown} more" if len(items) > shown else ""
  return f"{what} ({len(items)}): {', '.join(items[:shown])}{more}" if items else None


def load_checkpoint(model, path, allow_new_heads=False, ckpt=None, growth=None):
  """Assigns the weights of checkpoint `path` (any format) to `model`.

  Args:
    model: one of our models (encoder or task model).
    path: checkpoint prefix, directory or .safetensors file.
    allow_new_heads: when True (fine-tuning), head variables missing from the
      checkpoint, or of another shape there, keep their fresh initial values
      and are listed in the log, as does the pooler of a checkpoint that has
      none; encoder variables must otherwise always match.
    ckpt: the already read `Checkpoint` of `path`, to avoid reading it twice.
    growth: a vocab_growth.VocabGrowth: word rows the checkpoint lacks, or
      [unusedN] rows now words, are initialised from it before the load.
  Returns:
    the `Checkpoint` read (path, format, weights).
  Raises:
    ValueError: one line naming the checkpoint and every kind of mismatch: the
      variables whose shapes differ (with both shapes), those missing from the
      checkpoint and those the model lacks, each kind's first few and its count.
  """
  ckpt = ckpt or read_checkpoint(path)
  if growth is not None:
    ckpt = growth(ckpt)
  targets = variable_map(model)
  mismatched, fresh = [], []
  for name, var in targets.items():
    if name not in ckpt.weights:
      continue
    got, want = tuple(ckpt.weights[name].shape), tuple(var.shape)
    if got != want:
      if allow_new_heads and is_head_variable(name):
        fresh.append(name)
      else:
        mismatched.append(f"{name} ({_shape(got)} in the checkpoint, {_shape(want)} in the model)")
  missing = [n for n in targets if n not in ckpt.weights]
  pooler_absent = not any(n.startswith("bert/pooler/") for n in ckpt.weights)
  if not getattr(model, "uses_pooler", True) or (allow_new_heads and pooler_absent):
    # transformers' question answering, token classification and masked/causal
    # LM files have no pooler: a model that never reads it keeps it fresh, and
    # so does fine-tuning from such a file (as transformers does).
    fresh += [n for n in missing if n.startswith("bert/pooler/")]
    missing = [n for n in missing if not n.startswith("bert/pooler/")]
  if allow_new_heads:
    fresh += [n for n in missing if is_head_variable(n)]
    missing = [n for n in missing if not is_head_variable(n)]
  unused = [n for n in ckpt.weights if n not in targets]
  unexpected = [n for n in unused if not is_head_variable(n) or n.startswith("<hf>")]
  problems = [p for p in (_listing("shapes differ", mismatched),
                          _listing("missing from the checkpoint", missing),
                          _listing("in the checkpoint but not in the model", unexpected)) if p]
  if problems:
    rows = ckpt.weights.get("bert/embeddings/word_embeddings")
    table = targets.get("bert/embeddings/word_embeddings")
    hint = ""
    if rows is not None and table is not None and len(rows) != table.shape[0]:
      hint = (f" The checkpoint has {len(rows)} word rows, the model's config "
              f"vocab_size {table.shape[0]}: the bert_config.json and vocab.txt beside the "
              "checkpoint give the model as many.")
    raise ValueError(f"Checkpoint {ckpt.path} ({ckpt.format}) does not fit the model: "
                     f"{'; '.join(problems)}.{hint}")
  for name, var in targets.items():
    if name not in fresh:
      var.assign(ckpt.weights[name].astype(var.dtype))
  logging.info("Loaded %d variables from %s (%s).", len(targets) - len(fresh),
               ckpt.path, ckpt.format)
  if fresh or unused:  # one line: the head variables left behind and those started fresh
    logging.info("Head variables of the checkpoint left unused: %s; started fresh (not in "
                 "the checkpoint): %s", ", ".join(sorted(unused)) or "none",
                 ", ".join(sorted(fresh)) or "none")
  return ckpt


# --- Writing ---------------------------------------------------------------

def _write_tf1_bundle(weights, prefix):
  names = sorted(weights)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.convert_to_tensor(weights[n]) for n in names])


def save_tf1_checkpoint(weights, output_dir, config=None, vocab_file=None,
                        basename="bert_model.ckpt", extra_files=None):
  """Writes `weights` ({original name: array}) as Google's checkpoint layout.

  output_dir receives `bert_model.ckpt.{index,data-*}`, a `checkpoint` state
  file (a directory holding a Hugging Face model is refused: it would name two), and,
  when given, `bert_config.json`, `vocab.txt` and extra_files
  (files.write_extra_files). Files are written under temporary names and moved into
  place once complete. Returns the checkpoint prefix.
  """
  path_checks.ensure_writable_dir(output_dir, "output directory")
  checkpoint_paths.check_no_other_model(output_dir, "tf1")
  staging = os.path.join(output_dir, files.temporary_name("staging"))
  try:
    files.makedirs(staging)
    _write_tf1_bundle(weights, os.path.join(staging, basename))
    if config is not None:
      config.to_json_file(os.path.join(staging, "bert_config.json"))
    if vocab_file is not None:
      files.copy(vocab_file, os.path.join(staging, "vocab.txt"))
    _write_state_file(staging, basename)
    # Each file is renamed whole (see data/files.py); an older state file goes first and
    # the new one last: without it the directory is not a checkpoint.
    files.remove_marker(os.path.join(output_dir, "checkpoint"))
    files.write_extra_files(output_dir, extra_files)
    for name in sorted(files.listdir(staging), key=lambda n: n == "checkpoint"):
      files.rename(os.path.join(staging, name), os.path.join(output_dir, name))
  finally:
    if files.exists(staging):
      files.rmtree(staging)
  return os.path.join(output_dir, basename)


def _write_state_file(directory, basename):
  """The `checkpoint` file that makes `directory` resolve to `basename`."""
  with files.atomic_output(os.path.join(directory, "checkpoint")) as f:
    f.write(f'model_checkpoint_path: "{basename}"\n'
            f'all_model_checkpoint_paths: "{basename}"\n')


def model_weights(model):
  """{original name: numpy array} of a model's current values."""
  return {name: var.numpy() for name, var in variable_map(model).items()}


def save_tf2_checkpoint(model, prefix):
  """Writes `model` in our object-based format (tf.train.Checkpoint); returns the path.

  The directory's `checkpoint` file is updated so the directory resolves to it.
  """
  path = tf.train.Checkpoint(model=NamedVariables(variable_map(model))).write(prefix)
  _write_state_file(os.path.dirname(path) or ".", os.path.basename(path))
  return path


# --- Config and vocab next to a checkpoint ---------------------------------

def _checkpoint_dir(checkpoint_path):
  """The directory of a checkpoint that exists; a missing one is reported as such."""
  checkpoint_paths.resolve_checkpoint(checkpoint_path)
  if files.isdir(checkpoint_path):
    return checkpoint_path
  return os.path.dirname(checkpoint_path)


def _beside(checkpoint_path):
  """Where a checkpoint's config and vocab may be: its directory, then that directory's
  export/ (run_pretraining.py's --output_dir keeps the original layout there)."""
  directory = _checkpoint_dir(checkpoint_path)
  return directory, os.path.join(directory, "export")


def write_config_and_vocab(directory, config, vocab_file=None):
  """Writes bert_config.json and a copy of `vocab_file` (if given) into `directory`, each
  under a temporary name first, so that the directory reads as a checkpoint's."""
  with files.atomic_output(os.path.join(directory, "bert_config.json")) as f:
    f.write(config.to_json_string())
  if vocab_file:
    with files.atomic_output(os.path.join(directory, "vocab.txt"), "wb") as f:
      with files.open_file(vocab_file, "rb") as src:
        f.write(src.read())


def find_config(checkpoint_path):
  """The BertConfig stored beside a checkpoint (bert_config.json or config.json)."""
  for directory in _beside(checkpoint_path):
    for name in ("bert_config.json", "config.json"):
      candidate = os.path.join(directory, name)
      if files.exists(candidate):
        return BertConfig.from_json_file(candidate)
  raise ValueError(f"No bert_config.json or config.json beside {checkpoint_path}; "
                   "pass --bert_config_file.")


def find_vocab(checkpoint_path):
  """The vocab.txt stored beside a checkpoint."""
  for directory in _beside(checkpoint_path):
    candidate = os.path.join(directory, "vocab.txt")
    if files.exists(candidate):
      return candidate
  raise ValueError(f"No vocab.txt beside {checkpoint_path}; pass --vocab_file.")
