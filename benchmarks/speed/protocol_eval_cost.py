"""The cost of evaluation during training (--eval_every_steps), as a user runs it.

  python benchmarks/speed/protocol_eval_cost.py [--hidden_size=256 --layers=4 --steps=120]

Runs run_classifier.py twice on generated SST-2-layout data (an SST-2-sized dev set of
872 sentences) from a random BERT of the given size: once plain, once evaluating every
--eval_steps steps. Reports the training rate of each (steps/s over the log intervals
after the first, from train_log.csv, which leaves evaluation time out), the seconds of
one dev evaluation (from the log) and that cost in training steps. The steps between
evaluations should run at the plain run's rate.
"""

import csv
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from modeling.config import BertConfig  # noqa: E402

flags.DEFINE_integer("hidden_size", 256, "Hidden size of the random BERT.")
flags.DEFINE_integer("layers", 4, "Transformer layers.")
flags.DEFINE_integer("steps", 120, "Training steps of each run (batch 32).")
flags.DEFINE_integer("eval_steps", 30, "--eval_every_steps of the evaluating run.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length.")
FLAGS = flags.FLAGS

WORDS = [f"w{i}" for i in range(400)]


def _write_data(directory, n_train, n_dev, seed=0):
  rng = random.Random(seed)
  for name, n in (("train", n_train), ("dev", n_dev)):
    rows = ["sentence\tlabel"]
    for _ in range(n):
      label = rng.randint(0, 1)
      words = [rng.choice(WORDS[label * 200:(label + 1) * 200] if rng.random() < 0.2 else WORDS)
               for _ in range(rng.randint(8, 40))]
      rows.append(f"{' '.join(words)}\t{label}")
    with open(os.path.join(directory, f"{name}.tsv"), "w") as f:
      f.write("\n".join(rows) + "\n")


def _run(tmp, name, *extra):
  out = os.path.join(tmp, name)
  command = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=SST-2",
             f"--data_dir={tmp}", f"--bert_config_file={tmp}/bert_config.json",
             f"--vocab_file={tmp}/vocab.txt", f"--output_dir={out}", "--do_train", "--do_eval",
             "--train_batch_size=32", "--eval_batch_size=32", "--num_train_epochs=1",
             f"--max_seq_length={FLAGS.max_seq_length}", "--seed=1",
             f"--log_steps={FLAGS.eval_steps // 2}", "--save_checkpoints_steps=100000",
             *extra]
  start = time.time()
  proc = subprocess.run(command, capture_output=True, text=True,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
  seconds = time.time() - start
  if proc.returncode:
    raise RuntimeError(proc.stderr[-3000:])
  with open(os.path.join(out, "train_log.csv")) as f:
    rates = [float(r["steps_per_second"]) for r in csv.DictReader(f)][1:]  # first: tracing
  evals = [float(s) for s in re.findall(r"Evaluation at step \d+: .*\((\d+\.\d) s\)",
                                        proc.stderr)]
  return rates, evals, seconds


def main(_):
  with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "vocab.txt"), "w") as f:
      f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertConfig(vocab_size=405, hidden_size=FLAGS.hidden_size,
               num_hidden_layers=FLAGS.layers, num_attention_heads=FLAGS.hidden_size // 64,
               intermediate_size=4 * FLAGS.hidden_size,
               max_position_embeddings=max(128, FLAGS.max_seq_length)).to_json_file(
                   os.path.join(tmp, "bert_config.json"))
    _write_data(tmp, n_train=32 * FLAGS.steps, n_dev=872)
    plain, _, plain_seconds = _run(tmp, "plain")
    evaluating, evals, eval_seconds = _run(tmp, "eval", f"--eval_every_steps={FLAGS.eval_steps}")
  rate, rate_eval = statistics.median(plain), statistics.median(evaluating)
  print(f"model: hidden {FLAGS.hidden_size}, {FLAGS.layers} layers, seq "
        f"{FLAGS.max_seq_length}, batch 32; dev 872 sentences; {FLAGS.steps} steps")
  print(f"training steps/s, plain run:        {rate:.3f} (median of {len(plain)} intervals)")
  print(f"training steps/s, evaluating run:   {rate_eval:.3f} ({rate_eval / rate:.1%} of plain)")
  first, rest = evals[0], statistics.median(evals[1:]) if len(evals) > 1 else evals[0]
  print(f"one dev evaluation: {rest:.2f} s (first, with tracing: {first:.2f} s) = "
        f"{rest * rate:.1f} training steps")
  extra = (eval_seconds - plain_seconds) / len(evals)
  print(f"whole runs: {plain_seconds:.1f} s plain, {eval_seconds:.1f} s with {len(evals)} "
        f"evaluations: {extra:.2f} s = {extra * rate:.1f} training steps per evaluation "
        "(its checkpoint and best/ included)")


if __name__ == "__main__":
  app.run(main)
