"""Running any of our raw-text exports (modeling/export.py, squad_export.py) from Python."""

import numpy as np
from google.protobuf import message
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from data import files


def _serving_signature(export_dir):
  """The serving_default SignatureDef of the export, read from saved_model.pb alone: in
  milliseconds, before the export loads. ValueError (one line) when the file is missing,
  unreadable or has no such signature."""
  path = f"{export_dir}/saved_model.pb"
  try:
    if not files.exists(path):
      raise ValueError(f"--export_dir={export_dir} holds no SavedModel (saved_model.pb).")
    with files.open_file(path, "rb") as f:
      data = f.read()
  except (OSError, tf.errors.OpError) as e:
    reason = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
    raise ValueError(f"--export_dir={export_dir}: cannot read saved_model.pb ({reason}).") \
        from None
  saved = saved_model_pb2.SavedModel()
  try:
    saved.ParseFromString(data)
  except message.DecodeError as e:
    raise ValueError(f"--export_dir={export_dir}: saved_model.pb is not a SavedModel ({e}).") \
        from None
  for meta_graph in saved.meta_graphs:
    if "serving_default" in meta_graph.signature_def:
      return meta_graph.signature_def["serving_default"]
  raise ValueError(f"--export_dir={export_dir} has no serving_default signature.")


def signature_inputs(export_dir):
  """{input name: rank} of the export's serving_default signature (1: string [N]; 2: string
  [N, C]), read from saved_model.pb before the export loads.

  Raises:
    ValueError: one line, when the file is missing, unreadable, has no such signature or
      an input that is not a string (not a raw-text export).
  """
  inputs = _serving_signature(export_dir).inputs
  for name, info in sorted(inputs.items()):
    if info.dtype != types_pb2.DT_STRING:
      kind = tf.dtypes.as_dtype(info.dtype).name if info.dtype else "not a plain tensor"
      raise ValueError(f"--export_dir={export_dir}: input {name!r} is {kind}; predict.py runs "
                       "raw-text exports (string inputs) only.")
  return {name: len(info.tensor_shape.dim) for name, info in sorted(inputs.items())}


def signature_outputs(export_dir):
  """The names of the outputs each row gets (ServedModel's rows: num_words is applied, not
  kept), sorted; from saved_model.pb, as signature_inputs."""
  return sorted(set(_serving_signature(export_dir).outputs) - {"num_words"})


class ServedModel:
  """An export's serving_default signature: inputs by name, outputs as plain Python rows.

  Attributes:
    inputs: {input name: rank} (signature_inputs).
    precision: the compute dtype of its matrix products ("float32", "bfloat16", ...).
  """

  def __init__(self, export_dir):
    self.inputs = signature_inputs(export_dir)
    try:
      self._loaded = tf.saved_model.load(export_dir)  # kept: its variables serve the signature
    except (OSError, tf.errors.OpError) as e:
      raise ValueError(f"--export_dir={export_dir}: cannot load the SavedModel ({e}).") \
          from None
    self._serve = self._loaded.signatures["serving_default"]
    # Exports record their precision (export.Precision); earlier ones computed in float32.
    recorded = getattr(getattr(self._loaded, "precision", None), "dtype", None)
    self.precision = recorded.numpy().decode() if recorded is not None else "float32"

  def __call__(self, batch):
    """Outputs of one batch ({input name: list of values}) as a list of dicts, one per row.

    Strings are decoded; a tagger's padded tags and words are cut to each row's num_words.
    """
    out = self._serve(**{k: tf.constant(v, tf.string) for k, v in batch.items()})
    out = {k: v.numpy() for k, v in out.items()}
    rows = []
    for i in range(len(next(iter(batch.values())))):
      row = {k: _plain(v[i]) for k, v in sorted(out.items())}
      if "num_words" in row:
        count = row.pop("num_words")
        row.update({k: row[k][:count] for k in ("tags", "words") if k in row})
      rows.append(row)
    return rows


def _plain(value):
  """A numpy value as JSON-ready Python: str for bytes, lists for arrays."""
  if isinstance(value, np.ndarray):
    return [_plain(v) for v in value]
  if isinstance(value, bytes):
    return value.decode("utf-8", "replace")
  if isinstance(value, np.generic):
    return value.item()
  return value
