"""Prepares raw text for create_pretraining_data.py: one sentence per line, blank line between documents.

Each input file is a document unless --document_separator names a line
pattern that separates documents. Blank lines end paragraphs; wrapped lines
are joined and paragraphs split into sentences.

  python prepare_corpus.py --input_file='books/*.txt' --output_file=corpus.txt
"""

import sys
import time

from absl import flags

from cli import app

flags.DEFINE_string("input_file", None, "Raw text files: comma-separated paths or globs.")
flags.DEFINE_string("output_file", None, "Where to write the prepared corpus.")
flags.DEFINE_string("document_separator", None,
                    "Regex; a line matching it separates two documents (and is dropped), "
                    "e.g. '^</?doc' for WikiExtractor's <doc ...> and </doc> lines. "
                    "Default: each input file is one document.")
flags.DEFINE_integer("min_sentence_chars", 1, "Drop sentences shorter than this.")
FLAGS = flags.FLAGS


def main(_):
  app.check_given(input_file=FLAGS.input_file, output_file=FLAGS.output_file)
  app.log_flags()
  import re
  from data import corpus, files, path_checks
  if FLAGS.document_separator:
    try:
      re.compile(FLAGS.document_separator)
    except re.error as e:
      raise ValueError(f"--document_separator={FLAGS.document_separator!r}: {e}") from None
  paths = path_checks.expand_file_patterns(FLAGS.input_file, "--input_file")
  path_checks.check_output_file(FLAGS.output_file, "--output_file", paths)
  stats = corpus.PrepareStats()
  start = time.time()
  with files.atomic_output(FLAGS.output_file) as out:
    corpus.prepare(paths, out, stats, FLAGS.document_separator, FLAGS.min_sentence_chars)
    if not stats.sentences:
      raise ValueError(f"--input_file: no text in {', '.join(paths)}.")
  seconds = time.time() - start
  print(f"read {stats.files} file(s), {stats.bytes_read / 1e6:.1f} MB in {seconds:.1f}s; "
        f"wrote {stats.documents} documents, {stats.paragraphs} paragraphs, "
        f"{stats.sentences} sentences to {FLAGS.output_file}", file=sys.stderr)
  if stats.undecodable.count:
    print(stats.undecodable.report(), file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
