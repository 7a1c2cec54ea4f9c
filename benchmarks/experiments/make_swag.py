r"""Makes SWAG-layout questions from plain-text books, for trying run_swag.py on real text.

  python benchmarks/experiments/make_swag.py --input_files='corpus/gutenberg/*.txt' --output_dir=swag_text \
    --heldout=austen-persuasion,chesterton-brown,shakespeare-macbeth

Each question: a sentence as sent1, sent2 empty, and four endings: the
sentence that really follows it (in the same paragraph) and three sentences
drawn from elsewhere in the same book (at least --min_distance sentences
away), in random order. Questions of the books named by --heldout go to
val.csv (and, without labels, test.csv), the others to train.csv, so the
evaluation books are never seen in training. Project Gutenberg headers,
licences and footers are cut off before sentence splitting.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags, logging  # noqa: E402

from data import files, path_checks, swag  # noqa: E402

flags.DEFINE_string("input_files", None, "Comma-separated globs of plain-text books.")
flags.DEFINE_string("output_dir", None, "Where train.csv, val.csv and test.csv go.")
flags.DEFINE_list("heldout", ["austen-persuasion", "chesterton-brown", "shakespeare-macbeth"],
                  "Books (file names without .txt) whose questions form val.csv and test.csv.")
flags.DEFINE_integer("train_questions", 2000, "Questions drawn from the training books.")
flags.DEFINE_integer("val_questions", 500, "Questions drawn from the held-out books.")
flags.DEFINE_integer("min_words", 5, "Shortest sentence used, in words.")
flags.DEFINE_integer("max_words", 40, "Longest sentence used, in words.")
flags.DEFINE_integer("min_distance", 20, "Distractors lie at least this many sentences away.")
flags.DEFINE_integer("seed", 12345, "Seeds the choice of questions, distractors and order.")
FLAGS = flags.FLAGS


def main(_):
  if not FLAGS.input_files or not FLAGS.output_dir:
    raise app.UsageError("--input_files and --output_dir are required.")
  rng = random.Random(FLAGS.seed)
  train, val = [], []
  for path in sorted(path_checks.expand_file_patterns(FLAGS.input_files, "--input_files")):
    name = os.path.splitext(os.path.basename(path))[0]
    with files.open_file(path, "rb") as f:
      text = f.read().decode("utf-8", "ignore").replace("\r", "")
    questions = swag.book_questions(name, swag.book_sentences(text), rng, FLAGS.min_words,
                               FLAGS.max_words, FLAGS.min_distance)
    logging.info("%s: %d questions%s", name, len(questions),
                 " (held out)" if name in FLAGS.heldout else "")
    (val if name in FLAGS.heldout else train).extend(questions)
  missing = set(FLAGS.heldout) - {q[0] for q in val}
  if missing:
    raise app.UsageError(f"--heldout names books with no questions: {', '.join(sorted(missing))}")
  train = rng.sample(train, min(FLAGS.train_questions, len(train)))
  val = rng.sample(val, min(FLAGS.val_questions, len(val)))
  files.makedirs(FLAGS.output_dir)
  swag.write_questions(os.path.join(FLAGS.output_dir, "train.csv"), train)
  swag.write_questions(os.path.join(FLAGS.output_dir, "val.csv"), val)
  swag.write_questions(os.path.join(FLAGS.output_dir, "test.csv"), val, with_labels=False)
  logging.info("Wrote %d training and %d held-out questions to %s", len(train), len(val),
               FLAGS.output_dir)


if __name__ == "__main__":
  app.run(main)
