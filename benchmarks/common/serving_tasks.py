"""What the serving benchmarks serve: each task's raw-text module on all-MiniLM-L6-v2, the
embedded inputs (four sentences of 14-16 pieces, a short SQuAD-like context and question, a
SWAG-like question of four endings: every batch nearly one length), and real text of mixed
lengths, one row per request, in file order (RTE's dev premises for the classifier,
CoNLL-2003's validation sentences for the tagger, SQuAD's dev questions with their
paragraphs). Only the standard library at import: the Hugging Face side of
benchmarks/speed/serving.py reads its rows here without TensorFlow."""

import csv
import json
import os

# The developers' data folder beside the repository (../shared/data).
DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")

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
# Multiple choice: a context, the start of every ending, four endings (SWAG's layout).
CHOICE = ("The chef puts a pan of chopped onions on the stove.", "He",
          ["stirs them slowly with a wooden spoon.", "throws the pan out of the window at once.",
           "reads a newspaper about the weather in Spain.",
           "paints the kitchen wall a bright shade of blue."])


def embedded_rows(task, first, n):
  """n rows of `task`'s embedded inputs from row `first` on (cycling), as {input name: list}."""
  if task == "squad":
    return {"question": [QUESTION] * n, "context": [CONTEXT] * n}
  if task == "choice":
    return {"sent1": [CHOICE[0]] * n, "sent2": [CHOICE[1]] * n, "endings": [CHOICE[2]] * n}
  key = "text_a" if task == "classifier" else "text"
  return {key: [SENTENCES[(first + i) % len(SENTENCES)] for i in range(n)]}


def real_rows(task, data_dir):
  """[{input name: text}] of `task` ("classifier", "tagger" or "squad") from `data_dir`
  (glue/RTE/dev.tsv, conll2003/valid.txt, squad/dev-v2.0-half.json)."""
  if task == "classifier":
    with open(os.path.join(data_dir, "glue", "RTE", "dev.tsv"), encoding="utf-8") as f:
      rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [{"text_a": r[1]} for r in rows]
  if task == "tagger":
    sentences, words = [], []
    with open(os.path.join(data_dir, "conll2003", "valid.txt"), encoding="utf-8") as f:
      for line in list(f) + [""]:
        if line.strip() and not line.startswith("-DOCSTART-"):
          words.append(line.split()[0])
        elif words:
          sentences.append({"text": " ".join(words)})
          words = []
    return sentences
  with open(os.path.join(data_dir, "squad", "dev-v2.0-half.json"), encoding="utf-8") as f:
    articles = json.load(f)["data"]
  return [{"question": qa["question"], "context": p["context"]}
          for a in articles for p in a["paragraphs"] for qa in p["qas"]]


def real_rows_or_exit(tasks, data_dir, hint=""):
  """{task: real_rows(task, data_dir)} for each of `tasks`; a missing or unreadable file stops
  the benchmark with one line naming --data_dir (and `hint`), before any work."""
  import sys
  rows = {}
  for task in tasks:
    try:
      rows[task] = real_rows(task, data_dir)
    except (OSError, ValueError, KeyError, IndexError) as e:
      sys.exit(f"error: --data_dir={data_dir}: {task} rows unreadable ({e}){hint}")
  return rows


EMBEDDED_HINT = "; --data_dir='' times the embedded inputs alone"


def raw_text_module(task, checkpoint):
  """The task's export module (modeling/export.py, squad_export.py) on `checkpoint`, its
  head new: a classifier of 2 labels, a tagger of 9, question answering as run_squad.py's
  defaults (384 tokens, stride 128), multiple choice ("choice") of 128 tokens a choice."""
  from cli import model_files
  from modeling import checkpoints, export, squad_export
  from modeling.classification import BertClassifier
  from modeling.encoder import BertEncoder
  from modeling.multiple_choice import BertMultipleChoice
  from modeling.span_labeling import BertSpanLabeler
  from modeling.tagging import BertTagger
  config, vocab = model_files.config_and_vocab(None, None, checkpoint)
  if task == "classifier":
    model = BertClassifier(BertEncoder(config), 2)
    make = lambda m: export.TextClassifier(m, vocab, True, 128, ["0", "1"], False)  # noqa: E731
  elif task == "tagger":
    model = BertTagger(BertEncoder(config), 9)
    make = lambda m: export.TextTagger(m, vocab, True, 128, [str(i) for i in range(9)])  # noqa: E731
  elif task == "choice":
    model = BertMultipleChoice(BertEncoder(config))
    make = lambda m: export.TextMultipleChoice(m, vocab, True, 128)  # noqa: E731
  else:
    model = BertSpanLabeler(BertEncoder(config))
    make = lambda m: squad_export.TextQuestionAnswerer(  # noqa: E731
        m, vocab, True, 384, 128, 64, 20, 30, False, 0.0)
  checkpoints.load_checkpoint(model, checkpoint, allow_new_heads=True)
  return make(model)


def replay_warm_up(serve, directory):
  """Calls `serve` (an export's loaded serving_default) on each request of the export's
  warm-up file, as TensorFlow Serving does when it loads the export; returns the seconds."""
  import time
  import tensorflow as tf
  from tensorflow_serving.apis import prediction_log_pb2
  from modeling import export
  start = time.perf_counter()
  for record in tf.data.TFRecordDataset(os.path.join(directory, export.WARM_UP_FILE)):
    request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
    serve(**{k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()})
  return time.perf_counter() - start


def ask(process, request):
  """Writes the line `request` to a peer subprocess's stdin and returns the JSON object of
  its next line that is one (it may print other lines first); a peer that has stopped ends
  the benchmark with one line."""
  import sys
  process.stdin.write(f"{request}\n")
  process.stdin.flush()
  line = process.stdout.readline()
  while line and not line.startswith("{"):
    line = process.stdout.readline()
  if not line:
    sys.exit("error: the Hugging Face side stopped (its messages are above)")
  return json.loads(line)


def hf_question_answerer(checkpoint, dtype="float32", max_length=384, doc_stride=128,
                         max_answer_length=30):
  """Question answering on the Hugging Face side (call it in the torch venv). transformers 5
  has no question-answering pipeline; this is what it did, written out: the fast tokenizer's
  overflowing windows of `max_length` pieces, the model in `dtype`, and for each question the
  span of at most `max_answer_length` pieces inside its context with the highest start + end
  logit over all its windows. Windows and choice follow run_squad.py, so that both sides do
  the same work and agree where the weights do: a window every `doc_stride` context pieces
  (transformers' `stride` is the overlap of two windows, so it is set per question to the
  window's room less `doc_stride`), a span starting only in the window where its first piece
  has the most context (the original's max-context rule), windows compared by raw logits
  (the pipeline compared softmax probabilities). A call takes {"question": [N], "context":
  [N]} and returns the N answers, each the context's characters of its span (no n-best
  table, no get_final_text)."""
  import torch
  import transformers
  tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
  model = transformers.AutoModelForQuestionAnswering.from_pretrained(
      checkpoint, dtype=getattr(torch, dtype)).eval()

  def windows(question, context):
    room = max_length - len(tokenizer(question, add_special_tokens=False)["input_ids"]) - 3
    return tokenizer(question, context, truncation="only_second", max_length=max_length,
                     stride=max(room - doc_stride, 0), return_overflowing_tokens=True,
                     return_offsets_mapping=True)

  def max_context(context, owner):
    """bool [windows, length]: the context pieces whose window is their max-context one
    (min(left, right) + 0.01 x the window's context length, the first best window winning)."""
    keep = torch.zeros_like(context)
    for q in sorted(set(owner)):
      rows = [w for w, o in enumerate(owner) if o == q]  # the question's windows, in order
      counts = context[rows].sum(1)  # context pieces per window
      piece = torch.arange(int(counts.max()))
      score = (torch.minimum(piece[None, :], counts[:, None] - 1 - piece[None, :])
               + 0.01 * counts[:, None])
      score = score.masked_fill(piece[None, :] >= counts[:, None], -1.0)
      total = (len(rows) - 1) * doc_stride + int(counts[-1])
      spread = torch.full((len(rows), total), -1.0)  # each window's scores at context positions
      for i in range(len(rows)):
        width = min(int(counts[i]), total - i * doc_stride)
        spread[i, i * doc_stride:i * doc_stride + width] = score[i, :width]
      best = spread.argmax(0)  # the first of equal maxima
      for i, w in enumerate(rows):
        first = int(context[w].nonzero()[0])
        n = int(counts[i])
        keep[w, first:first + n] = best[i * doc_stride:i * doc_stride + n] == i
    return keep

  def answer(batch):
    owner, offsets, in_context, rows = [], [], [], []
    for q, (question, context) in enumerate(zip(batch["question"], batch["context"])):
      enc = windows(question, context)
      for w in range(len(enc["input_ids"])):
        owner.append(q)
        offsets.append(enc["offset_mapping"][w])
        in_context.append([s == 1 for s in enc.sequence_ids(w)])
        rows.append({k: enc[k][w] for k in ("input_ids", "token_type_ids", "attention_mask")})
    padded = tokenizer.pad(rows, return_tensors="pt")
    with torch.inference_mode():
      out = model(**padded)
    length = padded["input_ids"].shape[1]
    context = torch.tensor([c + [False] * (length - len(c)) for c in in_context])
    start = out.start_logits.float().masked_fill(~max_context(context, owner), -1e9)
    end = out.end_logits.float().masked_fill(~context, -1e9)
    scores = start[:, :, None] + end[:, None, :]  # [windows, start, end]
    position = torch.arange(length)
    band = (position[None, :] >= position[:, None]) & (position[None, :] - position[:, None]
                                                       < max_answer_length)
    value, index = scores.masked_fill(~band, -1e9).flatten(1).max(1)
    best = {}  # question -> (score, window, flat index)
    for w, (v, k) in enumerate(zip(value.tolist(), index.tolist())):
      if owner[w] not in best or v > best[owner[w]][0]:
        best[owner[w]] = (v, w, k)
    answers = []
    for q, text in enumerate(batch["context"]):
      _, w, k = best[q]
      s, e = divmod(k, length)
      answers.append(text[offsets[w][s][0]:offsets[w][e][1]])
    return answers
  return answer
