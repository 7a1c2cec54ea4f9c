"""Evaluation and prediction: a task model's forward passes over a dataset, under a strategy.

Evaluation sums the task's loss and metric numerators and denominators over
every replica and batch and reports the task's eval results; prediction
gathers the model's outputs in dataset order. Both run an inference copy of the
model (modeling/inference.py: its weights in the compute dtype, attention's
joined), loaded from the model's weights at the start of every pass. Under jit_compile each
replica's forward is XLA-compiled; each step is traced once per input layout.
With one replica, batches sorted by length are joined into fewer, larger calls
(see JOIN_LENGTH): short sequences in batches of 8 leave a CPU mostly waiting
on the per-call overhead.
"""

import numpy as np
import tensorflow as tf

from data import pipeline
from modeling import inference

SUM = tf.distribute.ReduceOp.SUM

# Sorted prediction batches of B rows are joined while a call holds at most
# B * JOIN_LENGTH token positions: no more than one batch of the scripts' default
# 128-token sequences, so memory stays within what the batch size already asks.
# Measured (MiniLM, CoLA dev, batches of 8, 2 CPU cores): see benchmarks/speed/finetuning.py.
JOIN_LENGTH = 128


class Predictor:
  """Runs a task model forward for evaluation and prediction; holds no optimizer.

  Args:
    strategy: a tf.distribute strategy.
    task: the task whose model this is (numerators, denominators, losses, eval_results).
    model: the task's built model.
    jit_compile: XLA-compile each replica's forward (not on TPUs, which compile anyway).
    static_shapes: inputs are full batches of one shape (XLA, TPUs).
  """

  def __init__(self, strategy, task, model, jit_compile=False, static_shapes=False):
    self.strategy, self.task, self.model = strategy, task, model
    self._jit = jit_compile
    self.static_shapes = static_shapes
    self.traced = {}  # evaluation and prediction steps, by input signature
    self._copy = None  # the inference copy, made by the first pass

  def _inference_model(self):
    """The inference copy with the model's current weights (made on the first call)."""
    if self._copy is None:
      with self.strategy.scope():
        self._copy = inference.inference_copy(self.model)
    else:
      inference.load_weights(self._copy, self.model)
    return self._copy

  def evaluate(self, dataset_fn, max_steps=None):
    """The task's eval results over the dataset (at most max_steps batches)."""
    dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
    model = self._inference_model()

    local = self._compiled(lambda batch: (
        *self.task.numerators(model, batch, training=False), self.task.denominators(batch)))

    @tf.autograph.experimental.do_not_convert
    def replica(batch):
      context = tf.distribute.get_replica_context()
      sums, metrics, denominators = context.all_reduce(SUM, local(batch))
      loss, _ = self.task.losses(sums, denominators)
      return sums, metrics, denominators, loss

    def step(batch):
      out = self.strategy.run(replica, args=(batch,))
      return tf.nest.map_structure(lambda v: self.strategy.experimental_local_results(v)[0], out)

    step = self._traced_once(("evaluate",), dataset.element_spec, step)
    totals, batch_losses = None, []
    for count, batch in enumerate(dataset):
      if max_steps is not None and count >= max_steps:
        break
      sums, metrics, denominators, loss = tf.nest.map_structure(float, step(batch))
      batch_losses.append(loss)
      part = (sums, metrics, denominators)
      totals = part if totals is None else tf.nest.map_structure(lambda a, b: a + b, totals, part)
    if totals is None:
      if max_steps == 0:
        raise ValueError("Evaluation was asked for 0 batches.")
      if self.static_shapes:  # the scripts' input then drops a last partial batch
        raise ValueError("The evaluation data holds no complete batch, and with static "
                         "shapes (XLA, TPUs) a last partial batch is not evaluated.")
      raise ValueError("The evaluation data holds no records.")  # partial batches count
    return self.task.eval_results(*totals, batch_losses)

  def predict(self, dataset_fn, keep=(), fill=0.0):
    """Model outputs for a dataset of whole global batches, in dataset order.

    dataset_fn must give each input pipeline its replicas' rows of every
    global batch (see pipeline.global_batches). Returns numpy arrays of the
    model's outputs plus the input features named in `keep`. Per-token outputs
    of trimmed batches are padded back to the longest batch with `fill`.
    Batches sorted by length (rows carrying pipeline.RECORD_INDEX) come back
    in record order.
    """
    if self.strategy.num_replicas_in_sync == 1:
      # One replica: the plain dataset; a distributed one's Python-side
      # iteration costs a third of the time of small prediction batches.
      dataset = dataset_fn(tf.distribute.InputContext())
    else:
      dataset = self.strategy.distribute_datasets_from_function(dataset_fn)

    numbered = pipeline.RECORD_INDEX in dataset.element_spec
    keep = tuple(keep) + ((pipeline.RECORD_INDEX,) if numbered else ())

    model = self._inference_model()
    local = self._compiled(lambda batch: dict(model(batch, training=False)))

    @tf.autograph.experimental.do_not_convert
    def replica(batch):
      outputs = local(batch)
      outputs.update({k: batch[k] for k in keep})
      return outputs

    def step(batch):
      out = self.strategy.run(replica, args=(batch,))
      return {k: self.strategy.gather(v, axis=0) for k, v in out.items()}

    spec = dataset.element_spec
    # Joining needs one replica (a step's replicas share one shape), no compilation
    # per shape (XLA, TPUs) and record numbers, which put joined rows back in order.
    join = (numbered and self.strategy.num_replicas_in_sync == 1
            and not (self._jit or self.static_shapes))
    rows = spec[pipeline.RECORD_INDEX].shape[0] if join else None
    if rows:
      spec = {k: tf.TensorSpec([None] + v.shape[1:], v.dtype) for k, v in spec.items()}
    step = self._traced_once(("predict",) + tuple(keep), spec, step)
    if rows:
      outputs = step.get_concrete_function().structured_outputs
      token_axes = {k: v.shape.as_list().index(None, 1) for k, v in outputs.items()
                    if None in v.shape[1:]}  # unknown only where the length is
      chunks = [_call_joined(step, group, token_axes, fill)
                for group in _joined(dataset, rows * JOIN_LENGTH)]
    else:
      chunks = [{k: v.numpy() for k, v in step(batch).items()} for batch in dataset]
    if not chunks:
      return {}
    outputs = {k: _concatenate([c[k] for c in chunks], fill) for k in chunks[0]}
    if numbered:
      order = np.argsort(outputs.pop(pipeline.RECORD_INDEX), kind="stable")
      outputs = {k: v[order] for k, v in outputs.items()}
    return outputs

  def _compiled(self, fn):
    """fn (a replica's share of an evaluation or prediction step), XLA-compiled under
    jit_compile; as is otherwise (and on TPUs, which compile the whole step anyway)."""
    return tf.function(fn, jit_compile=True, autograph=False) if self._jit else fn

  def _traced_once(self, key, spec, fn):
    """fn compiled for the input `spec`, whose unknown lengths cover trimmed batches.

    Kept per (key, spec): a later pass over data of the same layout (another
    evaluation, another file to predict) reuses the graph instead of tracing
    the model again (~0.5-1 s for MiniLM).
    """
    key = key + (repr(spec),)
    if key not in self.traced:
      self.traced[key] = tf.function(fn, autograph=False, input_signature=[spec])
    return self.traced[key]


def _joined(dataset, max_positions, length_feature="input_mask"):
  """Lists of consecutive numpy batches, each holding at most max_positions (its rows
  times its longest batch's length) unless it is a single batch."""
  group, rows, longest = [], 0, 0
  for batch in dataset.as_numpy_iterator():
    count, length = batch[length_feature].shape[0], batch[length_feature].shape[-1]
    if group and (rows + count) * max(longest, length) > max_positions:
      yield group
      group, rows, longest = [], 0, 0
    group.append(batch)
    rows, longest = rows + count, max(longest, length)
  if group:
    yield group


def _call_joined(step, group, token_axes, fill, length_feature="input_mask"):
  """step's numpy outputs for a list of batches run as one call, as they are run one
  by one: outputs along a token axis (token_axes: output name -> axis) are `fill`
  past each row's own batch length, as _concatenate pads them."""
  joined = {k: _concatenate([b[k] for b in group], 0) for k in group[0]}
  out = {k: v.numpy() for k, v in step(joined).items()}
  own = np.concatenate([np.full(len(b[length_feature]), b[length_feature].shape[-1])
                        for b in group])  # [rows]: each row's batch length
  for k, axis in token_axes.items():
    shape = [len(own)] + [1] * (out[k].ndim - 1)
    shape[axis] = out[k].shape[axis]
    past = (np.arange(out[k].shape[axis]) >= own[:, None]).reshape(shape)
    out[k][np.broadcast_to(past, out[k].shape)] = fill
  return out


def _concatenate(arrays, fill):
  """Concatenates along axis 0, padding every other axis to its largest size with `fill`."""
  shape = np.max([a.shape for a in arrays], axis=0)
  padded = [a if a.shape[1:] == tuple(shape[1:]) else
            np.pad(a, [(0, 0)] + [(0, int(s - n)) for s, n in zip(shape[1:], a.shape[1:])],
                   constant_values=fill) for a in arrays]
  return np.concatenate(padded)
