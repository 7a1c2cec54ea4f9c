"""Trains the tiny pretraining model a few steps under a given strategy; saves the weights.

Run as a script by the tests (devices and TF_CONFIG must be set before
TensorFlow starts):
  python distributed_worker.py MODE RECORDS CONFIG INIT OUT_DIR STEPS BATCH ACCUMULATION
MODE: single | mirrored (2 logical CPUs) | multi_worker (TF_CONFIG set by the caller).
STEPS=0: for each k in ACCUMULATION (comma-separated), writes the first global
batch's summed gradients to gradients_k.npz, then trains one step on it and
writes Adam's first moments to adam_m_k.npz; keys are the original variable
names ("/" written as "|"). An item "k:float16" does the same in mixed float16
with dynamic loss scaling, into OUT_DIR/float16/ (after the float32 items).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(mode, records, config_file, init, out_dir, steps, batch, accumulation):
  import tensorflow as tf
  if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  import keras
  import numpy as np
  from data import features
  from modeling import checkpoints, optimization, pretraining, training
  from modeling.config import BertConfig

  strategy = {"single": tf.distribute.get_strategy,
              "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
              "multi_worker": tf.distribute.MultiWorkerMirroredStrategy}[mode]()
  config = BertConfig.from_json_file(config_file)
  spec = features.pretraining_feature_spec(32, 5)

  def dataset_fn(ctx):
    # Global batches in file order; each input pipeline takes its rows of each.
    per = ctx.get_per_replica_batch_size(batch)
    ds = tf.data.TFRecordDataset(records).batch(batch, drop_remainder=True).repeat()
    ds = ds.map(lambda r: {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
                           for k, v in tf.io.parse_example(r, spec).items()})
    if ctx.num_input_pipelines > 1:
      i = ctx.input_pipeline_id
      return ds.map(lambda b: {k: v[i * per:(i + 1) * per] for k, v in b.items()})
    return ds.unbatch().batch(per)

  def make_trainer(accumulation, out_dir=out_dir, steps=steps, loss_scaling=False):
    return training.Trainer(
        strategy, pretraining.PretrainingTask(config),
        lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
        training.TrainConfig(output_dir=out_dir, num_train_steps=steps, global_batch_size=batch,
                             steps_per_loop=steps, log_steps=steps, save_checkpoints_steps=steps,
                             gradient_accumulation_steps=accumulation, loss_scaling=loss_scaling))

  if steps == 0:
    for item in accumulation.split(","):
      k, _, dtype = item.partition(":")
      half = dtype == "float16"
      if half:  # models built from here on compute in float16
        keras.mixed_precision.set_global_policy("mixed_float16")
      run_dir = os.path.join(out_dir, "float16") if half else out_dir
      os.makedirs(run_dir, exist_ok=True)
      trainer = make_trainer(int(k), os.path.join(run_dir, f"k{k}"), 1, loss_scaling=half)
      trainer.restore(init)
      names = {v.path: n for n, v in checkpoints.variable_map(trainer.model).items()}
      grads = trainer.summed_gradients(dataset_fn)
      trainer.train(dataset_fn)  # one step, for Adam's first moment (0.1 x the clipped gradient)
      first_moments = {v.path: trainer.optimizer.slots(v)[0].numpy()
                       for v in trainer.model.trainable_variables}
      for what, values in (("gradients", grads), ("adam_m", first_moments)):
        np.savez(os.path.join(run_dir, f"{what}_{k}.npz"),
                 **{names[path].replace("/", "|"): g for path, g in values.items()})
    return
  trainer = make_trainer(int(accumulation))
  trainer.train(dataset_fn, init_checkpoint=init)
  if trainer.chief:
    weights = checkpoints.model_weights(trainer.model)
    np.savez(os.path.join(out_dir, "weights.npz"), **{k.replace("/", "|"): v for k, v in weights.items()})


if __name__ == "__main__":
  mode, records, config_file, init, out_dir, steps, batch, accumulation = sys.argv[1:]
  main(mode, records, config_file, init, out_dir, int(steps), int(batch), accumulation)
