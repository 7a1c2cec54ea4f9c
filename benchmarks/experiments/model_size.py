r"""The paper's Table 6 at small scale: masked-LM accuracy against model size and step.

Runs the real scripts, as a user would: prepare_corpus.py on the training books
and on one held-out book, learn_vocab.py on the training text,
create_pretraining_data.py for both, then run_pretraining.py for every L/H/A
in --sizes with the same data, batch, learning rate and number of steps. Each
run's train_log.csv gives masked-LM accuracy against step; its
eval_results.txt (on the held-out book) the final accuracy. Writes
model_size.png (both panels) and prints a Markdown table. A finished run (one
with eval_results.txt) is reused, so an interrupted sweep picks up where it
stopped.

  python benchmarks/experiments/model_size.py --work_dir=/tmp/table6 --steps=2000 \
    --sizes=2/128/2,4/256/4,4/512/8,6/384/6
"""

import csv
import json
import os
import shlex
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.common import corpus, flops, launch  # noqa: E402

# --learning_rate: 1e-3 left the models of 4 and 6 layers predicting the most frequent word
# after 1,500 steps.
corpus.define_flags(__name__, steps=2000)
flags.DEFINE_list("sizes", ["2/128/2", "4/256/4", "4/512/8", "6/384/6"],
                  "Models as L/H/A (layers, hidden size, attention heads); feed-forward 4H.")
flags.DEFINE_integer("max_eval_steps", 50, "Held-out batches (of 32) scored per model.")
flags.DEFINE_integer("seed", 1, "Seed of data order, weights and dropout.")
flags.DEFINE_string("generator_flags", "",
                    "More create_pretraining_data.py flags, e.g. '--masking_mix=1,0,0'.")
flags.DEFINE_string("pretraining_flags", "",
                    "More run_pretraining.py flags, e.g. '--next_sentence_weight=0'.")
FLAGS = flags.FLAGS


def parse_size(text):
  """(layers, hidden, heads) from 'L/H/A'; ValueError naming --sizes if malformed."""
  try:
    layers, hidden, heads = (int(part) for part in text.split("/"))
  except ValueError:
    raise ValueError(f"--sizes: {text!r} is not L/H/A, e.g. 4/256/4.") from None
  if min(layers, hidden, heads) < 1 or hidden % heads:
    raise ValueError(f"--sizes: {text!r} needs positive numbers with H divisible by A.")
  return layers, hidden, heads


def prepare_data(work):
  """Corpus, vocab and records of the training books and the held-out book."""
  paths = corpus.prepare_text(work, corpus.books(FLAGS.input_files, False), FLAGS.vocab_size)
  for name, dupe in (("train", FLAGS.dupe_factor), ("heldout", 1)):
    paths[f"{name}.tfrecord"] = corpus.make_records(
        paths[f"{name}.txt"], paths["vocab.txt"], os.path.join(work, f"{name}.tfrecord"),
        FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, dupe,
        *shlex.split(FLAGS.generator_flags))
  return paths


def train(work, paths, size):
  """Pretrains one L/H/A; returns its run directory."""
  layers, hidden, heads = size
  out = os.path.join(work, f"L{layers}_H{hidden}_A{heads}")
  if os.path.exists(os.path.join(out, "eval_results.txt")):
    return out
  os.makedirs(out, exist_ok=True)
  config_file = corpus.write_config(os.path.join(out, "bert_config.json"), paths["vocab.txt"],
                                    "{}/{}/{}".format(*size))
  launch.script(
      "run_pretraining.py", f"--bert_config_file={config_file}",
      f"--input_file={paths['train.tfrecord']}",
      f"--eval_input_file={paths['heldout.tfrecord']}", f"--output_dir={out}",
      "--do_train", "--do_eval", f"--train_batch_size={FLAGS.batch_size}",
      "--eval_batch_size=32", f"--max_seq_length={FLAGS.max_seq_length}",
      f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
      f"--num_train_steps={FLAGS.steps}", f"--num_warmup_steps={max(FLAGS.steps // 10, 1)}",
      f"--learning_rate={FLAGS.learning_rate}", f"--save_checkpoints_steps={FLAGS.steps}",
      f"--iterations_per_loop={max(FLAGS.steps // 20, 1)}",
      f"--log_steps={max(FLAGS.steps // 20, 1)}", f"--max_eval_steps={FLAGS.max_eval_steps}",
      f"--seed={FLAGS.seed}", *shlex.split(FLAGS.pretraining_flags))
  return out


def read_run(out):
  """(steps, train masked-LM accuracies, eval results dict) of a finished run."""
  rows = {}
  with open(os.path.join(out, "train_log.csv")) as f:
    for row in csv.DictReader(f):
      rows[int(row["step"])] = float(row["masked_lm_accuracy"])
  results = launch.read_results(os.path.join(out, "eval_results.txt"))
  steps = sorted(rows)
  return steps, [rows[s] for s in steps], results


def plot(runs, png_path):
  """Two panels: training masked-LM accuracy per step; held-out accuracy per size."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (by_step, by_size) = plt.subplots(1, 2, figsize=(11, 4))
  for label, params, steps, accuracy, results in runs:
    by_step.plot(steps, accuracy, label=f"{label} ({params / 1e6:.1f}M)")
  by_step.set(xlabel="step", ylabel="masked-LM accuracy (training batches)",
              title="Masked-LM accuracy during pretraining")
  by_step.legend(fontsize=8)
  points = sorted((params, float(results["masked_lm_accuracy"]), label)
                  for label, params, _, _, results in runs)
  by_size.plot([p for p, _, _ in points], [a for _, a, _ in points], marker="o")
  for params, accuracy, label in points:
    by_size.annotate(label, (params, accuracy), textcoords="offset points", xytext=(4, -10),
                     fontsize=8)
  by_size.set_xscale("log")
  by_size.set(xlabel="parameters", ylabel="masked-LM accuracy (held-out book)",
              title=f"After {FLAGS.steps} steps")
  for ax in (by_step, by_size):
    ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)
  plt.close(fig)


def main(_):
  if not FLAGS.work_dir:
    raise ValueError("--work_dir is required.")
  if FLAGS.steps < 1:
    raise ValueError(f"--steps={FLAGS.steps} must be at least 1.")
  sizes = [parse_size(s) for s in FLAGS.sizes]
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  paths = prepare_data(FLAGS.work_dir)
  runs = []
  for size in sizes:
    out = train(FLAGS.work_dir, paths, size)
    steps, accuracy, results = read_run(out)
    with open(os.path.join(out, "bert_config.json")) as f:
      weights = flops.encoder_parameters(json.load(f))
    runs.append(("L{}/H{}/A{}".format(*size), weights, steps, accuracy, results))
  png = os.path.join(FLAGS.work_dir, "model_size.png")
  plot(runs, png)
  print("| L/H/A | parameters | steps | masked-LM accuracy (train, last log) | "
        "masked-LM accuracy (held out) | masked-LM loss (held out) |")
  print("|---|---|---|---|---|---|")
  for label, params, steps, accuracy, results in runs:
    print(f"| {label} | {params / 1e6:.2f}M | {steps[-1]} | {accuracy[-1]:.3f} | "
          f"{float(results['masked_lm_accuracy']):.3f} | "
          f"{float(results['masked_lm_loss']):.3f} |")
  print(f"plot: {png}")


if __name__ == "__main__":
  launch.main_guarded(main)
