"""Runs entry scripts on local disk and on ram://, in one process, for the file-system tests.

  python tests/on_ram.py ROOT SCRIPT [FLAGS...] [, SCRIPT [FLAGS...]]...

ROOT is a local directory holding every input. Each command (commands are
separated by a lone ",") runs twice: first as given, its outputs landing under
ROOT; then with ROOT in every flag replaced by ram://ROOT. ram:// is
TensorFlow's in-memory file system: it is reached through the same tf.io.gfile
calls as gs://, so any Python open(), os or shutil call on a user path fails
there. The ram:// tree starts as a copy of ROOT taken before the first command;
at the end it is copied back to ROOT.ram, a local directory, for the test to
compare with ROOT. ram:// lives inside one process, hence running the scripts
in-process (runpy), like tests/two_cpus.py; absl's flags are reset between runs.
"""

import importlib
import os
import re
import runpy
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)


def exact_ram_names(set_attribute=setattr):
  """Makes ram:// match whole names, as local disk and gs:// do.

  TensorFlow's ram:// finds names by string prefix: beside ram://d/ab.txt alone,
  ram://d/a "exists" as a directory holding b.txt, so a checkpoint prefix such as
  ram://d/bert_model.ckpt passes for a directory; and it lists no subdirectory
  that was never made explicitly. Here exists, isdir and listdir look at whole
  names (through the file system's own glob) instead. `set_attribute`: setattr,
  or pytest's monkeypatch.setattr to undo it after a test.
  """
  import tensorflow as tf
  from tensorflow.python.lib.io import file_io
  glob, isdir = file_io.get_matching_files_v2, file_io.is_directory_v2
  exists, listdir = file_io.file_exists_v2, file_io.list_directory_v2

  def below(path):  # names of the entries under ram:// directory `path`, whole names only
    names, pattern = set(), path
    for _ in range(16):  # deeper than any test's tree
      pattern += "/*"
      names.update(m[len(path) + 1:].split("/")[0] for m in glob(pattern))
    return names

  def ram(path):  # the name without a trailing /, for a ram:// path without wildcards
    path = os.fsdecode(path)
    return None if not path.startswith("ram://") or any(c in path for c in "*?[") else (
        path.rstrip("/"))

  def exact_exists(path):
    p = ram(path)
    return exists(path) if p is None else bool(glob(p)) or bool(below(p))

  def exact_isdir(path):
    p = ram(path)
    return isdir(path) if p is None else isdir(p) and (bool(glob(p)) or bool(below(p)))

  def exact_listdir(path):
    p = ram(path)
    if p is None:
      return listdir(path)
    if not exact_isdir(p):
      raise tf.errors.NotFoundError(None, None, f"{path}: no such directory")
    return sorted(below(p))

  rmtree = file_io.delete_recursively_v2

  def exact_rmtree(path):  # TensorFlow's, removing ram://d/assets, also takes d/assets.extra
    p = ram(path)
    if p is None:
      return rmtree(path)
    if not exact_exists(p):
      raise tf.errors.NotFoundError(None, None, f"{path}: no such directory")
    entries = {p + "/" + "/".join(m[len(p) + 1:].split("/")[:depth])
               for depth in range(1, 17) for m in glob(p + "/*" * depth)}
    for entry in sorted(entries, key=lambda e: -e.count("/")) + [p]:  # the deepest first
      try:
        rmtree(entry) if isdir(entry) else file_io.delete_file_v2(entry)
      except tf.errors.NotFoundError:  # gone with an entry whose name it extends
        pass

  for name, function in (("file_exists_v2", exact_exists), ("is_directory_v2", exact_isdir),
                         ("list_directory_v2", exact_listdir),
                         ("delete_recursively_v2", exact_rmtree)):
    set_attribute(file_io, name, function)
  for name, function in (("exists", exact_exists), ("isdir", exact_isdir),
                         ("listdir", exact_listdir), ("rmtree", exact_rmtree)):
    set_attribute(tf.io.gfile, name, function)


def ram_path(path):
  """The ram:// twin of local absolute path `path`."""
  return "ram://" + path


def copy_tree(source, target):
  """Copies every file and directory under `source` to `target` (either side local or ram://)."""
  import tensorflow as tf
  for directory, subdirs, names in tf.io.gfile.walk(source):
    below = directory[len(source):].lstrip("/")
    tf.io.gfile.makedirs(os.path.join(target, below) if below else target)
    for name in names:
      tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, below, name),
                       overwrite=True)


def run_script(script, args):
  """Runs `python script args...` in this process; SystemExit naming it if it fails."""
  from absl import flags
  # absl's and TensorFlow's own flags, defined when the scripts' shared modules are first
  # imported, stay defined (a rerun script imports those modules from the cache).
  importlib.import_module("cli.runner")
  defined = set(flags.FLAGS)
  sys.argv = [script, *args]
  try:
    runpy.run_path(os.path.join(PROJECT, script), run_name="__main__")
  except SystemExit as e:
    if e.code not in (0, None):
      raise SystemExit(f"{script} {' '.join(args)} failed: {e.code}") from None
  finally:
    import keras
    keras.utils.clear_session()  # Keras' automatic names (seed_generator_1, ...) restart
    flags.FLAGS.unparse_flags()
    for name in set(flags.FLAGS) - defined:  # the script defines them again when rerun
      delattr(flags.FLAGS, name)


def main(root, argv):
  root = os.path.abspath(root).rstrip("/")
  commands, current = [], []
  for arg in argv + [","]:
    if arg == ",":
      commands.append(current)
      current = []
    else:
      current.append(arg)
  on_ram = re.compile(re.escape(root) + r"(?=/|,|$)")
  exact_ram_names()
  copy_tree(root, ram_path(root))
  for script, *args in commands:
    print(f"on_ram.py: {script} on local disk", file=sys.stderr, flush=True)
    run_script(script, args)
    print(f"on_ram.py: {script} on ram://", file=sys.stderr, flush=True)
    run_script(script, [on_ram.sub(ram_path(root), a) for a in args])
  copy_tree(ram_path(root), root + ".ram")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
