"""The process of an entry script: one-line errors, flag parsing, logging the flags, clean-up.

An entry script ends with `app.run(main)`. Bad input anywhere (a ValueError,
or a flag absl refuses) ends the run with one line `error: ...` on stderr and
exit code 1; what the run registered for clean-up (scratch folders, an output
directory it made and left empty) is removed whatever the outcome.
"""

import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

from absl import app, flags, logging  # noqa: E402

_CLEAN_UP = []  # callables run when the run ends, whatever the outcome
_MADE_DIRS = []  # output directories this run made: removed if it fails before filling them


def run(main):
  """absl's app.run with one-line errors (a bad flag, a ValueError) and the clean-up."""
  def guarded(argv):
    failed = True
    try:
      main(argv)
      failed = False
    except ValueError as e:
      logging.debug("Failure details", exc_info=True)
      sys.exit(f"error: {e}")
    finally:
      while _CLEAN_UP:
        _CLEAN_UP.pop()()
      while _MADE_DIRS:
        path = _MADE_DIRS.pop()
        if failed:
          from data import files
          files.remove_empty_dir(path)
  app.run(guarded, flags_parser=_parse_flags)


def _parse_flags(argv):
  """absl's parsing, a bad flag reported as one `error:` line (absl's own report takes two
  lines and says FATAL)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.exit(f"error: {e} (--helpfull lists the flags)")


def at_exit(clean_up):
  """Registers `clean_up()` to run when the run ends, whatever the outcome."""
  _CLEAN_UP.append(clean_up)


def make_output_dir(path, flag="--output_dir"):
  """Creates output directory `path` if needed (ValueError naming `flag` if it cannot be
  written). If this run made it and then fails before writing into it, run() removes it."""
  from data import files, path_checks
  if not files.exists(path):
    _MADE_DIRS.append(path)
  elif not files.isdir(path):
    raise ValueError(f"{flag}={path} is a file; name a directory.")
  path_checks.ensure_writable_dir(path, flag)


def scratch_dir(prefix):
  """A new local folder in the system's temporary directory (TMPDIR), removed at the end."""
  path = tempfile.mkdtemp(prefix=prefix)
  at_exit(lambda: shutil.rmtree(path, ignore_errors=True))
  return path


def log_flags():
  """Logs the running script's flags (those it defines and the shared ones), once."""
  values = []
  for module in (sys.argv[0], "cli.flags"):
    values += flags.FLAGS.get_flags_for_module(module)
  logging.info("Flags: %s", " ".join(f"--{f.name}={f.value}" for f in values))


def check_given(**named_values):
  """Raises ValueError naming the first flag whose value is missing (None or "")."""
  for name, value in named_values.items():
    if value is None or value == "":
      raise ValueError(f"--{name} is required.")
