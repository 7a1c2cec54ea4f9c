"""Running the entry scripts as a user would: a fresh process per run.

Importing TensorFlow takes about 4 s of CPU, and the suite runs the scripts about a
hundred times. So each run is a child forked from a server process that has imported
TensorFlow, Keras and tensorflow-text but never started TensorFlow's runtime (forking
after that would be unsafe); the child then runs the script as `python script args`
would, with its own environment, working directory, argv, stdout and stderr.
BERT_TESTS_FORK=0 (or a platform without forkserver) runs each script in a plain new
interpreter instead.
"""

import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELOAD = ["tensorflow", "keras", "tensorflow_text", "numpy", "absl.app", "absl.flags"]
_context = None


def _forking():
  global _context
  if (os.environ.get("BERT_TESTS_FORK", "1") == "0"
      or "forkserver" not in multiprocessing.get_all_start_methods()):
    return None
  if _context is None:
    _context = multiprocessing.get_context("forkserver")
    _context.set_forkserver_preload(PRELOAD)
  return _context


def _run_in_child(script, args, env, out_path, err_path):
  """In the forked child: `python script args` with env, cwd ROOT and output to files."""
  opened = {}
  for fd, path in ((1, out_path), (2, err_path)):
    if path not in opened:  # one file for both: one offset, so neither overwrites the other
      opened[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(opened[path], fd)
  for target in opened.values():
    os.close(target)
  signal.signal(signal.SIGINT, signal.default_int_handler)  # as started from a terminal
  os.environ.clear()
  os.environ.update(env)
  tempfile.tempdir = None  # found again from this environment's TMPDIR, as a new process would
  os.chdir(ROOT)
  sys.argv = [script, *args]
  # As the interpreter would: the script's folder first, then PYTHONPATH, then the
  # installed packages (not the tests' folder the server was started from).
  def kept(path):  # the stdlib and installed packages, not this project's folders
    path = os.path.abspath(path)
    return "site-packages" in path or not (path + os.sep).startswith(ROOT + os.sep)
  sys.path[:] = [os.path.dirname(script), ROOT] + [p for p in sys.path if p and kept(p)]
  code = 0
  try:
    runpy.run_path(script, run_name="__main__")
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if e.code is not None and not isinstance(e.code, int):
      print(e.code, file=sys.stderr)
  except BaseException:  # what the interpreter prints for an uncaught exception
    import traceback
    traceback.print_exc()
    code = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


def run_script(name, *args, expect_ok=True):
  """Runs `python name args...` from the project root; returns the CompletedProcess."""
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
  script = os.path.join(ROOT, name)
  context = _forking()
  if context is None:
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
  else:
    with tempfile.TemporaryDirectory() as d:
      out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
      child = context.Process(target=_run_in_child, args=(script, list(args), env, out, err))
      child.start()
      child.join(600)
      if child.exitcode is None:
        child.kill()
        child.join()
        raise subprocess.TimeoutExpired([name, *args], 600)
      with open(out, errors="replace") as f_out, open(err, errors="replace") as f_err:
        proc = subprocess.CompletedProcess([name, *args], child.exitcode, f_out.read(),
                                           f_err.read())
  if expect_ok and proc.returncode != 0:
    raise AssertionError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
  return proc


def last_error_line(proc):
  """The one-line error a failed script printed (its last stderr line)."""
  return proc.stderr.strip().splitlines()[-1]


class Started:
  """A script started by start_script: pid, poll(), wait(timeout), send_signal(), kill(),
  returncode; its stdout and stderr go to the file `log`."""

  def __init__(self, process, log):
    self.process, self.log = process, log

  @property
  def pid(self):
    return self.process.pid

  @property
  def returncode(self):
    return self.poll()

  def poll(self):
    if isinstance(self.process, subprocess.Popen):
      return self.process.poll()
    return self.process.exitcode

  def wait(self, timeout=None):
    if isinstance(self.process, subprocess.Popen):
      return self.process.wait(timeout)
    self.process.join(timeout)
    if self.process.exitcode is None:
      raise subprocess.TimeoutExpired(self.pid, timeout)
    return self.process.exitcode

  def send_signal(self, signum):
    os.kill(self.pid, signum)

  def kill(self):
    self.process.kill()
    self.wait(60)


def start_script(name, args, log, env=None):
  """Starts `python name args...` as run_script does, without waiting for it; stdout and
  stderr go to the file `log`. SIGINT raises KeyboardInterrupt in it, as in a terminal."""
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT, **(env or {})}
  script = os.path.join(ROOT, name)
  context = _forking()
  if context is None:
    with open(log, "w") as f:
      process = subprocess.Popen(
          [sys.executable, script, *args], stdout=f, stderr=subprocess.STDOUT, env=env,
          cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  else:
    process = context.Process(target=_run_in_child, args=(script, list(args), env, log, log))
    process.start()
  return Started(process, log)
