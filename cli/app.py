"""The process of an entry script: TensorFlow's environment defaults, one-line errors, flag
parsing, logging the flags, clean-up.

An entry script ends with `app.run(main)`. Bad input anywhere (a ValueError,
or a flag absl refuses), a cluster that does not come together or loses a
task, SIGINT and SIGTERM each end the run with one line `error: ...` on
stderr; what the run registered for clean-up (scratch folders, an output
directory it made and left empty) is removed whatever the outcome.
"""

import dataclasses
import os
import platform
import re
import shutil
import sys
import tempfile


def use_tensorflow_defaults():
  """What the scripts ask of TensorFlow, where the environment does not say otherwise; in
  effect only before TensorFlow is imported (this module does it on import)."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  # TensorFlow turns its oneDNN kernels (dense layers fused with their bias and GELU,
  # faster batched products for attention) on by default only on CPUs with AVX512-VNNI,
  # AVX512-BF16 or AMX. On an AVX2-only CPU they were faster too: training steps by up to
  # 20%, served batches of real text by 10-40% (docs/performance.md, docs/serving.md); single
  # requests not. TF_ENABLE_ONEDNN_OPTS=0 turns them off. Other processors (ARM) keep
  # TensorFlow's own choice: nothing was measured there.
  if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def use_inference_defaults():
  """For a process that only runs models whose weights are in place before their first call
  and never change (predict.py, extract_features.py; a server), where the environment does
  not say otherwise: TF_ONEDNN_ASSUME_FROZEN_WEIGHTS, so that TensorFlow's oneDNN dense
  layers convert each weight once, at their first call, to the blocked layout their fastest
  kernels read, and keep it, instead of reading the plain layout at every call (single
  requests and batches faster, docs/serving.md). Wrong for a process that trains or assigns
  weights: a layer would go on with the values of its first call. In effect when called
  before the first model runs."""
  os.environ.setdefault("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "1")


def frozen_weights():
  """Whether this process's dense layers keep their weights' first values
  (use_inference_defaults)."""
  return os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "0").lower() in ("1", "true")


use_tensorflow_defaults()

from absl import app, flags, logging  # noqa: E402

from cli import signals  # noqa: E402
from modeling import cluster  # noqa: E402  (no TensorFlow)

_CLUSTER = []  # the parsed TF_CONFIG of a multi-worker run, once its strategy is made
_CLEAN_UP = []  # callables run when the run ends, whatever the outcome


def one_line(error):
  """An error's text on one line (TensorFlow's file errors go on with a line break and a tab)."""
  return re.sub(r"\s*[\r\n]\s*", " ", str(error)).strip()


def run(main):
  """absl's app.run with one-line errors and the clean-up (see the module's docstring)."""
  def guarded(argv):
    failed, cluster_failed = True, None
    signals.watch()
    try:
      main(argv)
      failed = False
    except ValueError as e:
      logging.debug("Failure details", exc_info=True)
      sys.exit(f"error: {one_line(e)}")
    except cluster.ClusterError as e:
      logging.debug("Failure details", exc_info=True)
      cluster_failed = str(e)
    except Exception as e:  # noqa: BLE001  (re-raised unless the cluster lost a task)
      cluster_failed = _CLUSTER and cluster.lost_task(e, _CLUSTER[0])
      if not cluster_failed:
        raise
      logging.debug("Failure details", exc_info=True)
    except (KeyboardInterrupt, signals.Stopped) as e:
      logging.debug("Stopped at", exc_info=True)
      name, code = signals.exit_code(e)
      print(f"error: stopped by {name}", file=sys.stderr, flush=True)
      sys.exit(code)
    finally:
      while _CLEAN_UP:
        _CLEAN_UP.pop()()
      from data import files, path_checks
      while path_checks.MADE_DIRS:  # output directories the run made and left empty
        path = path_checks.MADE_DIRS.pop()
        if failed:
          files.remove_empty_dir(path)
    if cluster_failed:
      # Without the interpreter's teardown: TensorFlow's, with its runtime in an error
      # state, would log pages after this line (or wait on the lost task).
      logging.flush()
      print(f"error: {cluster_failed}", file=sys.stderr, flush=True)
      os._exit(1)
  app.run(guarded, flags_parser=_parse_flags)


def joined_cluster(tf_config):
  """Records the multi-worker cluster this run joined, so that losing one of its tasks
  reads as one line naming it."""
  _CLUSTER.append(tf_config)


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
  if files.exists(path) and not files.isdir(path):
    raise ValueError(f"{flag}={path} is a file; name a directory.")
  path_checks.ensure_writable_dir(path, flag)


def scratch_dir(prefix):
  """A new local folder in the system's temporary directory (TMPDIR), removed at the end."""
  path = tempfile.mkdtemp(prefix=prefix)
  at_exit(lambda: shutil.rmtree(path, ignore_errors=True))
  return path


def log_flags(settings=None):
  """Logs the running script's flags (those it defines and the shared ones), once; a flag
  that is a field of `settings` (cli/settings.py) as the run uses it (run_ner's unset
  --learning_rate as the default it resolves to)."""
  used = ({f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
          if settings is not None else {})
  logging.info("Flags: %s", script_flags(used))


def script_flags(values=None):
  """The running script's flags (those it defines and the shared ones) as one string of
  --name=value, `values` ({name: value}) replacing the parsed ones."""
  shown = []
  for module in (sys.argv[0], "cli.flags"):
    for flag in flags.FLAGS.get_flags_for_module(module):
      value = (values or {}).get(flag.name, flag.value)
      shown.append(f"--{flag.name}={list(value) if isinstance(value, tuple) else value}")
  return " ".join(shown)


def check_given(**named_values):
  """Raises ValueError naming the first flag whose value is missing (None or "")."""
  for name, value in named_values.items():
    if value is None or value == "":
      raise ValueError(f"--{name} is required.")
