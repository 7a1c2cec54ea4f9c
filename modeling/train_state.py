"""What a training checkpoint holds, and how it is saved and restored.

A checkpoint of the scripts holds four entries: `model` (the model's
variables under their original names), `optimizer` (the global step and the
Adam moments of every trainable variable), `state` (the dynamic loss scale
and the dropout RNG states) and, under the default strategy, `iterator` (the
input's position; under other strategies positioned_input skips the batches
already trained on instead). The optimizer is built only when something
trains: a run that only evaluates or predicts restores the model and the step
from a training checkpoint and leaves the moments unread.
"""

import hashlib

import keras
import tensorflow as tf
from absl import logging

from modeling import checkpoints, distribution


class TrainState:
  """A model's checkpoint state: its variables, the optimizer (built on demand), the step.

  Args:
    strategy: the tf.distribute strategy the model was built under.
    model: a built task model.
    make_optimizer: callable(names: dict variable path -> original name) -> optimizer.
    config: training.TrainConfig (output_dir, keep_checkpoint_max,
      loss_scale_growth_steps are read).
  """

  def __init__(self, strategy, model, make_optimizer, config):
    self.strategy, self.model, self.config = strategy, model, config
    self._make_optimizer = make_optimizer
    self.table = checkpoints.variable_map(model)
    mapped = {id(v) for v in self.table.values()}
    # The rest are dropout RNG states; their Keras names depend on creation
    # order across the process, so they are keyed by their order in the model.
    others = [v for v in model.variables if id(v) not in mapped]
    self.model_state = {f"model_state_{i}": v for i, v in enumerate(others)}
    self.optimizer = self.scaler = None
    self._step = None  # the step variable while there is no optimizer
    self._initialized = None  # (init_checkpoint, description) once load_start has loaded it

  def build_optimizer(self):
    """Builds the optimizer and its loss scaler once; returns the optimizer."""
    if self.optimizer is None:
      with self.strategy.scope():
        optimizer = self._make_optimizer({v.path: n for n, v in self.table.items()})
        # Built whatever the dtype, so every checkpoint holds the loss scale
        # and a float32 run can resume in float16.
        scaler = keras.optimizers.LossScaleOptimizer(
            optimizer, dynamic_growth_steps=self.config.loss_scale_growth_steps)
        scaler.build(self.model.trainable_variables)
      self.optimizer, self.scaler = optimizer, scaler
    return self.optimizer

  @property
  def step(self):
    """The global step variable: the optimizer's iterations, or one of its own without
    an optimizer (restored from a checkpoint all the same)."""
    if self.optimizer is not None:
      return self.optimizer.iterations
    if self._step is None:
      with self.strategy.scope():
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    return self._step

  def checkpoint(self, iterator=None, input_signature=None):
    """A tf.train.Checkpoint of the state (and of `iterator`'s position, and the
    input_signature of what it reads: positioned_input's)."""
    slots = {"global_step": self.step}
    state = dict(self.model_state)
    if self.optimizer is not None:
      for name, var in self.table.items():
        if var.trainable:
          slots[f"{name}/adam_m"], slots[f"{name}/adam_v"] = self.optimizer.slots(var)
      state.update(loss_scale=self.scaler.dynamic_scale, good_steps=self.scaler.step_counter)
    objects = {"model": checkpoints.NamedVariables(self.table),
               "optimizer": checkpoints.NamedVariables(slots, "optimizer"),
               "state": checkpoints.NamedVariables(state, "state")}
    if iterator is not None and not isinstance(self.strategy, tf.distribute.TPUStrategy):
      objects["iterator"] = iterator  # resume exactly where the input stopped
    if input_signature is not None:  # written, never restored: _saved_signature reads it
      objects[_SIGNATURE] = tf.Variable(input_signature, trainable=False)
    return tf.train.Checkpoint(**objects)

  def manager(self, checkpoint):
    """The CheckpointManager that saves `checkpoint` in output_dir, numbered by step."""
    # Every worker takes part in saving; those other than the chief write aside.
    directory = distribution.worker_dir(self.strategy, self.config.output_dir)
    return tf.train.CheckpointManager(checkpoint, directory, self.config.keep_checkpoint_max,
                                      step_counter=self.step)

  def restore(self, init_checkpoint=None, iterator=None, for_training=True,
              heads_required=False):
    """Resumes from output_dir's latest checkpoint, else loads init_checkpoint.

    for_training builds the optimizer and requires every saved object to
    match; otherwise the optimizer's moments and the loss scale stay unread.
    init_checkpoint may lack the task's head (it starts fresh) unless heads_required
    (evaluation or prediction alone of a fine-tuning task: ValueError).
    Returns a description of what was loaded, for the log.
    """
    if for_training:
      self.build_optimizer()
    latest = tf.train.latest_checkpoint(self.config.output_dir)
    if latest:
      try:
        status = self.checkpoint(iterator).restore(latest)
        if for_training:
          status.assert_existing_objects_matched()  # every object given is in it
        status.expect_partial()  # what else it holds (an iterator not given) stays unread
      # A cut .data file raises IndexError or an OpError inside TensorFlow; a model of
      # other layers, AssertionError; of other sizes, ValueError (or an InvalidArgumentError
      # naming the shapes). Removing the files helps only the unreadable one.
      except (tf.errors.OpError, IndexError, AssertionError, ValueError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if _mismatch(e):
          raise ValueError(f"{latest}: the checkpoint to resume from does not fit this model "
                           f"({reason}); it was trained with another bert_config.json (see "
                           "the one in --output_dir). Pass that config, or train into a new "
                           "output directory.") from None
        raise ValueError(f"{latest}: the checkpoint to resume from cannot be read ({reason}). "
                         "Remove its files to resume from an earlier one, or train into a "
                         "new output directory.") from None
      return f"resumed from {latest} at step {int(self.step.numpy())}"
    if init_checkpoint:
      if self._initialized and self._initialized[0] == init_checkpoint:
        return self._initialized[1]  # loaded by load_start, untouched since
      try:  # evaluating or predicting alone, a head left untrained would score noise
        ckpt = checkpoints.load_checkpoint(self.model, init_checkpoint,
                                           allow_new_heads=not heads_required,
                                           growth=self.config.vocab_growth)
      except ValueError as e:
        if not heads_required:
          raise
        raise ValueError(f"{e} Without --do_train every weight, the task's head included, "
                         "comes from --init_checkpoint: give a fine-tuned run's, or train.")
      return f"initialized from {ckpt.path} ({ckpt.format})"
    return "initialized from scratch"

  def load_start(self, init_checkpoint=None):
    """Reads now the weights training would start from (see Trainer.load_start)."""
    if tf.train.latest_checkpoint(self.config.output_dir):
      self.restore()
    elif init_checkpoint:
      self._initialized = (init_checkpoint, self.restore(init_checkpoint))

  def positioned_input(self, dataset_fn, init_checkpoint=None, load_fn=None, source=""):
    """Restores the state for training (restore()); returns the training iterator,
    positioned where a resumed run stopped, restore()'s description, whether the
    iterator's state belongs in the checkpoints, and the input's signature for them.

    source: what the input reads (its files and their records' lengths), whose hash is
    the signature. A run resumed on another input (the paper's second phase: the same run
    on records of 512 tokens) starts that input from its beginning, as the original's
    runs always did, rather than restore or skip to a position in the old one. The batches'
    padding is not part of it: the same records batched otherwise resume in place.

    dataset_fn(input_context) -> per-replica batched tf.data.Dataset; load_fn(dataset)
    -> dataset, applied after positioning (see Trainer.train). Under the default
    strategy the iterator is a plain tf.data one and its state goes into the
    checkpoint. Distributed iterators (every other strategy, even with one replica)
    cannot be checkpointed, so there the input skips the batches the restored steps
    consumed (reproducing the order when the shuffle is seeded), and load_fn comes
    after the skip; so does a run under the default strategy resuming a checkpoint
    that holds no input position (one written under another strategy), whose own
    checkpoints then hold none either (a skipped pipeline's state would not fit the
    unskipped one a later resume builds).
    """
    load = load_fn or (lambda dataset: dataset)
    dataset = self.strategy.distribute_datasets_from_function(
        lambda context: load(dataset_fn(context)))
    signature = hashlib.sha256(source.encode()).hexdigest()[:16]
    latest = tf.train.latest_checkpoint(self.config.output_dir)
    saved = _saved_signature(latest) if latest else None
    changed = saved not in (None, signature)  # checkpoints from before signatures: the same
    if changed:
      logging.warning("The training input is not the one %s was trained on (other files or "
                      "record lengths): training goes on from its step on the new input, from its "
                      "start.", latest)
    if isinstance(dataset, tf.data.Dataset) and (not latest or changed
                                                 or _holds_input_position(latest)):
      iterator = iter(dataset)  # no iterator made before: none reads in vain
      return (iterator, self.restore(init_checkpoint, None if changed else iterator), True,
              signature)
    description = self.restore(init_checkpoint)
    done = 0 if changed else int(self.step.numpy())

    def positioned(context):
      per_step = context.num_replicas_in_sync // context.num_input_pipelines
      return load(dataset_fn(context).skip(done * per_step))
    return (iter(self.strategy.distribute_datasets_from_function(positioned)), description,
            False, signature)

  def weights_checkpoint(self):
    """A tf.train.Checkpoint of the model's variables and the step alone (no optimizer
    moments): what --output_dir/best/ keeps. Readable as any of our checkpoints."""
    return tf.train.Checkpoint(
        model=checkpoints.NamedVariables(self.table),
        optimizer=checkpoints.NamedVariables({"global_step": self.step}, "optimizer"))

  def load_weights(self, prefix):
    """Restores the model and the step written by weights_checkpoint() at `prefix`."""
    try:
      self.weights_checkpoint().read(prefix).assert_existing_objects_matched().expect_partial()
    except (tf.errors.OpError, IndexError, AssertionError) as e:
      reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
      raise ValueError(f"{prefix}: the best checkpoint cannot be read ({reason}).") from None


_SIGNATURE = "input_signature"


def _mismatch(error):
  """Whether a restore failed because the checkpoint is of another model (its variables or
  their shapes), rather than because its files cannot be read."""
  if isinstance(error, (AssertionError, ValueError)):
    return True
  return (isinstance(error, tf.errors.InvalidArgumentError)
          and "shape" in str(error).lower() and "does not match" in str(error).lower())


def _saved_signature(path):
  """The input signature the checkpoint at `path` was written with (None: none recorded)."""
  try:
    return tf.train.load_variable(path, f"{_SIGNATURE}/.ATTRIBUTES/VARIABLE_VALUE").decode()
  except (tf.errors.OpError, ValueError):
    return None


def _holds_input_position(path):
  """Whether the checkpoint at `path` holds a tf.data iterator's state."""
  try:
    return any(name.startswith("iterator/") for name, _ in tf.train.list_variables(path))
  except (tf.errors.OpError, ValueError):
    return True  # unreadable: restore() names the file
