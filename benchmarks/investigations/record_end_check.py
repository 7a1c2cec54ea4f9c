"""What checking each TFRecord file's end (data/record_files.py) costs the input pipeline.

Writes 100,000 pretraining records (128 tokens, 20 predictions: what
run_pretraining.py reads) in 4 local files, plain and GZIP-compressed, then
measures, alternating checked and unchecked over --repeats rounds and keeping
the median:
  - the host's check of the plain files' ends (file_ends: a stat and a read of
    the last MiB of each file), once per pipeline built;
  - records/s of pipeline.record_dataset as run_pretraining.py's training input
    builds it (files shuffled and interleaved, records shuffled, batches of 32
    parsed), over --seconds after a warm-up, checked and unchecked (the
    check replaced by a plain tf.data.TFRecordDataset). For plain files the
    tf.data graph is the same either way; GZIP files are counted in it.
The files are in the page cache: reading is at its fastest and the check's
share at its largest. Other processes on the machine add noise of several %.

  python benchmarks/investigations/record_end_check.py   # about 2 minutes
"""

import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_integer("records", 100_000, "Records per variant, over 4 files.")
flags.DEFINE_integer("repeats", 5, "Rounds of each variant; the median is reported.")
flags.DEFINE_float("seconds", 4.0, "Measured time per round.")
FLAGS = flags.FLAGS
FILES = 4


def _write(directory, compression):
  import numpy as np
  from data import tfrecords
  rng = np.random.default_rng(0)
  per_file, names = FLAGS.records // FILES, []
  for i in range(FILES):
    names.append(os.path.join(directory, f"records-{compression or 'plain'}-{i}"))
    n = per_file
    arrays = {
        "input_ids": rng.integers(0, 30522, (n, 128)), "input_mask": np.ones((n, 128), np.int64),
        "segment_ids": np.zeros((n, 128), np.int64),
        "masked_lm_positions": rng.integers(1, 128, (n, 20)),
        "masked_lm_ids": rng.integers(0, 30522, (n, 20)),
        "masked_lm_weights": np.ones((n, 20), np.float32),
        "next_sentence_labels": rng.integers(0, 2, n)}
    tfrecords.write_arrays(names[-1], arrays, compression=compression)
  return names


def main(_):
  import tensorflow as tf
  from data import features, pipeline, record_files
  checked = record_files.file_end, record_files.read
  unchecked = (lambda path, compression="": 0,
               lambda path, end, compression="": tf.data.TFRecordDataset(path, compression))
  spec = features.pretraining_feature_spec(128, 20)

  def rate(names, compression, check):
    record_files.file_end, record_files.read = checked if check else unchecked
    try:
      iterator = iter(pipeline.record_dataset(",".join(names), spec, 32, True,
                                              compression=compression))
    finally:
      record_files.file_end, record_files.read = checked
    # 100 batches of warm-up: the shuffle buffer filled, the autotuner settled.
    return timing.items_per_second(lambda: next(iterator), 32, FLAGS.seconds, min_calls=1,
                                   warmup_calls=100)

  with tempfile.TemporaryDirectory() as directory:
    plain = _write(directory, "")
    took = []
    for _ in range(FLAGS.repeats):
      took.append(timing.timed(lambda: record_files.file_ends(plain))[0])
    size = sum(os.path.getsize(n) for n in plain) / FILES / 2**20
    print(f"file_ends of {FILES} plain files of {size:.0f} MiB: "
          f"{statistics.median(took) * 1000:.1f} ms")
    for title, names, compression in (("plain", plain, ""),
                                      ("GZIP", _write(directory, "GZIP"), "GZIP")):
      rates = {True: [], False: []}
      for _ in range(FLAGS.repeats):
        for check in (False, True):
          rates[check].append(rate(names, compression, check))
      without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
      print(f"record_dataset training input, {title}: unchecked {without:,.0f} records/s, "
            f"checked {with_:,.0f} ({with_ / without - 1:+.1%}); rounds "
            f"{[round(r) for r in rates[False]]} / {[round(r) for r in rates[True]]}")


if __name__ == "__main__":
  app.run(main)
