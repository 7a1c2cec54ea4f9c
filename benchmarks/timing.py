"""The one timing loop the benchmarks share."""

import time


def items_per_second(run, items_per_call, seconds, min_calls=3):
  """Items/s of run() over at least `seconds` and `min_calls` calls, after two warm-up calls.

  run() must block until its work is done (return numpy values, not pending tensors).
  """
  run()
  run()
  calls, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds or calls < min_calls:
    run()
    calls += 1
  return calls * items_per_call / (time.perf_counter() - start)


def training_sequences_per_second(trainer, iterator, seconds, batch_size):
  """Sequences/s of a Trainer's compiled loop (10 steps per call) after two warm-up calls."""
  import tensorflow as tf
  trainer._train_loop(iterator, tf.constant(1))  # traces
  float(trainer._train_loop(iterator, tf.constant(10))[0]["loss"])
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds or steps < 20:
    float(trainer._train_loop(iterator, tf.constant(10))[0]["loss"])
    steps += 10
  return steps * batch_size / (time.perf_counter() - start)


def pass_items_per_second(run_pass, count):
  """Items/s of two consecutive whole passes run_pass() over `count` items: (first, second).

  The first pays the one-off work a script pays once per run (tracing the
  step, setting up kernels); the second is the speed of every later pass (the
  Trainer keeps its traced step), the figure comparable to Hugging Face's loop,
  which is timed after one warm-up batch.
  """
  speeds = []
  for _ in range(2):
    start = time.perf_counter()
    run_pass()
    speeds.append(count / (time.perf_counter() - start))
  return tuple(speeds)


def benchmark_trainer(task, dtype, batch_size, learning_rate=5e-5, pack_tokens=True):
  """A Trainer for `task` under the default strategy in `dtype` (float32 or bfloat16), set to
  train without end (AdamW, 10 warmup steps); the global Keras policy is left at float32.
  pack_tokens=False computes padded positions too (the original's way)."""
  import tempfile

  import keras
  import tensorflow as tf
  from modeling import optimization, training
  keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
  try:
    return training.Trainer(
        tf.distribute.get_strategy(), task,
        lambda names: optimization.create_optimizer("adamw", learning_rate, 10**6, 10, names),
        training.TrainConfig(output_dir=tempfile.mkdtemp(), num_train_steps=10**6,
                             global_batch_size=batch_size, pack_tokens=pack_tokens))
  finally:
    keras.mixed_precision.set_global_policy("float32")
