r"""Learns a WordPiece vocab.txt from raw text, for create_pretraining_data.py and pretraining.

  python learn_vocab.py --input_file=corpus.txt --vocab_file=vocab.txt --vocab_size=8000

The vocab begins [PAD] [UNK] [CLS] [SEP] [MASK], then --num_unused_tokens
placeholders [unused0]..., then the learned pieces (see data/wordpiece_vocab.py
for the relation to Google's released vocabularies).

With --base_vocab_file it extends that vocab instead (data/vocab_extension.py):
the --num_new_tokens words of the input the base vocab splits into the most
pieces, weighted by frequency, fill its [unusedN] slots or are appended.

  python learn_vocab.py --input_file=notes.txt --base_vocab_file=$BERT/vocab.txt \
    --vocab_file=vocab.txt --num_new_tokens=500 --held_out_file=held_out.txt
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
                     "[unusedN] placeholders to reserve after the special tokens.", lower_bound=0)
flags.DEFINE_integer("min_count", 2, "Ignore words seen fewer times.", lower_bound=1)
flags.DEFINE_integer("max_unique_chars", 1000, "Largest alphabet; rarer characters are dropped.",
                     lower_bound=1)
# Added: extending a released vocab.
flags.DEFINE_string("base_vocab_file", None,
                    "Extend this vocab.txt with the input's words instead of learning one.")
flags.DEFINE_enum("extension", "unused", ["unused", "append"],
                  "unused: new words take the base vocab's [unusedN] slots (ids unchanged); "
                  "append: they follow its last entry (a larger vocab_size).")
flags.DEFINE_integer("num_new_tokens", 100, "Words to add with --base_vocab_file.", lower_bound=1)
flags.DEFINE_string("held_out_file", None,
                    "With --base_vocab_file: text to report WordPieces per word on, before and "
                    "after (default: the input).")
FLAGS = flags.FLAGS


def held_out_counts():
  """The words of --held_out_file (None without it), counted before the input: a file
  without words stops the run first."""
  from data import path_checks, wordpiece_vocab
  if not FLAGS.held_out_file:
    return None
  counts = wordpiece_vocab.count_words(
      path_checks.expand_file_patterns(FLAGS.held_out_file, "--held_out_file"),
      FLAGS.do_lower_case)
  if not counts:
    raise ValueError(f"--held_out_file={FLAGS.held_out_file}: no words to measure pieces per "
                     "word on.")
  return counts


def extend_vocab(counts, held_out, log):
  """--base_vocab_file: writes the extended vocab and its report; logs pieces per word."""
  from data import vocab_extension
  report = vocab_extension.extend_vocab_file(
      counts, FLAGS.base_vocab_file, FLAGS.vocab_file, FLAGS.num_new_tokens, FLAGS.extension,
      held_out, FLAGS.min_count)
  text = "held-out text" if FLAGS.held_out_file else "the input (no --held_out_file)"
  log(f"added {len(report['new_tokens'])} words ({FLAGS.extension}) to "
      f"{FLAGS.base_vocab_file}: {report['vocab_size']:,} tokens in {FLAGS.vocab_file}; "
      f"WordPieces per word on {text}: {report['pieces_per_word_before']:.3f} before, "
      f"{report['pieces_per_word_after']:.3f} after")
  if len(report["new_tokens"]) < FLAGS.num_new_tokens:
    log(f"only {len(report['new_tokens'])} of --num_new_tokens={FLAGS.num_new_tokens}: the "
        f"input has no more words seen --min_count={FLAGS.min_count} times or more that the "
        "base vocab splits into several pieces (none of them [UNK]; check --do_lower_case "
        "against the base vocab's case)")


def main(_):
  app.check_given(input_file=FLAGS.input_file, vocab_file=FLAGS.vocab_file)
  app.log_flags()
  from data import files, path_checks, text_decoding, tokenization, wordpiece_vocab
  from data.progress import Progress
  paths = path_checks.expand_file_patterns(FLAGS.input_file, "--input_file")
  path_checks.check_output_file(FLAGS.vocab_file, "--vocab_file", paths + [
      p for p in (FLAGS.base_vocab_file, FLAGS.held_out_file) if p])
  if FLAGS.base_vocab_file:
    path_checks.check_input_files(base_vocab_file=FLAGS.base_vocab_file,
                                  held_out_file=FLAGS.held_out_file)
    from data import vocab_extension
    base = tokenization.vocab_tokens(FLAGS.base_vocab_file)
    slots = sum(map(vocab_extension.is_unused, base))
    if FLAGS.extension == "unused" and FLAGS.num_new_tokens > slots:
      raise ValueError(f"--num_new_tokens={FLAGS.num_new_tokens}: --base_vocab_file="
                       f"{FLAGS.base_vocab_file} has only {slots} [unusedN] slots; ask for "
                       "fewer or use --extension=append.")
    if not FLAGS.do_lower_case and vocab_extension.is_uncased(base):
      raise ValueError(f"--do_lower_case=false, but --base_vocab_file={FLAGS.base_vocab_file} "
                       "has no upper-case letter (an uncased vocab): no word with one would "
                       "match it. Leave --do_lower_case at true.")
    held_out = held_out_counts()
  else:
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
  print(f"counted {sum(counts.values()):,} words, {len(counts):,} distinct", file=sys.stderr)
  if FLAGS.base_vocab_file:
    return extend_vocab(counts, held_out, lambda line: print(line, file=sys.stderr))
  vocab = wordpiece_vocab.learn(counts, FLAGS.vocab_size, FLAGS.num_unused_tokens,
                                FLAGS.min_count, FLAGS.max_unique_chars)
  with files.atomic_output(FLAGS.vocab_file) as f:
    f.write("\n".join(vocab) + "\n")
  known, pieces = wordpiece_vocab.coverage(counts, vocab)
  print(f"wrote {len(vocab):,} tokens to {FLAGS.vocab_file} in {time.time() - start:.1f}s; "
        f"{known:.2%} of words known, {pieces:.2f} WordPieces per word", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
