"""Running any of our raw-text exports (modeling/export.py, squad_export.py) from Python."""

import numpy as np
import tensorflow as tf

from data import files


class ServedModel:
  """An export's serving_default signature: inputs by name, outputs as plain Python rows.

  Attributes:
    inputs: {input name: rank} (1: string [N]; 2: string [N, C]).
  """

  def __init__(self, export_dir):
    if not files.exists(f"{export_dir}/saved_model.pb"):
      raise ValueError(f"--export_dir={export_dir} holds no SavedModel (saved_model.pb).")
    self._loaded = tf.saved_model.load(export_dir)
    if "serving_default" not in self._loaded.signatures:
      raise ValueError(f"--export_dir={export_dir} has no serving_default signature.")
    self._serve = self._loaded.signatures["serving_default"]
    spec = self._serve.structured_input_signature[1]
    self.inputs = {name: len(s.shape) for name, s in sorted(spec.items())}

  def __call__(self, batch):
    """Outputs of one batch ({input name: list of values}) as a list of dicts, one per row.

    Strings are decoded; a tagger's padded tags are cut to each row's num_words.
    """
    out = self._serve(**{k: tf.constant(v, tf.string) for k, v in batch.items()})
    out = {k: v.numpy() for k, v in out.items()}
    rows = []
    for i in range(len(next(iter(batch.values())))):
      row = {k: _plain(v[i]) for k, v in sorted(out.items())}
      if "num_words" in row:
        row["tags"] = row["tags"][:row.pop("num_words")]
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
