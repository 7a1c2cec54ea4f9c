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
import shutil
import uuid


def is_remote(path):
  """True for URLs such as gs://bucket/file (false for local and file:// paths)."""
  return "://" in path and not path.startswith("file://")


def _local(path):
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
    return (open(_local(path), mode) if "b" in mode
            else open(_local(path), mode, encoding="utf-8", newline=newline))
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
    return os.path.exists(_local(path))
  with _as_os_errors(path):
    return _gfile().exists(path)


def isdir(path):
  if not is_remote(path):
    return os.path.isdir(_local(path))
  with _as_os_errors(path):
    return _gfile().isdir(path)


def size(path):
  """Size in bytes of a file."""
  if not is_remote(path):
    return os.path.getsize(_local(path))
  with _as_os_errors(path):
    return _gfile().stat(path).length


def listdir(path):
  """Sorted names of the entries in directory `path`."""
  if not is_remote(path):
    return sorted(os.listdir(_local(path)))
  with _as_os_errors(path):
    return sorted(name.rstrip("/") for name in _gfile().listdir(path))


def _walk(path):
  """(directory, subdirectories, files) under `path`, as os.walk gives them."""
  if not is_remote(path):
    return os.walk(_local(path))
  with _as_os_errors(path):
    return list(_gfile().walk(path))


def walk_files(path):
  """Paths relative to directory `path` of every file under it, sorted."""
  top = path if is_remote(path) else _local(path)
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
    return sorted(_pyglob.glob(_local(pattern)))
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
    shutil.copyfile(_local(source), _local(target))
    return
  with _as_os_errors(source):
    _gfile().copy(source, target, overwrite=True)


def rename(source, target):
  """Renames a file (or, locally, a directory) over an existing target."""
  if not is_remote(source) and not is_remote(target):
    os.replace(_local(source), _local(target))
    return
  with _as_os_errors(source):
    _gfile().rename(source, target, overwrite=True)


def remove(path):
  if not is_remote(path):
    os.remove(_local(path))
    return
  with _as_os_errors(path):
    _gfile().remove(path)


def rmtree(path):
  """Removes directory `path` and everything under it."""
  if not is_remote(path):
    shutil.rmtree(_local(path))
    return
  with _as_os_errors(path):
    _gfile().rmtree(path)


def makedirs(path):
  """Creates directory `path` and its parents; no error if it exists."""
  if not is_remote(path):
    os.makedirs(_local(path), exist_ok=True)
    return
  with _as_os_errors(path):
    _gfile().makedirs(path)


def parent_dir(path):
  """The directory that holds file `path` (made absolute when local)."""
  return os.path.dirname(path if is_remote(path) else os.path.abspath(_local(path)))


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


class Undecodable:
  """Lenient UTF-8 decoding, as the original's readers decode: bytes that are not UTF-8
  are dropped, counted, and the first one's place kept for the report."""

  def __init__(self):
    self.count, self.first = 0, ""

  def decode(self, data, path, line=1):
    """`data`, bytes starting at `line` of `path`, as str without its undecodable bytes."""
    try:
      return data.decode("utf-8")  # the common case, at full speed
    except UnicodeDecodeError as e:
      first_bad = e.start
    text = data.decode("utf-8", "ignore")
    self.count += len(data) - len(text.encode("utf-8"))
    if not self.first:
      line += data.count(b"\n", 0, first_bad)
      self.first = f"{path}:{line}"
    return text

  def merge(self, other):
    """Adds the bytes `other` dropped; its first place counts only when this has none."""
    self.count += other.count
    self.first = self.first or other.first

  def report(self):
    """One line for the log ("" when every byte was UTF-8)."""
    plural = "" if self.count == 1 else "s"
    return (f"dropped {self.count:,} undecodable byte{plural} (first at {self.first})"
            if self.count else "")


def read_text(path):
  """The whole UTF-8 file `path` as str; ValueError naming the file if unreadable or not UTF-8."""
  try:
    with open_file(path, "rb") as f:
      data = f.read()
  except OSError as e:
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
    matches = [m for m in glob(pattern) if not isdir(m)]
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


def withdraw(path):
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


def check_output_dir(path, flag, what):
  """Raises ValueError when directory `path` could not be written later.

  Checked before the work it would waste: `path` must not be a file, and its
  nearest existing parent must be a writable directory. Nothing is created.
  (A bucket's permissions show on writing.) `what` says what goes there.
  """
  if not path:
    return
  if exists(path) and not isdir(path):
    raise ValueError(f"{flag}={path} is a file; name a directory for {what}.")
  if is_remote(path):
    return  # a bucket has directories only as name prefixes: any parent will do
  parent = parent_dir(path)
  while not exists(parent):
    parent = os.path.dirname(parent)
  # os.access: gfile has no permission check that writes nothing (local disk only here).
  if not isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
    raise ValueError(f"{flag}={path} cannot be created: {parent} is not a writable "
                     "directory.")


def check_output_file(path, flag, inputs=()):
  """Before any work: ValueError naming `flag` when `path` cannot receive an output file
  (a directory, a folder that cannot be written, or one of the `inputs` it is made from)."""
  if isdir(path):
    raise ValueError(f"{flag}={path} is a directory; name a file.")
  same = lambda a, b: (a == b if is_remote(a) or is_remote(b)
                       else os.path.realpath(_local(a)) == os.path.realpath(_local(b)))
  if any(same(path, p) for p in inputs):
    raise ValueError(f"{flag}={path} is also an input file; name another file.")
  ensure_writable_dir(parent_dir(path), f"{flag}={path}:")


def remove_empty_dir(path):
  """Removes local directory `path` if it is empty (a bucket keeps no empty directories
  worth removing)."""
  if not is_remote(path):
    try:
      os.rmdir(_local(path))
    except OSError:
      pass  # not empty, or already gone


def ensure_writable_dir(path, flag):
  """Creates directory `path` if needed; ValueError naming `flag` if impossible."""
  try:
    makedirs(path)
    probe = os.path.join(path, f".write-probe-{uuid.uuid4().hex[:8]}")
    with open_file(probe, "w") as f:
      f.write("")
    remove(probe)
  except OSError as e:
    raise ValueError(f"{flag} {path} is not a writable directory: {e}") from e


def check_free_space(directory, needed, what, hint=""):
  """ValueError unless local `directory` has `needed` bytes free for `what`; `hint` ends
  the message (what to do instead)."""
  free = shutil.disk_usage(directory).free
  if needed > free:
    raise ValueError(f"{what} need {needed / 1e9:.2f} GB in {directory}, which has "
                     f"{free / 1e9:.2f} GB free{hint}.")
