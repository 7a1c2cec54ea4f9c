"""A training run's identity: what defines the model in --output_dir (run.json).

The training scripts resume, evaluate and predict with the latest checkpoint in
--output_dir; run.json keeps what that model was trained with, so that a later run of
another task, label set or length stops instead of reusing it, and a later run that only
evaluates or predicts takes the recorded flags it is not given (flags_to_take).
"""

import hashlib
import json
import os
import re

import tensorflow as tf

from data import files

TRAINED_WITH = "run.json"  # what the model in --output_dir was trained with


def identity(what, max_seq_length, init_checkpoint, output_dir, length_and_start=True,
             do_lower_case=None):
  """The run's identity: `what` (the script's dict) with, when `length_and_start`, the
  length, the casing of the text (unless None) and the starting checkpoint.

  The starting checkpoint counts only when given from outside output_dir
  (predicting with --init_checkpoint=<output_dir> is the same run).
  """
  if not length_and_start:
    return dict(what)
  found = {**what, "max_seq_length": max_seq_length}
  if do_lower_case is not None:  # a cased model reads text that lower-casing would change
    found["do_lower_case"] = do_lower_case
  if init_checkpoint:
    init, out = (p if files.is_remote(p) else os.path.abspath(files.local_path(p))
                 for p in (init_checkpoint, output_dir))
    if init.rstrip("/") != out.rstrip("/") and not init.startswith(out.rstrip("/") + "/"):
      found["init_checkpoint"] = init
  return found


def vocab_entry(vocab_file):
  """{"vocab": its entry count and content hash} of a run's vocab.txt ({} without one): a
  resume or evaluation with another vocab would read the model's rows as other words."""
  if not vocab_file:
    return {}
  from data import tokenization
  tokens = tokenization.vocab_tokens(vocab_file)  # the entries: line endings apart
  digest = hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]
  return {"vocab": f"{len(tokens)} entries, sha256 {digest}"}


def recorded(output_dir):
  """The identity `save` wrote to output_dir/run.json, or None when output_dir holds no
  checkpoint or no run.json (ValueError naming the file if it cannot be read)."""
  path = os.path.join(output_dir, TRAINED_WITH)
  if not tf.train.latest_checkpoint(output_dir) or not files.exists(path):
    return None
  try:
    with files.open_file(path, "r") as f:
      saved = json.load(f)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise ValueError(f"Cannot read {path}: {e}") from None
  # Written before 2026-12-07, an XNLI run's language was part of its task name.
  xnli = isinstance(saved, dict) and re.fullmatch(r"xnli \((.+)\)", str(saved.get("task_name")))
  if xnli:
    saved.update(task_name="xnli", xnli_language=xnli.group(1))
  return saved


def flags_to_take(output_dir, parsers):
  """What a run that only evaluates or predicts takes from the run that trained its model:
  {flag: value} of run.json's entries that name a flag in `parsers` ({flag: its parser's
  parse}, for the flags not on the command line) and read back as that flag's value (not
  --init_checkpoint: the model is output_dir's). {} when output_dir holds no trained run or
  its run.json cannot be read (`check` says so)."""
  try:
    saved = output_dir and recorded(output_dir)
  except ValueError:
    return {}
  taken = {}
  for key, value in (saved or {}).items():
    if key in parsers and key != "init_checkpoint" and value is not None:
      try:
        parsed = parsers[key](as_flag(value))
      except ValueError:
        continue
      if as_flag(parsed) == as_flag(value):
        taken[key] = parsed
  return taken


def check(output_dir, identity, settings=None):
  """Raises ValueError when output_dir holds checkpoints of a run other than `identity`.

  The training scripts resume (or predict with) the latest checkpoint in
  --output_dir, so a model trained for another task, label set or length
  would be reused without a word. `identity` (a dict of what defines the run)
  is compared with the one `save` wrote there; where the difference is a flag of
  `settings` recorded as given, the error says which value would use that model.
  """
  saved = recorded(output_dir) or {}
  for key, value in json.loads(json.dumps(identity)).items():  # tuples compare as JSON lists
    if key in saved and saved[key] != value:
      is_flag = (key != "init_checkpoint" and hasattr(settings, key)
                 and as_flag(getattr(settings, key)) == as_flag(value))
      use = (f"Pass --{key}={as_flag(saved[key])} to use it, or a new --output_dir to start "
             "afresh." if is_flag else "Pass a new --output_dir to start afresh.")
      if key == "vocab":
        use = (f"Pass the vocab.txt it was trained with ({os.path.join(output_dir, 'vocab.txt')})"
               " as --vocab_file, or a new --output_dir to start afresh.")
      raise ValueError(f"--output_dir={output_dir} holds a model trained with {key} "
                       f"{_shown(saved[key])}, not {_shown(value)}; it would be reused. {use}")


def as_flag(value):
  """A value as it is written on the command line (a list joined by commas)."""
  return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _shown(value):
  return ",".join(map(str, value)) if isinstance(value, list) else repr(value)


def save(output_dir, identity):
  """Writes the run's identity (see `check`) to output_dir/run.json, atomically."""
  with files.atomic_output(os.path.join(output_dir, TRAINED_WITH)) as f:
    json.dump(identity, f, indent=1)
