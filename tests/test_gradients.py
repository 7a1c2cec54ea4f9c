"""The gradients an optimizer step receives (summed, unscaled, before clipping and the
optimizer) equal one device's gradient of the whole batch's loss, whatever the gradient
accumulation and the number of replicas.

Weights after Adam cannot show a constant error in the gradients (Adam divides it
out), so these tests compare the gradients themselves, and their global norms.
"""

import numpy as np
import pytest
import tensorflow as tf

from data import features
from helpers import assert_close, block_ops, rounding_tolerance
from modeling import checkpoints, optimization, pretraining, training
from test_training import L, P, _finish, _worker, training_files

BATCH = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return training_files(tmp_path_factory.mktemp("train"))


def _dataset_fn(records):
  """The first global batches in file order, each input pipeline taking its replicas' rows."""
  spec = features.pretraining_feature_spec(L, P)

  def dataset_fn(ctx):
    ds = tf.data.TFRecordDataset(records).batch(BATCH, drop_remainder=True)
    return ds.map(lambda r: {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
                             for k, v in tf.io.parse_example(r, spec).items()})
  return dataset_fn


@pytest.fixture(scope="module")
def reference(setup):
  """One device, no trainer: the tape gradient of the task's loss on the first 8 records."""
  _, _, records, config, init = setup
  task = pretraining.PretrainingTask(config)
  model = task.build_model()
  checkpoints.load_checkpoint(model, init)
  batch = next(iter(_dataset_fn(records)(None)))
  with tf.GradientTape() as tape:
    sums, _ = task.numerators(model, batch, training=True)
    loss, _ = task.losses(sums, task.denominators(batch))
  grads = tape.gradient(loss, model.trainable_variables)
  names = {v.path: n for n, v in checkpoints.variable_map(model).items()}
  return {names[v.path]: tf.convert_to_tensor(g).numpy()
          for v, g in zip(model.trainable_variables, grads)}


def _norm(grads):
  return np.sqrt(sum(float(np.sum(g.astype("float64") ** 2)) for g in grads.values()))


def _first_moments(reference, clip_norm=1.0):
  """Adam's m after one step from zero: 0.1 x the gradient clipped to global norm 1."""
  factor = min(1.0, clip_norm / _norm(reference))
  return {name: 0.1 * factor * g for name, g in reference.items()}


def _gradient_ops(config):
  """float32 roundings of a gradient: forward and backward through the blocks and the
  heads (4 * 16 and a vocabulary-wide softmax), and weight gradients summed over a
  batch's BATCH * L positions."""
  heads = 4 * config.hidden_size + config.vocab_size
  return 2 * (config.num_hidden_layers * block_ops(config, L) + heads) + BATCH * L


def _assert_equal_gradients(got, want, label, config, clipped=False):
  """clipped: Adam's m, scaled by a clipping factor whose norm sums every parameter's
  square in float32."""
  assert sorted(got) == sorted(want)
  norm = _norm
  ops = _gradient_ops(config) + (sum(g.size for g in want.values()) if clipped else 0)
  # A constant factor (e.g. dividing by the number of micro-batches) moves this ratio;
  # summation orders (micro-batches, replicas) move it by rounding only.
  assert_close(norm(got) / norm(want), 1.0, "float32", ops, what=label)
  # Each tensor relative to the largest gradient: a tensor's own may be a sum that
  # cancels (the attention key bias's is zero but for rounding).
  scale = max(np.abs(g).max() for g in want.values())
  for name in want:
    assert_close(got[name], want[name], "float32", ops, scale, what=f"{label}: {name}")


def _one_step_trainer(config, init, tmp_path, **train_config):
  """A one-device pretraining Trainer (AdamW, one step) restored from `init`."""
  trainer = training.Trainer(
      tf.distribute.get_strategy(), pretraining.PretrainingTask(config),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
      training.TrainConfig(output_dir=str(tmp_path), num_train_steps=1, global_batch_size=BATCH,
                           **train_config))
  trainer.restore(init)
  return trainer


@pytest.mark.parametrize("accumulation", [1, 2, 4])
def test_accumulated_gradients_equal_the_full_batch(setup, reference, tmp_path, accumulation):
  _, _, records, config, init = setup
  trainer = _one_step_trainer(config, init, tmp_path, gradient_accumulation_steps=accumulation)
  names = {v.path: n for n, v in checkpoints.variable_map(trainer.model).items()}
  got = {names[p]: g for p, g in trainer.summed_gradients(_dataset_fn(records)).items()}
  _assert_equal_gradients(got, reference, f"accumulation {accumulation}", config)
  assert trainer.global_step == 0  # nothing was applied
  # One step: the optimizer receives exactly these gradients, clipped.
  trainer.train(_dataset_fn(records))
  moments = {names[v.path]: trainer.optimizer.slots(v)[0].numpy()
             for v in trainer.model.trainable_variables}
  _assert_equal_gradients(moments, _first_moments(reference), f"Adam m, accumulation {accumulation}",
                          config, clipped=True)


@pytest.mark.parametrize("within", [True, False])
def test_clipping_applies_only_past_the_norm(setup, reference, tmp_path, within):
  """Gradients within clip_norm reach Adam unscaled (the step skips the multiply by 1),
  and gradients past it are scaled to clip_norm: Adam's m after one step, either way."""
  _, _, records, config, init = setup
  clip_norm = 2.0 * _norm(reference) if within else 0.5 * _norm(reference)
  trainer = _one_step_trainer(config, init, tmp_path, clip_norm=clip_norm)
  names = {v.path: n for n, v in checkpoints.variable_map(trainer.model).items()}
  trainer.train(_dataset_fn(records))
  moments = {names[v.path]: trainer.optimizer.slots(v)[0].numpy()
             for v in trainer.model.trainable_variables}
  _assert_equal_gradients(moments, _first_moments(reference, clip_norm),
                          f"Adam m, clip_norm {clip_norm:.3g}", config, clipped=not within)


@pytest.mark.slow
def test_two_replicas_with_and_without_accumulation_equal_the_full_batch(setup, reference,
                                                                         tmp_path):
  """MirroredStrategy on 2 logical CPUs (a subprocess: devices are set before TF starts);
  float32, and float16 with loss scaling."""
  config = setup[3]
  out = tmp_path / "mirrored"
  _finish(_worker("mirrored", setup, out, batch=BATCH, steps=0, accumulation="1,2,2:float16"))
  load = lambda name: {key.replace("|", "/"): g for key, g in np.load(out / name).items()}
  for k in (1, 2):
    _assert_equal_gradients(load(f"gradients_{k}.npz"), reference, f"2 replicas x accumulation {k}",
                            config)
    # The optimizer step under the strategy adds no second all-reduce (x2 here).
    _assert_equal_gradients(load(f"adam_m_{k}.npz"), _first_moments(reference),
                            f"Adam m, 2 replicas x accumulation {k}", config, clipped=True)
  # float16 through Keras' LossScaleOptimizer under the strategy: unscaled, and applied.
  out = out / "float16"
  for name, want in (("gradients_2.npz", reference), ("adam_m_2.npz", _first_moments(reference))):
    got = {key.replace("|", "/"): g for key, g in np.load(out / name).items()}
    diff = {key: got[key] - want[key] for key in want}
    # float16 against float32, forward and backward through 2 blocks and the heads (the
    # masked LM's and next sentence's dense layers, 4 roundings each, and an activation),
    # relative to the norm; the loss scale is a power of 2.
    ops = 2 * (2 * block_ops(config, L, "float16") + 3 * 4 + 1)
    assert _norm(diff) < rounding_tolerance("float16", ops, _norm(want)), (name, _norm(diff))
