"""finetune_search.py's process layer: the grid, the runs as child processes, resuming.

Each run is the fine-tuning script with the user's flags plus its own
--output_dir (a sub-directory of the search's), --learning_rate,
--train_batch_size, --num_train_epochs and --seed; --export_dir, if given, is
moved into the run's directory. Its output goes to log.txt there, and
search_run.json records how it ended: a run whose record says "done" is
skipped when the search is started again (a killed search resumes); one that
failed is reported, the others go on, and it is tried again next time. Runs
stopped or killed half-way keep no record and resume from their own checkpoints next
time (the scripts resume).
The table, the choice and best/ come from modeling/search_results.py.
"""

import concurrent.futures
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl import logging

from data import files
from data.progress import format_duration
from modeling import search_results, selection

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = "search_run.json"
# Flags the search sets for each run; the pass-through flags may not set them.
OWN = ("output_dir", "learning_rate", "train_batch_size", "num_train_epochs", "seed")
# How a run that was stopped ends (cli/signals.py: 128 + SIGINT or SIGTERM, after saving a
# checkpoint; or killed by either signal): cut off, not failed, so it keeps no record.
STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)


@dataclasses.dataclass(frozen=True)
class Run:
  learning_rate: float
  batch_size: int
  epochs: float
  seed: int

  @property
  def name(self):
    return (f"lr{self.learning_rate:g}_bs{self.batch_size}_ep{self.epochs:g}"
            f"_seed{self.seed}")


def grid(learning_rates, batch_sizes, epochs, seeds):
  """Every Run of the grid, in order: learning rate, batch size, epochs, then seed."""
  return [Run(float(lr), int(b), float(e), int(s)) for lr in learning_rates
          for b in batch_sizes for e in epochs for s in seeds]


def grid_values(learning_rates, batch_sizes, epochs):
  """{learning_rates, batch_sizes, epochs} of the grid flags' strings as numbers, each in the
  range the scripts' own flags take (a learning rate and epochs finite and above 0, a batch
  size an integer of 1 or more), so that no run fails on one; ValueError naming the flag and
  value otherwise."""
  rules = (("learning_rates", learning_rates, float, "a finite number above 0",
            lambda v: math.isfinite(v) and v > 0),
           ("batch_sizes", batch_sizes, int, "an integer of 1 or more", lambda v: v >= 1),
           ("epochs", epochs, float, "a finite number above 0",
            lambda v: math.isfinite(v) and v > 0))
  values = {}
  for name, texts, kind, rule, holds in rules:
    if not texts:
      raise ValueError(f"--{name} is empty; give at least one value.")
    values[name] = []
    for text in texts:
      try:
        value = kind(text)
      except ValueError:
        value = None
      if value is None or not holds(value):
        raise ValueError(f"--{name}={','.join(texts)}: {text!r} is not {rule}.")
      values[name].append(value)
  return values


def seeds_from(seeds, num_seeds):
  """--seeds as integers, else 1 .. --num_seeds."""
  if seeds:
    try:
      return [int(s) for s in seeds]
    except ValueError:
      raise ValueError(f"--seeds={','.join(seeds)}: expected integers.") from None
  return list(range(1, num_seeds + 1))


def _flag_name(arg):
  return arg[2:].split("=", 1)[0] if arg.startswith("--") else None


def check_passthrough(args):
  """ValueError for a pass-through flag the search sets itself, or a stray argument."""
  for arg in args:
    name = _flag_name(arg)
    if name is None:
      raise ValueError(f"{arg!r}: pass the script's flags after `--` as --name=value.")
    if name in OWN:
      raise ValueError(f"--{name} is set by the search for each run; give the grid flags "
                       "(--learning_rates, --batch_sizes, --epochs, --seeds) or the search's "
                       "--output_dir instead.")


def _bool_flag(args, name):
  """The value absl gives boolean flag `name` from `args` (the last mention wins; False
  when absent): --name, --noname, --name=true|t|1|false|f|0 in any case."""
  value = False
  for arg in args:
    flag = _flag_name(arg)
    if flag == "no" + name:
      value = False
    elif flag == name:
      value = "=" not in arg or arg.split("=", 1)[1].lower() in ("true", "t", "1")
  return value


def _passed_flags(args):
  """{flag: value} of the flags given after `--`, as absl reads them (the last mention wins;
  booleans as true or false, --noname too); those the search sets itself left out."""
  values = {}
  for arg in args:
    name, value = _flag_name(arg), (arg.split("=", 1)[1] if "=" in arg else "true")
    if "=" not in arg and name.startswith("no"):
      name, value = name[2:], "false"
    if value.lower() in ("true", "t", "1", "false", "f", "0"):
      value = "true" if value.lower() in ("true", "t", "1") else "false"
    if name not in OWN + ("export_dir",):
      values[name] = value
  return values


def multi_worker(args):
  """Whether the runs pass --strategy=multi_worker."""
  return _passed_flags(args).get("strategy") == "multi_worker"


def writes_shared_outputs(args, tf_config_text):
  """Whether this search writes the search's records, log.txt files, tables and best/.

  Runs passed --strategy=multi_worker are each one cluster of the machines that all run
  this search with the same flags, every run a worker of it; so that each file has one
  writer, the chief's search (TF_CONFIG's `chief` task, else worker 0, as TensorFlow
  decides it) writes them, and every other machine's search runs the same grid in step,
  its runs logging to its own terminal. Otherwise: True. ValueError: TF_CONFIG's."""
  if not multi_worker(args):
    return True
  from modeling import cluster  # the standard library only
  config = cluster.parse_tf_config(tf_config_text)
  if "chief" in config.cluster:
    return config.task_type == "chief"
  return config.task_type == "worker" and config.task_index == 0


def check_scored(args):
  """ValueError unless the runs are scored on dev (--do_eval; run_squad: --do_predict)."""
  if not (_bool_flag(args, "do_eval") or _bool_flag(args, "do_predict")):
    raise ValueError("The runs write no dev scores to select on: pass --do_eval after `--` "
                     "(run_squad.py: --do_predict with a --predict_file that has answers).")


def uses_best(args):
  """Whether the runs pass --use_best_checkpoint (their scores are best/'s)."""
  return _bool_flag(args, "use_best_checkpoint")


def default_metric(script, args):
  """The script's headline metric (modeling/selection.py): run_classifier's --task_name."""
  task_name = None
  for arg in args:
    if _flag_name(arg) == "task_name":
      task_name = arg.split("=", 1)[1]
  return selection.script_metric(script, task_name)


def find_script(script):
  """The script's path: as given, else beside finetune_search.py."""
  for path in (script, os.path.join(ROOT, script)):
    if os.path.isfile(path):
      return path
  raise ValueError(f"--script={script}: no such file.")


def run_args(run, args, directory):
  """The script's arguments for `run` in `directory`."""
  own = [f"--output_dir={directory}", f"--learning_rate={run.learning_rate:g}",
         f"--train_batch_size={run.batch_size}", f"--num_train_epochs={run.epochs:g}",
         f"--seed={run.seed}"]
  kept = [a if _flag_name(a) != "export_dir" else f"--export_dir={directory}/export"
          for a in args]
  return kept + own


def _end_with_parent():
  """In a child before it starts (Linux): SIGTERM when the search dies, even by SIGKILL, so
  no orphan goes on writing into a run directory that a restarted search runs again."""
  try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def read_record(directory):
  path = os.path.join(directory, RECORD)
  if not files.exists(path):
    return None
  try:
    return json.loads(files.read_bytes(path).decode("utf-8"))
  except ValueError:
    return None  # cut short: run it again


class Search:
  """Runs the grid's runs (`parallel` at once) of `script` with `args` under output_dir."""

  def __init__(self, script, args, output_dir, runs, parallel=1, python=sys.executable,
               writer=True):
    self.script, self.args, self.output_dir, self.runs = script, args, output_dir, runs
    self.parallel, self.python, self.writer = parallel, python, writer
    self.children, self.lock = set(), threading.Lock()
    self.started, self.finished, self.todo = time.time(), 0, 0

  def directory(self, run):
    return os.path.join(self.output_dir, "runs", run.name)

  def _child(self, command, log=None):
    """Runs `command`, its output to the file object `log` (None: this process's own);
    returns its exit code."""
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT if log else None,
                             preexec_fn=_end_with_parent if sys.platform == "linux" else None)
    with self.lock:
      self.children.add(child)
    code = child.wait()
    with self.lock:
      self.children.discard(child)
    return code

  def _one(self, run, number):
    directory = self.directory(run)
    command = [self.python, self.script, *run_args(run, self.args, directory)]
    logging.info("[%d/%d] %s: started", number, len(self.runs), run.name)
    start = time.time()
    if not self.writer:  # another machine's worker of the chief's run: no shared writes
      code = self._child(command)
      logging.info("[%d/%d] %s: ended (exit %d) after %s; the chief records it.", number,
                   len(self.runs), run.name, code, format_duration(time.time() - start))
      return None
    files.makedirs(directory)
    log_path = os.path.join(directory, "log.txt")
    # A child writes to a local file: the run's own log.txt while it runs, or, for a bucket
    # (gs://), a temporary file appended to log.txt there when the child ends.
    remote = files.is_remote(log_path)
    if remote:
      handle, local = tempfile.mkstemp(prefix="search_log_")
      os.close(handle)
    else:
      local = files.local_path(log_path)
    try:
      with open(local, "ab") as log:
        code = self._child(command, log)
    finally:  # a stopped search too keeps what the child logged, and no local copy
      if remote:
        with open(local, "rb") as f:
          new = f.read()
        os.remove(local)
        old = files.read_bytes(log_path) if files.exists(log_path) else b""
        with files.atomic_output(log_path, "wb") as f:
          f.write(old + new)
    seconds = time.time() - start
    if code in STOPPED:  # no record: the next search runs it again, from its checkpoints
      logging.warning("[%d/%d] %s: stopped after %s (exit %d); it resumes next time.", number,
                      len(self.runs), run.name, format_duration(seconds), code)
      return None
    record = {"status": "done" if code == 0 else "failed", "returncode": code,
              "seconds": round(seconds, 1), "command": command}
    if code:
      lines = files.read_bytes(os.path.join(directory, "log.txt")).decode(
          "utf-8", "replace").strip().splitlines()
      record["error"] = lines[-1] if lines else ""
      logging.warning("[%d/%d] %s: failed (exit %d) after %s: %s", number, len(self.runs),
                      run.name, code, format_duration(seconds), record["error"])
    else:
      logging.info("[%d/%d] %s: done in %s", number, len(self.runs), run.name,
                   format_duration(seconds))
    with self.lock:
      self.finished += 1
      left = self.todo - self.finished
      elapsed = time.time() - self.started
    logging.info("%d of %d runs to do finished in %s; %d left, ETA %s.", self.finished,
                 self.todo, format_duration(elapsed), left,
                 format_duration(elapsed / self.finished * left))
    with files.atomic_output(os.path.join(directory, RECORD)) as f:
      json.dump(record, f, indent=1)
    return record

  def _check_same_command(self, run, record):
    """ValueError when a finished run was trained with other flags than this search
    passes: its results would be taken for the new ones'."""
    if "command" not in record:
      return
    before = _passed_flags(record["command"][2:])
    now = _passed_flags(run_args(run, self.args, self.directory(run)))
    if before != now:
      shown = lambda values, other: " ".join(  # noqa: E731
          f"--{k}={v}" for k, v in sorted(values.items()) if other.get(k) != v) or "none"
      raise ValueError(
          f"{self.directory(run)} was trained with other flags ({shown(before, now)} there; "
          f"{shown(now, before)} now): pass the same flags after `--`, or a new --output_dir "
          "for a new search.")

  def run_all(self):
    """Runs what is not done yet; returns {Run: record}. A stop (SIGINT, SIGTERM) is
    passed on to the running children, which save a checkpoint and end."""
    records, todo = {}, []
    for number, run in enumerate(self.runs, 1):
      record = read_record(self.directory(run))
      if record and record.get("status") == "done":
        self._check_same_command(run, record)
        records[run] = record
      else:
        if record:
          logging.info("%s failed last time: running it again.", run.name)
        todo.append((run, number))
    logging.info("%d runs: %d done before, %d to run, %d at a time.", len(self.runs),
                 len(records), len(todo), self.parallel)
    self.started, self.finished, self.todo = time.time(), 0, len(todo)
    pool, futures = concurrent.futures.ThreadPoolExecutor(self.parallel), {}
    try:
      futures = {pool.submit(self._one, run, number): run for run, number in todo}
      for future in concurrent.futures.as_completed(futures):
        record = future.result()
        if record is not None:  # None: stopped half-way (STOPPED)
          records[futures[future]] = record
    except BaseException:
      for future in futures:
        future.cancel()
      with self.lock:
        for child in self.children:
          child.send_signal(signal.SIGTERM)
      raise
    finally:
      pool.shutdown(wait=True)
    return records

  def rows(self, records):
    """search_results rows of every run, in grid order."""
    rows = []
    for run in self.runs:
      directory = self.directory(run)
      record = records.get(run) or read_record(directory) or {"status": "not run"}
      rows.append({"learning_rate": run.learning_rate, "batch_size": run.batch_size,
                   "epochs": run.epochs, "seed": run.seed, "run": run.name,
                   "status": record["status"],
                   "dev": search_results.read_results(os.path.join(directory,
                                                                   "eval_results.txt")),
                   "test": search_results.read_results(os.path.join(directory,
                                                                    "test_results.txt"))})
    return rows


def model_source(run_dir, use_best):
  """Where a run's model is (its best/ with use_best, else the run's directory); ValueError
  when it holds no checkpoint."""
  from modeling import periodic_eval  # reads no TensorFlow until a checkpoint is listed
  source = os.path.join(run_dir, periodic_eval.BEST_DIR) if use_best else run_dir
  if not files.exists(os.path.join(source, "checkpoint")):
    raise ValueError(f"The chosen run's {source} holds no checkpoint (deleted by "
                     "--keep_checkpoints=chosen of an earlier choice?): remove its "
                     f"{RECORD} to train it again.")
  return source


def copy_model(run_dir, target, use_best):
  """Copies the model of a run (model_source), its config, vocab, results and export into
  `target`, replacing it whole."""
  from modeling import periodic_eval
  source = model_source(run_dir, use_best)
  # On a bucket the files move one by one: each usable part's marker after its files.
  with files.atomic_dir(target, last=("export/saved_model.pb", "checkpoint")) as tmp:
    files.makedirs(tmp)
    state = files.read_bytes(os.path.join(source, "checkpoint")).decode("utf-8")
    prefix = state.split('model_checkpoint_path: "', 1)[1].split('"', 1)[0]
    for path in files.glob(os.path.join(source, os.path.basename(prefix) + ".*")):
      files.copy(path, os.path.join(tmp, os.path.basename(path)))
    for name in ("bert_config.json", "vocab.txt", "run.json", "label_list.txt",
                 "eval_results.txt", "test_results.txt", periodic_eval.BEST_JSON):
      for folder in (source, run_dir):
        if files.exists(os.path.join(folder, name)):
          files.copy(os.path.join(folder, name), os.path.join(tmp, name))
          break
    export = os.path.join(run_dir, "export")
    if files.isdir(export):
      for name in files.walk_files(export):
        files.makedirs(os.path.dirname(os.path.join(tmp, "export", name)))
        files.copy(os.path.join(export, name), os.path.join(tmp, "export", name))
    with files.atomic_output(os.path.join(tmp, "checkpoint")) as f:
      f.write(f'model_checkpoint_path: "{os.path.basename(prefix)}"\n')


def drop_checkpoints(run_dir):
  """Deletes a finished run's checkpoints (its own and its best/'s: the weights with the
  optimizer's moments), keeping its results, log, record and export."""
  from modeling import periodic_eval
  for folder in (run_dir, os.path.join(run_dir, periodic_eval.BEST_DIR)):
    for path in files.glob(os.path.join(folder, "ckpt-*")) + files.glob(
        os.path.join(folder, "checkpoint")):
      files.remove(path)
