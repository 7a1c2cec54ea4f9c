"""Every read and write of a user path: this module alone opens, lists and renames files.

A URL (gs://..., hdfs://, TensorFlow's in-memory ram://, which the tests use
to run every script on the same code path as a bucket) goes through
tf.io.gfile; a local path goes through Python's own functions, which is what
TensorFlow's local file system does too, without importing TensorFlow: the
data tools (prepare_corpus, learn_vocab, create_pretraining_data and its worker
processes) then start in a fraction of a second and stay small (measured: the
generator's peak memory 285 MB instead of 1,154 MB, each streaming worker
without TensorFlow's 300 MB). Both kinds give the same objects: buffered Python
file objects (UTF-8 text with Python's newline handling) and OSError
(FileNotFoundError, ...) naming the path. TensorFlow is imported at the first
operation on a URL.

Writes are all-or-nothing: a file is written under a temporary sibling name
and renamed into place (atomic_output, write_bytes); a directory is built
under a temporary name and published whole (atomic_dir). What a rename
guarantees depends on the file system:
  local disk: rename(2), atomic; a reader sees the old or the new file.
  gs://: a file (an object) is uploaded whole when it is closed, and renaming
    one copies it, then deletes the source: the target appears complete or not
    at all. A directory is only a name prefix and has no rename of its own, so
    atomic_dir moves its files one by one, the file that makes it usable last.
  ram://: one process's memory; renaming a file is atomic, renaming a
    directory moves no files (so atomic_dir moves them one by one there too).
"""

import contextlib
import errno
import glob as _pyglob
import io
import os
import re
import shutil
import uuid


def is_remote(path):
  """True for URLs such as gs://bucket/file (false for local and file:// paths)."""
  return "://" in path and not path.startswith("file://")


def local_path(path):
  """A local path as Python's own functions take it: file:///x is /x (TensorFlow reads
  both)."""
  return path[len("file://"):] if path.startswith("file://") else path


def _gfile():
  import tensorflow as tf
  return tf.io.gfile


def _os_error(e, path):
  """tf.errors.OpError -> the OSError Python's own functions raise, naming `path`."""
  import tensorflow as tf
  message = e.message or ""
  if message.startswith(f"{path}; "):  # the local file system's "path; strerror"
    message = message[len(path) + 2:]
  if isinstance(e, tf.errors.NotFoundError):
    code = errno.ENOENT
  elif isinstance(e, tf.errors.PermissionDeniedError):
    code = errno.EACCES
  elif isinstance(e, tf.errors.AlreadyExistsError):
    code = errno.EEXIST
  elif "Is a directory" in message:
    code = errno.EISDIR
  elif "Not a directory" in message:
    code = errno.ENOTDIR
  else:
    code = errno.EIO
  return OSError(code, message or os.strerror(code), path)  # OSError picks the subclass


@contextlib.contextmanager
def _as_os_errors(path):
  import tensorflow as tf
  try:
    yield
  except tf.errors.OpError as e:
    raise _os_error(e, path) from None


class _RawGFile(io.RawIOBase):
  """A tf.io.gfile.GFile as a raw Python stream, for io's buffers and text layer."""

  def __init__(self, path, mode):
    super().__init__()
    self.name, self.mode = path, mode
    self._file = _gfile().GFile(path, mode.replace("b", "") + "b")
    if self.writable():
      self.write(b"")  # GFile creates the file at its first write: make that now, as open() does

  def readable(self):
    return "r" in self.mode

  def writable(self):
    return "r" not in self.mode

  def readinto(self, buffer):
    with _as_os_errors(self.name):
      data = self._file.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)

  def write(self, data):
    with _as_os_errors(self.name):
      self._file.write(bytes(data))
    return len(data)

  def close(self):
    if not self.closed:
      try:
        with _as_os_errors(self.name):
          self._file.close()  # a remote file is uploaded here
      finally:
        super().close()


def open_file(path, mode="rb", newline=None):
  """Opens `path` like Python's open(path, mode, encoding="utf-8", newline=newline).

  Modes: r, w, a, each with b. Append on gs:// re-uploads the whole object.
  """
  if mode.replace("b", "") not in ("r", "w", "a"):
    raise ValueError(f"open_file: unsupported mode {mode!r}")
  if not is_remote(path):
    return (open(local_path(path), mode) if "b" in mode
            else open(local_path(path), mode, encoding="utf-8", newline=newline))
  raw = _RawGFile(path, mode)
  buffered = io.BufferedReader(raw, 1 << 20) if "r" in mode else io.BufferedWriter(raw, 1 << 20)
  if "b" in mode:
    return buffered
  return io.TextIOWrapper(buffered, encoding="utf-8", newline=newline)


def read_bytes(path):
  """The bytes of file `path`; OSError (FileNotFoundError, ...) naming it otherwise."""
  with open_file(path, "rb") as f:
    return f.read()


def write_bytes(path, data):
  """Writes `data` to `path` all-or-nothing (see atomic_output)."""
  with atomic_output(path, "wb") as f:
    f.write(data)


def exists(path):
  if not is_remote(path):
    return os.path.exists(local_path(path))
  with _as_os_errors(path):
    return _gfile().exists(path)


def isdir(path):
  if not is_remote(path):
    return os.path.isdir(local_path(path))
  with _as_os_errors(path):
    return _gfile().isdir(path)


def size(path):
  """Size in bytes of a file."""
  if not is_remote(path):
    return os.path.getsize(local_path(path))
  with _as_os_errors(path):
    return _gfile().stat(path).length


def read_tail(path, count):
  """The last `count` bytes of file `path` (all of it when shorter), reading nothing else."""
  if not is_remote(path):
    with open(local_path(path), "rb") as f:
      f.seek(max(0, os.fstat(f.fileno()).st_size - count))
      return f.read()
  with _as_os_errors(path):
    with _gfile().GFile(path, "rb") as f:
      f.seek(max(0, f.size() - count))
      return f.read()


def listdir(path):
  """Sorted names of the entries in directory `path`."""
  if not is_remote(path):
    return sorted(os.listdir(local_path(path)))
  with _as_os_errors(path):
    return sorted(name.rstrip("/") for name in _gfile().listdir(path))


def _walk(path):
  """(directory, subdirectories, files) under `path`, as os.walk gives them."""
  if not is_remote(path):
    return os.walk(local_path(path))
  with _as_os_errors(path):
    return list(_gfile().walk(path))


def walk_files(path):
  """Paths relative to directory `path` of every file under it, sorted."""
  top = path if is_remote(path) else local_path(path)
  return sorted(os.path.join(_relative(directory, top), n)
                for directory, _, names in _walk(path) for n in names)


def _relative(path, top):
  """`path` below directory `top` as a relative path ("" for top itself); gfile.walk's join."""
  return path[len(top):].lstrip("/") if path.startswith(top) else os.path.relpath(path, top)


def glob(pattern):
  """Sorted paths matching `pattern` (*, ?, [...]), skipping hidden names as Python's glob does.

  A wildcard component that does not itself start with "." matches no name
  that does: tf.io.gfile.glob would return them, temporary files included.
  """
  if not is_remote(pattern):
    return sorted(_pyglob.glob(local_path(pattern)))
  with _as_os_errors(pattern):
    matches = _gfile().glob(pattern)
  parts = pattern.split("/")
  wild = [i for i, p in enumerate(parts) if any(c in p for c in "*?[") and not p.startswith(".")]

  def visible(match):
    names = match.split("/")
    return len(names) != len(parts) or not any(names[i].startswith(".") for i in wild)
  return sorted(m for m in matches if visible(m))


def copy(source, target):
  """Copies file `source` over `target` (not atomic: see atomic_output)."""
  if not is_remote(source) and not is_remote(target):
    shutil.copyfile(local_path(source), local_path(target))
    return
  with _as_os_errors(source):
    _gfile().copy(source, target, overwrite=True)


def rename(source, target):
  """Renames a file (or, locally, a directory) over an existing target."""
  if not is_remote(source) and not is_remote(target):
    os.replace(local_path(source), local_path(target))
    return
  with _as_os_errors(source):
    _gfile().rename(source, target, overwrite=True)


def remove(path):
  if not is_remote(path):
    os.remove(local_path(path))
    return
  with _as_os_errors(path):
    _gfile().remove(path)


def rmtree(path):
  """Removes directory `path` and everything under it."""
  if not is_remote(path):
    shutil.rmtree(local_path(path))
    return
  with _as_os_errors(path):
    _gfile().rmtree(path)


def makedirs(path):
  """Creates directory `path` and its parents; no error if it exists."""
  if not is_remote(path):
    os.makedirs(local_path(path), exist_ok=True)
    return
  with _as_os_errors(path):
    _gfile().makedirs(path)


def parent_dir(path):
  """The directory that holds file `path` (made absolute when local)."""
  return os.path.dirname(path if is_remote(path) else os.path.abspath(local_path(path)))


def temporary_name(path):
  """A sibling name for `path` under which to write before renaming."""
  head, tail = os.path.split(path)
  return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:8]}")


def leftovers(path):
  """The temporary names of `path` (temporary_name's) found beside it: what earlier
  processes killed before renaming them into place left."""
  head, tail = os.path.split(path.rstrip("/"))
  pattern = re.compile(re.escape(f".{tail}.tmp-") + "[0-9a-f]{8}")
  return [os.path.join(head, name) for name in _entries(head or ".") if pattern.fullmatch(name)]


def _entries(directory):
  return listdir(directory) if isdir(directory) else []


def _remove_entry(path):
  """Removes file or directory `path`; returns the bytes it held."""
  if isdir(path):
    held = sum(size(os.path.join(path, name)) for name in walk_files(path))
    rmtree(path)
    return held
  held = size(path)
  remove(path)
  return held


def remove_leftovers(path):
  """Removes the temporary files or directories of `path` that an earlier process killed
  before renaming them left beside it (leftovers); returns their total size in bytes.
  Only for an output no other process is writing."""
  return sum(_remove_entry(left) for left in leftovers(path))


def remove_all_leftovers(directory):
  """Removes every temporary file or directory (temporary_name's, of any output) directly in
  `directory`; returns their total size in bytes. Only for a directory whose outputs no
  other process is writing."""
  pattern = re.compile(r"\..+\.tmp-[0-9a-f]{8}")
  return sum(_remove_entry(os.path.join(directory, name)) for name in _entries(directory)
             if pattern.fullmatch(name))


@contextlib.contextmanager
def atomic_output(path, mode="w", newline=None):
  """Opens a temporary sibling of `path` and renames it to `path` on success.

  On an exception the temporary file is removed and `path` is untouched, so a
  failed or interrupted run never leaves a file that looks complete.
  """
  tmp = temporary_name(path)
  try:
    with open_file(tmp, mode, newline) as f:
      yield f
    rename(tmp, path)
  except BaseException:
    _discard(tmp, remove)
    raise


def write_extra_files(directory, extra_files):
  """Writes {name: bytes} into `directory`, each under a temporary name first; a name
  given None is removed where an earlier write left it. The writers call it after
  removing their marker, so that a stopped write leaves no complete-looking directory
  with another model's files."""
  for name, data in (extra_files or {}).items():
    path = os.path.join(directory, name)
    if data is None:
      if exists(path):
        remove(path)
      continue
    with atomic_output(path, "wb") as f:
      f.write(data)


def remove_marker(path):
  """Removes the marker file `path` if it is there: a directory whose files are about to be
  replaced one by one stops looking complete first, so no reader mixes old and new files."""
  if exists(path):
    remove(path)


def _discard(path, delete):
  """Deletes what a failed write left, keeping the failure's own exception."""
  try:
    if exists(path):
      delete(path)
  except OSError:
    pass


@contextlib.contextmanager
def atomic_dir(path, last=()):
  """Yields a temporary sibling directory to fill; on success it replaces directory `path`.

  `last` names the files (relative paths) that make the directory usable, e.g.
  saved_model.pb: where the directory is published file by file (see
  publish_dir) they arrive after everything else. On an exception the
  temporary directory is removed and `path` is untouched.
  """
  tmp = temporary_name(path.rstrip("/"))
  try:
    yield tmp
    publish_dir(tmp, path, last)
  except BaseException:
    _discard(tmp, rmtree)
    raise


def publish_dir(source, target, last=()):
  """Moves the complete directory `source` to `target`, replacing an old `target`.

  Local disk: rename(2) moves the whole directory at once; an old target is
  first renamed aside, then deleted, so `target` is always the old or the new
  complete directory (absent for an instant). Elsewhere a directory cannot be
  renamed whole (gs:// renames object by object, ram:// moves no files), so
  the old target's `last` files go first, then the rest of it, then the new
  files move in with `last` at the end: a reader that waits for the `last`
  files never sees a mixture or a part.
  """
  target = target.rstrip("/")
  if not is_remote(target) and not is_remote(source):
    aside = temporary_name(target) if exists(target) else None
    if aside:
      rename(target, aside)
    rename(source, target)
    if aside:
      rmtree(aside)
    return
  if exists(target):
    for name in last:
      _discard(os.path.join(target, name), remove)
    rmtree(target)
  directories = [_relative(d, source) for d, _, _ in _walk(source)]
  for directory in directories:  # empty ones too (a SavedModel's assets/)
    makedirs(os.path.join(target, directory) if directory else target)
  for name in sorted(walk_files(source), key=lambda n: n in last):  # stable: `last` at the end
    rename(os.path.join(source, name), os.path.join(target, name))
  rmtree(source)


def write_score_rows(path, rows):
  """test_results.tsv as the original wrote it: a line per example, its scores (one per
  class or choice) tab-separated, all or nothing."""
  with atomic_output(path) as f:
    for row in rows:
      f.write("\t".join(str(float(p)) for p in row) + "\n")


def remove_empty_dir(path):
  """Removes directory `path` if it is empty (on a bucket, the placeholder object that
  makedirs wrote)."""
  if is_remote(path):
    try:
      if isdir(path) and not listdir(path):
        rmtree(path)
    except OSError:
      pass  # already gone, or not ours to remove
    return
  try:
    os.rmdir(local_path(path))
  except OSError:
    pass  # not empty, or already gone
