"""A training run's identity: what defines the model in --output_dir (run.json).

The training scripts resume, evaluate and predict with the latest checkpoint in
--output_dir; run.json keeps what that model was trained with, so that a later run of
another task, label set or length stops instead of reusing it.
"""

import json
import os

import tensorflow as tf

from data import files

TRAINED_WITH = "run.json"  # what the model in --output_dir was trained with


def identity(what, max_seq_length, init_checkpoint, output_dir, length_and_start=True):
  """The run's identity: `what` (the script's dict) with, when `length_and_start`, the
  length and the starting checkpoint.

  The starting checkpoint counts only when given from outside output_dir
  (predicting with --init_checkpoint=<output_dir> is the same run).
  """
  if not length_and_start:
    return dict(what)
  found = {**what, "max_seq_length": max_seq_length}
  if init_checkpoint:
    init, out = (p if "://" in p else os.path.abspath(p) for p in (init_checkpoint, output_dir))
    if init.rstrip("/") != out.rstrip("/") and not init.startswith(out.rstrip("/") + "/"):
      found["init_checkpoint"] = init
  return found


def check(output_dir, identity):
  """Raises ValueError when output_dir holds checkpoints of a run other than `identity`.

  The training scripts resume (or predict with) the latest checkpoint in
  --output_dir, so a model trained for another task, label set or length
  would be reused without a word. `identity` (a dict of what defines the run)
  is compared with the one `save` wrote there.
  """
  path = os.path.join(output_dir, TRAINED_WITH)
  if not tf.train.latest_checkpoint(output_dir) or not files.exists(path):
    return
  try:
    with files.open_file(path, "r") as f:
      saved = json.load(f)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise ValueError(f"Cannot read {path}: {e}") from None
  for key, value in json.loads(json.dumps(identity)).items():  # tuples compare as JSON lists
    if key in saved and saved[key] != value:
      raise ValueError(f"--output_dir={output_dir} holds a model trained with {key} "
                       f"{_shown(saved[key])}, not {_shown(value)}; it would be reused. "
                       "Pass a new --output_dir to start afresh.")


def _shown(value):
  return ",".join(map(str, value)) if isinstance(value, list) else repr(value)


def save(output_dir, identity):
  """Writes the run's identity (see `check`) to output_dir/run.json, atomically."""
  with files.atomic_output(os.path.join(output_dir, TRAINED_WITH)) as f:
    json.dump(identity, f, indent=1)
