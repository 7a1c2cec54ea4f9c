"""The paper's Table 5 (pretraining tasks) at small scale, through the real scripts.

From one corpus and one WordPiece vocabulary (learned from it), the same small
model is pretrained three ways for the same number of steps with
run_pretraining.py: MLM + NSP (the original), MLM only
(--next_sentence_weight=0, the paper's "No NSP") and a left-to-right model
(--objective=ltr, "LTR & No NSP"). Each is then fine-tuned with
run_classifier.py on a GLUE task and with run_squad.py on a span task cut
from a SQuAD file (answerable questions only, v1.1 style, articles split into
train and dev); the LTR model is fine-tuned once more with --bilstm_head (the
paper's "+ BiLSTM"). Prints one table in the paper's layout, plus the LTR
model's held-out next-token loss against a unigram model of the training
records. Finished steps (a run directory with its results) are reused, so an
interrupted run picks up where it stopped.

MLM + NSP reads records with random next sentences; the other two read
records of contiguous text (create_pretraining_data.py --nonext_sentence), so
MLM only and LTR see exactly the same tokens.

  python benchmarks/experiments/table5.py --work_dir=/tmp/table5 --steps=4000
  python benchmarks/experiments/table5.py --work_dir=/tmp/table5_quick --quick   # minutes: a check
"""

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402

from benchmarks.common import corpus, launch  # noqa: E402

flags.DEFINE_string("glue_dir", os.path.join(launch.SHARED, "glue", "RTE"),
                    "A GLUE task's directory.")
flags.DEFINE_string("glue_task", "RTE", "Its --task_name.")
flags.DEFINE_string("squad_file", os.path.join(launch.SHARED, "squad", "dev-v2.0-half.json"),
                    "SQuAD json whose answerable questions make the span task.")
flags.DEFINE_float("squad_train_share", 0.75, "Share of the articles trained on; the rest is dev.")
corpus.define_flags(__name__, steps=4000)
flags.DEFINE_string("size", "4/256/4", "Model as L/H/A (feed-forward 4H).")
flags.DEFINE_list("finetune_seeds", ["1"], "Fine-tuning seeds; the table shows their mean.")
flags.DEFINE_float("finetune_learning_rate", 5e-5, "Fine-tuning learning rate (both tasks).")
flags.DEFINE_float("finetune_epochs", 3.0, "Fine-tuning epochs (both tasks).")
flags.DEFINE_integer("finetune_max_seq_length", 128, "run_classifier's --max_seq_length.")
flags.DEFINE_integer("squad_max_seq_length", 256, "run_squad's --max_seq_length.")
flags.DEFINE_integer("max_examples", 0, "Use at most this many GLUE training examples and "
                     "SQuAD questions per split (0: all).")
flags.DEFINE_integer("seed", 1, "Pretraining seed (data order, weights, dropout).")
flags.DEFINE_bool("quick", False, "A few minutes' check of the whole flow: two short books, "
                  "a 2/64/2 model, 20 steps, 200 examples.")
FLAGS = flags.FLAGS

# (row label, pretraining run, extra fine-tuning flags), in the paper's order.
ROWS = [("MLM + NSP (BERT)", "mlm_nsp", []), ("No NSP", "mlm", []),
        ("LTR & No NSP", "ltr", []), ("+ BiLSTM", "ltr", ["--bilstm_head"])]
PRETRAINING = {"mlm_nsp": ["--next_sentence_weight=1"], "mlm": ["--next_sentence_weight=0"],
               "ltr": ["--objective=ltr"]}


def prepare_pretraining_data(work):
  """Corpus, vocab, NSP records, contiguous records and held-out contiguous records."""
  p = corpus.prepare_text(work, corpus.books(FLAGS.input_files, FLAGS.quick), FLAGS.vocab_size)
  shape = (FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)
  for name, text, dupe, extra in (("nsp", "train", FLAGS.dupe_factor, []),
                                  ("text", "train", FLAGS.dupe_factor, ["--nonext_sentence"]),
                                  ("heldout", "heldout", 1, ["--nonext_sentence"])):
    p[f"{name}.tfrecord"] = corpus.make_records(p[text + ".txt"], p["vocab.txt"],
                                                os.path.join(work, f"{name}.tfrecord"), *shape,
                                                dupe, *extra)
  return p


def prepare_finetuning_data(work):
  """(GLUE directory, SQuAD train json, SQuAD dev json), cut to --max_examples."""
  glue = os.path.join(work, "glue")
  if not os.path.exists(os.path.join(glue, "dev.tsv")):
    os.makedirs(glue, exist_ok=True)
    for split in ("train", "dev"):
      with open(os.path.join(FLAGS.glue_dir, f"{split}.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
      if FLAGS.max_examples:
        header = 1 if lines and lines[0].lower().startswith("index") else 0
        lines = lines[:header + FLAGS.max_examples]
      with open(os.path.join(glue, f"{split}.tsv"), "w", encoding="utf-8") as f:
        f.writelines(lines)
  train, dev = os.path.join(work, "squad_train.json"), os.path.join(work, "squad_dev.json")
  if not os.path.exists(dev):
    with open(FLAGS.squad_file, encoding="utf-8") as f:
      articles = json.load(f)["data"]
    for article in articles:  # v1.1 style: answerable questions only
      for paragraph in article["paragraphs"]:
        paragraph["qas"] = [q for q in paragraph["qas"] if not q.get("is_impossible")]
    cut = max(1, min(len(articles) - 1, round(len(articles) * FLAGS.squad_train_share)))
    for article in articles[:cut]:  # training takes one answer per question: the first
      for paragraph in article["paragraphs"]:
        for question in paragraph["qas"]:
          question["answers"] = question["answers"][:1]
    for path, part in ((train, articles[:cut]), (dev, articles[cut:])):
      if FLAGS.max_examples:
        part = _first_questions(part, FLAGS.max_examples)
      with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": part}, f)
  return glue, train, dev


def _first_questions(articles, count):
  """The articles cut after their first `count` questions."""
  kept = []
  for article in articles:
    paragraphs = []
    for paragraph in article["paragraphs"]:
      if count <= 0:
        break
      qas = paragraph["qas"][:count]
      count -= len(qas)
      if qas:
        paragraphs.append({**paragraph, "qas": qas})
    if paragraphs:
      kept.append({**article, "paragraphs": paragraphs})
  return kept


def pretrain(work, paths, name):
  """One pretraining run (see PRETRAINING); returns its directory."""
  out = os.path.join(work, "pretrain_" + name)
  if os.path.exists(os.path.join(out, "eval_results.txt")):
    return out
  os.makedirs(out, exist_ok=True)
  config_file = corpus.write_config(os.path.join(out, "bert_config.json"), paths["vocab.txt"],
                                    FLAGS.size)
  records = paths["nsp.tfrecord" if name == "mlm_nsp" else "text.tfrecord"]
  every = max(FLAGS.steps // 20, 1)
  launch.script(
      "run_pretraining.py", f"--bert_config_file={config_file}", f"--input_file={records}",
      f"--eval_input_file={paths['heldout.tfrecord']}", f"--output_dir={out}", "--do_train",
      "--do_eval", f"--vocab_file={paths['vocab.txt']}", f"--train_batch_size={FLAGS.batch_size}",
      "--eval_batch_size=32", f"--max_seq_length={FLAGS.max_seq_length}",
      f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
      f"--num_train_steps={FLAGS.steps}", f"--num_warmup_steps={max(FLAGS.steps // 10, 1)}",
      f"--learning_rate={FLAGS.learning_rate}", f"--save_checkpoints_steps={FLAGS.steps}",
      f"--iterations_per_loop={every}", f"--log_steps={every}", "--max_eval_steps=100",
      f"--seed={FLAGS.seed}", *PRETRAINING[name])
  return out


def finetune(work, model, extra, seed, glue, squad_train, squad_dev):
  """(GLUE eval results, SQuAD scores) of one fine-tuning of `model`'s export."""
  init = os.path.join(model, "export")
  tag = os.path.basename(model) + ("_bilstm" if extra else "") + f"_seed{seed}"
  common = [f"--init_checkpoint={init}", f"--learning_rate={FLAGS.finetune_learning_rate}",
            f"--num_train_epochs={FLAGS.finetune_epochs}", f"--seed={seed}", "--do_train",
            "--train_batch_size=32", *extra]
  out = os.path.join(work, "glue_" + tag)
  if not os.path.exists(os.path.join(out, "eval_results.txt")):
    launch.script(
        "run_classifier.py", f"--task_name={FLAGS.glue_task}", f"--data_dir={glue}",
        f"--output_dir={out}", "--do_eval", "--eval_batch_size=32",
        f"--max_seq_length={FLAGS.finetune_max_seq_length}", *common)
  glue_results = launch.read_results(os.path.join(out, "eval_results.txt"))
  out = os.path.join(work, "squad_" + tag)
  if not os.path.exists(os.path.join(out, "eval_results.json")):
    launch.script(
        "run_squad.py", f"--train_file={squad_train}", f"--predict_file={squad_dev}",
        f"--output_dir={out}", "--do_predict", "--predict_batch_size=32",
        f"--max_seq_length={FLAGS.squad_max_seq_length}", "--doc_stride=128",
        "--max_query_length=64", *common)
  with open(os.path.join(out, "eval_results.json")) as f:
    return glue_results, json.load(f)


def unigram_loss(vocab_file, train_records, heldout_records):
  """Next-token cross entropy of a unigram model (add-one counts of the training records'
  text) on the held-out positions the LTR task predicts."""
  import numpy as np
  import tensorflow as tf
  from data import features
  from modeling import language_model
  spec = features.pretraining_feature_spec(FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)

  def texts(path):
    for batch in tf.data.TFRecordDataset(path).batch(4096).map(
        lambda r: tf.io.parse_example(r, spec)):
      batch = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in batch.items()}
      yield np.asarray(language_model.original_tokens(batch)), batch["input_mask"].numpy()

  vocab = sum(1 for _ in open(vocab_file, encoding="utf-8"))
  counts = np.ones(vocab)
  for ids, mask in texts(train_records):
    np.add.at(counts, ids[:, 1:][(mask[:, :-1] * mask[:, 1:]) > 0], 1)
  logp = np.log(counts / counts.sum())
  total, n = 0.0, 0
  for ids, mask in texts(heldout_records):
    predicted = ids[:, 1:][(mask[:, :-1] * mask[:, 1:]) > 0]
    total, n = total - logp[predicted].sum(), n + predicted.size
  return total / n


def main(_):
  if not FLAGS.work_dir:
    raise ValueError("--work_dir is required.")
  if FLAGS.quick:
    corpus.apply_quick()
    FLAGS.size, FLAGS.max_examples, FLAGS.finetune_epochs = "2/64/2", 200, 1.0
    FLAGS.finetune_max_seq_length, FLAGS.squad_max_seq_length = 64, 128
  start = time.time()
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  paths = prepare_pretraining_data(FLAGS.work_dir)
  glue, squad_train, squad_dev = prepare_finetuning_data(FLAGS.work_dir)
  models = {name: pretrain(FLAGS.work_dir, paths, name) for name in PRETRAINING}
  rows = []
  for label, name, extra in ROWS:
    scores = [finetune(FLAGS.work_dir, models[name], extra, int(seed), glue, squad_train,
                       squad_dev) for seed in FLAGS.finetune_seeds]
    mean = lambda values: sum(values) / len(values)
    spread = lambda values: (max(values) - min(values)) / 2
    accuracy = [float(g["eval_accuracy"]) * 100 for g, _ in scores]
    em, f1 = [s["exact_match"] for _, s in scores], [s["f1"] for _, s in scores]
    rows.append((label, mean(accuracy), spread(accuracy), mean(em), mean(f1), spread(f1)))
  ltr = launch.read_results(os.path.join(models["ltr"], "eval_results.txt"))
  unigram = unigram_loss(paths["vocab.txt"], paths["text.tfrecord"], paths["heldout.tfrecord"])
  wall = time.time() - start
  seeds = len(FLAGS.finetune_seeds)
  print(f"\nTable 5 at small scale: L/H/A {FLAGS.size}, {FLAGS.steps} pretraining steps of "
        f"{FLAGS.batch_size} x {FLAGS.max_seq_length} tokens, mean of {seeds} fine-tuning "
        f"seed(s) (+- half the range)\n")
  print(f"| Pretraining tasks | {FLAGS.glue_task} (Acc) | SQuAD-style (EM) | SQuAD-style (F1) |")
  print("|---|---|---|---|")
  for label, acc, acc_spread, em, f1, f1_spread in rows:
    print(f"| {label} | {acc:.1f} +- {acc_spread:.1f} | {em:.1f} | {f1:.1f} +- {f1_spread:.1f} |")
  loss = float(ltr["next_token_loss"])
  print(f"\nLTR held-out next-token loss {loss:.3f} (perplexity {math.exp(loss):.1f}); "
        f"unigram model of the training text {unigram:.3f} (perplexity {math.exp(unigram):.1f})")
  print(f"wall time {wall:.0f} s (steps already done in --work_dir are not re-run)")


if __name__ == "__main__":
  launch.main_guarded(main)
