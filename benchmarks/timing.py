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
  """Items/s of one whole pass run_pass() over `count` items, after one warm-up pass.

  The timed pass includes whatever one-off work each pass does (the scripts' prediction
  traces its step once per pass), as a user running a script pays it.
  """
  run_pass()
  start = time.perf_counter()
  run_pass()
  return count / (time.perf_counter() - start)
