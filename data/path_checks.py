"""Checks of the paths a user names, before any work: each error names the flag.

A pattern that matches nothing, an output file that is a directory or one of
the inputs, an output directory that cannot be written, a scratch disk too
small: each is one ValueError naming the flag and the path.
"""

import os
import shutil
import uuid

from data import files


def expand_file_patterns(patterns, flag):
  """Expands a comma-separated list of paths or globs into sorted file names.

  Raises ValueError naming `flag` when a pattern matches nothing.
  """
  found = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matches = [m for m in files.glob(pattern) if not files.isdir(m)]
    if not matches:
      raise ValueError(f"{flag}: no file matches {pattern!r}.")
    found.extend(matches)
  if not found:
    raise ValueError(f"{flag} is empty.")
  return found


def check_input_files(**named_paths):
  """Raises ValueError naming the first flag (name=path) whose path does not exist or is a
  directory where a file is wanted; empty paths pass."""
  for name, path in named_paths.items():
    if path and not files.exists(path):
      raise ValueError(f"--{name}={path} does not exist.")
    if path and files.isdir(path):
      raise ValueError(f"--{name}={path} is a directory; name a file.")


def check_output_dir(path, flag, what):
  """Raises ValueError when directory `path` could not be written later.

  Checked before the work it would waste: `path` must not be a file, and its
  nearest existing parent must be a writable directory. Nothing is created.
  (A bucket's permissions show on writing.) `what` says what goes there.
  """
  if not path:
    return
  if files.exists(path) and not files.isdir(path):
    raise ValueError(f"{flag}={path} is a file; name a directory for {what}.")
  if files.is_remote(path):
    return  # a bucket has directories only as name prefixes: any parent will do
  parent = files.parent_dir(path)
  while not files.exists(parent):
    parent = os.path.dirname(parent)
  # os.access: gfile has no permission check that writes nothing (local disk only here).
  if not files.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
    raise ValueError(f"{flag}={path} cannot be created: {parent} is not a writable "
                     "directory.")


def check_output_file(path, flag, inputs=()):
  """Before any work: ValueError naming `flag` when `path` cannot receive an output file
  (a directory, a folder that cannot be written, or one of the `inputs` it is made from)."""
  if files.isdir(path):
    raise ValueError(f"{flag}={path} is a directory; name a file.")
  if any(same_file(path, p) for p in inputs):
    raise ValueError(f"{flag}={path} is also an input file; name another file.")
  ensure_writable_dir(files.parent_dir(path), f"{flag}={path}:")


def same_file(a, b):
  """Whether paths `a` and `b` name one file: local paths once resolved (./x, links,
  file://), URLs as written."""
  if files.is_remote(a) or files.is_remote(b):
    return a == b
  return os.path.realpath(files.local_path(a)) == os.path.realpath(files.local_path(b))


def check_distinct_outputs(paths, flag):
  """Before any work: ValueError naming `flag` when two of the output `paths` are one file
  (the second write would replace the first)."""
  for i, path in enumerate(paths):
    for earlier in paths[:i]:
      if same_file(earlier, path):
        named = f"{earlier!r}" if earlier == path else f"{earlier!r} and {path!r}"
        raise ValueError(f"{flag} names one file twice: {named}; name each output once.")


# Directories ensure_writable_dir created (on a bucket, the directory itself), outermost
# first: the entry point (cli/app.py) removes those still empty when the run fails.
MADE_DIRS = []


def ensure_writable_dir(path, flag):
  """Creates directory `path` if needed (noting in MADE_DIRS what it creates); ValueError
  naming `flag` if impossible."""
  missing = [path] if files.is_remote(path) and not files.exists(path) else []
  if not files.is_remote(path):  # a file where the directory or a parent would go (a bucket has none)
    existing = target = os.path.abspath(files.local_path(path))
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
      missing.append(existing)
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
      raise ValueError(f"{flag} {path} is a file, not a directory." if existing == target else
                       f"{flag} {path} cannot be made: {existing} is a file.")
  MADE_DIRS.extend(reversed(missing))
  try:
    files.makedirs(path)
    probe = os.path.join(path, f".write-probe-{uuid.uuid4().hex[:8]}")
    with files.open_file(probe, "w") as f:
      f.write("")
    files.remove(probe)
  except OSError as e:
    raise ValueError(f"{flag} {path} is not a writable directory: {e}") from e


def check_free_space(directory, needed, what, hint=""):
  """ValueError unless local `directory` has `needed` bytes free for `what`; `hint` ends
  the message (what to do instead)."""
  free = shutil.disk_usage(directory).free
  if needed > free:
    raise ValueError(f"{what} need {needed / 1e9:.2f} GB in {directory}, which has "
                     f"{free / 1e9:.2f} GB free{hint}.")
