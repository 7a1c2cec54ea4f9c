"""Running the entry scripts as a user would, in a subprocess."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(name, *args, expect_ok=True):
  """Runs `python name args...` from the project root; returns the CompletedProcess."""
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
  proc = subprocess.run([sys.executable, os.path.join(ROOT, name), *args],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  if expect_ok and proc.returncode != 0:
    raise AssertionError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
  return proc


def last_error_line(proc):
  """The one-line error a failed script printed (its last stderr line)."""
  return proc.stderr.strip().splitlines()[-1]
