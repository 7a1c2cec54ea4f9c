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
