"""Two costs outside the matrix products, each beside the way they were paid before.

1. The optimizer update over a model's weights: our AdamWeightDecay (TensorFlow's
   fused Adam kernel) against the same formula compiled with XLA per variable (the
   project's update until 2026-11-27), over MiniLM's 105 variables (22.7 M weights),
   milliseconds per update, alternating in one process.
2. Building a prediction pipeline (`pipeline.global_batches`, batches sorted by length)
   over 1,040 CoLA-shaped records, as the scripts build it (AutoGraph skipped) and with
   AutoGraph converting its functions (as before 2026-11-27), which a process pays once.

  .venv/bin/python benchmarks/investigations/update_and_startup.py
"""

import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_integer("updates", 30, "Updates timed per round.", lower_bound=1)
flags.DEFINE_integer("rounds", 3, "Alternating rounds of the update measurement.", lower_bound=1)
FLAGS = flags.FLAGS

# all-MiniLM-L6-v2's trainable shapes (embeddings, 6 layers, pooler, a 2-class head),
# with whether the original decays each (matrices yes, biases and LayerNorm no).
MINILM = ([((30522, 384), 1), ((512, 384), 1), ((2, 384), 1), ((384,), 0), ((384,), 0)]
          + 6 * ([((384, 384), 1), ((384,), 0)] * 4 + [((384,), 0)] * 2
                 + [((384, 1536), 1), ((1536,), 0), ((1536, 384), 1), ((384,), 0)]
                 + [((384,), 0)] * 2)
          + [((384, 384), 1), ((384,), 0), ((384, 2), 1), ((2,), 0)])


def update_milliseconds():
  """(ours, XLA per variable): ms per update of MINILM's weights, medians of rounds."""
  import keras
  import numpy as np
  import tensorflow as tf
  from modeling import optimization

  rng = np.random.default_rng(0)
  weights = [keras.Variable(rng.normal(0, 0.02, s).astype("float32"), name=f"w{i}")
             for i, (s, _) in enumerate(MINILM)]
  grads = [tf.constant(rng.normal(0, 1e-3, s).astype("float32")) for s, _ in MINILM]
  names = {w.path: "kernel" if d else "bias" for w, (_, d) in zip(weights, MINILM)}
  ours = optimization.AdamWeightDecay(1e-4, names=names)
  ours_step = tf.function(lambda: ours.apply(grads, weights))

  @tf.function(jit_compile=True)
  def xla_update(w, m, v, g, lr, decay):  # the formula, compiled per variable
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * tf.square(g)
    return w - lr * (m / (tf.sqrt(v) + 1e-6) + decay * w), m, v

  plain = [tf.Variable(w.value) for w in weights]
  slots = [(tf.Variable(tf.zeros(s)), tf.Variable(tf.zeros(s))) for s, _ in MINILM]

  @tf.function
  def xla_step():
    for w, (m, v), g, (_, d) in zip(plain, slots, grads, MINILM):
      new = xla_update(tf.identity(w), tf.identity(m), tf.identity(v), g, 1e-4, 0.01 * d)
      for var, value in zip((w, m, v), new):
        var.assign(value)

  def milliseconds(step):
    step()

    def updates():
      for _ in range(FLAGS.updates):
        step()
      plain[0].numpy(), weights[0].numpy()  # wait for the last update
    return timing.timed(updates)[0] / FLAGS.updates * 1000
  results = [(milliseconds(ours_step), milliseconds(xla_step)) for _ in range(FLAGS.rounds)]
  return tuple(statistics.median(r[i] for r in results) for i in range(2))


def pipeline_seconds(work):
  """(as the scripts, with AutoGraph): seconds to build a fresh prediction pipeline and
  take its first batch. AutoGraph converts each function once per process (later
  pipelines reuse the conversion), so each figure is that of the process's first
  pipeline of its kind, after a warm-up pipeline has paid TensorFlow's first-use costs."""
  import numpy as np
  from data import pipeline, tfrecords

  rng = np.random.default_rng(0)
  lengths = rng.integers(3, 48, 1040)
  mask = (np.arange(128)[None, :] < lengths[:, None]).astype(np.int64)
  arrays = {"input_ids": mask * rng.integers(1000, 2000, mask.shape), "input_mask": mask,
            "segment_ids": np.zeros_like(mask), "label_ids": rng.integers(0, 2, len(mask)),
            "is_real_example": np.ones(len(mask), np.int64)}
  path = os.path.join(work, "dev.tf_record")
  tfrecords.write_arrays(path, arrays)
  spec = tfrecords.array_spec(arrays)

  def build():
    return timing.timed(lambda: next(iter(pipeline.global_batches(
        path, spec, 8, length_multiple=1, by_length=True))))[0]

  build()  # warm-up: TensorFlow's own first-use costs
  scripts = build()
  marker = pipeline.no_autograph
  pipeline.no_autograph = lambda f: f  # AutoGraph back on while this pipeline is built
  try:
    with_autograph = build()
  finally:
    pipeline.no_autograph = marker
  return scripts, with_autograph


def main(_):
  import tensorflow as tf
  print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs")
  ours, xla = update_milliseconds()
  print(f"optimizer update, MiniLM's 22.7 M weights: fused Adam kernel {ours:.1f} ms, "
        f"XLA per variable {xla:.1f} ms ({xla / ours:.2f}x)")
  with tempfile.TemporaryDirectory() as work:
    scripts, autograph = pipeline_seconds(work)
  print(f"prediction pipeline built, first batch: as the scripts {scripts:.2f} s, "
        f"with AutoGraph converting its functions {autograph:.2f} s")


if __name__ == "__main__":
  app.run(main)
