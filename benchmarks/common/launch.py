"""The one way the benchmarks launch a process: the project's scripts as a user runs them,
a benchmark's own fresh child, or a peer in another Python; with its wall time and peak
memory."""

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import threading
import time

from absl import app, logging

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared", "data")


@dataclasses.dataclass
class Finished:
  """A process that ended: its output, wall seconds, exit code and peak memory in bytes
  ({"anonymous": its own memory, "file": pages of mapped files, which the system can drop
  and read again, "tree": resident memory of it and its children}; empty without /proc)."""
  stdout: str
  stderr: str
  seconds: float
  returncode: int
  peak: dict

  def json_line(self):
    """The last line of stdout that is a JSON object, parsed (None when there is none)."""
    lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def memory_cgroup(limit):
  """A new memory cgroup of `limit` bytes, swap excluded (Linux, cgroup v1 or v2, as root):
  its folder, whose cgroup.procs a process joins by writing its pid there."""
  v1 = "/sys/fs/cgroup/memory"
  if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
    top, limits = v1, {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
  else:
    top, limits = "/sys/fs/cgroup", {"memory.max": limit, "memory.swap.max": 0}
    try:
      with open(os.path.join(top, "cgroup.subtree_control")) as f:
        enabled = "memory" in f.read().split()
    except OSError:
      enabled = False
    if not enabled:
      raise RuntimeError("No memory cgroup can be made here (needs Linux, root and the "
                         "memory controller).")
  group = os.path.join(top, f"bert_benchmark_{os.getpid()}")
  try:
    os.makedirs(group, exist_ok=True)
    for name, value in limits.items():
      if os.path.exists(os.path.join(group, name)):  # swap files exist where swap is counted
        with open(os.path.join(group, name), "w") as f:
          f.write(str(int(value)))
  except OSError as e:
    if os.path.isdir(group):
      os.rmdir(group)
    raise RuntimeError(f"Could not make a memory cgroup at {group}: {e}") from e
  return group


def _sample(pid, peak):
  """Raises the peaks in `peak` to the memory process `pid` and its children hold now."""
  try:
    with open(f"/proc/{pid}/status") as f:
      fields = dict(line.split(":", 1) for line in f)
  except (OSError, ValueError):
    return
  for name, key in (("anonymous", "RssAnon"), ("file", "RssFile")):
    if key in fields:  # "123456 kB"
      peak[name] = max(peak.get(name, 0), int(fields[key].split()[0]) * 1024)
  try:
    import psutil
    parent = psutil.Process(pid)
    tree = sum(p.memory_info().rss for p in [parent] + parent.children(recursive=True))
    peak["tree"] = max(peak.get("tree", 0), tree)
  except Exception:  # no psutil, or a process ended while being read
    pass


def command(args, name=None, cwd=ROOT, memory_limit=None, interval=0.25, check=True):
  """Runs `args` to its end, sampling its memory every `interval` seconds; returns Finished.

  memory_limit: bytes the process may use, its page cache included (a memory cgroup; the
  kernel kills it beyond them). check: raise RuntimeError naming `name` with the last
  error line when the process fails.
  """
  name = name or os.path.basename(args[0])
  logging.info("$ %s", " ".join(shlex.quote(a) for a in args))
  group = memory_cgroup(memory_limit) if memory_limit else None
  if group:  # the shell joins the group, then becomes the command: one process throughout
    args = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(group, "cgroup.procs"),
            *args]
  peak, start = {}, time.perf_counter()
  try:
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    done = threading.Event()

    def sample():
      while not done.wait(interval):
        _sample(proc.pid, peak)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    done.set()
    sampler.join()
  finally:
    if group:
      os.rmdir(group)  # empty once the process has ended
  finished = Finished(stdout, stderr, time.perf_counter() - start, proc.returncode, peak)
  if check and proc.returncode:
    lines = stderr.strip().splitlines() or ["(no output)"]
    if group and proc.returncode == -9:
      lines.append(f"killed: more than its {memory_limit / 1e9:.2f} GB of memory")
    raise RuntimeError(f"{name} failed ({proc.returncode}): {lines[-1]}")
  return finished


def script(path, *args, python=sys.executable, **kwargs):
  """Runs the project's script `path` (relative to the repository) with `args` as a user
  would, from the repository; see command()."""
  return command([python, os.path.join(ROOT, path), *args], name=path, **kwargs)


def read_results(path):
  """eval_results.txt as {key: string}."""
  with open(path) as f:
    return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)


def main_guarded(main):
  """absl's app.run of `main`, a failed script run or bad flag reported as one line."""
  def guarded(argv):
    try:
      main(argv)
    except (ValueError, RuntimeError) as e:
      sys.exit(f"error: {e}")
  app.run(guarded)
