r"""One question at a time: a run_squad.py export against the same weights in PyTorch.

What a question-answering service sees: a model fine-tuned by run_squad.py and exported
with --export_dir, asked one question at a time through its serving_default signature from
raw strings, loaded as TensorFlow Serving loads it (its warm-up requests replayed) with the
weights kept converted as predict.py keeps them; against the same weights converted by
convert_checkpoint.py --output_format=hf, answering in PyTorch with transformers' fast
tokenizer as its question-answering pipeline did (benchmarks/common/serving_tasks.py
hf_question_answerer), in the export's precision. The PyTorch side runs in another
interpreter (--hf_python) and times its own calls; the two sides take turns request by
request, so a change in a shared machine's speed falls on both. Printed: each side's median
and p99 latency, ours over theirs, and how many answers are the same string (and the same
after SQuAD's answer normalization). The PyTorch side makes the windows the export records
(squad_export.Windows: run_squad.py's --max_seq_length, --doc_stride, --max_query_length
and --max_answer_length).

  python benchmarks/speed/squad_requests.py --export_dir=/tmp/squad_export/export \
    --hf_dir=/tmp/squad_export/hf --questions=/tmp/squad_export/questions.jsonl --threads=2

benchmarks/checks/squad_export.py trains, exports, converts and runs this in one command.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if not any(a.startswith("--hf_side") for a in sys.argv):  # that side: torch, no TensorFlow
  from cli.app import use_inference_defaults, use_tensorflow_defaults

  use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
  use_inference_defaults()  # as predict.py: the export's weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks  # noqa: E402

flags.DEFINE_string("export_dir", None, "A run_squad.py --export_dir SavedModel.")
flags.DEFINE_string("hf_dir", None, "The same weights as a local Hugging Face directory "
                    "(convert_checkpoint.py --output_format=hf).")
flags.DEFINE_string("questions", None, "JSON Lines (a local or gs:// path), each with "
                    "\"question\" and \"context\" (predict.py's input). Default: SQuAD's "
                    "dev questions in --data_dir.")
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR,
                    "Holds squad/dev-v2.0-half.json, read when --questions is not given.")
flags.DEFINE_integer("requests", 200, "Questions asked, one at a time, by each side.",
                     lower_bound=1)
flags.DEFINE_integer("threads", 2, "Threads on both sides: torch's, and TensorFlow's intra-op "
                     "and inter-op pools (0: the library's choice).", lower_bound=0)
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python",
                    "Interpreter with torch and transformers for the PyTorch side.")
flags.DEFINE_string("hf_side", None, "Internal: run the PyTorch side on this directory.")
flags.DEFINE_string("dtype", "float32", "Internal: the PyTorch side's dtype.")
flags.DEFINE_string("windows", None, "Internal: the export's window settings for the PyTorch "
                    "side, as JSON.")
FLAGS = flags.FLAGS


def read_questions(path, data_dir, count):
  """The first `count` {"question", "context"} rows of `path` (JSON Lines) or, without it,
  of SQuAD's dev file in `data_dir`; a bad file is one error naming it (and its line)."""
  if not path:
    return serving_tasks.real_rows_or_exit(["squad"], data_dir)["squad"][:count]
  from data import text_decoding  # a local path or a bucket's
  rows = []
  try:
    for number, line in enumerate(text_decoding.text_lines(text_decoding.read_text(path)), 1):
      if len(rows) == count:
        break
      if not line.strip():  # blank lines are skipped, as predict.py skips them
        continue
      try:
        row = json.loads(line)
      except ValueError as e:
        raise ValueError(f"line {number}: not JSON ({getattr(e, 'msg', e)})") from None
      if not (isinstance(row, dict) and isinstance(row.get("question"), str)
              and isinstance(row.get("context"), str)):
        raise ValueError(f"line {number}: no \"question\" and \"context\" strings")
      rows.append({"question": row["question"], "context": row["context"]})
  except ValueError as e:
    sys.exit(f"error: --questions={path}: {e}")
  if not rows:
    sys.exit(f"error: --questions={path}: no questions")
  return rows


def hf_side():
  """The PyTorch side: a JSON {"question", "context"} line on stdin -> {"seconds", "text"}
  on stdout."""
  import torch
  if FLAGS.threads:
    torch.set_num_threads(FLAGS.threads)
  windows = json.loads(FLAGS.windows)
  answer = serving_tasks.hf_question_answerer(
      FLAGS.hf_side, FLAGS.dtype, max_length=windows["max_seq_length"], **{
          k: v for k, v in windows.items() if k != "max_seq_length"})
  print("READY", flush=True)
  for line in sys.stdin:
    row = json.loads(line)
    start = time.perf_counter()
    text = answer({"question": [row["question"]], "context": [row["context"]]})[0]
    print(json.dumps({"seconds": time.perf_counter() - start, "text": text}), flush=True)


def main(_):
  if FLAGS.hf_side:
    hf_side()
    return
  from data import files
  for name, inside in (("export_dir", "saved_model.pb"), ("hf_dir", "config.json")):
    if not getattr(FLAGS, name):
      sys.exit(f"error: --{name} is required")
    if not files.exists(os.path.join(getattr(FLAGS, name), inside)):
      sys.exit(f"error: --{name}={getattr(FLAGS, name)}: no {inside} there")
  if not os.access(FLAGS.hf_python, os.X_OK):
    sys.exit(f"error: --hf_python={FLAGS.hf_python}: no such interpreter (one with torch and "
             "transformers)")
  rows = read_questions(FLAGS.questions, FLAGS.data_dir, FLAGS.requests)
  import numpy as np
  import tensorflow as tf
  from benchmarks.common import timing
  from data import progress, squad_evaluation
  timing.use_threads(FLAGS.threads)
  loaded = tf.saved_model.load(FLAGS.export_dir)
  serve = loaded.signatures.get("serving_default")
  if serve is None or set(serve.structured_input_signature[1]) != {"question", "context"}:
    sys.exit(f"error: --export_dir={FLAGS.export_dir}: not a run_squad.py export (its "
             "serving_default takes no question and context)")
  if getattr(loaded, "windows", None) is None:  # recorded by exports since 2026-12-07
    sys.exit(f"error: --export_dir={FLAGS.export_dir}: the export does not record its window "
             "settings (written before 2026-12-07): export it again with run_squad.py")
  windows = {name: int(getattr(loaded.windows, name).numpy()) for name in (
      "max_seq_length", "doc_stride", "max_query_length", "max_answer_length")}
  precision = getattr(loaded, "precision", None)  # recorded by exports since 2026-12-06
  dtype = precision.dtype.numpy().decode() if precision is not None else "float32"
  from modeling import export
  replay = None  # exports written before 2026-12-07 carry no warm-up file
  if files.exists(os.path.join(FLAGS.export_dir, export.WARM_UP_FILE)):
    replay = serving_tasks.replay_warm_up(serve, FLAGS.export_dir)
  hf = subprocess.Popen(
      [FLAGS.hf_python, os.path.abspath(__file__), f"--hf_side={FLAGS.hf_dir}",
       f"--dtype={dtype}", f"--threads={FLAGS.threads}", f"--windows={json.dumps(windows)}"],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def theirs(i):
    got = serving_tasks.ask(hf, json.dumps(rows[i]))
    return got["seconds"], got["text"]

  def ours(i):
    start = time.perf_counter()
    text = serve(question=tf.constant([rows[i]["question"]]),
                 context=tf.constant([rows[i]["context"]]))["text"].numpy()[0]
    return time.perf_counter() - start, text.decode("utf-8")

  ours(0), theirs(0)  # each side's first call (torch sets itself up)
  times, texts = {"ours": [], "theirs": []}, {"ours": [], "theirs": []}
  shown = progress.Progress("asking", total=len(rows), interval=10)
  for i in range(len(rows)):
    for side, call in (("ours", ours), ("theirs", theirs))[::1 - 2 * (i % 2)]:  # turns
      seconds, text = call(i)
      times[side].append(1000 * seconds)
      texts[side].append(text)
    shown.update(i + 1, questions=i + 1)
  hf.stdin.close()
  hf.wait()
  same = [a == b for a, b in zip(texts["ours"], texts["theirs"])]
  normalized = [squad_evaluation.normalize_answer(a) == squad_evaluation.normalize_answer(b)
                for a, b in zip(texts["ours"], texts["theirs"])]
  p50 = {side: float(np.median(t)) for side, t in times.items()}
  p99 = {side: float(np.percentile(t, 99)) for side, t in times.items()}
  print(f"{timing.cpu()}; {FLAGS.threads or 'default'} threads each side; {dtype}; "
        f"{len(rows)} questions one at a time, windows of {windows['max_seq_length']} every "
        f"{windows['doc_stride']}; " + ("no warm-up file" if replay is None
                                    else f"warm-up file replayed in {replay:.1f} s"))
  print(f"{'':<8}{'p50 ms':>9}{'p99 ms':>9}")
  for side in ("ours", "theirs"):
    print(f"{side:<8}{p50[side]:>9.1f}{p99[side]:>9.1f}")
  print(f"{'x theirs':<8}{p50['ours'] / p50['theirs']:>9.2f}{p99['ours'] / p99['theirs']:>9.2f}")
  print(f"the same answer string: {sum(same)} of {len(rows)}; the same after SQuAD's "
        f"normalization: {sum(normalized)}")
  for i in [i for i, n in enumerate(normalized) if not n][:5]:
    print(f"  question {i}: ours {texts['ours'][i]!r}, theirs {texts['theirs'][i]!r}")


if __name__ == "__main__":
  app.run(main)
