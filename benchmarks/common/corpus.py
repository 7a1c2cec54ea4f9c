"""A corpus, a vocabulary and pretraining records made from raw books with the project's
own scripts, as a user would make them: what the pretraining experiments share."""

import glob
import json
import os
import sys

from absl import flags

from benchmarks.common import launch

GUTENBERG = os.path.join(launch.SHARED, "corpus", "gutenberg", "*.txt")


def define_flags(module_name, steps):
  """The flags of the experiments that pretrain small models on the books: the books, the
  work folder, the vocabulary and records, and how long and how the models train
  (`steps` by default); module_name: the script's, under which --help lists them."""
  named = {"module_name": sys.argv[0] if module_name == "__main__" else module_name}
  flags.DEFINE_string("input_files", GUTENBERG,
                      "Raw text files (glob); the last in sorted order is held out.", **named)
  flags.DEFINE_string("work_dir", None, "Everything is written here; a finished run in it is "
                      "reused, so an interrupted run picks up where it stopped.", **named)
  flags.DEFINE_integer("vocab_size", 8000, "WordPiece vocab learned from the training books.",
                       **named)
  flags.DEFINE_integer("dupe_factor", 5, "Generator passes over the training books.",
                       **named)
  flags.DEFINE_integer("max_seq_length", 128, "Pretraining tokens per instance.", **named)
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per instance.", **named)
  flags.DEFINE_integer("steps", steps, "Pretraining steps of every model.", **named)
  flags.DEFINE_integer("batch_size", 32, "Pretraining batch size.", **named)
  flags.DEFINE_float("learning_rate", 2e-4, "Pretraining peak learning rate (warmup: a tenth "
                     "of --steps).", **named)


def apply_quick():
  """--quick's settings of the flags define_flags made: a check of the flow in minutes
  (20 steps of 16 x 64 tokens, a 1,000-piece vocab, one generator pass)."""
  f = flags.FLAGS
  f.steps, f.batch_size, f.max_seq_length, f.max_predictions_per_seq = 20, 16, 64, 10
  f.vocab_size, f.dupe_factor, f.learning_rate = 1000, 1, 1e-3


def books(pattern, quick):
  """The sorted files of `pattern` (the last is held out); with `quick`, the two short
  Blake books only."""
  found = sorted(glob.glob(pattern))
  if quick:
    found = [b for b in found if os.path.basename(b).startswith("blake")] or found[:2]
  if len(found) < 2:
    raise ValueError(f"--input_files={pattern}: need at least two files.")
  return found


def prepare_text(work, files, vocab_size):
  """train.txt (all books but the last), heldout.txt (the last) and a vocab.txt learned
  from train.txt, in `work`; returns their paths. Existing files are kept."""
  p = {n: os.path.join(work, n) for n in ("train.txt", "heldout.txt", "vocab.txt")}
  if not os.path.exists(p["heldout.txt"]):
    launch.script("prepare_corpus.py", "--input_file=" + ",".join(files[:-1]),
                  "--output_file=" + p["train.txt"])
    launch.script("prepare_corpus.py", "--input_file=" + files[-1],
                  "--output_file=" + p["heldout.txt"])
  if not os.path.exists(p["vocab.txt"]):
    launch.script("learn_vocab.py", f"--input_file={p['train.txt']}",
                  f"--vocab_file={p['vocab.txt']}", f"--vocab_size={vocab_size}")
  return p


def make_records(text, vocab, output, max_seq_length, max_predictions, dupe_factor, *extra):
  """create_pretraining_data.py on `text` unless `output` exists; returns `output`."""
  if not os.path.exists(output):
    launch.script("create_pretraining_data.py", f"--input_file={text}",
                  f"--output_file={output}", f"--vocab_file={vocab}",
                  f"--max_seq_length={max_seq_length}",
                  f"--max_predictions_per_seq={max_predictions}",
                  f"--dupe_factor={dupe_factor}", *extra)
  return output


def write_config(path, vocab_file, size):
  """A bert_config.json for L/H/A `size` (feed-forward 4H) and the vocab's size."""
  layers, hidden, heads = (int(x) for x in size.split("/"))
  with open(vocab_file, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = {"vocab_size": vocab_size,
            "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512,
            "type_vocab_size": 2, "initializer_range": 0.02}
  with open(path, "w") as f:
    json.dump(config, f, indent=2)
  return path
