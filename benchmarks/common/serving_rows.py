"""Real text of mixed lengths for the serving benchmarks, one row per request, in file
order: RTE's dev premises (classifier), CoNLL-2003's validation sentences (tagger), SQuAD's
dev questions with their paragraphs (question answering). Standard library only: the
Hugging Face side of benchmarks/speed/serving.py imports it too."""

import csv
import json
import os


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
