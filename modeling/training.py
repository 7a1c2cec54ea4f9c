"""The training loop of the scripts, under any tf.distribute strategy.

The Trainer only runs steps: the entry script gives it batches
(data/pipeline.py) and a task (e.g. modeling/classification.py) that builds
the model and turns a batch into its loss; no loss or model is defined here.
What a checkpoint holds (and restoring it, the input's position included) is
modeling/train_state.py's; evaluation and prediction are
modeling/prediction.py's, which the Trainer hands its model to.

One optimizer step:
  1. the task's loss denominators (mask weights, example counts) are summed
     over the global batch: all micro-batches, all replicas;
  2. each micro-batch's gradient of (its loss sums / those denominators) is
     computed and added up, then summed across replicas: exactly the gradient
     of the large batch's loss;
  3. the summed gradient is clipped to global norm `clip_norm` (measured
     unscaled) and applied once. float16 uses Keras' LossScaleOptimizer: the
     loss is multiplied by its dynamic scale, and a step whose gradients are
     not finite is skipped and halves the scale; a loss that is not finite
     stops the run (as without loss scaling), since no scale can fix it.
With jit_compile, XLA compiles the whole step (steps 1-3) as one function
under one-replica strategies, and each micro-batch's forward and backward
under several replicas; evaluation and prediction compile each replica's
forward. Fed one shape (full batches of a fixed length, as XLA and TPUs
want: `static_shapes`), each compiled function is traced and compiled once.
Host loops run `steps_per_loop` steps per call, save tf.train.Checkpoints
(model, optimizer slots, step, dropout RNG state, input position), log
progress, TensorBoard scalars and a CSV, and stop cleanly on SIGTERM.
"""

import dataclasses
import signal
import time

import tensorflow as tf
from absl import logging

from modeling import distribution, prediction, reports, train_state

SUM = tf.distribute.ReduceOp.SUM


@dataclasses.dataclass
class TrainConfig:
  """How long and how to train, and where to write."""
  output_dir: str
  num_train_steps: int
  global_batch_size: int
  steps_per_loop: int = 1000
  log_steps: int = 100
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  gradient_accumulation_steps: int = 1
  clip_norm: float = 1.0
  jit_compile: bool = False
  # Run the encoder on real tokens only (BertEncoder's pack_tokens), except under
  # XLA and on TPUs, which need static shapes.
  pack_tokens: bool = True
  loss_scaling: bool = False  # dynamic loss scaling, for float16
  loss_scale_growth_steps: int = 2000  # finite steps before the loss scale doubles
  # A vocab_growth.VocabGrowth applied to --init_checkpoint's weights (new word rows).
  vocab_growth: object = None


def static_shapes(jit_compile, strategy):
  """Whether steps are compiled for fixed shapes: under XLA (jit_compile), where each new
  shape is a compilation, and on TPUs, which run one static shape."""
  return jit_compile or isinstance(strategy, tf.distribute.TPUStrategy)


def packs_tokens(config, strategy):
  """Whether the encoder runs on real tokens only: as config.pack_tokens asks, but
  never with static shapes (XLA, TPUs)."""
  return config.pack_tokens and not static_shapes(config.jit_compile, strategy)


def compiles_whole_step(strategy):
  """Whether jit_compile compiles the whole per-replica step as one XLA function: under
  the default and one-device strategies (one replica, no cross-replica merge_call)."""
  return isinstance(strategy, tf.distribute.OneDeviceStrategy) or (
      strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy())


class Trainer:
  """Builds a task's model under a strategy; trains, evaluates, predicts, saves.

  The optimizer is built when training first needs it (train, restore for
  training, load_start), so evaluation or prediction alone builds none.

  Args:
    strategy: a tf.distribute strategy.
    task: e.g. pretraining.PretrainingTask.
    make_optimizer: callable(names: dict variable path -> original name) -> optimizer.
    config: TrainConfig.
  """

  def __init__(self, strategy, task, make_optimizer, config):
    self.strategy, self.task, self.config = strategy, task, config
    self.static_shapes = static_shapes(config.jit_compile, strategy)
    replicas = strategy.num_replicas_in_sync
    if config.global_batch_size % (replicas * config.gradient_accumulation_steps):
      raise ValueError(
          f"The global batch size ({config.global_batch_size}) must divide evenly into "
          f"{replicas} replica(s) x {config.gradient_accumulation_steps} micro-batch(es) "
          "(gradient accumulation steps).")
    with strategy.scope():
      self.model = task.build_model(pack_tokens=packs_tokens(config, strategy))
    self.state = train_state.TrainState(strategy, self.model, make_optimizer, config)
    # Under jit_compile, XLA compiles the whole per-replica step (forward, backward,
    # clipping, loss scaling, update) as one function where the strategy allows it;
    # several replicas synchronize through merge_call, which cannot sit inside a
    # compiled function, so there each micro-batch's forward and backward is
    # compiled. A TPU compiles everything strategy.run runs, jit_compile or not.
    jit = config.jit_compile and not isinstance(strategy, tf.distribute.TPUStrategy)
    whole = jit and compiles_whole_step(strategy)
    self._compiled_step = (tf.function(self._update, jit_compile=True, autograph=False)
                           if whole else None)
    self._micro_step = (tf.function(self._micro_gradients, jit_compile=True, autograph=False)
                        if jit and not whole else self._micro_gradients)
    self.predictor = prediction.Predictor(strategy, task, self.model, jit, self.static_shapes)
    self._stop_requested = False
    self.chief = distribution.is_chief(strategy)

  # --- Checkpoint state (modeling/train_state.py) -----------------------------

  def build_optimizer(self):
    """Builds the optimizer (and loss scaler) now if not yet built; returns it.

    Training builds it; evaluation and prediction never do.
    """
    return self.state.build_optimizer()

  @property
  def optimizer(self):
    return self.build_optimizer()

  @property
  def scaler(self):
    """The dynamic loss scaler around the optimizer (built with it)."""
    self.build_optimizer()
    return self.state.scaler

  @property
  def global_step(self):
    return int(self.state.step.numpy())

  @property
  def loss_scale(self):
    """The current dynamic loss scale (used only with loss_scaling)."""
    return float(self.scaler.dynamic_scale.numpy())

  def restore(self, init_checkpoint=None, iterator=None, for_training=True,
              heads_required=False):
    """Resumes from output_dir's latest checkpoint, else loads init_checkpoint.

    for_training=False (evaluation or prediction alone) builds no optimizer and
    reads only the model and the step; with heads_required, init_checkpoint must then
    hold the task's head too (ValueError). Returns a description for the log.
    """
    return self.state.restore(init_checkpoint, iterator, for_training, heads_required)

  def load_start(self, init_checkpoint=None):
    """Reads now the weights train() would start from, so that a checkpoint that is
    missing, unreadable or of another model stops the run before it writes anything.

    Resuming, output_dir's latest checkpoint is restored (train() restores it
    again, with the input position); else init_checkpoint is loaded, and
    train() keeps it instead of reading it twice.
    """
    self.state.load_start(init_checkpoint)

  # --- One step --------------------------------------------------------------

  def _micro_gradients(self, batch, denominators, scale):
    with tf.GradientTape() as tape:
      sums, metrics = self.task.numerators(self.model, batch, training=True)
      loss, _ = self.task.losses(sums, denominators)
      scaled = loss * scale
    variables = self.model.trainable_variables
    grads = tape.gradient(scaled, variables)
    # Dense float32 gradients (embedding lookups give IndexedSlices), ready to sum.
    grads = [tf.zeros_like(v) if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32)
             for g, v in zip(grads, variables)]
    return grads, sums, metrics

  def _scale(self):
    return (tf.convert_to_tensor(self.scaler.dynamic_scale) if self.config.loss_scaling
            else tf.constant(1.0))

  def _replica_gradients(self, batch):
    """Replica: the gradients of the global batch's (scaled) loss, summed over
    micro-batches and replicas; the summed loss and metric numerators; denominators."""
    context = tf.distribute.get_replica_context()
    denominators = context.all_reduce(SUM, self.task.denominators(batch))
    k = self.config.gradient_accumulation_steps
    micro = [{name: part[i] for name, part in
              ((n, tf.split(v, k, axis=0)) for n, v in batch.items())} for i in range(k)]
    scale = self._scale()
    grads, sums, metrics = self._micro_step(micro[0], denominators, scale)
    for i in range(1, k):
      g, s, m = self._micro_step(micro[i], denominators, scale)
      grads = [a + b for a, b in zip(grads, g)]
      sums = {n: sums[n] + s[n] for n in sums}
      metrics = {n: metrics[n] + m[n] for n in metrics}
    grads, sums, metrics = context.all_reduce(SUM, (grads, sums, metrics))
    return grads, sums, metrics, denominators

  # Plain Python: no tensor-dependent control flow to convert (nor in the tasks and
  # models it calls), so AutoGraph leaves it as written, as XLA and TPUs run it.
  @tf.autograph.experimental.do_not_convert
  def _replica_step(self, batch):
    """Replica: one optimizer step on its share of the global batch; (values, finite,
    loss_finite): finite when the gradients and the loss are."""
    if self._compiled_step is not None:
      return self._compiled_step(batch)
    return self._update(batch)

  def _update(self, batch):
    grads, sums, metrics, denominators = self._replica_gradients(batch)
    scale = self._scale()
    loss, parts = self.task.losses(sums, denominators)
    scaled_norm = tf.linalg.global_norm(grads)
    grad_norm = scaled_norm / scale
    loss_finite = tf.math.is_finite(loss)
    finite = tf.math.is_finite(grad_norm) & loss_finite
    # The scale is a power of two, so clipping the scaled gradients to
    # clip_norm * scale is exactly clipping the unscaled ones to clip_norm. Within the
    # norm, clipping multiplies by exactly 1: that pass over every gradient is skipped.
    limit = self.config.clip_norm * scale
    grads = tf.cond(scaled_norm > limit,
                    lambda: tf.clip_by_global_norm(grads, limit, use_norm=scaled_norm)[0],
                    lambda: grads)
    learning_rate = self.optimizer.learning_rate  # the rate this update uses
    variables = self.model.trainable_variables
    if self.config.loss_scaling:
      self.scaler.apply(grads, variables)  # unscales; skips non-finite steps
    else:
      self.optimizer.apply(grads, variables)
    values = {"loss": loss, **parts, **self.task.metric_values(metrics, denominators),
              "grad_norm": grad_norm, "learning_rate": tf.cast(learning_rate, tf.float32)}
    return values, finite, loss_finite

  def summed_gradients(self, dataset_fn):
    """{variable path: numpy gradient} of the first global batch's loss: summed over
    micro-batches and replicas and unscaled, as a step has them before clipping.
    Applies no update (for tests and debugging)."""
    self.build_optimizer()  # the loss scale
    batch = next(iter(self.strategy.distribute_datasets_from_function(dataset_fn)))

    @tf.function
    def run(batch):
      grads = self.strategy.run(lambda b: self._replica_gradients(b)[0], args=(batch,))
      return [self.strategy.experimental_local_results(g)[0] / self._scale() for g in grads]
    return {v.path: g.numpy() for v, g in zip(self.model.trainable_variables, run(batch))}

  def _train_loop(self, iterator, steps):
    """Runs `steps` steps; returns the values summed over the finite steps (those loss
    scaling does not skip), the first step whose gradients or loss are not finite, and
    the first whose loss is not (each -1 if none)."""
    self.build_optimizer()  # its variables exist before the loop is traced
    return self._train_loop_graph(iterator, steps)

  @tf.function(autograph=False)
  def _train_loop_graph(self, iterator, steps):

    def one_step():
      # The step this one tries, read before it: a skipped step does not advance it.
      attempt = self.optimizer.iterations + 1
      values, finite, loss_finite = self.strategy.run(self._replica_step,
                                                      args=(next(iterator),))
      first = self.strategy.experimental_local_results
      finite, loss_finite = first(finite)[0], first(loss_finite)[0]
      # A step loss scaling skips is no step: its values (an infinite norm) count nowhere.
      values = {k: self.strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
                for k, v in values.items()}
      values = {k: tf.where(finite, v, tf.zeros_like(v)) for k, v in values.items()}
      none = tf.constant(-1, tf.int64)
      return values, tf.where(finite, none, attempt), tf.where(loss_finite, none, attempt)

    # One traced step serves every iteration: tracing the model, its gradients
    # and the optimizer (and optimizing that graph) is seconds of a run's start.
    step = tf.function(one_step, autograph=False)
    outputs = step.get_concrete_function().structured_outputs[0]

    def body(i, totals, first_bad, first_bad_loss):
      values, bad, bad_loss = step()
      totals = {k: totals[k] + values[k] for k in totals}
      return (i + 1, totals, tf.where(first_bad < 0, bad, first_bad),
              tf.where(first_bad_loss < 0, bad_loss, first_bad_loss))

    totals = {k: tf.zeros(v.shape, v.dtype) for k, v in outputs.items()}
    none = tf.constant(-1, tf.int64)
    _, totals, first_bad, first_bad_loss = tf.while_loop(
        lambda i, *_: i < steps, body, (tf.constant(0, steps.dtype), totals, none, none))
    return totals, first_bad, first_bad_loss

  # --- The host loop -----------------------------------------------------------

  def train(self, dataset_fn, init_checkpoint=None, load_fn=None, evaluator=None, source=""):
    """Trains to num_train_steps (or until `evaluator` stops it); returns the final step.

    dataset_fn(input_context) -> per-replica batched tf.data.Dataset (repeating).
    load_fn(dataset) -> dataset: per-batch loading (cached features read from
    a file) applied once the input is positioned, so the batches a resumed run
    skips are never loaded.
    evaluator: a modeling/periodic_eval.PeriodicEvaluation, called between device
    calls at its steps; a checkpoint is saved right after each of its evaluations.
    source: what the input reads (TrainState.positioned_input).
    """
    config = self.config
    iterator, description, save_position, signature = self.state.positioned_input(
        dataset_fn, init_checkpoint, load_fn, source)
    logging.info("Model %s.", description)
    checkpoint = self.state.checkpoint(iterator if save_position else None, signature)
    manager = self.state.manager(checkpoint)
    # Set back at the end: TensorFlow's preemption handler installs its own (multi-worker).
    previous = signal.getsignal(signal.SIGTERM)
    preemption = distribution.preemption_handler(self.strategy, manager, self._exit_on_sigterm)
    step, seconds_per_step = self.global_step, None
    # Sequences, not examples: a multiple-choice question is one per ending.
    sequences = config.global_batch_size * getattr(self.task, "sequences_per_example", 1)
    log = reports.StepLog(config.output_dir, config.num_train_steps, sequences, step, self.chief)
    if evaluator is not None:
      evaluator.start(step)
    if preemption is None:
      signal.signal(signal.SIGTERM, self._on_sigterm)
    try:
      while step < config.num_train_steps and not (evaluator and evaluator.stopped):
        n = self._steps_until_boundary(step, seconds_per_step,
                                       evaluator.every if evaluator else None)
        call_start, before = time.time(), step
        totals, first_bad, first_bad_loss = self._train_loop(iterator, tf.constant(n))
        step = self.global_step
        if log.pending_steps or n > 1:  # the first call includes tracing: not a rate
          seconds_per_step = (time.time() - call_start) / n
        # Loss scaling skips a step whose gradients overflow and retries with half the
        # scale; a loss that is not finite is not the scale's doing, and would be
        # skipped forever.
        bad = int(first_bad_loss) if config.loss_scaling else int(first_bad)
        if bad >= 0:
          precise = self.state.model.compute_dtype == "float32"
          raise ValueError(f"The loss became NaN or infinite at step {bad}; "
                           "stopping. Try a lower --learning_rate"
                           f"{'' if precise else ' or --dtype=float32'}.")
        # A call whose steps were all skipped is at the step already logged, saved and
        # evaluated: nothing of it is done again.
        if step > before:
          log.add(totals, step - before)
          last = step == config.num_train_steps
          save = step % config.save_checkpoints_steps == 0 or last
          evaluating = evaluator is not None and evaluator.due(step, config.num_train_steps)
          if evaluating:
            started = time.time()
            last = evaluator(self.state, step) or last  # True: early stopping ends training
            log.mark_time += time.time() - started  # the logged rate counts training alone
            save = True
          if step % config.log_steps == 0 or last:
            log.write(step)
          if save:
            started = time.time()
            manager.save(checkpoint_number=step)
            if evaluating:  # the checkpoint an evaluation adds is its cost, not the steps'
              log.mark_time += time.time() - started
        if preemption is not None:  # named by the step, as every checkpoint
          preemption.save_checkpoint_if_preempted(checkpoint_number=self.global_step)
        elif self._stop_requested:
          if log.pending_steps:  # the steps since the last row: a resumed run goes on after them
            log.write(step)
          manager.save(checkpoint_number=step)
          self._exit_on_sigterm()
    finally:
      if previous is not None:
        signal.signal(signal.SIGTERM, previous)
      log.writer.flush()
    return step

  def _steps_until_boundary(self, step, seconds_per_step=None, eval_every=None):
    """Steps for the next device call: up to the next log, checkpoint, evaluation or the
    end, at most steps_per_loop, and at most about 10 seconds of work so SIGTERM is
    answered quickly."""
    c = self.config
    boundaries = [c.steps_per_loop, c.log_steps - step % c.log_steps,
                  c.save_checkpoints_steps - step % c.save_checkpoints_steps,
                  c.num_train_steps - step]
    if eval_every:
      boundaries.append(eval_every - step % eval_every)
    # Until a step has been timed, one step per call.
    boundaries.append(int(10.0 / seconds_per_step) if seconds_per_step else 1)
    return max(1, min(boundaries))

  def _on_sigterm(self, signum, frame):
    logging.warning("SIGTERM received: the run will save a checkpoint and stop.")
    self._stop_requested = True

  def _exit_on_sigterm(self):
    """Once the checkpoint of a SIGTERM is saved: exit with 128 + 15, as killed by it."""
    logging.info("SIGTERM: saved a checkpoint at step %d; exiting.", self.global_step)
    raise SystemExit(143)

  # --- Evaluation and prediction (modeling/prediction.py) ----------------------

  def evaluate(self, dataset_fn, max_steps=None):
    """The task's eval results over the dataset (at most max_steps batches), with the
    global step."""
    results = self.predictor.evaluate(dataset_fn, max_steps)
    results["global_step"] = self.global_step
    return results

  def predict(self, dataset_fn, keep=(), fill=0.0):
    """Model outputs for a dataset of whole global batches (see Predictor.predict)."""
    return self.predictor.predict(dataset_fn, keep, fill)
