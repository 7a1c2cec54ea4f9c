"""What one TensorFlow CPU op costs beyond its arithmetic, on one intra-op thread and on more.

Chains of 100 ops of one kind, each op's input the previous op's output, in a traced
function; the time per op is a chain's call minus an empty call's, over the ops run. Kinds:
a dense product small enough for TensorFlow's oneDNN kernel to keep on the calling thread
([16, 64] x [64, 64]: it runs on one thread when its operands fit the L2 cache), a batched
product and a softmax of as few values (oneDNN's kernels, which always hand their work to
the intra-op pool), elementwise ops (TensorFlow's own kernels), and the feed-forward
products of a 56-token request ([56, 384] x [384, 1536] and back, large enough to be shared
by the pool's threads). Each line adds the cores kept busy while its chain ran (the
process's CPU time over the wall time: threads spinning or waiting on a lock count too).
Each thread count runs in a process of its own (a process's pools are fixed when
TensorFlow starts), intra-op and inter-op threads both at that count, bfloat16 where the
CPU has bfloat16 instructions, else float32, with the scripts' oneDNN settings. What the
few-valued oneDNN kernels gain between the columns is the price of the hand-off to the
pool and back (docs/serving.md#one-thread-or-two).

  python benchmarks/investigations/kernel_handoff.py --threads=1,2
"""

import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("threads", ["1", "2"], "Thread counts, one process each.")
flags.DEFINE_integer("calls", 300, "Timed calls of each chain.", lower_bound=10)
flags.DEFINE_integer("side", None, "Internal: time every kind at this thread count, print JSON.")
flags.register_validator("threads", lambda v: all(x.isdigit() and int(x) >= 1 for x in v),
                         "--threads: each a thread count of at least 1")
FLAGS = flags.FLAGS

CHAIN = 100  # ops per chain


def kinds(dtype):
  """{kind: (input shape, ops per link of the chain, the link)}."""
  import tensorflow as tf
  rng = tf.random.Generator.from_seed(1)
  weight = lambda shape, scale: tf.cast(rng.normal(shape) * scale, dtype)  # noqa: E731
  small, batched = weight([64, 64], 0.125), weight([4, 16, 16], 0.25)
  w_in, w_out = weight([384, 1536], 0.05), weight([1536, 384], 0.025)  # sizes kept near 1
  return {
      "dense product [16, 64] x [64, 64], one thread by TF's rule": (
          [16, 64], 1, lambda x: tf.matmul(x, small)),
      "batched product [4, 16, 16] x [4, 16, 16]": ([4, 16, 16], 1,
                                                     lambda x: tf.matmul(x, batched)),
      "softmax of [4, 16, 16]": ([4, 16, 16], 1, tf.nn.softmax),
      "elementwise multiply or add of [16, 64]": ([16, 64], 2, lambda x: x * 0.5 + 0.5),
      # Out to 1,536 and back, so that the chain keeps its shape.
      "dense product [56, 384] x [384, 1536] (and back)": (
          [56, 384], 2, lambda x: tf.matmul(tf.matmul(x, w_in), w_out)),
  }


def side(threads):
  """{kind: [microseconds per op, cores busy]} at `threads` threads."""
  import numpy as np
  import tensorflow as tf
  timing.use_threads(threads)
  dtype = tf.bfloat16 if timing.bfloat16_units() else tf.float32
  out = {}
  for kind, (shape, per_call, op) in kinds(dtype).items():
    x = tf.cast(tf.random.normal(shape), dtype)
    chain = tf.function(lambda x, op=op: _chained(op, x, CHAIN))
    empty = tf.function(lambda x: _chained(lambda t: t, x, 1))
    times = {}
    for name, fn in (("chain", chain), ("empty", empty)):
      for _ in range(20):
        fn(x).numpy()
      used = resource.getrusage(resource.RUSAGE_SELF)
      start = time.perf_counter()
      ts = []
      for _ in range(FLAGS.calls):
        t = time.perf_counter()
        fn(x).numpy()
        ts.append(time.perf_counter() - t)
      wall = time.perf_counter() - start
      now = resource.getrusage(resource.RUSAGE_SELF)
      cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
      times[name] = (float(np.median(ts)), cpu / wall)
    us = (times["chain"][0] - times["empty"][0]) / (CHAIN * per_call) * 1e6
    out[kind] = [us, times["chain"][1]]
  return {"dtype": dtype.name, "kinds": out}


def _chained(op, x, n):
  for _ in range(n):
    x = op(x)
  return x


def main(_):
  if FLAGS.side:
    print(json.dumps(side(FLAGS.side)), flush=True)
    return
  results = {}
  for threads in FLAGS.threads:
    got = subprocess.run([sys.executable, os.path.abspath(__file__), f"--side={threads}",
                          f"--calls={FLAGS.calls}"], capture_output=True, text=True)
    lines = [line for line in got.stdout.splitlines() if line.startswith("{")]
    if got.returncode or not lines:
      sys.exit(f"error: the side of {threads} threads failed:\n{got.stderr[-2000:]}")
    results[threads] = json.loads(lines[-1])
  dtype = next(iter(results.values()))["dtype"]
  print(f"{timing.cpu()}; {dtype}; microseconds per op (cores busy while the chain ran)")
  print(f"{'op':<58}" + "".join(f"{t + ' thread' + ('s' if t != '1' else ''):>20}"
                                for t in FLAGS.threads))
  for kind in next(iter(results.values()))["kinds"]:
    cells = "".join(f"{'%.1f (%.2f)' % tuple(results[t]['kinds'][kind]):>20}"
                    for t in FLAGS.threads)
    print(f"{kind:<58}{cells}", flush=True)


if __name__ == "__main__":
  app.run(main)
