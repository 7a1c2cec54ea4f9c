"""Which checkpoint a path names, and in which format (tf1, tf2 or hf).

A path may be a checkpoint prefix, any file of a TF bundle, a directory
holding a checkpoint, or a .safetensors file. A path that is missing, holds
no checkpoint, or names a bundle whose index is unreadable is reported in
one line (ValueError) before any weights are read; modeling/checkpoints.py
reads what the path resolves to.
"""

import os
import re

import tensorflow as tf

from data import files


def resolve_checkpoint(path):
  """(format, concrete path) for a checkpoint prefix, directory or safetensors file.

  Raises:
    ValueError: one line saying the path does not exist, holds no checkpoint,
      or names a checkpoint file that is truncated or corrupt.
  """
  if not path:
    raise ValueError("No checkpoint path given.")
  if files.isdir(path):
    if files.exists(os.path.join(path, "model.safetensors")):
      return "hf", os.path.join(path, "model.safetensors")
    latest = tf.train.latest_checkpoint(path)
    if latest is None and files.exists(os.path.join(path, "bert_model.ckpt.index")):
      latest = os.path.join(path, "bert_model.ckpt")
    if latest is None:
      raise ValueError(f"{path} holds no checkpoint (no model.safetensors, "
                       "'checkpoint' file or bert_model.ckpt.index).")
    path = latest
  if path.endswith(".safetensors"):
    if not files.exists(path):
      raise ValueError(f"Checkpoint file {path} does not exist.")
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
