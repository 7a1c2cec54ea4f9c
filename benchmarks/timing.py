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
