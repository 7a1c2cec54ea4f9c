"""What the paper's pretraining costs: FLOPs per step, then time and money per machine.

Pure arithmetic, no TensorFlow. For BERT-Base and BERT-Large (the released
configs: vocab 30522, 512 positions, 2 token types, feed-forward 4H) at 128
and 512 tokens, batch 256 (the paper's), it counts the FLOPs of one training
step from the config, then the time and on-demand cost of the paper's 1M
steps (all at 128, all at 512, and the paper's mix: 90% of the steps at 128,
10% at 512) on a TPU v3-8, a TPU v4-8 and 8 H100s at a model FLOPs
utilization (MFU) given by --mfu. It also prints the MFU the paper's own runs
imply. Markdown on stdout.

FLOPs are counted by benchmarks/common/flops.py (its docstring has the formula):
a multiply-add counts 2, training = 3 x forward, and embedding lookups,
LayerNorm, softmax, GELU and biases are left out (<1%).

The peak FLOP/s and hourly prices below are assumptions, list figures as
stated with their source and date; prices change and differ by region and
contract: update them for a real plan. Every result is an estimate.

  python benchmarks/experiments/scale_plan.py --mfu=0.4
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.common import flops  # noqa: E402

# The released configs (google-research/bert README; bert_config.json of each).
CONFIGS = {
    "BERT-Base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                      intermediate_size=3072, vocab_size=30522, max_position_embeddings=512,
                      type_vocab_size=2),
    "BERT-Large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                       intermediate_size=4096, vocab_size=30522, max_position_embeddings=512,
                       type_vocab_size=2),
}
# The paper (Devlin et al. 2019, A.2): batch 256 sequences, 1,000,000 steps, 90% of the
# steps at 128 tokens and 10% at 512. Masked positions per sequence: 20 at 128 (the
# original README's command), 80 at 512 (its advice: about max_seq_length x 0.15).
BATCH_SIZE = 256
STEPS = 1_000_000
SHARE_128 = 0.9
MAX_PREDICTIONS = {128: 20, 512: 80}
# The paper: BERT-Base on 4 Cloud TPUs (16 TPU v2 chips), BERT-Large on 16 (64 chips),
# 4 days each; a Cloud TPU (v2-8) is one host with 4 chips.
PAPER_RUNS = {"BERT-Base": 16, "BERT-Large": 64}  # TPU v2 chips
PAPER_DAYS = 4
TPU_V2_CHIP_FLOPS = 45e12  # bf16, Google Cloud TPU v2 docs (180 TFLOP/s per 4-chip v2-8)


@dataclasses.dataclass(frozen=True)
class Machine:
  name: str
  peak_flops: float  # dense bf16 FLOP/s of the whole machine
  dollars_per_hour: float  # on-demand list price
  source: str


# Assumptions (list figures, checked 2024; update them).
MACHINES = [
    Machine("TPU v3-8", 4 * 123e12, 8.00,
            "4 chips x 123 TFLOP/s bf16 (Cloud TPU v3 docs); $2.00/chip-hour on demand, "
            "us-central1 (Cloud TPU pricing, 2024)"),
    Machine("TPU v4-8", 4 * 275e12, 12.88,
            "4 chips x 275 TFLOP/s bf16 (Cloud TPU v4 docs); $3.22/chip-hour on demand, "
            "us-central2 (Cloud TPU pricing, 2024)"),
    Machine("8x H100", 8 * 989e12, 98.32,
            "8 x 989 TFLOP/s dense bf16 (H100 SXM datasheet; 1979 is with sparsity); AWS "
            "p5.48xlarge on demand, us-east-1 (2024 list; AWS announced lower P5 prices in "
            "2025)"),
]


def train_flops(config, seq_length):
  """FLOPs of one sequence's training step at the paper's masked positions for its length."""
  return flops.training(config, seq_length, MAX_PREDICTIONS[seq_length])


def sequences_per_second(config, seq_length, machine, mfu):
  """Training sequences/s a machine sustains at that utilization."""
  return mfu * machine.peak_flops / train_flops(config, seq_length)


def schedule_flops(config, steps=STEPS, batch_size=BATCH_SIZE, share_128=SHARE_128):
  """Training FLOPs of `steps` steps, share_128 of them at 128 tokens and the rest at 512."""
  per_step = {s: batch_size * train_flops(config, s) for s in (128, 512)}
  return steps * (share_128 * per_step[128] + (1 - share_128) * per_step[512])


def paper_rates(model):
  """The paper's run, from its schedule and 4 days: (implied MFU on TPU v2,
  sequences/s per 4-chip host at 128 tokens, at 512 tokens)."""
  config, chips = CONFIGS[model], PAPER_RUNS[model]
  seconds = PAPER_DAYS * 86400
  flops_per_second = schedule_flops(config) / seconds
  mfu = flops_per_second / (chips * TPU_V2_CHIP_FLOPS)
  # Within the run, each phase gets time in proportion to its FLOPs.
  hosts = chips / 4
  per_host = {s: flops_per_second / train_flops(config, s) / hosts for s in (128, 512)}
  return mfu, per_host[128], per_host[512]


def _duration(seconds):
  days = seconds / 86400
  return f"{days:,.1f} d" if days >= 1 else f"{seconds / 3600:,.1f} h"


def tables(mfu, steps=STEPS, batch_size=BATCH_SIZE, share_128=SHARE_128):
  """The report, as Markdown lines."""
  out = ["## FLOPs per training step", "",
         "| model | encoder params (with pooler) | tokens | masked positions | forward "
         "GFLOP/sequence | training TFLOP/step (batch %d) |" % batch_size,
         "|---|---|---|---|---|---|"]
  for model, config in CONFIGS.items():
    for s in (128, 512):
      p = MAX_PREDICTIONS[s]
      out.append(f"| {model} | {flops.encoder_parameters(config):,} | {s} | {p} | "
                 f"{flops.forward(config, s, p) / 1e9:,.2f} | "
                 f"{batch_size * train_flops(config, s) / 1e12:,.1f} |")
  mix = f"{share_128:.0%}/{1 - share_128:.0%}"
  out += ["", f"## {steps:,} steps at batch {batch_size}, MFU {mfu:.0%} (estimates)", "",
          f"| model | machine | all at 128 | all at 512 | {mix} of steps at 128/512 | "
          f"cost of the {mix} run |", "|---|---|---|---|---|---|"]
  for model, config in CONFIGS.items():
    for m in MACHINES:
      rate = mfu * m.peak_flops
      times = [schedule_flops(config, steps, batch_size, share) / rate
               for share in (1.0, 0.0, share_128)]
      out.append(f"| {model} | {m.name} | " + " | ".join(_duration(t) for t in times)
                 + f" | ${times[2] / 3600 * m.dollars_per_hour:,.0f} |")
  out += ["", "## The paper's own runs (4 days, TPU v2, 45 TFLOP/s per chip)", "",
          "| model | TPU v2 chips | implied MFU | sequences/s per 4-chip host at 128 | at 512 |",
          "|---|---|---|---|---|"]
  for model in CONFIGS:
    implied, at_128, at_512 = paper_rates(model)
    out.append(f"| {model} | {PAPER_RUNS[model]} | {implied:.1%} | {at_128:,.0f} | "
               f"{at_512:,.0f} |")
  out += ["", "Formula (per sequence; a multiply-add is 2 FLOPs): training = 3 x forward, "
          "forward = 2 S L (4H^2 + 2HI) + 4 L S^2 H + 2 P (H^2 + HV) + 2 H^2 + 4 H.",
          "Time = steps x batch x training FLOPs / (MFU x peak FLOP/s); cost = time x "
          "hourly price.", "", "Assumed machines (list figures; update them):"]
  out += [f"- {m.name}: {m.peak_flops / 1e12:,.0f} TFLOP/s peak, ${m.dollars_per_hour:.2f}/h: "
          f"{m.source}" for m in MACHINES]
  return out


def main(argv):
  from absl import flags
  values = flags.FLAGS
  print("\n".join(tables(values.mfu, values.steps, values.batch_size, values.share_128)))


if __name__ == "__main__":
  from absl import app, flags
  flags.DEFINE_float("mfu", 0.4, "Model FLOPs utilization assumed for every machine.")
  flags.DEFINE_integer("steps", STEPS, "Training steps (the paper: 1M).")
  flags.DEFINE_integer("batch_size", BATCH_SIZE, "Sequences per step (the paper: 256).")
  flags.DEFINE_float("share_128", SHARE_128, "Share of the steps at 128 tokens (the paper: 0.9).")
  app.run(main)
