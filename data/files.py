"""File helpers shared by the scripts: input globbing and all-or-nothing writes."""

import contextlib
import os
import uuid

import tensorflow as tf


def expand_file_patterns(patterns, flag):
  """Expands a comma-separated list of paths or globs into sorted file names.

  Raises ValueError naming `flag` when a pattern matches nothing.
  """
  files = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matches = sorted(tf.io.gfile.glob(pattern))
    if not matches:
      raise ValueError(f"{flag}: no file matches {pattern!r}.")
    files.extend(matches)
  if not files:
    raise ValueError(f"{flag} is empty.")
  return files


def temporary_name(path):
  """A sibling name for `path` under which to write before renaming."""
  head, tail = os.path.split(path)
  return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_output(path, mode="w"):
  """Opens a temporary sibling of `path` and renames it to `path` on success.

  On an exception the temporary file is removed and `path` is untouched, so a
  failed or interrupted run never leaves a file that looks complete.
  """
  tmp = temporary_name(path)
  try:
    with tf.io.gfile.GFile(tmp, mode) as f:
      yield f
    tf.io.gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)
    raise


def ensure_writable_dir(path, flag):
  """Creates directory `path` if needed; ValueError naming `flag` if impossible."""
  try:
    tf.io.gfile.makedirs(path)
    probe = os.path.join(path, f".write-probe-{uuid.uuid4().hex[:8]}")
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("")
    tf.io.gfile.remove(probe)
  except (OSError, tf.errors.OpError) as e:
    raise ValueError(f"{flag}={path} is not a writable directory: {e}") from e
