"""Attention's transposes: tf.transpose (oneDNN's kernel under the scripts' settings) against
attention.transpose (TensorFlow's kernel, through a float64 view of the same bytes).

Two parts, each side taking turns call by call so that a change in the machine's speed falls
on both alike:
1. The transposes alone: attention's two (the joined query, key and value [B, S, 3, N, D] to
   [3, B, N, S, D], and the context [B, N, S, D] to [B, S, N, D]; all-MiniLM-L6-v2's 12 heads
   of 32), microseconds per call, median of --repeats timed calls of 12 chained transposes.
2. The path a served request takes: all-MiniLM-L6-v2 as the exports hold it
   (inference.inference_copy, the classifier head) through export.served_outputs, traced as
   the exports trace it (unknown batch and length), built once with each transpose;
   milliseconds per call, median, and the outputs compared bit for bit.

  python benchmarks/investigations/transposes.py --threads=2
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py: the exports' weights never change

from absl import app, flags  # noqa: E402

flags.DEFINE_integer("threads", 2, "Intra-op and inter-op threads (0: TensorFlow's choice).",
                     lower_bound=0)
flags.DEFINE_integer("repeats", 100, "Timed calls of each side per case at batch 1 (fewer for "
                     "larger batches, at least 10).", lower_bound=10)
flags.DEFINE_list("shapes", ["1x24", "1x64", "1x128", "8x48", "32x128", "64x128"],
                  "Batch x tokens, without padding.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
FLAGS = flags.FLAGS

CHAIN = 12  # transposes per timed call, so that the call's own overhead is shared


def median_ms(functions, args, calls):
  """{name: median ms per call} of each function of `functions`, called in turns."""
  import numpy as np
  times = {name: [] for name in functions}
  for f in functions.values():  # warm up: kernels set up, caches filled
    f(*args)
    f(*args)
  for _ in range(calls):
    for name, f in functions.items():
      start = time.perf_counter()
      f(*args)
      times[name].append(1000 * (time.perf_counter() - start))
  return {name: float(np.median(t)) for name, t in times.items()}


def transposes_alone(dtype, batch, length, calls):
  """(tf.transpose, attention.transpose) microseconds per transpose, each of attention's two."""
  import tensorflow as tf
  from modeling import attention
  out = []
  for shape, perm in (([batch, length, 3, 12, 32], [2, 0, 3, 1, 4]),
                      ([batch, 12, length, 32], [0, 2, 1, 3])):
    x = tf.cast(tf.random.normal(shape), dtype)
    spec = tf.TensorSpec([None] * (len(shape) - 1) + [32], dtype)

    def chain(step):
      def run(t):
        for _ in range(CHAIN):
          t = tf.reshape(step(t), tf.shape(t))  # back to the input's shape, values moved
        return t
      return tf.function(run, input_signature=[spec], autograph=False)
    functions = {
        "none": chain(lambda t: t),
        "tf": chain(lambda t: tf.transpose(t, perm)),
        "view": chain(lambda t: attention.transpose(t, perm, tf.shape(t)))}
    ms = median_ms({k: (lambda f: lambda t: f(t).numpy())(f) for k, f in functions.items()},
                   (x,), calls)
    out.append(tuple(1000 * (ms[k] - ms["none"]) / CHAIN for k in ("tf", "view")))
  return out


def served(dtype, shapes, calls):
  """{shape: (tf.transpose ms, attention.transpose ms, equal)} of MiniLM's served forward."""
  import numpy as np
  import tensorflow as tf
  from benchmarks.common import timing
  from modeling import attention, classification, distribution, export, inference
  from modeling.encoder import BertEncoder
  distribution.set_precision(dtype)
  model = classification.BertClassifier(BertEncoder(timing.classifier_config("minilm")), 2)
  model.build()
  copy = inference.inference_copy(model)
  distribution.set_precision("float32")
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  view = attention.transpose
  functions = {}
  try:
    for name, step in (("tf", lambda x, perm, shape, _=True: view(x, perm, shape, False)),
                       ("view", view)):
      attention.transpose = step  # read when the function is traced, just below
      functions[name] = tf.function(lambda f: export.served_outputs(copy, f)["logits"],
                                    input_signature=[spec]).get_concrete_function()
  finally:
    attention.transpose = view
  rng = np.random.default_rng(0)
  out = {}
  for batch, length in shapes:
    features = {"input_ids": tf.constant(rng.integers(1000, 2000, (batch, length)), tf.int32),
                "input_mask": tf.ones((batch, length), tf.int32),
                "segment_ids": tf.zeros((batch, length), tf.int32)}
    equal = np.array_equal(functions["tf"](features).numpy(), functions["view"](features).numpy())
    ms = median_ms({k: (lambda f: lambda x: f(x).numpy())(f) for k, f in functions.items()},
                   (features,), max(10, calls // batch))
    out[(batch, length)] = (ms["tf"], ms["view"], equal)
  return out


def main(_):
  import tensorflow as tf
  if FLAGS.threads:
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  shapes = [tuple(int(v) for v in s.split("x")) for s in FLAGS.shapes]
  print("1. Attention's transposes alone, us per transpose, tf.transpose / attention.transpose")
  print(f"{'dtype':<10}{'shape':>8}{'[B,S,3,N,D] -> [3,B,N,S,D]':>30}{'[B,N,S,D] -> [B,S,N,D]':>26}")
  for dtype in FLAGS.dtypes:
    for batch, length in shapes:
      joined, context = transposes_alone(dtype, batch, length, max(10, FLAGS.repeats // batch))
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{'%.1f / %.1f' % joined:>30}"
            f"{'%.1f / %.1f' % context:>26}", flush=True)
  print("\n2. all-MiniLM-L6-v2 served (export.served_outputs), ms per call, median")
  print(f"{'dtype':<10}{'shape':>8}{'tf.transpose':>14}{'attention.transpose':>21}{'ratio':>7}"
        f"{'outputs equal':>15}")
  for dtype in FLAGS.dtypes:
    for (batch, length), (plain, view, equal) in served(dtype, shapes, FLAGS.repeats).items():
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{plain:>14.3f}{view:>21.3f}{view / plain:>7.3f}"
            f"{str(equal):>15}", flush=True)


if __name__ == "__main__":
  app.run(main)
