"""File helpers shared by the scripts: globbing, remote paths, all-or-nothing writes.

Local paths use Python's own file functions, so tools that need no model
(the data generator, the corpus preparer) start without TensorFlow. Remote
paths (gs://, hdfs://, s3://, ...) go through tf.io.gfile, imported then.
"""

import contextlib
import glob
import io
import os
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


# Byte order marks of the wide encodings, longest first (UTF-32LE starts like UTF-16LE).
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def check_not_wide(data, where, at_start=True):
  """Raises ValueError naming `where` when bytes `data` look like UTF-16 or UTF-32.

  Such text is mostly valid UTF-8 byte by byte (ASCII comes out NUL-laced), so
  decoding it would not fail but silently yield garbage. The signs: a UTF-16/32
  byte order mark (checked when `data` starts a file) or NUL bytes making up a
  quarter or more of `data`; stray NULs in UTF-8 text pass.
  """
  if at_start:
    for bom, name in _WIDE_BOMS:
      if data.startswith(bom):
        raise ValueError(f"{where}: starts with a {name} byte order mark; expected UTF-8 "
                         f"text (convert it, e.g. iconv -f {name} -t UTF-8).")
  nuls = data.count(b"\0")
  if nuls and 4 * nuls >= len(data):
    raise ValueError(f"{where}: NUL bytes all through the text, as in UTF-16 or UTF-32; "
                     "expected UTF-8 text (convert it, e.g. with iconv).")


def decode_utf8(data, path):
  """Bytes of the file `path` as str, a leading UTF-8 byte order mark dropped.

  Raises ValueError naming path:line for UTF-16/32 text or bytes that are not UTF-8.
  """
  check_not_wide(data, path)
  if data.startswith(b"\xef\xbb\xbf"):
    data = data[3:]
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{path}:{line}: byte 0x{data[e.start]:02x} is not UTF-8; expected UTF-8 "
                     "text (convert the file, e.g. with iconv).") from None


def read_text(path):
  """The whole UTF-8 file `path` as str; ValueError naming the file if unreadable or not UTF-8."""
  try:
    with open_file(path, "rb") as f:
      data = f.read()
  except Exception as e:  # OSError locally, tf.errors.OpError remotely
    raise ValueError(f"Cannot read {path}: {e}") from None
  return decode_utf8(data, path)


def text_lines(text):
  """Lines of `text` as a file reads them: only \\n, \\r\\n and \\r end one.

  str.splitlines() would also break at U+2028, U+2029, U+0085, \\v, \\f and
  \\x1c-\\x1e, which are legal inside a field. The lines keep no line ending.
  """
  return [line[:-1] if line.endswith("\n") else line for line in io.StringIO(text, newline=None)]


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
