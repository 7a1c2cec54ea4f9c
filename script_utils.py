"""What every entry script shares: one-line errors, logging of the flags, config lookup."""

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

from absl import app, flags, logging  # noqa: E402

from modeling import cluster  # noqa: E402  (no TensorFlow)


def run(main):
  """absl's app.run, with a bad flag, a bad-input ValueError or a cluster that does not come
  together reported as one line on stderr, and SIGINT and SIGTERM as one line too (see
  _watch_signals); removes the scratch directories of worker_outputs at the end, whatever
  the outcome."""
  def guarded(argv):
    failed, cluster_failed = True, None
    _watch_signals()
    try:
      main(argv)
      failed = False
    except ValueError as e:
      logging.debug("Failure details", exc_info=True)
      sys.exit(f"error: {e}")
    except cluster.ClusterError as e:
      logging.debug("Failure details", exc_info=True)
      cluster_failed = str(e)
    except Exception as e:  # noqa: BLE001  (re-raised unless the cluster lost a task)
      cluster_failed = _CLUSTER and cluster.lost_task(e, _CLUSTER[0])
      if not cluster_failed:
        raise
      logging.debug("Failure details", exc_info=True)
    except (KeyboardInterrupt, Stopped) as e:
      signum = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM
      logging.debug("Stopped at", exc_info=True)
      print(f"error: stopped by {_SIGNAL_NAMES[signum]}", file=sys.stderr, flush=True)
      sys.exit(128 + signum)
    finally:
      while _SCRATCH:
        _SCRATCH.pop()()
      while _MADE_DIRS:  # a failed run leaves no output directory it made and left empty
        path = _MADE_DIRS.pop()
        if failed:
          from data import files
          files.remove_empty_dir(path)
    if cluster_failed:
      # Without the interpreter's teardown: TensorFlow's, with its runtime in an error
      # state, would log pages after this line (or wait on the lost task).
      logging.flush()
      print(f"error: {cluster_failed}", file=sys.stderr, flush=True)
      os._exit(1)
  app.run(guarded, flags_parser=_parse_flags)


class Stopped(BaseException):
  """Raised in the main thread by SIGTERM, as SIGINT raises KeyboardInterrupt: the run
  unwinds (temporary files removed) and run() reports it."""


def _on_sigterm(signum, frame):
  raise Stopped()


_SIGNAL_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
SIGNAL_GRACE_SECONDS = 5.0
_WAKEUP = []  # the socket pair signals are written to; kept open for the process's life


def _watch_signals():
  """SIGTERM raises Stopped; and SIGINT or SIGTERM end the process within
  SIGNAL_GRACE_SECONDS even when the main thread cannot take them.

  Python runs signal handlers in the main thread only, between two of its
  bytecodes: while that thread waits in TensorFlow (a collective waiting for a
  worker that has not reached it, which can last minutes), a signal would not
  be acted on. Python also writes each signal's number to the wakeup fd, which
  a thread here reads: if the process still runs SIGNAL_GRACE_SECONDS later,
  it says so in one line and exits at once. A signal whose handler is the
  training loop's (save a checkpoint, then stop) is left to it.
  """
  signal.signal(signal.SIGTERM, _on_sigterm)
  if _WAKEUP or threading.current_thread() is not threading.main_thread():
    return
  reader, writer = socket.socketpair()
  writer.setblocking(False)
  signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
  _WAKEUP.extend((reader, writer))

  def watch():
    while True:
      signum = reader.recv(1)[0]
      if signum not in _SIGNAL_NAMES or signal.getsignal(signum) not in (
          _on_sigterm, signal.default_int_handler):
        continue
      time.sleep(SIGNAL_GRACE_SECONDS)
      logging.flush()
      print(f"error: stopped by {_SIGNAL_NAMES[signum]} (forced: the run was blocked in "
            f"TensorFlow for {SIGNAL_GRACE_SECONDS:g} s, e.g. waiting for another worker)",
            file=sys.stderr, flush=True)
      os._exit(128 + signum)

  threading.Thread(target=watch, name="signal-watch", daemon=True).start()


def _parse_flags(argv):
  """absl's flag parsing, a bad flag reported as one `error:` line like every other
  bad input (absl's own report takes two lines and says FATAL)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.exit(f"error: {e} (--helpfull lists the flags)")


_CLUSTER = []  # the TF_CONFIG of a multi-worker run, once its strategy is made
_SCRATCH = []  # removals of this run's scratch folders, which run() calls at the end
_MADE_DIRS = []  # output directories this run made, which run() removes if it fails early


def make_output_dir(path, flag="--output_dir"):
  """Creates the output directory `path` if needed (ValueError naming `flag` if it cannot be
  written); if this run made it and then fails before writing anything into it, run()
  removes it again."""
  from data import files
  if not files.exists(path):
    _MADE_DIRS.append(path)
  files.ensure_writable_dir(path, flag)


def worker_outputs(strategy, output_dir):
  """Where this worker writes (modeling.distribution.WorkerOutputs); logs which worker
  writes the shared outputs. Its scratch directory is removed when run() ends.

  Converted records: every worker converts its own copy (the chief into
  output_dir under the original's names, the others into their scratch
  directory) rather than the chief writing one copy that the others wait for.
  The conversion is deterministic, so the copies are identical, and no worker
  has to wait on a barrier or trust that a shared file system (a bucket) shows
  it the chief's complete file.
  """
  from modeling import distribution
  outputs = distribution.WorkerOutputs(strategy, output_dir)
  _SCRATCH.append(outputs.remove_scratch)
  return outputs


def scratch_dir(prefix):
  """A new local folder in the system's temporary directory (TMPDIR), removed when run()
  ends."""
  path = tempfile.mkdtemp(prefix=prefix)
  _SCRATCH.append(lambda: shutil.rmtree(path, ignore_errors=True))
  return path


def log_flags():
  """Logs the flags the running script defines (shared ones included), once, at start."""
  values = (flags.FLAGS.get_flags_for_module(sys.argv[0])
            + flags.FLAGS.get_flags_for_module(__name__))
  logging.info("Flags: %s", " ".join(f"--{f.name}={f.value}" for f in values))


def define_tpu_flags():
  """The original's TPU flags (run_pretraining, run_classifier, run_squad)."""
  flags.DEFINE_bool("use_tpu", False, "Train on a TPU (same as --strategy=tpu).")
  flags.DEFINE_string("tpu_name", None, "TPU name or grpc:// address; empty on a TPU VM.")
  flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU (else detected).")
  flags.DEFINE_string("gcp_project", None, "GCP project of the TPU (else detected).")
  flags.DEFINE_string("master", None, "TPU master address; same role as --tpu_name.")
  flags.DEFINE_integer("num_tpu_cores", 8,
                       "Accepted for compatibility: TPUStrategy uses every core it finds.",
                       lower_bound=1)


def define_runtime_flags():
  """Flags added to the original's, shared by the training scripts."""
  flags.DEFINE_enum("strategy", "default", ["default", "one_device", "mirrored",
                                            "multi_worker", "tpu"],
                    "tf.distribute strategy: default (one device), one_device, mirrored (the "
                    "GPUs of this machine), multi_worker (machines listed in TF_CONFIG), tpu.")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                    "Compute dtype; bfloat16/float16 keep float32 weights, softmax, LayerNorm "
                    "and losses; float16 adds dynamic loss scaling.")
  flags.DEFINE_bool("jit_compile", False,
                    "Compile the training, evaluation and prediction steps with XLA (on one "
                    "device the whole training step; with several replicas each one's "
                    "forward and backward). TPUs compile everything anyway.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw: the original's AdamWeightDecay; lamb: LAMB, for large batches.")
  flags.DEFINE_integer("gradient_accumulation_steps", 1,
                       "Split each batch into this many micro-batches whose gradients add up "
                       "to the full batch's (less memory, same update).", lower_bound=1)
  flags.DEFINE_integer("log_steps", 100, "Steps between progress lines and summaries.",
                       lower_bound=1)
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in --output_dir.",
                       lower_bound=1)
  flags.DEFINE_integer("seed", None, "Seeds weights, dropout and data order; unset: random.")
  flags.DEFINE_integer("worker_timeout_seconds", 900,
                       "With --strategy=multi_worker: seconds to wait for the other tasks of "
                       "TF_CONFIG's cluster to come up before giving up; 0 waits for ever.",
                       lower_bound=0)


def define_batching_flags(bucketing=True):
  """Flags added for the fine-tuning scripts: batches trimmed to their real length."""
  flags.DEFINE_integer("batch_length_multiple", None,
                       "Cut each batch to its longest sequence rounded up to a multiple of "
                       "this (at most --max_seq_length); 0 pads every batch to "
                       "--max_seq_length as the original did. Only padding is cut, so "
                       "results do not change. Records on disk keep the fixed length. "
                       "Unset: 1 (exact lengths) on CPUs, 8 on GPUs, 16 with --jit_compile "
                       "(each length is one XLA compilation); TPUs always use 0.",
                       lower_bound=0)
  if not bucketing:
    return
  flags.DEFINE_bool("bucket_by_length", False,
                    "Training: fill each batch with examples of similar length (buckets 16 "
                    "positions wide; feature-based run_ner: sentences of similar word counts). "
                    "Faster still, but it changes which examples share a batch.")


def require_positive(*names):
  """Makes absl refuse a zero or negative value (None passes) of each named float flag."""
  for name in names:
    flags.register_validator(name, lambda value: value is None or value > 0,
                             "must be greater than 0")


def batch_length_multiple(multiple, jit_compile=False, strategy=None):
  """The trimming multiple to use: `multiple` (the flag), or chosen for the hardware.

  TPUs need one static shape (0). Unset, it is 16 under XLA, where every
  distinct length is a compilation; 8 on GPUs, whose tensor cores want
  multiples of 8; else 1, since exact lengths are fastest on CPUs (measured
  1.28x multiple 16 on CoLA, see the README).
  """
  import tensorflow as tf
  if isinstance(strategy, tf.distribute.TPUStrategy):
    if multiple:
      logging.info("TPU: batches keep --max_seq_length (--batch_length_multiple is ignored).")
    return 0
  if multiple is not None:
    return multiple
  if jit_compile:
    return 16
  return 8 if tf.config.list_logical_devices("GPU") else 1


def check_cluster(values):
  """With --strategy=multi_worker, checks TF_CONFIG at once (ValueError, one line), rather
  than when runtime() makes the strategy after the data is read."""
  if values.strategy == "multi_worker" and not values.use_tpu:
    cluster.parse_tf_config(os.environ.get("TF_CONFIG"))


def runtime(values):
  """(strategy, Keras policy name) from the parsed runtime and TPU flags; seeds first."""
  from modeling import distribution
  distribution.set_seed(values.seed)
  policy = distribution.set_precision(values.dtype)
  name = "tpu" if values.use_tpu else values.strategy
  strategy = distribution.make_strategy(name, values.tpu_name or values.master,
                                        values.tpu_zone, values.gcp_project,
                                        os.environ.get("TF_CONFIG"),
                                        values.worker_timeout_seconds)
  if name == "multi_worker":
    _CLUSTER.append(cluster.parse_tf_config(os.environ.get("TF_CONFIG")))
    # The strategy put TensorFlow's own SIGTERM handler in place of Python's: it only
    # records the signal, for a preemption protocol these scripts do not use (training
    # installs its own handler). Python's handler (run()'s) is set again.
    handler = signal.getsignal(signal.SIGTERM)
    if handler is not None and threading.current_thread() is threading.main_thread():
      signal.signal(signal.SIGTERM, handler)
  distribution.describe(strategy)
  return strategy, policy


def require(**named_values):
  """Raises ValueError naming the first flag whose value is missing."""
  for name, value in named_values.items():
    if value is None or value == "":
      raise ValueError(f"--{name} is required.")


def config_and_vocab(bert_config_file, vocab_file, init_checkpoint, output_dir=None):
  """The BertConfig and vocab path: the flags', else the files beside --init_checkpoint,
  else (no --init_checkpoint) those a fine-tuning run copied into `output_dir`."""
  from data import files
  from modeling import checkpoints
  from modeling.config import BertConfig
  if init_checkpoint and not (bert_config_file and vocab_file):
    _require_checkpoint(init_checkpoint)  # not reported as a missing config beside it
  saved = {}  # without --init_checkpoint: a trained model's directory serves alone
  for name in ("bert_config.json", "vocab.txt") if output_dir and not init_checkpoint else ():
    if files.exists(os.path.join(output_dir, name)):
      saved[name] = os.path.join(output_dir, name)
  where = "--init_checkpoint is not given and --output_dir holds no trained model's"
  if bert_config_file or "bert_config.json" in saved:
    config = BertConfig.from_json_file(bert_config_file or saved["bert_config.json"])
  elif init_checkpoint:
    config = checkpoints.find_config(init_checkpoint)
  else:
    raise ValueError(f"--bert_config_file is required when {where} bert_config.json.")
  if not vocab_file:
    if init_checkpoint:
      vocab_file = checkpoints.find_vocab(init_checkpoint)
    elif "vocab.txt" in saved:
      vocab_file = saved["vocab.txt"]
    else:
      raise ValueError(f"--vocab_file is required when {where} vocab.txt.")
  return config, vocab_file


def check_lengths_and_case(config, max_seq_length, do_lower_case, init_checkpoint):
  """The original's checks: max_seq_length fits the model; casing fits the checkpoint name."""
  from data import tokenization
  if max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length={max_seq_length} exceeds the model's "
                     f"max_position_embeddings ({config.max_position_embeddings}).")
  if do_lower_case is not None:
    tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
  if init_checkpoint:
    _require_checkpoint(init_checkpoint)


def _require_checkpoint(path):
  """Raises ValueError naming --init_checkpoint when `path` holds no readable checkpoint."""
  from modeling import checkpoints
  try:
    checkpoints.resolve_checkpoint(path)
  except ValueError as e:
    raise ValueError(f"--init_checkpoint: {e}") from None


def load_tokenizer(vocab_file, do_lower_case, config, tokens=("[UNK]", "[CLS]", "[SEP]")):
  """A FullTokenizer; ValueError when the vocab lacks `tokens` or outgrows the model.

  A vocab with more entries than the config's vocab_size would give ids the
  embedding table does not have.
  """
  from data import tokenization
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  tokenizer.require_tokens(list(tokens))
  size = max(tokenizer.vocab.values()) + 1
  if size > config.vocab_size:
    raise ValueError(f"--vocab_file={vocab_file} has {size} entries but the model's "
                     f"vocab_size is {config.vocab_size}; pass the vocab the model was "
                     "made with.")
  return tokenizer


def require_weights(values):
  """Raises ValueError when evaluation or prediction alone would run untrained weights."""
  import tensorflow as tf
  if values.do_train or values.init_checkpoint or tf.train.latest_checkpoint(values.output_dir):
    return
  raise ValueError("Evaluating or predicting without --do_train needs trained weights: pass "
                   "--init_checkpoint, or an --output_dir holding a checkpoint.")


RUN_FILE = "run.json"


def check_run(output_dir, run):
  """Raises ValueError when output_dir holds checkpoints of a run other than `run`.

  The training scripts resume (or predict with) the latest checkpoint in
  --output_dir, so a model trained for another task, label set or length
  would be reused without a word. `run` is a dict of what defines the run;
  it is compared with the one save_run wrote there.
  """
  import tensorflow as tf
  from data import files
  path = os.path.join(output_dir, RUN_FILE)
  if not tf.train.latest_checkpoint(output_dir) or not files.exists(path):
    return
  try:
    with files.open_file(path, "r") as f:
      saved = json.load(f)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise ValueError(f"Cannot read {path}: {e}") from None
  for key, value in json.loads(json.dumps(run)).items():  # tuples compare as JSON lists
    if key in saved and saved[key] != value:
      raise ValueError(f"--output_dir={output_dir} holds a model trained with {key} "
                       f"{_shown(saved[key])}, not {_shown(value)}; it would be reused. "
                       "Pass a new --output_dir to start afresh.")


def run_record(values, **what):
  """What defines a fine-tuning run (see check_run): `what`, the length, the start.

  The starting checkpoint counts only when given from outside --output_dir
  (predicting with --init_checkpoint=<output_dir> is the same run).
  """
  run = {**what, "max_seq_length": values.max_seq_length}
  if values.init_checkpoint:
    init, out = (p if "://" in p else os.path.abspath(p)
                 for p in (values.init_checkpoint, values.output_dir))
    if init.rstrip("/") != out.rstrip("/") and not init.startswith(out.rstrip("/") + "/"):
      run["init_checkpoint"] = init
  return run


def _shown(value):
  return ",".join(map(str, value)) if isinstance(value, list) else repr(value)


def save_run(output_dir, run):
  """Writes what defines the run (see check_run) to output_dir, atomically."""
  from data import files
  with files.atomic_output(os.path.join(output_dir, RUN_FILE)) as f:
    json.dump(run, f, indent=1)


def make_trainer(strategy, task, num_train_steps, num_warmup_steps, batch_size, values):
  """A Trainer for `task` configured from the original's and the runtime flags.

  Training, the weights it starts from (--init_checkpoint, or the checkpoint
  in --output_dir it resumes) are read now: one that is missing or does not
  fit the model stops the run before the script writes anything.
  """
  from modeling import optimization, training
  if values.do_train and num_train_steps < 1:
    raise ValueError(f"Training needs at least one step, not {num_train_steps}.")
  steps = max(num_train_steps, 1)  # not training: the optimizer is built but never stepped
  replicas, micro = strategy.num_replicas_in_sync, values.gradient_accumulation_steps
  if values.do_train and batch_size % (replicas * micro):
    raise ValueError(f"--train_batch_size={batch_size} must divide evenly into {replicas} "
                     f"replica(s) x --gradient_accumulation_steps={micro}.")
  if not values.do_train:  # no training batch is ever split: nothing to divide
    batch_size, micro = replicas, 1
  trainer = training.Trainer(
      strategy, task,
      lambda names: optimization.create_optimizer(values.optimizer, values.learning_rate, steps,
                                                  num_warmup_steps, names),
      training.TrainConfig(
          output_dir=values.output_dir, num_train_steps=steps, global_batch_size=batch_size,
          steps_per_loop=values.iterations_per_loop, log_steps=min(values.log_steps, steps),
          save_checkpoints_steps=values.save_checkpoints_steps,
          keep_checkpoint_max=values.keep_checkpoint_max,
          gradient_accumulation_steps=micro,
          jit_compile=values.jit_compile, loss_scaling=values.dtype == "float16"))
  if values.do_train:
    trainer.load_start(values.init_checkpoint)
  return trainer


def train_steps(num_examples, batch_size, epochs, source):
  """The original's step count, int(examples / batch * epochs); ValueError when it is 0."""
  steps = int(num_examples / batch_size * epochs)
  if steps < 1:
    raise ValueError(f"{source}: {num_examples} training example(s) make no step of "
                     f"--train_batch_size={batch_size} over --num_train_epochs={epochs}.")
  return steps
