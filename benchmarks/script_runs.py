"""What the pretraining benchmarks share: running the project's scripts as a user would,
and preparing a corpus, a vocabulary and records from raw books with them."""

import glob
import json
import os
import shlex
import subprocess
import sys
import threading

from absl import app, logging

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data")
GUTENBERG = os.path.join(SHARED, "corpus", "gutenberg", "*.txt")


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


def run(script, *args, memory_limit=None):
  """Runs one of the project's scripts; raises RuntimeError with its last error line.

  memory_limit: bytes the process may use, its page cache included (a memory
  cgroup; the kernel kills it beyond them). Returns the process's peak memory
  in bytes, sampled 4 times a second (Linux): {"anonymous": its own memory,
  "file": pages of mapped files, which the system can drop and read again};
  empty where /proc is missing.
  """
  command = [sys.executable, os.path.join(ROOT, script), *args]
  logging.info("$ %s", " ".join(shlex.quote(a) for a in command[1:]))
  group = memory_cgroup(memory_limit) if memory_limit else None
  if group:  # the shell joins the group, then becomes the script: one process throughout
    command = ["sh", "-c", 'echo $$ > "$0" && exec "$@"',
               os.path.join(group, "cgroup.procs"), *command]
  peak = {}
  try:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    done = threading.Event()

    def sample():
      while not done.wait(0.25):
        try:
          with open(f"/proc/{proc.pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        except (OSError, ValueError):
          return
        for name, key in (("anonymous", "RssAnon"), ("file", "RssFile")):
          if key in fields:  # "123456 kB"
            peak[name] = max(peak.get(name, 0), int(fields[key].split()[0]) * 1024)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = proc.communicate()
    done.set()
    sampler.join()
  finally:
    if group:
      os.rmdir(group)  # empty once the process has ended
  if proc.returncode:
    lines = stderr.strip().splitlines() or ["(no output)"]
    if group and proc.returncode == -9:
      lines.append(f"killed: more than its {memory_limit / 1e9:.2f} GB of memory")
    raise RuntimeError(f"{script} failed ({proc.returncode}): {lines[-1]}")
  return peak


def read_results(path):
  """eval_results.txt as {key: string}."""
  with open(path) as f:
    return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)


def books(pattern, quick):
  """The sorted files of `pattern` (the last is held out); with `quick`, the two short
  Blake books only."""
  found = sorted(glob.glob(pattern))
  if quick:
    found = [b for b in found if os.path.basename(b).startswith("blake")] or found[:2]
  if len(found) < 2:
    raise ValueError(f"--input_files={pattern}: need at least two files.")
  return found


def prepare_text(work, files, vocab_size):
  """train.txt (all books but the last), heldout.txt (the last) and a vocab.txt learned
  from train.txt, in `work`; returns their paths. Existing files are kept."""
  p = {n: os.path.join(work, n) for n in ("train.txt", "heldout.txt", "vocab.txt")}
  if not os.path.exists(p["heldout.txt"]):
    run("prepare_corpus.py", "--input_file=" + ",".join(files[:-1]),
        "--output_file=" + p["train.txt"])
    run("prepare_corpus.py", "--input_file=" + files[-1], "--output_file=" + p["heldout.txt"])
  if not os.path.exists(p["vocab.txt"]):
    run("learn_vocab.py", f"--input_file={p['train.txt']}", f"--vocab_file={p['vocab.txt']}",
        f"--vocab_size={vocab_size}")
  return p


def make_records(text, vocab, output, max_seq_length, max_predictions, dupe_factor, *extra):
  """create_pretraining_data.py on `text` unless `output` exists; returns `output`."""
  if not os.path.exists(output):
    run("create_pretraining_data.py", f"--input_file={text}", f"--output_file={output}",
        f"--vocab_file={vocab}", f"--max_seq_length={max_seq_length}",
        f"--max_predictions_per_seq={max_predictions}", f"--dupe_factor={dupe_factor}", *extra)
  return output


def write_config(path, vocab_file, size):
  """A bert_config.json for L/H/A `size` (feed-forward 4H) and the vocab's size."""
  layers, hidden, heads = (int(x) for x in size.split("/"))
  config = {"vocab_size": sum(1 for _ in open(vocab_file, encoding="utf-8")),
            "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512,
            "type_vocab_size": 2, "initializer_range": 0.02}
  with open(path, "w") as f:
    json.dump(config, f, indent=2)
  return path


def main_guarded(main):
  """absl's app.run of `main`, a failed script run or bad flag reported as one line."""
  def guarded(argv):
    try:
      main(argv)
    except (ValueError, RuntimeError) as e:
      sys.exit(f"error: {e}")
  app.run(guarded)
