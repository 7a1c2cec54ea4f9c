"""The one timing loop the benchmarks share, and the Trainer they time."""

import time


def define_flags(repeats=None):
  """Defines --threads, the benchmarks' TensorFlow thread count (use_threads), and, given a
  default, --repeats: timed calls per case at batch 1, fewer for larger ones (calls_for)."""
  from absl import flags
  flags.DEFINE_integer("threads", 2, "Intra-op and inter-op threads (0: TensorFlow's choice).",
                       lower_bound=0)
  if repeats is not None:
    flags.DEFINE_integer("repeats", repeats, "Timed calls per case at batch 1 (fewer for "
                         "larger batches, at least 10).", lower_bound=10)


# oneDNN's names for the x86 instruction sets it may be capped at (ONEDNN_MAX_CPU_ISA, or
# DNNL_MAX_CPU_ISA; others are ignored): without bfloat16 products, with them but without
# AMX, and with AMX.
_NO_BFLOAT16_ISAS = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                     "AVX512_CORE_VNNI"}
_NO_AMX_ISAS = {"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX10_2_512"}
_AMX_ISAS = {"AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX",
             "AVX10_1_512_AMX_FP16", "AVX10_2_512_AMX_2"}


def onednn_isa_cap():
  """The instruction set oneDNN's kernels are capped at by the environment, upper case, or
  None (none set, or none of the names above: ALL, DEFAULT, a misspelling)."""
  import os
  cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "")
  cap = cap.strip().upper()
  return cap if cap in _NO_BFLOAT16_ISAS | _NO_AMX_ISAS | _AMX_ISAS else None


def bfloat16_units():
  """What multiplies bfloat16 matrices on this CPU: "AMX", "AVX-512 BF16", or None (emulated).
  A cap on oneDNN's instruction sets (onednn_isa_cap) below AVX512_CORE_BF16 counts as none:
  it makes oneDNN's kernels those of an older CPU, which TensorFlow still hands its bfloat16
  ops to (the process then dies)."""
  from modeling import distribution
  cap = onednn_isa_cap()
  units = distribution.cpu_units(distribution.read_cpuinfo())
  if cap in _NO_BFLOAT16_ISAS:
    return None
  if cap in _NO_AMX_ISAS and units == "AMX":
    return "AVX-512 BF16"
  return units


def cpu():
  """The CPU a figure was measured on, as one line: model, logical CPUs, bfloat16 units."""
  import os
  import platform
  from modeling import distribution
  lines = (distribution.read_cpuinfo() or "").splitlines()
  model = next((line.split(":", 1)[1].strip() for line in lines
                if line.startswith("model name")), platform.processor() or platform.machine())
  cap = onednn_isa_cap()
  return (f"{model}, {os.cpu_count()} logical CPUs, bfloat16 units: "
          f"{bfloat16_units() or 'none (emulated)'}"
          + (f", oneDNN's kernels capped at {cap}" if cap else ""))


def define_shapes_flag(default, help_text):
  """Defines --shapes, a list of batch x tokens such as 1x16, checked when parsed (a bad
  value stops the benchmark with one line naming it); shapes() reads it."""
  from absl import flags
  flags.DEFINE_list("shapes", default, help_text)
  flags.register_validator("shapes", lambda values: all(_shape(v) for v in values),
                           "--shapes: expected batch x tokens such as 1x16, both at least 1")


def shapes(values):
  """--shapes' values as [(batch, tokens)]."""
  return [_shape(v) for v in values]


def _shape(value):
  import re
  match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)", value.strip())
  return match and (int(match[1]), int(match[2]))


def calls_for(repeats, batch):
  """Timed calls for a case of `batch` rows: `repeats` at batch 1, as many rows in all for
  larger batches, at least 10."""
  return max(10, repeats // batch)


def use_threads(threads):
  """TensorFlow's intra-op and inter-op thread pools at `threads` each (0: its own choice);
  before TensorFlow runs anything."""
  if threads:
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def timed(run):
  """(seconds, result) of one call of run()."""
  start = time.perf_counter()
  result = run()
  return time.perf_counter() - start, result


def median_ms(functions, args, calls):
  """{name: median ms per call} of each function of `functions`, called in turns, in a new
  random order each round (so that no function always follows the same one)."""
  import random
  import numpy as np
  times = {name: [] for name in functions}
  for f in functions.values():  # warm up: kernels set up, caches filled
    f(*args)
    f(*args)
  for _ in range(calls):
    for name in random.sample(list(functions), len(functions)):
      start = time.perf_counter()
      functions[name](*args)
      times[name].append(1000 * (time.perf_counter() - start))
  return {name: float(np.median(t)) for name, t in times.items()}


def served_variants(dtype, variants, shapes, calls):
  """MiniLM's classifier as the exports serve it (inference.inference_copy through
  export.served_outputs, random weights, traced for unknown batch and length), once per
  variant, timed in turns on unpadded batches of random ids.

  variants: {name: [(module, attribute, value)]}, set while that variant is traced.
  shapes: [(batch, length)]; calls: timed calls at batch 1 (fewer, at least 10, for more).
  Returns {(batch, length): ({name: median ms per call}, largest |logit difference| from
  the first variant)}.
  """
  import numpy as np
  import tensorflow as tf
  from modeling import classification, distribution, export, inference
  from modeling.encoder import BertEncoder
  distribution.set_precision(dtype)
  model = classification.BertClassifier(BertEncoder(classifier_config("minilm")), 2)
  model.build()
  copy = inference.inference_copy(model)
  distribution.set_precision("float32")
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  functions = {}
  for name, patches in variants.items():
    saved = [(module, attribute, getattr(module, attribute)) for module, attribute, _ in patches]
    try:
      for module, attribute, value in patches:
        setattr(module, attribute, value)
      function = tf.function(lambda f: export.served_outputs(copy, f)["logits"],
                             input_signature=[spec]).get_concrete_function()
      functions[name] = lambda f, function=function: function(f).numpy()
    finally:
      for module, attribute, value in saved:
        setattr(module, attribute, value)
  rng = np.random.default_rng(0)
  out = {}
  for batch, length in shapes:
    features = {"input_ids": tf.constant(rng.integers(1000, 2000, (batch, length)), tf.int32),
                "input_mask": tf.ones((batch, length), tf.int32),
                "segment_ids": tf.zeros((batch, length), tf.int32)}
    logits = [f(features) for f in functions.values()]
    difference = max(float(np.abs(v - logits[0]).max()) for v in logits)
    out[(batch, length)] = (median_ms(functions, (features,), calls_for(calls, batch)),
                            difference)
  return out


def print_served_variants(dtypes, variants, shapes, calls):
  """Prints served_variants' table for two variants, per dtype and shape: each one's ms per
  call, the second's over the first's, and the largest |logit difference|."""
  first, second = variants
  print("all-MiniLM-L6-v2 served (export.served_outputs), ms per call, median")
  print(f"{'dtype':<10}{'shape':>8}{first:>22}{second:>22}{'ratio':>7}"
        f"{'max |logit diff|':>18}")
  for dtype in dtypes:
    for (batch, length), (ms, difference) in served_variants(
        dtype, variants, shapes, calls).items():
      print(f"{dtype:<10}{f'{batch}x{length}':>8}{ms[first]:>22.3f}{ms[second]:>22.3f}"
            f"{ms[second] / ms[first]:>7.3f}{difference:>18.2e}", flush=True)


def items_per_second(run, items_per_call, seconds, min_calls=3, warmup_calls=2,
                     warmup_seconds=0.0):
  """Items/s of run() over at least `seconds` and `min_calls` calls, after `warmup_calls`
  calls and then further calls for `warmup_seconds` (an input pipeline's buffers filling).

  run() must block until its work is done (return numpy values, not pending tensors).
  """
  for _ in range(warmup_calls):
    run()
  start = time.perf_counter()
  while time.perf_counter() - start < warmup_seconds:
    run()
  calls, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds or calls < min_calls:
    run()
    calls += 1
  return calls * items_per_call / (time.perf_counter() - start)


def training_sequences_per_second(trainer, iterator, seconds, batch_size, steps_per_call=10,
                                  min_steps=20):
  """Sequences/s of a Trainer's compiled loop (`steps_per_call` steps a call), after a
  one-step call that traces it and one warm-up call."""
  import tensorflow as tf
  trainer._train_loop(iterator, tf.constant(1))  # traces
  n = tf.constant(steps_per_call)
  return items_per_second(lambda: float(trainer._train_loop(iterator, n)[0]["loss"]),
                          steps_per_call * batch_size, seconds,
                          min_calls=-(-min_steps // steps_per_call), warmup_calls=1)


def pass_items_per_second(run_pass, count):
  """Items/s of two consecutive whole passes run_pass() over `count` items: (first, second).

  The first pays the one-off work a script pays once per run (tracing the
  step, setting up kernels); the second is the speed of every later pass (the
  Trainer keeps its traced step), the figure comparable to Hugging Face's loop,
  which is timed after one warm-up batch.
  """
  return tuple(count / timed(run_pass)[0] for _ in range(2))


def matmul_flops_per_second(hidden, dtype="float32", seconds=3.0, slices=6):
  """FLOP/s of a plain [4096, H] x [H, 4H] matrix product in `dtype`: the peak a model's
  achieved FLOP/s is set against. The best of `slices` timings of seconds / slices each:
  on a shared machine one timing of the whole moved by up to a third between runs
  (docs/performance.md), and the best is what the hardware gives with nothing in the way,
  so that a share of it errs low rather than above 100%."""
  import tensorflow as tf
  from benchmarks.common import flops
  a = tf.cast(tf.random.normal((4096, hidden)), dtype)
  b = tf.cast(tf.random.normal((hidden, 4 * hidden)), dtype)
  f = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b)[:1, :1], tf.float32)))
  work = flops.matmul(4096, hidden, 4 * hidden)
  return max(items_per_second(lambda: f().numpy(), work, seconds / slices,
                              warmup_calls=2 if i == 0 else 0) for i in range(slices))


def benchmark_trainer(task, dtype, batch_size, learning_rate=5e-5, pack_tokens=True,
                      jit_compile=False, optimizer_fn=None):
  """A Trainer for `task` under the default strategy in `dtype` (float32 or bfloat16), set to
  train without end (AdamW, 10 warmup steps, unless optimizer_fn(names) makes another); the
  global Keras policy is left at float32. pack_tokens=False computes padded positions too
  (the original's way)."""
  import tempfile

  import keras
  import tensorflow as tf
  from modeling import optimization, training
  keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
  try:
    return training.Trainer(
        tf.distribute.get_strategy(), task,
        optimizer_fn or (lambda names: optimization.create_optimizer(
            "adamw", learning_rate, 10**6, 10, names)),
        training.TrainConfig(output_dir=tempfile.mkdtemp(), num_train_steps=10**6,
                             global_batch_size=batch_size, pack_tokens=pack_tokens,
                             jit_compile=jit_compile))
  finally:
    keras.mixed_precision.set_global_policy("float32")


def classifier_steps_by_form(forms, module, attribute, config, batches, pack_tokens):
  """{name: run()} of bfloat16 classifier training steps (batch 32), one Trainer per entry
  of `forms` {name: value}, each traced with module.attribute set to that value (restored
  after); run() takes one step on the next of `batches` (a dict of stacked arrays, cycled)
  and waits for its loss. Each is traced, run once per batch and once more, before it
  returns."""
  import tensorflow as tf
  from modeling import classification
  kept, runs = getattr(module, attribute), {}
  for name, form in forms.items():
    setattr(module, attribute, form)  # read when the step is traced
    try:
      trainer = benchmark_trainer(classification.ClassificationTask(config, 2), "bfloat16", 32,
                                  pack_tokens=pack_tokens)
      iterator = iter(tf.data.Dataset.from_tensor_slices(batches).repeat())
      run = lambda t=trainer, i=iterator: float(t._train_loop(i, tf.constant(1))[0]["loss"])
      for _ in range(len(next(iter(batches.values()))) + 1):  # traced; every batch met
        run()
    finally:
      setattr(module, attribute, kept)
    runs[name] = run
  return runs


# The fixed-shape benchmarks' models: (layers, hidden), 12 heads of hidden / 12.
CLASSIFIER_SHAPES = {"minilm": (6, 384), "base": (12, 768)}


def classifier_config(size):
  """BertConfig of a CLASSIFIER_SHAPES model with BERT's vocabulary and 4H intermediate."""
  from modeling.config import BertConfig
  layers, hidden = CLASSIFIER_SHAPES[size]
  return BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                    num_attention_heads=12, intermediate_size=4 * hidden, type_vocab_size=2)


def classifier_batch(batch_size, seq_length, seed=0):
  """A classifier batch of random ids and labels without padding: int32 arrays."""
  import numpy as np
  rng = np.random.default_rng(seed)
  b, s = batch_size, seq_length
  batch = {"input_ids": rng.integers(1, 30522, (b, s)), "input_mask": np.ones((b, s)),
           "segment_ids": np.zeros((b, s)), "label_ids": rng.integers(0, 2, b),
           "is_real_example": np.ones(b)}
  return {k: np.asarray(v, np.int32) for k, v in batch.items()}
