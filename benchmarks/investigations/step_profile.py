r"""Where a training step's time goes: matrix products against everything else.

Profiles --steps training steps of the classifier (the Trainer as run_classifier.py builds
it, random weights, batch x length with no padding) with TensorFlow's profiler, once per
--dtypes entry, and sums the time of the operations that ran, by kind: matrix products
(oneDNN's matmul and fused matmul kernels, the batched ones of attention), the optimizer's
update (Adam's kernel, the weight decay), dropout's random numbers, casts, the XLA programs
(GELU in 16-bit training), and the rest (elementwise and reductions: LayerNorm, GELU in
float32, softmax, residual sums, bias gradients).
TensorFlow runs one op at a time here (TF_NUM_INTEROP_THREADS=1, each op on all the
cores), so that the ops' times add up to the step's; the scripts run two at a time, a
few percent faster (the wall time of such a step is printed too).

  python benchmarks/investigations/step_profile.py --model=base --dtypes=float32,bfloat16
"""

import collections
import glob
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")  # before TensorFlow starts

from absl import app, flags  # noqa: E402

flags.DEFINE_enum("model", "minilm", ["minilm", "base"], "Shape of the classifier.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes, one profile each.")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (no padding).")
flags.DEFINE_integer("steps", 3, "Steps profiled (after 3 untimed ones).")
FLAGS = flags.FLAGS

KINDS = (("products", re.compile(r":\w*(MatMul|Einsum)\w*$")),
         ("optimizer (norm, clip, update)",
          re.compile(r"adam_weight_decay|clip_by_global_norm|global_norm|L2Loss")),
         ("dropout's random bits", re.compile(r":StatelessRandom")),
         ("casts", re.compile(r":Cast$")),
         ("gather and scatter", re.compile(r":\w*(Gather|Scatter|UnsortedSegmentSum)\w*$")),
         ("transposes", re.compile(r":\w*Transpose$")))


# XLA programs (GELU's in 16-bit training) run as asynchronous ops: the executor's event
# for their start spans the program; their own events (fusions) nest inside it.
ASYNC_START = "ExecutorState::ProcessAsync::Start"
XLA_KIND = "XLA programs (GELU)"


def kind_of(name):
  """The kind of a profiled op, from its name (scope/name:OpType)."""
  for kind, pattern in KINDS:
    if pattern.search(name):
      return kind
  return "elementwise and reductions"


def profile(dtype):
  """{kind: milliseconds per step} summed over the ops that ran, and the step's wall ms."""
  import tensorflow as tf
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  from benchmarks.common import timing
  from modeling import classification
  config = timing.classifier_config(FLAGS.model)
  B, S = FLAGS.batch_size, FLAGS.seq_length
  batch = timing.classifier_batch(B, S)
  trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), dtype, B)
  iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
  for _ in range(3):
    trainer._train_loop(iterator, tf.constant(1))
  directory = tempfile.mkdtemp()
  tf.profiler.experimental.start(directory)
  start = time.perf_counter()
  for _ in range(FLAGS.steps):
    float(trainer._train_loop(iterator, tf.constant(1))[0]["loss"])
  wall = (time.perf_counter() - start) / FLAGS.steps * 1000
  tf.profiler.experimental.stop()
  space = xplane_pb2.XSpace()
  with open(glob.glob(f"{directory}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
    space.ParseFromString(f.read())
  totals = collections.Counter()
  for plane in space.planes:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    for line in plane.lines:
      if "tf_Compute" not in line.name:
        continue
      for event in line.events:
        name = names.get(event.metadata_id, "")
        if name == ASYNC_START:  # an asynchronous op: a compiled XLA program's run
          totals[XLA_KIND] += event.duration_ps / 1e9 / FLAGS.steps
          continue
        if ":" not in name or "::" in name:  # executor bookkeeping, not an op
          continue
        totals[kind_of(name)] += event.duration_ps / 1e9 / FLAGS.steps
  return totals, wall


def main(_):
  from benchmarks.common import timing
  print(timing.cpu())
  print(f"{FLAGS.model}, batch {FLAGS.batch_size} x {FLAGS.seq_length}, no padding; "
        f"milliseconds per training step, summed over the ops that ran")
  results = {dtype: profile(dtype) for dtype in FLAGS.dtypes}
  kinds = [k for k, _ in KINDS] + [XLA_KIND, "elementwise and reductions"]
  print(f"{'':<28}" + "".join(f"{d:>22}" for d in FLAGS.dtypes))
  for kind in kinds + ["all ops"]:
    cells = []
    for dtype in FLAGS.dtypes:
      totals, _ = results[dtype]
      value = sum(totals.values()) if kind == "all ops" else totals[kind]
      cells.append(f"{value:10.1f} ({100 * value / sum(totals.values()):5.1f}%)")
    print(f"{kind:<28}" + "".join(f"{c:>22}" for c in cells))
  print(f"{'step wall time':<28}" + "".join(f"{results[d][1]:>13.1f}{'':9}"
                                            for d in FLAGS.dtypes))


if __name__ == "__main__":
  app.run(main)
