"""A stand-in fine-tuning script for tests/test_search.py: no model, results from its flags.

dev eval_accuracy = 0.7 + 2000 * (6e-5 - lr) + 0.01 * epochs - 0.0001 * batch
                    + 0.02 * (seed % 2); test_accuracy = 1 - dev (so a selection that read
the test figures would choose the opposite). Each call appends its --output_dir to
$FAKE_CALLS; a learning rate listed in $FAKE_FAIL_LRS fails with one error line, one in
$FAKE_STOP_LRS ends as a script stopped by SIGTERM does (exit 143).
Writes a checkpoint-like set of files, and an export when --export_dir is given.
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
for name in ("output_dir", "export_dir"):
  parser.add_argument(f"--{name}")
parser.add_argument("--learning_rate", type=float)
parser.add_argument("--train_batch_size", type=int)
parser.add_argument("--num_train_epochs", type=float)
parser.add_argument("--seed", type=int)
args, _ = parser.parse_known_args()
with open(os.environ["FAKE_CALLS"], "a") as f:
  f.write(args.output_dir + "\n")
if f"{args.learning_rate:g}" in os.environ.get("FAKE_FAIL_LRS", "").split(","):
  sys.exit(f"error: learning rate {args.learning_rate:g} diverged")
if f"{args.learning_rate:g}" in os.environ.get("FAKE_STOP_LRS", "").split(","):
  print("error: stopped by SIGTERM", file=sys.stderr)  # as the scripts end on a stop
  sys.exit(143)
dev = (0.7 + 2000 * (6e-5 - args.learning_rate) + 0.01 * args.num_train_epochs
       - 0.0001 * args.train_batch_size + 0.02 * (args.seed % 2))
out = args.output_dir
os.makedirs(out, exist_ok=True)
files = {"eval_results.txt": f"eval_accuracy = {dev!r}\neval_loss = {1 - dev!r}\n",
         "test_results.txt": f"test_accuracy = {1 - dev!r}\n",
         "checkpoint": 'model_checkpoint_path: "ckpt-7"\n',
         "ckpt-7.index": out, "ckpt-7.data-00000-of-00001": out, "ckpt-3.index": "old",
         "bert_config.json": "{}", "vocab.txt": "[UNK]\n"}
if args.export_dir:
  os.makedirs(os.path.join(args.export_dir, "variables"), exist_ok=True)
  files[os.path.join(args.export_dir, "saved_model.pb")] = out
for name, text in files.items():
  with open(os.path.join(out, name), "w") as f:
    f.write(text)
