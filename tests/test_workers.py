"""Two workers (MultiWorkerMirroredStrategy, TF_CONFIG on localhost) sharing one --output_dir.

Each script runs once as two worker processes and once as a single worker,
from the same random checkpoint. Every shared file must be written once, by
the chief (worker 0): inotify counts the writes of each name in the output
directory, and the two-worker run must show as many as the single-worker
run; the other worker leaves nothing behind. The files must hold the single
run's values up to float rounding. To make the two runs train on the same
global batches although two input pipelines shard and shuffle the records
differently from one, every training record is the same example (evaluation
and prediction use distinct ones), and dropout is off (tests/without_dropout.py).
"""

import csv
import ctypes
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data.pretraining import generation, instances
from helpers import assert_same_numbers, randomize, read_eval_results
from modeling import checkpoints, cluster, distribution
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.pretraining import BertPretrainer
from modeling.span_labeling import BertSpanLabeler
from scripts import ROOT, last_error_line, run_script, start_script
from test_pretraining_data import make_corpus, make_vocab

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts writes with inotify")

WORDS = ["the", "a", "cat", "sat", "on", "mat", "film", "was", "good", "bad", "very", "plot"]
TIMEOUT = 180  # seconds for any one process: a hung collective fails the test, never hangs it
# One thread per op on the two cores the workers share.
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "OMP_NUM_THREADS": "1"}
TIMING = ("steps_per_second", "sequences_per_second")
TEMPORARY = re.compile(r"\.tmp|_temp|\.tempstate")  # TensorFlow's names before a rename


class _Writes:
  """Counts, per file name, the files written (closed after writing) or moved into a
  directory, with inotify. Only the directory itself is watched, not its subdirectories."""

  def __init__(self, directory):
    os.makedirs(directory, exist_ok=True)
    libc = ctypes.CDLL(None)
    self._fd = libc.inotify_init1(os.O_NONBLOCK)
    assert self._fd >= 0
    # IN_CLOSE_WRITE | IN_MOVED_TO
    assert libc.inotify_add_watch(self._fd, str(directory).encode(), 0x8 | 0x80) >= 0

  def stop(self):
    """{name: count} since the start; temporary names (TensorFlow's, ours) left out."""
    counts, data = {}, b""
    while True:
      try:
        data += os.read(self._fd, 1 << 16)
      except BlockingIOError:
        break
    os.close(self._fd)
    at = 0
    while at < len(data):
      _, _, _, size = struct.unpack_from("iIII", data, at)
      name = data[at + 16:at + 16 + size].rstrip(b"\0").decode()
      at += 16 + size
      if not (name.startswith(".") or TEMPORARY.search(name)):
        counts[name] = counts.get(name, 0) + 1
    return counts


def _free_ports(n):
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


class _Processes:
  """Starts the scripts (without dropout, see tests/without_dropout.py), logging to files;
  kills any still running when the test ends."""

  def __init__(self, tmp_path):
    self.tmp_path, self.procs = tmp_path, []

  def start(self, script, args, tag, ports=None, tasks=None, more_env=None):
    """One process, or with `ports` one worker per port under TF_CONFIG (those of `tasks`,
    indices; default all); `more_env`: more environment variables."""
    tasks = [None] if ports is None else range(len(ports)) if tasks is None else tasks
    procs = []
    for i in tasks:
      env = {**os.environ, **ENV, "PYTHONPATH": ROOT, **(more_env or {})}
      extra = []
      if ports is not None:
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                       "task": {"type": "worker", "index": i}})
        extra = ["--strategy=multi_worker"]
      log = self.tmp_path / f"{tag}_{i or 0}.log"
      with open(log, "w") as f:
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "without_dropout.py"), script, *args,
             *extra], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
      procs[-1].log = log
    self.procs += procs
    return procs

  def finish(self, procs):
    """Waits for every process; returns their logs. Fails (killing the rest) on a
    nonzero exit or after TIMEOUT: a hung collective never hangs the suite."""
    deadline = time.time() + TIMEOUT
    for p in procs:
      try:
        p.wait(timeout=max(deadline - time.time(), 1))
      except subprocess.TimeoutExpired:
        self.kill_all()
        pytest.fail(f"a process hung:\n{p.log.read_text()[-3000:]}")
    logs = [p.log.read_text() for p in procs]
    for p, log in zip(procs, logs):
      assert p.returncode == 0, log[-3000:]
    return logs

  def kill_all(self):
    for p in self.procs:
      if p.poll() is None:
        p.kill()
        p.wait()


@pytest.fixture
def processes(tmp_path):
  started = _Processes(tmp_path)
  yield started
  started.kill_all()


def _tiny_config(vocab_size):
  return BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                    type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _listing(directory):
  """Relative paths of the files under `directory`; event files named by their folder."""
  paths = set()
  for root, _, names in os.walk(directory):
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), directory)
      paths.add(os.path.join(os.path.dirname(rel), "events") if "tfevents" in name else rel)
  return paths


def _last_rows(path):
  """train_log.csv as {step: row without timing columns}, a repeated step's last row."""
  with open(path) as f:
    return {int(r["step"]): {k: float(v) for k, v in r.items() if k not in TIMING}
            for r in csv.DictReader(f)}


_eval_results = read_eval_results


def _assert_same_weights(got, want, tol=1e-5):
  a, b = (checkpoints.read_checkpoint(str(path)).weights for path in (got, want))
  assert a.keys() == b.keys()
  for name in b:
    # Two workers against one process: the same training, gradients summed in another
    # order. After Adam steps no bound follows from the arithmetic (helpers.adam_step says
    # why); 1e-5 is stated against one update instead: adam_step(1e-2) / 3000 after the
    # classifier's 4 steps at lr 1e-2, adam_step(1e-3) / 300 after pretraining's 30 at
    # 1e-3. Other data or a lost replica's gradient would move weights by whole updates;
    # the rounding noise stays below (1.7e-6 and 1.8e-7 on the AVX2 machine of these tests).
    np.testing.assert_allclose(a[name], b[name], atol=tol, err_msg=name)


def _assert_written_once_by_the_chief(logs, writes, expected, out):
  assert "Worker worker:0 is the chief" in logs[0]
  assert "Worker worker:1 is not the chief" in logs[1]
  assert writes == expected  # the other worker rewrote no shared file
  assert not (out / ".workers").exists()  # and removed its scratch


class _Strategy:
  """What WorkerOutputs reads of a MultiWorkerMirroredStrategy: its task in the cluster, and
  whether it is the chief, decided as TensorFlow's multi-worker strategy decides it."""

  def __init__(self, task_type, task_id, jobs=("worker",)):
    from tensorflow.python.distribute import multi_worker_util
    spec = {job: [f"{job}{i}:1" for i in range(1 if job == "chief" else 3)] for job in jobs}
    self.cluster_resolver = type("Resolver", (), {"task_type": task_type, "task_id": task_id})
    self.extended = type("Extended", (), {"should_checkpoint": multi_worker_util.is_chief(
        spec, task_type, task_id)})


def test_worker_outputs_chief_writes_output_dir_others_a_scratch_removed_at_the_end(tmp_path):
  out = str(tmp_path)
  chief = distribution.WorkerOutputs(_Strategy("worker", 0), out)
  assert chief.chief and chief.path("eval_results.txt") == os.path.join(out, "eval_results.txt")
  assert distribution.WorkerOutputs(tf.distribute.get_strategy(), out).chief
  # A cluster with a chief task: it writes, and worker 0 is an ordinary worker (TensorFlow's rule).
  assert distribution.WorkerOutputs(_Strategy("chief", 0, ("chief", "worker")), out).chief
  assert not distribution.is_chief(_Strategy("worker", 0, ("chief", "worker")))
  scratch = tmp_path / ".workers" / "worker_1"
  scratch.mkdir(parents=True)
  (scratch / "checkpoint").write_text("a killed run's")
  other = distribution.WorkerOutputs(_Strategy("worker", 1), out)
  assert not other.chief and other.path("train.tf_record") == str(scratch / "train.tf_record")
  assert list(scratch.iterdir()) == []  # never restored over the chief's checkpoint
  third = distribution.WorkerOutputs(_Strategy("worker", 2), out)
  (scratch / "train.tf_record").write_bytes(b"records")
  other.remove_scratch()
  assert not scratch.exists() and (tmp_path / ".workers" / "worker_2").exists()
  third.remove_scratch()
  chief.remove_scratch()
  assert os.listdir(out) == []


@pytest.mark.slow
@linux_only
def test_classifier_two_workers_write_once_what_one_worker_writes(tmp_path, processes):
  rng = random.Random(0)
  vocab = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS)
  config = _tiny_config(4 + len(WORDS))
  model = BertClassifier(BertEncoder(config), 2)
  model.build()
  randomize(model, seed=0, scale=0.3)
  init = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path / "init"),
                                         config, vocab)
  data = tmp_path / "data"
  data.mkdir()
  rows = lambda n, fmt: "\n".join(
      fmt(i, " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))) for i in range(n))
  (data / "train.tsv").write_text("sentence\tlabel\n" + "the cat sat on a mat\t1\n" * 16)
  # Dev labels all 1, as the training example's: the dev loss falls at each evaluation, so
  # the last one (step 4) is the best (--best_metric=eval_loss) and rewrites best/ at the end.
  (data / "dev.tsv").write_text("sentence\tlabel\n" + rows(12, lambda i, s: f"{s}\t1\n"))
  (data / "test.tsv").write_text("index\tsentence\n" + rows(10, lambda i, s: f"{i}\t{s}\n"))
  args = ["--task_name=SST-2", f"--data_dir={data}", f"--init_checkpoint={init}", "--do_train",
          "--do_eval", "--do_predict", "--max_seq_length=16", "--train_batch_size=8",
          "--eval_batch_size=4", "--predict_batch_size=4", "--num_train_epochs=2",
          "--learning_rate=1e-2", "--log_steps=1", "--seed=3", "--eval_every_steps=2",
          "--use_best_checkpoint", "--best_metric=eval_loss"]
  single, multi = tmp_path / "single", tmp_path / "multi"
  watches = {out: _Writes(out) for out in (single, multi)}
  # The chief publishes each best/ 2 s late, as over a slow bucket: the other worker must
  # still load the last one (not an older best/, or none).
  started = [processes.start("run_classifier.py", [f"--output_dir={out}",
                                                   f"--export_dir={out / 'export'}", *args],
                             out.name, ports, more_env={"SLOW_BEST_SECONDS": "2"})
             for out, ports in ((single, None), (multi, _free_ports(2)))]
  logs = processes.finish(started[1])
  processes.finish(started[0])
  used = [re.findall(r"Using the best checkpoint \S+ckpt-(\d+)", log) for log in logs]
  assert used[0] == used[1] == ["4"], used
  writes = {out: watch.stop() for out, watch in watches.items()}
  _assert_written_once_by_the_chief(logs, writes[multi], writes[single], multi)
  assert writes[single]["eval_results.txt"] == writes[single]["run.json"] == 1
  assert _listing(multi) == _listing(single)
  for name in ("train.tf_record", "eval.tf_record", "predict.tf_record", "run.json", "SST-2.tsv"):
    assert (multi / name).read_bytes() == (single / name).read_bytes(), name
  results = _eval_results(single / "eval_results.txt")
  # --use_best_checkpoint: the results are those of best/, one of the evaluations at steps 2
  # and 4, which the chief alone copied (_assert_written_once_by_the_chief covers best/).
  best = json.loads((single / "best" / "best.json").read_text())
  assert [step for step, _ in best["evaluations"]] == [2, 4]
  assert results["global_step"] == best["step"]
  # best.json holds an evaluation's results after training: the tolerance of eval_results.txt
  # below. eval_log.csv prints them with 6 significant digits, as train_log.csv (below).
  assert_same_numbers(json.loads((multi / "best" / "best.json").read_text()), best, tol=1e-5)
  assert_same_numbers(_last_rows(multi / "eval_log.csv"), _last_rows(single / "eval_log.csv"),
                      tol=1e-4)
  # After training, so no bound from the arithmetic (see _assert_same_weights): 1e-5 on the
  # loss and metrics, far above the rounding noise (4e-7 on AVX2), below a changed update's.
  assert_same_numbers(_eval_results(multi / "eval_results.txt"), results, tol=1e-5)
  # Probabilities after training, likewise (1.5e-8 on AVX2).
  np.testing.assert_allclose(np.loadtxt(multi / "test_results.tsv"),
                             np.loadtxt(single / "test_results.tsv"), atol=1e-5)
  # train_log.csv prints 6 significant digits: a loss near 4 moves by 1e-5 when one run's
  # value sits just across a rounding boundary from the other's; training adds ~1e-6.
  assert_same_numbers(_last_rows(multi / "train_log.csv"), _last_rows(single / "train_log.csv"),
                      tol=1e-4)
  _assert_same_weights(multi, single)
  reader = {out: tf.train.load_checkpoint(str(out / "export" / "variables" / "variables"))
            for out in (single, multi)}
  names = [n for n, _ in tf.train.list_variables(str(single / "export" / "variables" / "variables"))
           if "VARIABLE_VALUE" in n]
  assert names
  for n in names:
    got, want = reader[multi].get_tensor(n), reader[single].get_tensor(n)
    if isinstance(want, bytes):  # the export's recorded precision
      assert got == want, n
      continue
    # The SavedModel's copies of the weights: as _assert_same_weights.
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=n)


@pytest.mark.slow
@linux_only
def test_squad_prediction_only_from_a_checkpoint_on_two_workers(tmp_path, processes):
  """run_squad.py --do_predict without training, from --init_checkpoint: nothing made the
  step variable before the chief alone read it for eval_results.txt (a collective that
  waited for the other worker, which had finished: the chief hung, then failed)."""
  vocab = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS)
  config = _tiny_config(4 + len(WORDS))
  model = BertSpanLabeler(BertEncoder(config))
  model.build()
  randomize(model, seed=0, scale=0.3)
  init = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path / "init"),
                                         config, vocab)
  context = "the cat sat on a mat the film was very good"
  qas = [{"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
         for i, (q, a) in enumerate([("the cat sat", "mat"), ("the film was", "very good"),
                                     ("a plot", "cat")])]
  (tmp_path / "dev.json").write_text(json.dumps(
      {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context,
                                                                 "qas": qas}]}]}))
  args = [f"--vocab_file={vocab}", f"--bert_config_file={tmp_path / 'init' / 'bert_config.json'}",
          f"--init_checkpoint={init}", f"--predict_file={tmp_path / 'dev.json'}", "--do_predict",
          "--max_seq_length=16", "--doc_stride=4", "--max_query_length=6",
          "--predict_batch_size=2"]
  single, multi = tmp_path / "single", tmp_path / "multi"
  started = [processes.start("run_squad.py", [f"--output_dir={out}", *args], out.name, ports)
             for out, ports in ((single, None), (multi, _free_ports(2)))]
  processes.finish(started[1])
  processes.finish(started[0])
  assert _eval_results(multi / "eval_results.txt") == _eval_results(single / "eval_results.txt")
  # The same weights, forward only: the logits agree to float32 rounding (~1e-6 relative) on
  # any CPU, so the chosen spans and their texts match unless two candidates of this random
  # model were that close, which the seed makes not so.
  assert (multi / "predictions.json").read_text() == (single / "predictions.json").read_text()
  assert not (multi / ".workers").exists()


def _identical_records(tmp_path, count):
  """A vocab, and a records file holding one generated pretraining instance `count` times."""
  vocab = make_vocab(tmp_path / "vocab.txt")
  corpus = make_corpus(tmp_path / "corpus.txt", documents=4, seed=5)
  generated = str(tmp_path / "generated.tfrecord")
  generation.generate_exact([corpus], [generated], vocab, True,
                            instances.GenerationConfig(32, 5, 0.15, 0.1, False, 1), 1)
  record = next(iter(tf.data.TFRecordDataset(generated))).numpy()
  path = str(tmp_path / "train.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for _ in range(count):
      w.write(record)
  return vocab, path


@pytest.mark.slow
@linux_only
def test_pretraining_two_workers_resume_after_a_kill_and_match_one_worker(tmp_path, processes):
  vocab, records = _identical_records(tmp_path, 64)
  config = _tiny_config(len(open(vocab).read().split()))
  config.to_json_file(str(tmp_path / "bert_config.json"))
  model = BertPretrainer(BertEncoder(config))
  model.build()
  init = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(tmp_path / "init"))
  steps = 30
  args = [f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--input_file={records}",
          f"--init_checkpoint={init}", "--do_train", "--do_eval", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--train_batch_size=8", "--eval_batch_size=8",
          "--max_eval_steps=2", f"--num_train_steps={steps}", "--num_warmup_steps=5",
          "--learning_rate=1e-3", "--save_checkpoints_steps=5", "--iterations_per_loop=1",
          "--log_steps=5", "--seed=7", f"--vocab_file={vocab}"]
  single, multi = tmp_path / "single", tmp_path / "multi"
  single_watch = _Writes(single)
  reference = processes.start("run_pretraining.py", [f"--output_dir={single}", *args], "single")
  ports = _free_ports(2)
  args = [f"--output_dir={multi}", *args]
  first = processes.start("run_pretraining.py", args, "first", ports)
  deadline = time.time() + TIMEOUT
  while not tf.train.latest_checkpoint(str(multi)):
    assert all(p.poll() is None for p in first) and time.time() < deadline, \
        first[0].log.read_text()[-3000:]
    time.sleep(0.02)
  first[1].send_signal(signal.SIGKILL)  # the other worker dies, and the chief stops by itself
  killed = time.time()
  first[0].wait(timeout=60)
  stopped_after = time.time() - killed
  first[1].wait()
  lines = first[0].log.read_text().strip().splitlines()
  assert first[0].returncode == 1, lines[-5:]
  # Found when a connection is reset, or when TensorFlow's coordination service misses
  # 10 s of the dead worker's heartbeats.
  assert re.fullmatch(r"error: the cluster of TF_CONFIG lost worker 1 at 127\.0\.0\.1:\d+ "
                      r"\(its process ended or stopped answering\): .+\. Every worker stops; "
                      r"start them all again\.", lines[-1]), lines[-1]
  assert stopped_after < 30, stopped_after
  killed_at = int(tf.train.latest_checkpoint(str(multi)).rsplit("-", 1)[1])
  assert 0 < killed_at < steps and not (multi / "eval_results.txt").exists()
  assert (multi / ".workers" / "worker_1").exists()  # the other worker's part of a checkpoint

  watch = _Writes(multi)
  logs = processes.finish(processes.start("run_pretraining.py", args, "again", ports))
  writes = watch.stop()
  processes.finish(reference)
  single_writes = single_watch.stop()
  for log in logs:
    assert f"resumed from {multi / f'ckpt-{killed_at}'} at step {killed_at}" in log
  # The resumed part writes what one worker writes from that step on: every file
  # written once per run, the checkpoints after the step, the state file and the
  # log at each of the fewer save and log points.
  points, resumed_points = steps // 5, (steps - killed_at) // 5
  expected = {name: count for name, count in single_writes.items()
              if not re.match(r"ckpt-(\d+)\.", name)
              or int(re.match(r"ckpt-(\d+)\.", name).group(1)) > killed_at}
  for name in ("checkpoint", "train_log.csv"):
    expected[name] = single_writes[name] // points * resumed_points
  assert single_writes["eval_results.txt"] == single_writes["run.json"] == 1
  _assert_written_once_by_the_chief(logs, writes, expected, multi)

  assert _listing(multi) >= _listing(single)  # the killed part may have left an extra event file
  results = _eval_results(single / "eval_results.txt")
  assert results["global_step"] == steps
  # After training, so no bound from the arithmetic (see _assert_same_weights): 1e-5 on the
  # loss and metrics, far above the rounding noise (6e-8 on AVX2), below a changed update's.
  assert_same_numbers(_eval_results(multi / "eval_results.txt"), results, tol=1e-5)
  # train_log.csv prints 6 significant digits: a loss near 4 moves by 1e-5 when one run's
  # value sits just across a rounding boundary from the other's; training adds ~1e-7.
  assert_same_numbers(_last_rows(multi / "train_log.csv"), _last_rows(single / "train_log.csv"),
                      tol=1e-4)
  _assert_same_weights(multi / "export", single / "export")
  _assert_same_weights(multi, single)


STEP = "optimizer/by_name/global_step/.ATTRIBUTES/VARIABLE_VALUE"  # in our checkpoints


@pytest.mark.slow
@linux_only
def test_sigterm_on_one_worker_saves_one_checkpoint_by_step_and_resumes_on_one(tmp_path,
                                                                              processes):
  """SIGTERM to one worker: every worker saves at one step, in a checkpoint named by it
  (the earlier ones untouched), logs it and exits 143; one process resumes it."""
  vocab, records = _identical_records(tmp_path, 64)
  config = _tiny_config(len(open(vocab).read().split()))
  config.to_json_file(str(tmp_path / "bert_config.json"))
  out = tmp_path / "out"
  args = [f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--input_file={records}",
          "--do_train", "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--train_batch_size=8", "--num_train_steps=100000", "--num_warmup_steps=5",
          "--save_checkpoints_steps=5", "--iterations_per_loop=1", "--log_steps=5",
          "--seed=7", f"--vocab_file={vocab}", f"--output_dir={out}"]
  workers = processes.start("run_pretraining.py", args, "term", _free_ports(2))
  deadline = time.time() + TIMEOUT
  while not tf.train.latest_checkpoint(str(out)):
    assert all(p.poll() is None for p in workers) and time.time() < deadline, \
        workers[0].log.read_text()[-3000:]
    time.sleep(0.02)
  workers[1].send_signal(signal.SIGTERM)
  for p in workers:
    p.wait(timeout=TIMEOUT)
  logs = [p.log.read_text() for p in workers]
  assert [p.returncode for p in workers] == [143, 143], logs[0][-2000:] + logs[1][-2000:]
  saved = tf.train.latest_checkpoint(str(out))
  step = int(saved.rsplit("-", 1)[1])
  for log in logs:
    assert f"SIGTERM: saved a checkpoint at step {step}; exiting." in log
  for path in tf.train.get_checkpoint_state(str(out)).all_model_checkpoint_paths:
    assert tf.train.load_variable(path, STEP) == int(path.rsplit("-", 1)[1])
  resumed = run_script("run_pretraining.py", *[a.replace("100000", str(step + 2)) for a in args])
  assert f"resumed from {out / f'ckpt-{step}'} at step {step}" in resumed.stderr
  assert tf.train.load_variable(tf.train.latest_checkpoint(str(out)), STEP) == step + 2


@pytest.mark.slow
@linux_only
def test_workers_started_with_different_flags_stop_before_training(tmp_path, processes):
  vocab, records = _identical_records(tmp_path, 16)
  _tiny_config(len(open(vocab).read().split())).to_json_file(str(tmp_path / "bert_config.json"))
  args = [f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--input_file={records}",
          "--do_train", "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--train_batch_size=8", "--num_train_steps=4", f"--vocab_file={vocab}",
          f"--output_dir={tmp_path / 'out'}"]
  ports = _free_ports(2)
  workers = (processes.start("run_pretraining.py", args, "same", ports, [0])
             + processes.start("run_pretraining.py", args + ["--learning_rate=1e-3"], "other",
                               ports, [1]))
  for p in workers:
    p.wait(timeout=TIMEOUT)
  for p in workers:
    lines = p.log.read_text().strip().splitlines()
    assert p.returncode == 1 and lines[-1] == (
        "error: the workers of TF_CONFIG's cluster were started with different flags (compare "
        "the 'Flags:' line each logs): start the same command on every worker, only "
        "TF_CONFIG's task differing."), lines[-3:]
  assert not tf.train.latest_checkpoint(str(tmp_path / "out"))


# --- TF_CONFIG, and a cluster that does not come together ---------------------

EXAMPLE = cluster.EXAMPLE


@pytest.mark.parametrize("text, message", [
    (None, "--strategy=multi_worker needs the TF_CONFIG environment variable describing the "
           f"cluster and this worker's task, e.g. {EXAMPLE}"),
    (" ", f"TF_CONFIG is empty; expected JSON such as {EXAMPLE}"),
    ("{cluster: {worker: [h:1]}}", "TF_CONFIG: not valid JSON (Expecting property name "
     "enclosed in double quotes: line 1 column 2 (char 1)): {cluster: {worker: [h:1]}}"),
    ('["h:1"]', 'TF_CONFIG: expected a JSON object with "cluster" and "task", found ["h:1"]'),
    ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG has no "cluster" (or an empty '
     f"one): it must list every task's host:port, e.g. {EXAMPLE}"),
    ('{"cluster": ["h:1"]}',
     'TF_CONFIG: "cluster" must map job names to lists of "host:port", found ["h:1"]'),
    ('{"cluster": {"workers": ["h:1"]}}',
     'TF_CONFIG: the cluster has a job "workers"; TensorFlow knows chief, worker, ps, evaluator'),
    ('{"cluster": {"worker": "h:1"}}', 'TF_CONFIG: cluster "worker" must be a non-empty list '
     'of "host:port" strings, found "h:1"'),
    ('{"cluster": {"worker": ["h:1", "h"]}}',
     'TF_CONFIG: cluster "worker" entry 1 is "h", not a "host:port" address'),
    ('{"cluster": {"worker": ["h:1", "h:65536"]}}',
     'TF_CONFIG: cluster "worker" entry 1 is "h:65536", not a "host:port" address'),
    ('{"cluster": {"chief": ["h:1"], "worker": ["h:1"]}}',
     "TF_CONFIG: h:1 is the address of both chief 0 and worker 0"),
    ('{"cluster": {"chief": ["h:1", "h:2"]}}',
     'TF_CONFIG: cluster "chief" lists 2 tasks; TensorFlow allows one'),
    ('{"cluster": {"worker": ["h:1"]}}', 'TF_CONFIG has no "task" object saying which task '
     'this process is, e.g. "task": {"type": "worker", "index": 0}'),
    ('{"cluster": {"worker": ["h:1"]}, "task": "worker"}', 'TF_CONFIG: "task" must be an '
     'object such as {"type": "worker", "index": 0}, found "worker"'),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"index": 0}}',
     'TF_CONFIG: the task needs a "type" (chief, worker, ps, evaluator), found {"index": 0}'),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}',
     'TF_CONFIG: task type "chief" is not a job of the cluster, which has worker'),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker"}}', 'TF_CONFIG: the task '
     'needs an "index", a whole number from 0, found {"type": "worker"}'),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0.5}}',
     'TF_CONFIG: the task needs an "index", a whole number from 0, found '
     '{"type": "worker", "index": 0.5}'),
    ('{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
     'TF_CONFIG: task index 2 is out of range: cluster "worker" lists 2 task(s), indices 0 to 1'),
    ('{"cluster": {"worker": ["h:1"], "evaluator": ["h:2"]}, '
     '"task": {"type": "evaluator", "index": 0}}',
     'TF_CONFIG: this task is "evaluator", but --strategy=multi_worker runs chief and worker '
     "tasks only (no side evaluator: evaluate with --do_eval on --output_dir once training "
     "ends)"),
    ('{"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 0}}',
     'TF_CONFIG: the cluster has a "ps" job; --strategy=multi_worker (MultiWorkerMirroredStrategy)'
     " has no parameter servers: list chief and worker tasks only"),
])
def test_tf_config_errors_name_tf_config_and_the_fault(text, message):
  with pytest.raises(ValueError) as e:
    cluster.parse_tf_config(text)
  assert str(e.value) == message


def test_tf_config_accepts_what_tensorflow_accepts():
  parse = lambda config: cluster.parse_tf_config(json.dumps(config))
  assert parse({"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]},
                "task": {"type": "worker", "index": 1}}) == (
      {"chief": ["c:1"], "worker": ["w:1", "w:2"]}, "worker", 1)
  # TensorFlow takes int() of the index; an evaluator listed beside the workers is left out.
  assert parse({"cluster": {"worker": ["w:1", "w:2"]},
                "task": {"type": "worker", "index": "1"}}).task_index == 1
  config = parse({"cluster": {"worker": ["[::1]:5", "host.example.com:6"], "evaluator": ["e:2"]},
                  "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"})
  assert cluster.connected_tasks(config) == [("worker", 0, "[::1]:5"),
                                             ("worker", 1, "host.example.com:6")]


def _tf_config(ports, index, job="worker"):
  return {"cluster": {job: [f"127.0.0.1:{p}" for p in ports]},
          "task": {"type": job, "index": index}}


def test_wait_for_cluster_says_what_it_waits_for_and_gives_up(caplog):
  own, missing = _free_ports(2)
  config = cluster.parse_tf_config(json.dumps(
      {"cluster": {"chief": [f"127.0.0.1:{own}"], "worker": [f"127.0.0.1:{missing}"]},
       "task": {"type": "chief", "index": 0}}))
  start = time.monotonic()
  with caplog.at_level("INFO", logger="absl"), pytest.raises(cluster.ClusterError) as e:
    cluster.wait_for_cluster(config, 2.5, report_every=1.0)
  took = time.monotonic() - start
  assert 2.5 <= took < 5  # the bound, plus at most one probe round of 1 s and some slack
  assert re.fullmatch(
      r"--worker_timeout_seconds=2.5: gave up after \d s waiting for the cluster of TF_CONFIG: "
      rf"not reachable: worker 0 at 127.0.0.1:{missing} \(not started, stopped, or a wrong "
      r"address\?\); reachable: none", str(e.value))
  lines = [r.getMessage() for r in caplog.records if r.name == "absl"]
  assert lines[0] == (
      "Waiting for the other tasks of TF_CONFIG's cluster to listen on their addresses (this "
      f"task: chief 0 at 127.0.0.1:{own}; gives up after 2.5 s, --worker_timeout_seconds). "
      f"Not reachable yet: worker 0 at 127.0.0.1:{missing}; reachable: none.")
  assert len(lines) >= 2 and all(re.fullmatch(
      r"Still waiting for the cluster after \d s \(gives up after 2.5 s, "
      rf"--worker_timeout_seconds\). Not reachable: worker 0 at 127.0.0.1:{missing}; "
      r"reachable: none.", line) for line in lines[1:])
  with socket.create_server(("127.0.0.1", own)):  # its own port is free again
    pass


def test_wait_for_cluster_returns_once_every_task_listens(caplog):
  ports = _free_ports(3)
  configs = [cluster.parse_tf_config(json.dumps(_tf_config(ports, i))) for i in range(3)]
  waited, errors, servers = {}, [], []

  def wait(i):
    try:
      waited[i] = cluster.wait_for_cluster(configs[i], 20)
      # As TensorFlow's server would next (which also shows the port is free again).
      servers.append(socket.create_server(("127.0.0.1", ports[i])))
    except Exception as e:  # noqa: BLE001  (reported below)
      errors.append(e)

  # Worker 2 starts 1.5 s late: the others see it (and each other) through the port each
  # listens on while it waits.
  threads = [threading.Thread(target=wait, args=(i,)) for i in range(3)]
  for t in threads[:2]:
    t.start()
  time.sleep(1.5)
  threads[2].start()
  for t in threads:
    t.join(30)
  for server in servers:
    server.close()
  assert not errors and sorted(waited) == [0, 1, 2]
  # Workers 0 and 1 waited for worker 2, which found them up at once (loose upper bounds:
  # probes run every second, on a busy machine too).
  assert 1.5 <= waited[0] < 10 and 1.5 <= waited[1] < 10 and waited[2] < 5


def test_wait_for_cluster_port_taken_and_a_task_that_does_not_wait():
  own, other = _free_ports(2)
  config = cluster.parse_tf_config(json.dumps(_tf_config([own, other], 0)))
  with socket.create_server(("127.0.0.1", own)):
    with pytest.raises(ValueError) as e:
      cluster.wait_for_cluster(config, 1)
  assert str(e.value) == (
      f"TF_CONFIG: this task (worker 0) is to listen on 127.0.0.1:{own}, but port {own} is "
      "taken on this machine (Address already in use): another program, or another task "
      "given the same index?")
  # One worker alone does not wait.
  assert cluster.wait_for_cluster(cluster.parse_tf_config(json.dumps(_tf_config([own], 0))),
                                  1) == 0


def _waiting_worker(tmp_path, tag, *flags, ports=None):
  """run_pretraining.py as worker 0 of two, whose worker 1 never starts; output to a file."""
  config = tmp_path / "bert_config.json"
  if not config.exists():
    _tiny_config(16).to_json_file(str(config))
  return start_script(
      "run_pretraining.py",
      [f"--bert_config_file={config}", f"--input_file={tmp_path / 'none.tfrecord'}",
       f"--output_dir={tmp_path / tag}", "--do_train", "--max_seq_length=32",
       "--strategy=multi_worker", *flags], tmp_path / f"{tag}.log",
      {**ENV, "TF_CONFIG": json.dumps(_tf_config(ports or _free_ports(2), 0))})


def _when_waiting(proc, deadline):
  """Waits until proc logs that it waits for the cluster; the time it did."""
  while "Waiting for the other tasks" not in proc.log.read_text():
    assert proc.poll() is None and time.time() < deadline, proc.log.read_text()[-3000:]
    time.sleep(0.05)
  return time.time()


@pytest.mark.slow
def test_worker_whose_peer_never_starts_says_so_gives_up_and_stops_on_signals(tmp_path,
                                                                              processes):
  """Workers each missing their peer, run at once: one gives up after
  --worker_timeout_seconds=5, two are stopped by SIGINT and SIGTERM; and one whose peer
  listens but is not TensorFlow gives up in TensorFlow's registration, bounded too."""
  ports = _free_ports(2)
  impostor = socket.create_server(("127.0.0.1", ports[1]))  # accepts, never registers
  late = _waiting_worker(tmp_path, "late", "--worker_timeout_seconds=5", ports=ports)
  timed = _waiting_worker(tmp_path, "timeout", "--worker_timeout_seconds=5")
  stopped = {sig: _waiting_worker(tmp_path, sig.name) for sig in (signal.SIGINT,
                                                                  signal.SIGTERM)}
  processes.procs += [late, timed, *stopped.values()]  # killed if the test fails
  deadline = time.time() + TIMEOUT
  started = _when_waiting(timed, deadline)
  for sig, proc in stopped.items():
    _when_waiting(proc, deadline)
    sent = time.time()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    took = time.time() - sent
    lines = proc.log.read_text().strip().splitlines()
    assert proc.returncode == 128 + sig, lines[-5:]
    assert lines[-1] == f"error: stopped by {'SIGINT (Ctrl-C)' if sig == signal.SIGINT else 'SIGTERM'}"
    assert took < 3, took  # the wait answers signals at once; 3 s for the unwinding
    assert not (tmp_path / sig.name).exists()  # the output directory it made is removed
  timed.wait(timeout=60)
  took = time.time() - started
  lines = timed.log.read_text().strip().splitlines()
  assert timed.returncode == 1, lines[-5:]
  assert re.fullmatch(r"error: --worker_timeout_seconds=5: gave up after \d s waiting for the "
                      r"cluster of TF_CONFIG: not reachable: worker 1 at 127.0.0.1:\d+ \(not "
                      r"started, stopped, or a wrong address\?\); reachable: none", lines[-1])
  assert 4 <= took < 9, took  # 5 s from its first report, within a probe round and slack
  waiting = [line for line in lines if "Waiting for the other tasks" in line]
  assert len(waiting) == 1 and "Not reachable yet: worker 1 at 127.0.0.1:" in waiting[0]

  # TensorFlow's registration gets the time left, at least 10 s, then gives up too.
  late.wait(timeout=60)
  impostor.close()
  lines = late.log.read_text().strip().splitlines()
  assert late.returncode == 1, lines[-5:]
  assert lines[-1] == ("error: TensorFlow could not connect the cluster of TF_CONFIG within "
                       f"10 s (Barrier timed out): no answer from worker 1 at 127.0.0.1:{ports[1]}")


class _Aborted(Exception):
  def __init__(self, message):
    super().__init__(message)
    self.message = message  # as tf.errors.OpError carries it


def test_lost_task_turns_tensorflows_abort_into_one_line():
  config = cluster.parse_tf_config(json.dumps(
      {"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]},
       "task": {"type": "worker", "index": 0}}))
  # TensorFlow's messages (2.20) when a peer's connection is reset, when the coordination
  # service misses a task's heartbeats, and when the service (on the chief) stops answering.
  reset = ("Graph execution error:\n\nDetected at node CollectiveReduceV2 ...\nCollective ops "
           "is aborted by: recvmsg:Connection reset by peer\nAdditional GRPC error information "
           "from remote target /job:worker/replica:0/task:1 while calling "
           "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer")
  unhealthy = ("Graph execution error:\n\nCollective ops is aborted by: Error reported from "
               "/job:worker/task:0: The following tasks are unhealthy (stopped sending "
               "heartbeats):\n/job:chief/replica:0/task:0\nThe tasks have crashed.")
  heartbeat = ("Graph execution error:\n\nCollective ops is aborted by: Deadline Exceeded\n\n"
               "RPC: /tensorflow.CoordinationService/Heartbeat\nThe error could be from a "
               "previous operation.")
  tail = "Every worker stops; start them all again."
  assert cluster.lost_task(_Aborted(reset), config) == (
      "the cluster of TF_CONFIG lost worker 1 at w:2 (its process ended or stopped answering): "
      f"recvmsg:Connection reset by peer. {tail}")
  assert cluster.lost_task(_Aborted(unhealthy), config) == (
      "the cluster of TF_CONFIG lost chief 0 at c:1 (its process ended or stopped answering): "
      "Error reported from /job:worker/task:0: The following tasks are unhealthy (stopped "
      f"sending heartbeats). {tail}")
  assert cluster.lost_task(_Aborted(heartbeat), config) == (
      "the cluster of TF_CONFIG lost chief 0 at c:1 (its process ended or stopped answering): "
      f"Deadline Exceeded. {tail}")
  assert cluster.lost_task(_Aborted("Graph execution error: NaN"), config) is None
  assert cluster.lost_task(ValueError("Collective ops is aborted by: x"), config) is None


@pytest.mark.parametrize("script, args", [
    ("run_classifier.py", ["--task_name=SST-2", "--data_dir=data", "--do_train"]),
    ("run_pretraining.py", ["--bert_config_file=bert_config.json", "--input_file=x.tfrecord",
                            "--do_train"]),
])
def test_bad_tf_config_is_one_line_before_any_work(script, args, tmp_path, monkeypatch):
  monkeypatch.setenv("TF_CONFIG", "{'cluster': {'worker': ['h:1']}}")  # Python, not JSON
  proc = run_script(script, f"--output_dir={tmp_path / 'out'}", "--strategy=multi_worker", *args,
                    expect_ok=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert last_error_line(proc) == (
      "error: TF_CONFIG: not valid JSON (Expecting property name enclosed in double quotes: "
      "line 1 column 2 (char 1)): {'cluster': {'worker': ['h:1']}}")
  assert not (tmp_path / "out").exists()
