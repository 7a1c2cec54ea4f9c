"""Checks against outputs of Google's original code (by hand; the tests do not need them).

  python benchmarks/checks/golden.py --golden_dir=../shared/reference/golden

tokenization/cases.jsonl: the original FullTokenizer's ids for each line, both
casings; compared with our Python tokenizer and our graph FastTokenizer.
create_pretraining_data/*.tfrecord: the original generator's records for
sample_text.txt under three flag settings; our create_pretraining_data.py is run
with the same flags and its records are compared feature by feature, in order.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("golden_dir", None, "The golden/ directory (tokenization/, "
                    "create_pretraining_data/).")
FLAGS = flags.FLAGS

GENERATOR_RUNS = {  # file -> flags besides input and vocab, as in the golden README
    "default_seed12345.tfrecord": ["--do_lower_case=True", "--max_seq_length=128",
                                   "--max_predictions_per_seq=20", "--masked_lm_prob=0.15",
                                   "--random_seed=12345", "--dupe_factor=10"],
    "wwm_seq64_seed7.tfrecord": ["--do_lower_case=True", "--do_whole_word_mask=True",
                                 "--max_seq_length=64", "--max_predictions_per_seq=10",
                                 "--masked_lm_prob=0.15", "--random_seed=7", "--dupe_factor=3",
                                 "--short_seq_prob=0.3"],
    "cased_seq32_seed1.tfrecord": ["--do_lower_case=False", "--max_seq_length=32",
                                   "--max_predictions_per_seq=5", "--masked_lm_prob=0.2",
                                   "--random_seed=1", "--dupe_factor=2"],
}


def check_tokenization(directory):
  import tensorflow as tf

  from data import fast_tokenization, tokenization
  vocab = os.path.join(directory, "create_pretraining_data", "vocab.txt")
  with open(os.path.join(directory, "tokenization", "cases.jsonl"), encoding="utf-8") as f:
    cases = [json.loads(line) for line in f]
  for lower, key in ((True, "lower"), (False, "cased")):
    python = tokenization.FullTokenizer(vocab, lower)
    fast = fast_tokenization.FastTokenizer(vocab, lower)
    texts = [c["text"] for c in cases]
    graph = [ids for i in range(0, len(texts), 512)
             for ids in fast.tokenize(tf.constant(texts[i:i + 512])).to_list()]
    py_ok = sum(python.convert_tokens_to_ids(python.tokenize(c["text"])) == c[key] for c in cases)
    graph_ok = sum(list(g) == c[key] for g, c in zip(graph, cases))
    print(f"tokenization {key}: Python {py_ok}/{len(cases)}, FastTokenizer "
          f"{graph_ok}/{len(cases)} lines equal to the original", flush=True)


def _records(path):
  import tensorflow as tf
  out = []
  for raw in tf.data.TFRecordDataset(path):
    feature = tf.train.Example.FromString(raw.numpy()).features.feature
    out.append({k: list(v.int64_list.value or v.float_list.value) for k, v in feature.items()})
  return out


def check_generator(directory):
  golden = os.path.join(directory, "create_pretraining_data")
  for name, args in GENERATOR_RUNS.items():
    with tempfile.TemporaryDirectory() as tmp:
      output = os.path.join(tmp, name)
      launch.script("create_pretraining_data.py",
                    f"--input_file={os.path.join(golden, 'sample_text.txt')}",
                    f"--vocab_file={os.path.join(golden, 'vocab.txt')}",
                    f"--output_file={output}", *args)
      ours, theirs = _records(output), _records(os.path.join(golden, name))
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"create_pretraining_data {name}: {same}/{len(theirs)} records equal "
          f"(ours wrote {len(ours)})", flush=True)


def main(_):
  check_tokenization(FLAGS.golden_dir)
  check_generator(FLAGS.golden_dir)


if __name__ == "__main__":
  flags.mark_flag_as_required("golden_dir")
  app.run(main)
