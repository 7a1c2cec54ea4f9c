"""Learns a WordPiece vocab.txt from raw text, for create_pretraining_data.py and pretraining.

  python learn_vocab.py --input_file=corpus.txt --vocab_file=vocab.txt --vocab_size=8000

The vocab begins [PAD] [UNK] [CLS] [SEP] [MASK], then --num_unused_tokens
placeholders [unused0]..., then the learned pieces (see data/wordpiece_vocab.py
for the relation to Google's released vocabularies).
"""

import sys
import time

from absl import flags

from cli import app

flags.DEFINE_string("input_file", None, "Text files: comma-separated paths or globs.")
flags.DEFINE_string("vocab_file", None, "Where to write vocab.txt.")
flags.DEFINE_integer("vocab_size", 30522, "Largest vocabulary size, special tokens included.")
flags.DEFINE_bool("do_lower_case", True,
                  "Lower-case and strip accents before counting (an uncased vocab).")
flags.DEFINE_integer("num_unused_tokens", 0,
                     "[unusedN] placeholders to reserve after the special tokens.")
flags.DEFINE_integer("min_count", 2, "Ignore words seen fewer times.")
flags.DEFINE_integer("max_unique_chars", 1000, "Largest alphabet; rarer characters are dropped.")
FLAGS = flags.FLAGS


def main(_):
  app.check_given(input_file=FLAGS.input_file, vocab_file=FLAGS.vocab_file)
  from data import files, path_checks, text_decoding, wordpiece_vocab
  from data.progress import Progress
  paths = path_checks.expand_file_patterns(FLAGS.input_file, "--input_file")
  path_checks.check_output_file(FLAGS.vocab_file, "--vocab_file", paths)
  wordpiece_vocab.reserved_tokens(FLAGS.vocab_size, FLAGS.num_unused_tokens)  # room left?
  start = time.time()
  progress = Progress("counting", sum(files.size(p) for p in paths))
  undecodable = text_decoding.Undecodable()
  counts = wordpiece_vocab.count_words(paths, FLAGS.do_lower_case,
                                       lambda done: progress.update(done, bytes=done), undecodable)
  if undecodable.count:
    print(undecodable.report(), file=sys.stderr)
  if not counts:
    raise ValueError(f"--input_file: no words in {', '.join(paths)}.")
  print(f"counted {sum(counts.values()):,} words, {len(counts):,} distinct; learning...",
        file=sys.stderr)
  vocab = wordpiece_vocab.learn(counts, FLAGS.vocab_size, FLAGS.num_unused_tokens,
                                FLAGS.min_count, FLAGS.max_unique_chars)
  with files.atomic_output(FLAGS.vocab_file) as f:
    f.write("\n".join(vocab) + "\n")
  known, pieces = wordpiece_vocab.coverage(counts, vocab)
  print(f"wrote {len(vocab):,} tokens to {FLAGS.vocab_file} in {time.time() - start:.1f}s; "
        f"{known:.2%} of words known, {pieces:.2f} WordPieces per word", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
