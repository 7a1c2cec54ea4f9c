"""The steps of a training run, in order, around the script's task adapter.

Every training script (run_pretraining, run_classifier, run_squad, run_ner,
run_swag) hands the Runner a TaskAdapter: what its task does its own way
(which flags it needs, what defines a run, how it reads its files, builds its
records and model, scores and writes its outputs). Runner.run() performs the
steps they all share, always in this order:

  1. flags: the required ones given, one --do_* set, the adapter's checks; logged
  2. the model files: config (the adapter may adjust it), vocab, lengths,
     casing, the starting checkpoint readable; the tokenizer
  3. the outputs: --output_dir writable, --export_dir usable
  4. the run's identity: --output_dir holds no model of another run (run.json)
  5. the strategy (seeds and precision first), where this worker writes
  6. the data: the adapter reads every file now, so bad input stops the run
     before training rather than after it
  7. weights to use when evaluating or predicting without training
  8. the Trainer, which reads the starting weights now
  9. train (or restore), evaluate, predict, export

With --eval_every_steps / --eval_every_epochs, training evaluates on dev with
the adapter's own `evaluate` (modeling/periodic_eval.py): eval_log.csv, the
best checkpoint in --output_dir/best, early stopping; --use_best_checkpoint
then evaluates, predicts and exports with that checkpoint (docs/protocol.md).

Each check raises ValueError (one `error:` line, cli/app.py) before the step
whose work it would waste. Only the chief writes the shared outputs.
"""

import contextlib
import dataclasses
import math
import os
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from cli import app, model_files, run_identity, signals
from cli.flags import ACTIONS
from data import path_checks, pipeline, tfrecords
from modeling import (checkpoints, cluster, distribution, export, optimization, periodic_eval,
                      reports, selection, training, vocab_growth)



@dataclasses.dataclass
class TrainInput:
  """What a run trains on.

  dataset_fn(input_context) -> per-replica batches, repeating; load_fn:
  per-batch loading applied after a resumed run's skip (Trainer.train);
  naming_errors: a context manager that turns a damaged file met while
  reading into an error naming it.
  """
  dataset_fn: Callable
  load_fn: Optional[Callable] = None
  naming_errors: Callable = contextlib.nullcontext


class TaskAdapter:
  """What one script's task does its own way. Runner.run() calls the methods in the
  order listed here, each once but `evaluate`, which evaluation during training also
  calls; `run` is the Runner, with what earlier steps made."""

  actions = ACTIONS  # the script's --do_* flags
  tokens = ("[UNK]", "[CLS]", "[SEP]")  # the vocab must hold these
  vocab_required = True
  # Whether --max_seq_length and the starting checkpoint belong to the run's identity.
  length_and_start_define_run = True
  # The --do_* flag that makes read() load the dev data `evaluate` scores.
  dev_action = "do_eval"
  selection_task = None  # the task's name in modeling/selection.HEADLINE (check_flags may set)

  def required_flags(self):
    """{flag name: value} of the flags the script cannot run without."""
    return {}

  def check_flags(self):
    """The script's own flag checks (ValueError naming the flag)."""

  def adjust_config(self, config):
    """The config to build the model from (checked against the script's flags)."""
    return config

  def trained_with(self, config):
    """What defines the run beside --max_seq_length and the starting checkpoint: a dict
    stored in run.json, compared when --output_dir is used again."""
    return {}

  def read(self, run):
    """Reads and checks every data file the run will use (training and held-out)."""

  def train_steps(self, run):
    """(training steps, warmup steps)."""
    raise NotImplementedError

  def build_task(self, run):
    """The modeling task (model, losses, metrics) to train or run."""
    raise NotImplementedError

  def train_input(self, run):
    """The TrainInput; run.record_input(arrays) makes one from feature arrays."""
    raise NotImplementedError

  def notes(self, run):
    """Facts stored in run.json beside the identity, for readers; never compared."""
    return {}

  def after_training(self, run):
    """The chief's work once training has finished (not after a stop on SIGTERM)."""

  def evaluate(self, run):
    """--do_eval: the results to write to eval_results.txt."""
    raise NotImplementedError

  def predict(self, run):
    """--do_predict: predicts and writes the outputs (the chief)."""

  def serving(self, run):
    """The raw-text module to save with --export_dir (modeling/export.py), or None."""
    return None


class Runner:
  """One training run of a script: Runner(FLAGS, adapter).run().

  After the steps that make them: config, vocab_file, tokenizer, strategy,
  outputs (where this worker writes), length_multiple, static_shapes (steps
  compiled for one shape: XLA, TPUs), num_train_steps, trainer.
  """

  def __init__(self, values, adapter):
    self.values, self.adapter = values, adapter
    self.config = self.vocab_file = self.tokenizer = self.identity = None
    self.strategy = self.outputs = self.trainer = self.length_multiple = None
    self.static_shapes = False
    self.num_train_steps = 0
    self.steps_per_epoch = None  # set by epoch_steps
    self.evaluates_during_training = False

  def _flag(self, name, default=None):
    """A flag the script may not define (run_pretraining has no --do_predict, ...)."""
    return getattr(self.values, name, default)

  def run(self):
    """The steps, in order (see the module's docstring)."""
    v, adapter = self.values, self.adapter
    app.check_given(**adapter.required_flags())
    if not any(self._flag(action) for action in adapter.actions):
      names = [f"--{action}" for action in adapter.actions]
      raise ValueError(f"At least one of {', '.join(names[:-1])} and {names[-1]} must be set.")
    adapter.check_flags()
    self._check_protocol_flags()
    if v.strategy == "multi_worker" and not v.use_tpu:  # TF_CONFIG checked at once
      cluster.parse_tf_config(os.environ.get("TF_CONFIG"))
    app.log_flags()

    self.config, self.vocab_file = model_files.config_and_vocab(
        v.bert_config_file, v.vocab_file, v.init_checkpoint, v.output_dir,
        adapter.vocab_required)
    self.config = adapter.adjust_config(self.config)
    do_lower_case = self._flag("do_lower_case")
    model_files.check_lengths_and_case(self.config, v.max_seq_length, do_lower_case,
                                       v.init_checkpoint)
    if self.vocab_file:
      self.tokenizer = model_files.load_tokenizer(
          self.vocab_file, True if do_lower_case is None else do_lower_case, self.config,
          adapter.tokens)

    app.make_output_dir(v.output_dir)
    path_checks.check_output_dir(self._flag("export_dir"), "--export_dir", "the SavedModel")
    self.identity = self._identity(adapter.trained_with(self.config))
    run_identity.check(v.output_dir, self.identity)

    self.strategy = strategy_from_flags(v)
    self.outputs = distribution.WorkerOutputs(self.strategy, v.output_dir)
    app.at_exit(self.outputs.remove_scratch)
    self.length_multiple = batch_length_multiple(self._flag("batch_length_multiple"),
                                                 v.jit_compile, self.strategy)
    self.static_shapes = training.static_shapes(v.jit_compile, self.strategy)

    adapter.read(self)
    model_files.check_has_weights(v.do_train, v.init_checkpoint, v.output_dir)
    steps, warmup = adapter.train_steps(self) if v.do_train else (0, 0)
    self.num_train_steps = steps
    if v.do_train:
      logging.info("%d training steps, %d of them warming up.", steps, warmup)
    growth = vocab_growth.growth_for(v.init_checkpoint, self.vocab_file, self.config,
                                     v.new_token_embeddings, v.seed)
    self.trainer = make_trainer(self.strategy, adapter.build_task(self), steps, warmup,
                                v.train_batch_size, v, growth)

    if v.do_train:
      self._train(adapter.train_input(self))
    if self._flag("use_best_checkpoint"):
      self._use_best()
    elif not v.do_train:
      logging.info("Model %s.", self.trainer.restore(v.init_checkpoint, for_training=False))
    if self._flag("do_eval"):
      self.write_results("eval_results.txt", adapter.evaluate(self))
    if self._flag("do_predict"):
      adapter.predict(self)
    self._export(adapter.serving(self))

  def _check_protocol_flags(self):
    """Evaluation during training, the best checkpoint and early stopping: flags that
    agree with each other and with the run's --do_* flags."""
    v, dev = self.values, self.adapter.dev_action
    steps, epochs = self._flag("eval_every_steps", 0), self._flag("eval_every_epochs", 0.0)
    if steps and epochs:
      raise ValueError("Give --eval_every_steps or --eval_every_epochs, not both.")
    self.evaluates_during_training = bool(steps or epochs)
    name = "--eval_every_steps" if steps else "--eval_every_epochs"
    if self.evaluates_during_training and not v.do_train:
      raise ValueError(f"{name} evaluates during training: it needs --do_train.")
    if self.evaluates_during_training and not self._flag(dev):
      raise ValueError(f"{name} needs --{dev}: it scores the dev data that --{dev} reads.")
    if not self.evaluates_during_training:
      for flag in ("best_metric", "early_stopping_patience"):
        if self._flag(flag):
          raise ValueError(f"--{flag} needs --eval_every_steps or --eval_every_epochs.")
      if self._flag("use_best_checkpoint") and v.do_train:
        raise ValueError("--use_best_checkpoint with --do_train needs --eval_every_steps or "
                         "--eval_every_epochs (they choose the best checkpoint).")
    if self._flag("use_best_checkpoint") and not v.do_train:
      periodic_eval.best_checkpoint(v.output_dir)  # ValueError when there is none
    self.best_metric = (self._flag("best_metric")
                        or selection.headline_metric(self.adapter.selection_task))

  def _evaluator(self):
    """The PeriodicEvaluation of --eval_every_*, or None."""
    v = self.values
    every = periodic_eval.every_steps(self._flag("eval_every_steps", 0),
                                      self._flag("eval_every_epochs", 0.0),
                                      self.steps_per_epoch or 0)
    if not every:
      return None
    tracker = selection.Tracker(self.best_metric, patience=self._flag("early_stopping_patience", 0),
                                state=periodic_eval.read_best(v.output_dir))
    logging.info("Evaluating on dev every %d steps and at the last; the best %s (%s is "
                 "better) is kept in %s.", every, tracker.metric,
                 "higher" if tracker.higher else "lower",
                 os.path.join(v.output_dir, periodic_eval.BEST_DIR))
    return periodic_eval.PeriodicEvaluation(every, lambda: self.adapter.evaluate(self), tracker,
                                            v.output_dir, self.config, self.vocab_file,
                                            self.chief)

  def _use_best(self):
    """--use_best_checkpoint: the model takes the weights and step of --output_dir/best."""
    prefix, state = periodic_eval.best_checkpoint(self.values.output_dir)
    self.trainer.state.load_weights(prefix)
    logging.info("Using the best checkpoint %s: step %d, %s = %.6g.", prefix, state["step"],
                 state["metric"], state["value"])

  def _identity(self, what):
    """The run's identity (see run_identity): `what`, the length and the start.

    The starting checkpoint counts only when given from outside --output_dir
    (predicting with --init_checkpoint=<output_dir> is the same run).
    """
    v = self.values
    if not self.adapter.length_and_start_define_run:
      return dict(what)
    identity = {**what, "max_seq_length": v.max_seq_length}
    if v.init_checkpoint:
      init, out = (p if "://" in p else os.path.abspath(p)
                   for p in (v.init_checkpoint, v.output_dir))
      if init.rstrip("/") != out.rstrip("/") and not init.startswith(out.rstrip("/") + "/"):
        identity["init_checkpoint"] = init
    return identity

  def _train(self, train_input):
    """The chief records the run's identity, config and vocab in --output_dir (which then
    reads as a checkpoint directory); then every worker trains."""
    v = self.values
    if self.chief:
      run_identity.save(v.output_dir, {**self.identity, **self.adapter.notes(self)})
      checkpoints.write_config_and_vocab(v.output_dir, self.config, self.vocab_file)
    with train_input.naming_errors():
      self.trainer.train(train_input.dataset_fn, v.init_checkpoint, load_fn=train_input.load_fn,
                         evaluator=self._evaluator())
    if self.chief:
      self.adapter.after_training(self)

  def _export(self, serving):
    """With --export_dir, the chief saves `serving` as a SavedModel."""
    export_dir = self._flag("export_dir")
    if serving is None or not export_dir or not self.chief:
      return
    export.save(serving, export_dir)
    logging.info("Exported a raw-text SavedModel to %s", export_dir)

  # --- What adapters use --------------------------------------------------------

  @property
  def chief(self):
    """Whether this worker writes the shared outputs."""
    return self.outputs.chief

  def worker_path(self, name):
    """Where this worker writes its own file `name` (records): --output_dir on the chief,
    a scratch folder on the others."""
    return self.outputs.path(name)

  def shared_path(self, name):
    """--output_dir/name: a shared output, which only the chief writes."""
    return os.path.join(self.values.output_dir, name)

  def global_batch(self, size):
    """The smallest multiple of `size` that splits evenly over the replicas: evaluation
    and prediction run whole batches, padded with examples that are not real."""
    replicas = self.strategy.num_replicas_in_sync
    return size * replicas // math.gcd(size, replicas)

  def epoch_steps(self, num_examples, source):
    """(steps, warmup steps) of --num_train_epochs over `num_examples` at
    --train_batch_size, as the original counted them; `source` names the training data."""
    v = self.values
    self.steps_per_epoch = num_examples / v.train_batch_size
    steps = int(num_examples / v.train_batch_size * v.num_train_epochs)
    if steps < 1:
      raise ValueError(f"{source}: {num_examples} training example(s) make no step of "
                       f"--train_batch_size={v.train_batch_size} over "
                       f"--num_train_epochs={v.num_train_epochs}.")
    return steps, int(steps * v.warmup_proportion)

  def record_input(self, arrays, name="train.tf_record"):
    """Writes training feature arrays as records `name` (this worker's copy) and returns
    the TrainInput that reads them: shuffled, batched, trimmed to their lengths."""
    v = self.values
    path = self.worker_path(name)
    tfrecords.write_arrays(path, arrays)
    spec = tfrecords.array_spec(arrays)
    return TrainInput(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(v.train_batch_size), True, v.seed, ctx,
        shuffle_buffer=10000, length_multiple=self.length_multiple,
        bucket_by_length=self._flag("bucket_by_length", False)))

  def predict_records(self, arrays, name, batch, keep=(), fill=0.0):
    """Writes feature arrays (padded to whole batches of `batch`) as records `name`, then
    returns the model's outputs over them, in file order (Trainer.predict's keep, fill)."""
    path = self.worker_path(name)
    tfrecords.write_arrays(path, arrays)
    spec = tfrecords.array_spec(arrays)
    return self.trainer.predict(lambda ctx: pipeline.global_batches(
        path, spec, batch, ctx, length_multiple=self.length_multiple, by_length=True),
        keep=keep, fill=fill)

  def write_results(self, name, results, prefix="eval"):
    """Writes `results` to --output_dir/name in the original's `key = value` form (the
    chief), and logs them."""
    if self.chief:
      reports.write_eval_results(self.shared_path(name), results)
    for key in sorted(results):
      logging.info("%s %s = %s", prefix, key, results[key])


def strategy_from_flags(values):
  """Seeds (--seed), sets the precision policy (--dtype), then makes and describes the
  tf.distribute strategy of --strategy / --use_tpu and the TPU flags (multi-worker:
  TF_CONFIG's cluster, waited for up to --worker_timeout_seconds)."""
  distribution.set_seed(values.seed)
  distribution.set_precision(values.dtype)
  name = "tpu" if values.use_tpu else values.strategy
  tf_config = os.environ.get("TF_CONFIG")
  strategy = distribution.make_strategy(name, values.tpu_name or values.master,
                                        values.tpu_zone, values.gcp_project, tf_config,
                                        values.worker_timeout_seconds)
  if name == "multi_worker":
    app.joined_cluster(cluster.parse_tf_config(tf_config))
    signals.take_back_sigterm()
  distribution.describe(strategy)
  return strategy


def batch_length_multiple(multiple, jit_compile=False, strategy=None):
  """The trimming multiple to use: `multiple` (the flag), or chosen for the hardware.

  TPUs need one static shape (0). Unset, it is 16 under XLA, where every
  distinct length is a compilation; 8 on GPUs, whose tensor cores want
  multiples of 8; else 1, since exact lengths are fastest on CPUs (see
  docs/performance.md).
  """
  if isinstance(strategy, tf.distribute.TPUStrategy):
    if multiple:
      logging.info("TPU: batches keep --max_seq_length (--batch_length_multiple is ignored).")
    return 0
  if multiple is not None:
    return multiple
  if jit_compile:
    return 16
  return 8 if tf.config.list_logical_devices("GPU") else 1


def make_trainer(strategy, task, num_train_steps, num_warmup_steps, batch_size, values,
                 vocab_growth=None):
  """A Trainer for `task` configured from the original's and the runtime flags.

  Training, the weights it starts from (--init_checkpoint, or the checkpoint
  in --output_dir it resumes) are read now: one that is missing or does not
  fit the model stops the run before the script writes anything.
  """
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
          jit_compile=values.jit_compile, loss_scaling=values.dtype == "float16",
          vocab_growth=vocab_growth))
  if values.do_train:
    trainer.load_start(values.init_checkpoint)
  return trainer
