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
  try:
    process.stdin.write(f"{request}\n")
    process.stdin.flush()
  except BrokenPipeError:
    sys.exit("error: the Hugging Face side stopped (its messages are above)")
  line = process.stdout.readline()
  while line and not line.startswith("{"):
    line = process.stdout.readline()
  if not line:
    sys.exit("error: the Hugging Face side stopped (its messages are above)")
  return json.loads(line)


def hf_question_answerer(checkpoint, dtype="float32", max_length=384, doc_stride=128,
                         max_query_length=64, max_answer_length=30, model=None, tokenizer=None):
  """Question answering on the Hugging Face side (call it in the torch venv): transformers 5
  has no question-answering pipeline, so its steps are written out here, doing the work our
  export does, as run_squad.py defines it. The fast tokenizer tokenizes the questions and
  the contexts (each batch in one call); a question keeps its first `max_query_length`
  pieces; each context is read in windows of `max_length` pieces ([CLS] question [SEP]
  window [SEP]), one every `doc_stride` context pieces, the last reaching the end; the model
  runs in `dtype`; a span of at most `max_answer_length` pieces may start only in the window
  where its first piece has the most context (the original's max-context rule; windows and
  rule are data/windows.py's, which run_squad.py uses), and the highest start + end logit
  over all of a question's windows wins (float64 sums, as the original's Python floats). A
  call takes {"question": [N], "context": [N]} and returns the N answers, each the
  context's characters of its span ("" for a context without pieces; no n-best table, no
  get_final_text). `model` and `tokenizer`: already loaded ones to use (several callers
  may share a model; a fast tokenizer serves one thread at a time)."""
  import torch
  import transformers
  from data import windows  # run_squad.py's own windows and max-context rule (NumPy only)
  tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(checkpoint)
  model = model or transformers.AutoModelForQuestionAnswering.from_pretrained(
      checkpoint, dtype=getattr(torch, dtype)).eval()
  cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id

  def answer(batch):
    questions = tokenizer(batch["question"], add_special_tokens=False)["input_ids"]
    contexts = tokenizer(batch["context"], add_special_tokens=False,
                         return_offsets_mapping=True)
    rows, owner, where = [], [], []  # model rows; each row's question, (start, length, mask)
    for q, (query, ids) in enumerate(zip(questions, contexts["input_ids"])):
      query = query[:max_query_length]
      spans = windows.doc_spans(len(ids), max_length - len(query) - 3, doc_stride)
      best = windows.max_context_windows(spans, len(ids))  # [pieces] each one's window
      for i, (start, length) in enumerate(spans):
        rows.append(([cls] + query + [sep] + ids[start:start + length] + [sep], len(query) + 2))
        owner.append(q)
        where.append((start, length, (best[start:start + length] == i).tolist()))
    answers = [""] * len(questions)
    if not rows:
      return answers
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    segment = torch.tensor([[0] * first + [1] * (len(ids) - first) + [0] * (width - len(ids))
                            for ids, first in rows])
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    with torch.inference_mode():
      out = model(input_ids=input_ids, token_type_ids=segment, attention_mask=mask)
    start_ok = torch.zeros(len(rows), width, dtype=torch.bool)
    end_ok = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, ((_, first), (_, length, allowed)) in enumerate(zip(rows, where)):
      start_ok[r, first:first + length] = torch.tensor(allowed)
      end_ok[r, first:first + length] = True
    start = out.start_logits.double().masked_fill(~start_ok, -1e9)
    end = out.end_logits.double().masked_fill(~end_ok, -1e9)
    scores = start[:, :, None] + end[:, None, :]  # [rows, start, end]
    position = torch.arange(width)
    band = (position[None, :] >= position[:, None]) & (position[None, :] - position[:, None]
                                                       < max_answer_length)
    value, index = scores.masked_fill(~band, -1e18).flatten(1).max(1)
    best = {}  # question -> (score, row, flat index); the first of equal scores wins
    for r, (v, k) in enumerate(zip(value.tolist(), index.tolist())):
      if owner[r] not in best or v > best[owner[r]][0]:
        best[owner[r]] = (v, r, k)
    for q, (_, r, k) in best.items():
      s, e = divmod(k, width)
      first, (window_start, _, _) = rows[r][1], where[r]
      offsets = contexts["offset_mapping"][q]
      answers[q] = batch["context"][q][offsets[window_start + s - first][0]:
                                        offsets[window_start + e - first][1]]
    return answers
  return answer
