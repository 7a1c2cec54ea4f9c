r"""Where new vocabulary rows help or hurt at step 0: as inputs, as answers, by kind of answer.

Reads a finished benchmarks/experiments/domain_adaptation.py work directory
(which reports the same split for its held-out records itself) and scores its
`continued` run grown to the extended vocab on any records of that vocab (see
benchmarks/common/new_rows.py): e.g. the training books' records, where the new
words are as frequent as in the domain.

  python benchmarks/investigations/new_rows_step0.py --work_dir=/tmp/i40run/domain
  python benchmarks/investigations/new_rows_step0.py --work_dir=/tmp/i40run/domain \
    --records=/tmp/i40run/domain/extended.tfrecord   (text of the training books)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import new_rows  # noqa: E402

flags.DEFINE_string("work_dir", None, "A domain_adaptation.py --work_dir whose runs finished.")
flags.DEFINE_string("records", None, "Records of the extended vocab to score (default: the "
                    "work dir's extended_heldout.tfrecord, the held-out book).")
flags.DEFINE_integer("max_records", 1600, "Records scored (the benchmark scores 50 x 32).",
                     lower_bound=1)
flags.DEFINE_integer("seed", 1, "Seed of the random rows.")
FLAGS = flags.FLAGS


def main(_):
  work = FLAGS.work_dir
  if not work or not os.path.exists(os.path.join(work, "continued", "checkpoint")):
    sys.exit(f"error: --work_dir={work} has no finished continued run of "
             "domain_adaptation.py")
  records = FLAGS.records or os.path.join(work, "extended_heldout.tfrecord")
  if not os.path.isfile(records):
    sys.exit(f"error: --records={records}: no such file")
  print(f"{records}, {FLAGS.max_records} records at most")
  new_rows.print_table(new_rows.split_losses(
      os.path.join(work, "continued"), os.path.join(work, "extended_config.json"),
      os.path.join(work, "extended_vocab.txt"), records, FLAGS.max_records, FLAGS.seed))


if __name__ == "__main__":
  app.run(main)
