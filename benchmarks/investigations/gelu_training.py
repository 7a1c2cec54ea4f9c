r"""GELU in training: TensorFlow's kernels against one XLA program.

layers.get_activation("gelu") in training computes the activation and its slope (kept for
the gradient) in float32; a 16-bit input goes through one XLA program over rows padded to
layers.GELU_ROW_MULTIPLE (casts, erf and exp in one pass), a float32 one through
TensorFlow's kernels (a dozen passes). Two parts, the two forms taking turns in random order:
1. The activation and slope alone, per shape and dtype, ms per call, median, with the
   largest difference between the forms' outputs.
2. Whole training steps of the classifier (the Trainer as run_classifier.py builds it,
   random weights, batch 32 x --seq_length) in bfloat16, once traced with each form: without
   padding, and with a quarter of the positions padding on average, eight batches of random
   lengths in turn, which the Trainer packs away (so the rows GELU sees change from step to
   step, and so does the padding to GELU_ROW_MULTIPLE).

  python benchmarks/investigations/gelu_training.py --threads=2
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

timing.define_flags()
flags.DEFINE_list("shapes", ["4000x1536", "4096x3072", "700x1536"], "Rows x width for part 1.")
flags.DEFINE_integer("calls", 40, "Timed calls per form in part 1.", lower_bound=1)
flags.DEFINE_list("models", ["minilm", "base"], "Classifier shapes for part 2.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence in part 2.", lower_bound=8)
flags.DEFINE_integer("steps", 10, "Timed steps per form and batch kind in part 2.", lower_bound=1)
FLAGS = flags.FLAGS


def alone():
  import numpy as np
  import tensorflow as tf
  from modeling import layers
  print("1. GELU and its slope alone, ms per call, median: TensorFlow's kernels / XLA program")
  forms = {"kernels": layers._gelu_and_slope, "xla": layers._gelu_and_slope_compiled}
  for dtype in ("float32", "bfloat16"):
    for shape in FLAGS.shapes:
      rows, width = (int(v) for v in shape.split("x"))
      spec = [tf.TensorSpec([None, width], dtype)]  # rows unknown, as in a packed step
      functions = {n: tf.function(f, input_signature=spec, autograph=False)
                   for n, f in forms.items()}
      x = tf.cast(tf.random.stateless_normal([rows, width], [1, rows]) * 2, dtype)
      outputs = {n: [t.numpy().astype(np.float64) for t in f(x)] for n, f in functions.items()}
      difference = max(np.abs(a - b).max() for a, b in zip(*outputs.values()))
      ms = timing.median_ms({n: (lambda f=f: f(x)[0].numpy()) for n, f in functions.items()}, (),
                            FLAGS.calls)
      print(f"   {dtype:<9} {shape:>10}  {ms['kernels']:8.2f} / {ms['xla']:8.2f}  "
            f"(x{ms['xla'] / ms['kernels']:.2f}; outputs differ by at most {difference:.1e})",
            flush=True)


def training_steps():
  import numpy as np
  from modeling import layers
  print(f"\n2. bfloat16 training steps, batch 32 x {FLAGS.seq_length}, ms per step, median: "
        "TensorFlow's kernels / XLA program")
  for model in FLAGS.models:
    config = timing.classifier_config(model)
    for padded in (False, True):
      batches = [timing.classifier_batch(32, FLAGS.seq_length, seed) for seed in range(8)]
      if padded:  # lengths from half the sequence to all of it: a quarter padding on average
        rng = np.random.default_rng(1)
        for i, batch in enumerate(batches):
          lengths = rng.integers(FLAGS.seq_length // 2, FLAGS.seq_length + 1, 32)
          mask = (np.arange(FLAGS.seq_length)[None] < lengths[:, None]).astype(np.int32)
          batches[i] = dict(batch, input_mask=mask, input_ids=batch["input_ids"] * mask)
      data = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
      runs = timing.classifier_steps_by_form(
          {"kernels": layers._gelu_and_slope, "xla": layers._gelu_and_slope_compiled}, layers,
          "_gelu_and_slope_compiled", config, data, padded)
      ms = timing.median_ms(runs, (), FLAGS.steps)
      kind = "packed, a quarter padding" if padded else "no padding"
      print(f"   {model:<7} {kind:<26} {ms['kernels']:9.1f} / {ms['xla']:9.1f}  "
            f"(x{ms['xla'] / ms['kernels']:.3f})", flush=True)


def main(_):
  timing.use_threads(FLAGS.threads)
  print(timing.cpu())
  alone()
  training_steps()


if __name__ == "__main__":
  app.run(main)
