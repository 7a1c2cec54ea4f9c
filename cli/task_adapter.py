"""A script's task adapter: what it must say, and what its steps are given.

A training script subclasses TaskAdapter with what its task does its own way
(which flags it needs, what defines a run, how it reads its files, builds its
records and model, scores and writes its outputs) and hands the class to the
Runner (cli/runner.py), whose docstring gives the order of the steps. The
adapter is made from the script's frozen settings (cli/settings.py) and keeps
nothing that a step sets: each step takes what earlier steps returned. The
types here are what those steps take and return: TrainSteps, TrainInput, the
Worker (the strategy and where this worker writes) and the Run (the settings,
the model files, the Worker and the Trainer), and epoch_steps counts a
fine-tuning run's steps.
"""

import contextlib
import dataclasses
import math
import os
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from cli import model_files
from cli.flags import ACTIONS
from cli.settings import RunSettings
from data import pipeline, tfrecords
from modeling import distribution, reports, selection, training


@dataclasses.dataclass(frozen=True)
class TrainSteps:
  """How long a run trains: optimizer steps, the warming-up ones among them, and the steps
  of an epoch (None: the run counts no epochs; --eval_every_epochs needs them)."""
  steps: int
  warmup: int
  per_epoch: Optional[float] = None


@dataclasses.dataclass
class TrainInput:
  """What a run trains on.

  dataset_fn(input_context) -> per-replica batches, repeating; load_fn:
  per-batch loading applied after a resumed run's skip (Trainer.train);
  naming_errors: a context manager that turns a damaged file met while
  reading into an error naming it; source: what it reads, for a resume to tell
  another input (TrainState.positioned_input).
  """
  dataset_fn: Callable
  load_fn: Optional[Callable] = None
  naming_errors: Callable = contextlib.nullcontext
  source: str = ""


@dataclasses.dataclass(frozen=True)
class Worker:
  """Where this worker runs and writes (step 5): the strategy, its outputs (the chief's
  are --output_dir), the batch trimming multiple, and whether steps are compiled for one
  shape (XLA, TPUs)."""
  strategy: tf.distribute.Strategy
  outputs: distribution.WorkerOutputs
  length_multiple: int
  static_shapes: bool

  @property
  def chief(self):
    """Whether this worker writes the shared outputs."""
    return self.outputs.chief

  def path(self, name):
    """Where this worker writes its own file `name` (records): --output_dir on the chief,
    a scratch folder on the others."""
    return self.outputs.path(name)

  def shared_path(self, name):
    """--output_dir/name: a shared output, which only the chief writes."""
    return os.path.join(self.outputs.output_dir, name)

  def global_batch(self, size):
    """The smallest multiple of `size` that splits evenly over the replicas: evaluation
    and prediction run whole batches, padded with examples that are not real."""
    replicas = self.strategy.num_replicas_in_sync
    return size * replicas // math.gcd(size, replicas)


@dataclasses.dataclass(frozen=True)
class Run:
  """What the adapter's steps take once the Trainer is made (step 8 on)."""
  settings: RunSettings
  files: model_files.ModelFiles
  worker: Worker
  trainer: training.Trainer

  def record_input(self, arrays, name="train.tf_record"):
    """Writes training feature arrays as records `name` (this worker's copy) and returns
    the TrainInput that reads them: shuffled, batched, trimmed to their lengths."""
    s, path = self.settings, self.worker.path(name)
    tfrecords.write_arrays(path, arrays)
    spec = tfrecords.array_spec(arrays)
    return TrainInput(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(s.train_batch_size), True, s.seed, ctx,
        shuffle_buffer=10000, length_multiple=self.worker.length_multiple,
        bucket_by_length=s.bucket_by_length),
        source=f"{name}: {len(next(iter(arrays.values())))} records")

  def predict_records(self, arrays, name, batch, keep=(), fill=0.0):
    """Writes feature arrays (padded to whole batches of `batch`) as records `name`, then
    returns the model's outputs over them, in file order (Trainer.predict's keep, fill)."""
    path = self.worker.path(name)
    tfrecords.write_arrays(path, arrays)
    spec = tfrecords.array_spec(arrays)
    return self.trainer.predict(lambda ctx: pipeline.global_batches(
        path, spec, batch, ctx, length_multiple=self.worker.length_multiple, by_length=True),
        keep=keep, fill=fill)

  def write_results(self, name, results, prefix="eval"):
    """Writes `results` to --output_dir/name in the original's `key = value` form (the
    chief), and logs them."""
    if self.worker.chief:
      reports.write_eval_results(self.worker.shared_path(name), results)
    for key in sorted(results):
      logging.info("%s %s = %s", prefix, key, results[key])


class TaskAdapter:
  """What one script's task does its own way, from its frozen `settings` alone.

  The Runner makes the adapter once the required flags are given, then calls its
  methods in the order cli/runner.py's docstring gives; each takes what earlier
  steps returned.
  """

  actions = ACTIONS  # the script's --do_* flags
  exports = True  # whether it has --export_dir (which alone is an action too)
  tokens = ("[UNK]", "[CLS]", "[SEP]")  # the vocab must hold these
  vocab_required = True
  # Whether --max_seq_length and the starting checkpoint belong to the run's identity.
  length_and_start_define_run = True
  # Whether evaluating or predicting without training needs the task's head trained (in
  # --init_checkpoint or --output_dir), rather than letting it start fresh.
  trained_head_required = True
  # Flags that shape the model's inputs without defining the model (--doc_stride...): run.json
  # records them beside the identity, never compared, so that a later run that does not train
  # takes them when not given (cli/settings.py), as it takes the identity's flags.
  input_flags = ()
  # The --do_* flag that makes read() load the dev data `evaluate` scores.
  dev_action = "do_eval"
  script = None  # the script's file name: its task in modeling/selection.SCRIPT_TASKS

  def __init__(self, settings):
    """Step 1: checks the script's own flags (ValueError naming the flag); keeps `settings` and
    what they define (a subclass's attributes, set here and never changed)."""
    self.settings = settings

  @classmethod
  def required_flags(cls, settings):
    """Step 1, before the adapter is made: {flag name: value} of the flags the script cannot
    run without."""
    return {}

  def headline_metric(self):
    """The metric --best_metric defaults to (modeling/selection.py)."""
    return selection.script_metric(self.script)

  def adjust_config(self, config):
    """Step 2: the config to build the model from (checked against the script's flags)."""
    return config

  def define(self, config):
    """Step 4: (identity, defined): what defines the run beside --max_seq_length and the starting
    checkpoint, a dict stored in run.json and compared when --output_dir is used again;
    and what read() needs of it."""
    return {}, None

  def read(self, defined, files, worker):
    """Step 6: reads and checks every data file the run will use (training and held-out); returns
    them as the later steps take them (`data`). files: ModelFiles; worker: Worker."""

  def train_steps(self, data):
    """Step 8, training only: the TrainSteps of training on `data` (epoch_steps counts them
    by epoch)."""
    raise NotImplementedError

  def build_task(self, config, data):
    """Step 8: the modeling task (model, losses, metrics) to train or run."""
    raise NotImplementedError

  def train_input(self, data, run):
    """Step 9, training only: the TrainInput; run.record_input(arrays) makes one from
    feature arrays."""
    raise NotImplementedError

  def notes(self, run):
    """Step 9, the chief before training: facts stored in run.json beside the identity,
    for readers; never compared."""
    return {}

  def after_training(self, run):
    """Step 9: the chief's work once training has finished (not after a stop on SIGTERM)."""

  def evaluate(self, data, run):
    """Step 9 with --do_eval, and at each evaluation during training: scores the dev data,
    the results to write to eval_results.txt."""
    raise NotImplementedError

  def predict(self, data, run):
    """Step 9 with --do_predict: predicts and writes the outputs (the chief); returns what serving
    takes of it (`predicted`), or None."""

  def serving(self, data, run, predicted):
    """Step 9, last: the raw-text module to save with --export_dir (modeling/export.py), or None;
    `predicted`: what predict returned (None without --do_predict)."""
    return None


def epoch_steps(settings, num_examples, source):
  """The TrainSteps of settings.num_train_epochs over `num_examples` at
  --train_batch_size, as the original counted them; `source` names the training data."""
  s = settings
  steps = int(num_examples / s.train_batch_size * s.num_train_epochs)
  if steps < 1:
    raise ValueError(f"{source}: {num_examples} training example(s) make no step of "
                     f"--train_batch_size={s.train_batch_size} over "
                     f"--num_train_epochs={s.num_train_epochs}.")
  return TrainSteps(steps, int(steps * s.warmup_proportion), num_examples / s.train_batch_size)
