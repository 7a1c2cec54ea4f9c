r"""What a bfloat16 training step and prediction batch compute in which dtype, and, on a
CPU with bfloat16 instructions, on which kernels.

1. From the traced graphs (any CPU): every matrix product with its input dtype and every
   cast between float types with its size, per encoder layer, forward and backward
   (benchmarks/common/census.py; tests/test_precision_census.py pins the same for a small
   model).
2. With --verbose (a CPU whose /proc/cpuinfo lists amx_bf16 or avx512_bf16): one training
   step and one prediction batch run in a child process under ONEDNN_VERBOSE=1, and each
   matrix-product primitive oneDNN ran is counted by its data type and instruction set
   (brg_matmul:avx512_core_amx is AMX, ...avx512_core_bf16 is AVX-512 BF16).

  python benchmarks/investigations/precision_census.py --model=minilm --verbose
"""

import collections
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_enum("model", "minilm", ["minilm", "base"], "Shape of the classifier.")
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (no padding).")
flags.DEFINE_bool("verbose", False, "Also run under ONEDNN_VERBOSE=1 and count kernels.")
flags.DEFINE_bool("child", False, "Internal: run one step and one batch, then exit.")
FLAGS = flags.FLAGS

MARK = "=== census: measured part"


def _setup():
  import tensorflow as tf
  from benchmarks.common import timing
  from modeling import classification
  config = timing.classifier_config(FLAGS.model)
  B, S = FLAGS.batch_size, FLAGS.seq_length
  batch = timing.classifier_batch(B, S)
  trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), "bfloat16",
                                     B, pack_tokens=False)
  trainer.build_optimizer()
  spec = {k: tf.TensorSpec(v.shape, tf.int32) for k, v in batch.items()}
  step = tf.function(trainer._update).get_concrete_function(spec)
  predict = tf.function(lambda f: trainer.model(f, training=False)["logits"]) \
      .get_concrete_function(spec)
  return batch, step, predict


def census_table(step, predict):
  from benchmarks.common import census
  for title, function in (("training step", step), ("prediction batch", predict)):
    ops = census.census(function)
    print(f"\n{title}: {FLAGS.model}, batch {FLAGS.batch_size} x {FLAGS.seq_length}")
    print(f"{'part':<12} {'pass':<9} {'products by input dtype':<28} {'casts':>6} "
          f"{'cast elements':>14}")
    for (part, direction), row in sorted(census.per_part(ops).items(),
                                         key=lambda kv: (_order(kv[0][0]), kv[0][1])):
      products = ", ".join(f"{n} {d}" for d, n in sorted(row["products"].items())) or "-"
      print(f"{part:<12} {direction:<9} {products:<28} {row['casts']:>6} "
            f"{row['cast_elements']:>14,}")
    wrong = [op for op in ops if op.kind == "product" and op.dtypes != "bfloat16"]
    print(f"products not in bfloat16: {len(wrong)}" + "".join(f"\n  {op.name} ({op.dtypes})"
                                                              for op in wrong))


def _order(part):
  return (0, int(part.split("_")[1])) if part.startswith("layer_") else (1, part)


def child():
  batch, step, predict = _setup()
  step(batch), predict(batch)  # set-up: kernels are created on first use
  print(MARK, flush=True)
  step(batch), predict(batch)


def verbose_count():
  """Runs child() under ONEDNN_VERBOSE=1; counts the products oneDNN ran by dtype and ISA."""
  env = {**os.environ, "ONEDNN_VERBOSE": "1"}
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                        f"--model={FLAGS.model}", f"--batch_size={FLAGS.batch_size}",
                        f"--seq_length={FLAGS.seq_length}"],
                       env=env, capture_output=True, text=True, check=True).stdout
  counts = collections.Counter()
  for line in out.split(MARK, 1)[-1].splitlines():
    fields = line.split(",")
    if len(fields) < 10 or fields[0] != "onednn_verbose" or fields[3] != "exec":
      continue
    kind, implementation, descriptors = fields[5], fields[6], fields[8]
    if kind not in ("matmul", "inner_product", "gemm_api"):
      continue
    source = descriptors.split()[0].split(":")[1] if ":" in descriptors else descriptors
    counts[(kind, implementation, source.replace("src_", ""))] += 1
  total = sum(counts.values())
  fast = sum(n for (_, implementation, source), n in counts.items()
             if source == "bf16" and ("amx" in implementation or "bf16" in implementation
                                      or "gemm:jit" in implementation))
  print(f"\noneDNN matrix products of one step and one batch (ONEDNN_VERBOSE=1): {total}")
  for (kind, implementation, source), n in counts.most_common():
    print(f"  {n:5d}  {kind:<14} {implementation:<32} src {source}")
  print(f"bfloat16 inputs on a bfloat16 kernel: {fast} of {total}"
        f" ({100 * fast / max(total, 1):.1f}%)")


def main(_):
  from benchmarks.common import timing
  if FLAGS.child:
    return child()
  isa = timing.bfloat16_units()
  print(timing.cpu())
  _, step, predict = _setup()
  census_table(step, predict)
  if FLAGS.verbose:
    if not isa:
      print("\n--verbose: this CPU has no bfloat16 instructions; the kernels would be "
            "emulation, nothing to count.")
    else:
      verbose_count()


if __name__ == "__main__":
  app.run(main)
