"""File helpers shared by the scripts: globbing, remote paths, all-or-nothing writes.

Local paths use Python's own file functions, so tools that need no model
(the data generator, the corpus preparer) start without TensorFlow. Remote
paths (gs://, hdfs://, s3://, ...) go through tf.io.gfile, imported then.
"""

import contextlib
import glob
import os
import shutil
import uuid


def is_remote(path):
  """True for URLs such as gs://bucket/file."""
  return "://" in path


def _gfile():
  import tensorflow as tf
  return tf.io.gfile


def open_file(path, mode="rb"):
  """Opens a local or remote file; text modes use UTF-8."""
  if is_remote(path):
    return _gfile().GFile(path, mode)
  return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")


def exists(path):
  return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def size(path):
  """Size in bytes of a local or remote file."""
  return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def rename(source, target):
  """Renames over an existing target."""
  if is_remote(source):
    _gfile().rename(source, target, overwrite=True)
  else:
    os.replace(source, target)


def remove(path):
  if is_remote(path):
    _gfile().remove(path)
  else:
    os.remove(path)


def makedirs(path):
  if is_remote(path):
    _gfile().makedirs(path)
  else:
    os.makedirs(path, exist_ok=True)


def copy(source, target):
  """Copies a file, overwriting the target."""
  if is_remote(source) or is_remote(target):
    _gfile().copy(source, target, overwrite=True)
  else:
    shutil.copyfile(source, target)


def expand_file_patterns(patterns, flag):
  """Expands a comma-separated list of paths or globs into sorted file names.

  Raises ValueError naming `flag` when a pattern matches nothing.
  """
  found = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matches = sorted(_gfile().glob(pattern) if is_remote(pattern) else glob.glob(pattern))
    matches = [m for m in matches if is_remote(m) or os.path.isfile(m)]
    if not matches:
      raise ValueError(f"{flag}: no file matches {pattern!r}.")
    found.extend(matches)
  if not found:
    raise ValueError(f"{flag} is empty.")
  return found


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
    with open_file(tmp, mode) as f:
      yield f
    rename(tmp, path)
  except BaseException:
    if exists(tmp):
      remove(tmp)
    raise


def ensure_writable_dir(path, flag):
  """Creates directory `path` if needed; ValueError naming `flag` if impossible."""
  try:
    makedirs(path)
    probe = os.path.join(path, f".write-probe-{uuid.uuid4().hex[:8]}")
    with open_file(probe, "w") as f:
      f.write("")
    remove(probe)
  except Exception as e:  # OSError locally, tf.errors.OpError remotely
    raise ValueError(f"{flag} {path} is not a writable directory: {e}") from e
