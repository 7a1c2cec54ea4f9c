r"""Turns raw text into masked-LM / next-sentence pretraining TFRecords.

Input: one sentence per line, a blank line between documents (see
prepare_corpus.py). By default the output is exactly the original's: the same
input, vocab, flags and seed give the same instances in the same order.
--num_workers=N (N > 1) or --streaming switch to streaming mode: bounded
memory for corpora of any size, N processes, deterministic for a seed and N.
--shard_by_input_file makes each output file from its own share of the input
files, as one run of the original per output would, in --num_workers
processes at once; the files are the same for any number of workers.

  python create_pretraining_data.py --input_file=corpus.txt \
    --output_file=train.tfrecord --vocab_file=vocab.txt
  python create_pretraining_data.py --input_file='text/*.txt' --vocab_file=vocab.txt \
    --output_file=records/train.tfrecord --num_output_files=256 \
    --shard_by_input_file --num_workers=16
"""

import sys

from absl import flags, logging

from cli import app

flags.DEFINE_string("input_file", None,
                    "Input text: comma-separated files or globs, one sentence per line, "
                    "blank lines between documents.")
flags.DEFINE_string("output_file", None,
                    "Output TFRecord file, or a comma-separated list written round-robin.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocab).")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Mask whole words: all WordPieces of a word together.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, [CLS] and [SEP]s included.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked positions per instance.")
flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice.")
flags.DEFINE_integer("dupe_factor", 10,
                     "Passes over the corpus, each with fresh pairings and masks.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of a shorter target length for a document pass.")
# Added flags.
flags.DEFINE_integer("num_workers", 1,
                     "Worker processes. 1: the original's exact output, all in memory. "
                     "More: streaming mode with that many processes; with "
                     "--shard_by_input_file, that many output files made at once.")
flags.DEFINE_integer("num_output_files", 1,
                     "More than 1: write this many files named <--output_file>-00000-of-0000N "
                     "(--output_file then names one file).")
flags.DEFINE_bool("shard_by_input_file", False,
                  "Output file j of K is made from input files j, j+K, j+2K, ... with seed "
                  "--random_seed+j: the file one run with those inputs and that seed writes "
                  "(with --streaming, in streaming mode with one worker). Outputs are made "
                  "--num_workers at a time and are the same for any number of workers. "
                  "Needs at least as many input files as output files.")
flags.DEFINE_bool("streaming", False,
                  "Streaming mode even with one worker: memory stays flat as the corpus grows.")
flags.DEFINE_enum("output_compression", "none", ["none", "gzip"],
                  "Compression of the output TFRecords (readers need the same setting).")
flags.DEFINE_integer("shuffle_buffer_size", 100_000,
                     "Streaming mode: instances held to shuffle the output.")
flags.DEFINE_integer("streaming_block_tokens", 1_000_000,
                     "Streaming mode: tokens per block of documents processed together; "
                     "random next sentences come from the same block.")
flags.DEFINE_string("masking_mix", "0.8,0.1,0.1",
                    "MASK,SAME,RANDOM: shares of the masked positions written as [MASK], "
                    "kept, or a random word (the paper's Table 8); the default is the "
                    "original's and keeps its output.")
flags.DEFINE_bool("next_sentence", True,
                  "Next-sentence pairs as the original (half random next). False: every "
                  "instance is contiguous text of one document, labels all 0 (the paper's "
                  "'No NSP').")
flags.DEFINE_bool("per_word_decision", False,
                  "Whole-word masking that draws [MASK]/kept/random once per word, for all "
                  "its WordPieces (the original draws per WordPiece).")
flags.DEFINE_integer("max_ngram_size", 1,
                     "More than 1: n-gram masking, spans of 1..N whole words of a segment, "
                     "length n with probability proportional to 1/n.")
FLAGS = flags.FLAGS


def _validate():
  app.check_given(input_file=FLAGS.input_file, output_file=FLAGS.output_file,
                       vocab_file=FLAGS.vocab_file)
  if FLAGS.max_seq_length < 5:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} is too small: [CLS], two "
                     "[SEP]s and at least two tokens of text need 5.")
  if FLAGS.max_predictions_per_seq < 0:
    raise ValueError("--max_predictions_per_seq must not be negative.")
  for name in ("masked_lm_prob", "short_seq_prob"):
    if not 0.0 <= FLAGS[name].value <= 1.0:
      raise ValueError(f"--{name}={FLAGS[name].value} must be between 0 and 1.")
  for name in ("dupe_factor", "num_workers", "num_output_files", "shuffle_buffer_size",
               "streaming_block_tokens"):
    if FLAGS[name].value < 1:
      raise ValueError(f"--{name}={FLAGS[name].value} must be at least 1.")
  if FLAGS.max_ngram_size < 1:
    raise ValueError(f"--max_ngram_size={FLAGS.max_ngram_size} must be at least 1.")
  from data.pretraining import instances
  return instances.parse_masking_mix(FLAGS.masking_mix, f"--masking_mix={FLAGS.masking_mix}")


def main(_):
  masking_mix = _validate()
  app.log_flags()
  from data import files, path_checks
  from data.pretraining import instances, sharded
  from data import tokenization

  input_files = path_checks.expand_file_patterns(FLAGS.input_file, "--input_file")
  output_files = [p.strip() for p in FLAGS.output_file.split(",") if p.strip()]
  if FLAGS.num_output_files > 1:
    if len(output_files) != 1:
      raise ValueError(f"--num_output_files={FLAGS.num_output_files} needs one --output_file "
                       f"name to number, not {len(output_files)}.")
    output_files = sharded.sharded_names(output_files[0], FLAGS.num_output_files)
  if FLAGS.shard_by_input_file:
    sharded.input_groups(input_files, len(output_files))  # enough input files: checked now
  # One file named twice would take both shares of the instances, the second replacing the first.
  path_checks.check_distinct_outputs(output_files, "--output_file")
  for path in output_files:  # found now, not when the finished file is renamed into place
    path_checks.check_output_file(path, "--output_file", input_files)
  for path in output_files:
    left = files.remove_leftovers(path)
    if left:
      logging.info("Removed %.1f MB of %s left by an earlier run that did not finish.",
                   left / 1e6, path)
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
  tokenizer.require_tokens(["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
  config = instances.GenerationConfig(
      FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.masked_lm_prob,
      FLAGS.short_seq_prob, FLAGS.do_whole_word_mask, FLAGS.dupe_factor, masking_mix,
      FLAGS.next_sentence, FLAGS.per_word_decision, FLAGS.max_ngram_size)
  compression = "" if FLAGS.output_compression == "none" else "GZIP"
  logging.info("Reading %d input file(s): %s", len(input_files), ", ".join(input_files))
  summary = sharded.generate(
      input_files, output_files, FLAGS.vocab_file, FLAGS.do_lower_case, config,
      FLAGS.random_seed, FLAGS.num_workers, compression, FLAGS.shard_by_input_file,
      FLAGS.streaming, FLAGS.streaming_block_tokens, FLAGS.shuffle_buffer_size)
  for line in summary.examples:
    logging.info("%s", line)
  print("\n".join(summary.lines()), file=sys.stderr)
  print(f"Wrote {summary.instances} total instances to {', '.join(output_files)}",
        file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
