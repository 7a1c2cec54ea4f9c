"""Which checkpoint a path names, and in which format (tf1, tf2 or hf).

A path may be a checkpoint prefix, any file of a TF bundle, a directory
holding one checkpoint, a .safetensors file (one shard of a sharded model
stands for the model) or a sharded model's index json. A path that is
missing, holds no checkpoint or two, or names a bundle whose index is
unreadable is reported in one line (ValueError) before any weights are read;
modeling/checkpoints.py reads what the path resolves to. The writers refuse a
directory holding a model of another format (`check_no_other_model`), so a
directory names one model.
"""

import os
import re

import tensorflow as tf

from data import files, text_decoding


# A Hugging Face model: one file, or shards listed by an index json (transformers' names).
HF_FILE = "model.safetensors"
HF_SHARD_INDEX = "model.safetensors.index.json"
_HF_SHARD = re.compile(r".+-\d{5}-of-\d{5}\.safetensors")
# The prefixes our writers give a TF checkpoint (tf1 and tf2); a `checkpoint` state file
# naming another one is a training run's (ckpt-N).
CONVERTED_PREFIXES = ("bert_model.ckpt", "model.ckpt")


def resolve_checkpoint(path):
  """(format, concrete path) for a checkpoint prefix, directory or safetensors file.

  A directory names one model: one holding both a Hugging Face model and a TF
  checkpoint is refused (which one it means is not ours to guess). The concrete
  path of a sharded Hugging Face model is its index json.
  Raises:
    ValueError: one line saying the path does not exist, holds no checkpoint or
      two, or names a checkpoint file that is truncated or corrupt.
  """
  if not path:
    raise ValueError("No checkpoint path given.")
  if files.isdir(path):
    fmt, path = _resolve_directory(path)
    if fmt == "hf":
      return fmt, path
  if path.endswith(".bin"):
    raise ValueError(_pytorch_message(path))
  if path.endswith((".safetensors", ".safetensors.index.json")):
    if not files.exists(path):
      raise ValueError(f"Checkpoint file {path} does not exist.")
    index = os.path.join(os.path.dirname(path), HF_SHARD_INDEX)
    if _HF_SHARD.fullmatch(os.path.basename(path)) and files.exists(index):
      return "hf", index  # one shard stands for the model it is part of
    return "hf", path
  # Any file of a TF bundle stands for its prefix.
  path = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
  if not files.exists(path + ".index"):
    if data_files(path):
      raise ValueError(f"Checkpoint {path} is incomplete: {path}.index is missing.")
    if files.exists(path):
      raise ValueError(f"{path} is not a checkpoint: expected a checkpoint prefix (with "
                       f"{path}.index), a directory holding a checkpoint, or a "
                       ".safetensors file.")
    raise ValueError(f"Checkpoint {path} does not exist (no {path}.index, no directory "
                     "or .safetensors file of that name).")
  reader = open_bundle(path)
  return ("tf2" if reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH") else "tf1"), path


def _resolve_directory(path):
  """("hf", file) or (None, TF prefix) for a directory holding exactly one model."""
  hf = next((os.path.join(path, n) for n in (HF_FILE, HF_SHARD_INDEX)
             if files.exists(os.path.join(path, n))), None)
  prefix = tf.train.latest_checkpoint(path)
  if prefix is None and files.exists(os.path.join(path, "bert_model.ckpt.index")):
    prefix = os.path.join(path, "bert_model.ckpt")
  if hf and prefix:
    raise ValueError(f"{path} holds two models, the Hugging Face {os.path.basename(hf)} and "
                     f"the TF checkpoint {os.path.basename(prefix)}: give the file or prefix "
                     f"you mean ({hf} or {prefix}).")
  if hf or prefix:
    return ("hf", hf) if hf else (None, prefix)
  names = files.listdir(path)
  pytorch = sorted(n for n in names if n.startswith("pytorch_model") and n.endswith(".bin"))
  if pytorch:
    raise ValueError(_pytorch_message(os.path.join(path, pytorch[0])))
  target = state_file_target(path)
  if target:  # e.g. a run's directory copied down from the bucket its state file names
    local = os.path.join(path, os.path.basename(target))
    indexes = sorted(n[:-len(".index")] for n in names if n.endswith(".index"))
    here = (f"; its prefix {local} is here: give that" if files.exists(local + ".index") else
            f"; prefixes here: {', '.join(indexes)}" if indexes else "; no .index file is here")
    raise ValueError(f"{path} holds no checkpoint: its 'checkpoint' file names {target}, "
                     f"which is not found{here}.")
  raise ValueError(f"{path} holds no checkpoint (no model.safetensors, "
                   "'checkpoint' file or bert_model.ckpt.index).")


def _pytorch_message(path):
  return (f"{path} is a PyTorch file, which is not read: save the model as safetensors "
          "(transformers' save_pretrained(directory, safe_serialization=True)).")


def state_file_target(directory):
  """The prefix a directory's `checkpoint` state file names, as written there (a relative one
  joined to the directory), or None (no file, or none named)."""
  state = os.path.join(directory, "checkpoint")
  if not files.exists(state):
    return None
  try:  # read as text: tf.train.get_checkpoint_state would put a gs:// target under directory
    text = text_decoding.read_text(state)
  except (ValueError, OSError):
    return None
  m = re.search(r'^\s*model_checkpoint_path:\s*"([^"]*)"', text, re.MULTILINE)
  if not m or not m.group(1):
    return None
  target = m.group(1)
  return target if "://" in target or os.path.isabs(target) else os.path.join(directory, target)


def training_run_checkpoint(directory):
  """The checkpoint a training run keeps in `directory` (ckpt-N, which its `checkpoint`
  state file names), or None when the directory holds no run's checkpoints."""
  target = state_file_target(directory)
  name = os.path.basename(target) if target else ""
  return name if name not in ("", *CONVERTED_PREFIXES) else None


def check_no_other_model(directory, output_format):
  """ValueError when `directory` holds a model of another kind than `output_format` would
  write there (a Hugging Face model for tf1/tf2, a TF checkpoint for hf): the directory
  would then name two models, and the reader of one would silently get the other. Nothing
  is removed: the other model may be the user's only copy (a release, a converted input)."""
  if output_format == "hf":
    run = training_run_checkpoint(directory)
    tf_files = [n for n in ("checkpoint", "bert_model.ckpt.index", "model.ckpt.index")
                if files.exists(os.path.join(directory, n))]
    if run or tf_files:
      what = f"a training run's checkpoints ({run})" if run else f"a TF checkpoint ({tf_files[0]})"
      raise ValueError(f"{directory} holds {what}; a Hugging Face model written there would "
                       "make it name two models: name another directory.")
    return
  hf = [n for n in (HF_FILE, HF_SHARD_INDEX) if files.exists(os.path.join(directory, n))]
  if hf:
    raise ValueError(f"{directory} holds a Hugging Face model ({hf[0]}); a TF checkpoint "
                     "written there would make it name two models: name another directory.")


def data_files(prefix):
  """The data files (`prefix.data-*`) of a TF checkpoint bundle."""
  return files.glob(prefix + ".data-*")


def first_line(error):
  """The first line of an error's message (its type's name when it has none)."""
  text = str(getattr(error, "message", error)).strip()
  return text.splitlines()[0] if text else type(error).__name__


def open_bundle(prefix):
  """tf.train.load_checkpoint, with an unreadable index reported as one line."""
  try:
    return tf.train.load_checkpoint(prefix)
  except tf.errors.OpError as e:
    raise ValueError(f"Checkpoint file {prefix}.index is truncated or corrupt "
                     f"({first_line(e)}).") from e
