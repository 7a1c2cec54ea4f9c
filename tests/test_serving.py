"""Raw-text exports: the question-answering export against the script's Python path, the
predict command, long documents for the classifier, saved_model_cli."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import squad, squad_predictions, tokenization
from helpers import assert_close, block_ops, randomize
from scripts import run_script
from modeling import squad_export
from modeling.config import BertConfig
from modeling.span_labeling import BertSpanLabeler

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "sat", "on", "mat",
         "steve", "smith", "'", "s", ",", ".", "who", "where", "what", "did", "is", "un",
         "##believ", "##able", "##s", "hello", "world", "cafe", "zebra", "in", "park", "!", "(",
         ")", "1", "##9", "##5", "-", "##e", "caf"]
CONTEXT_WORDS = ["the", "cat", "sat", "on", "mat", "Steve", "Smith's", "(1995),", "unbelievable",
                 "café", "Hello", "world!", "zebra-park", "in", "a", "x", "émile", "q.", "CAFE"]
QUESTIONS = ["where is the zebra ?", "who sat on the mat", "what is unbelievable",
             "did steve smith's cat sit ?", "hello"]


def _paragraphs(rng, n):
  """(question, context) pairs: punctuation inside words, accents, several spaces, some
  contexts long enough for several windows."""
  pairs = []
  for _ in range(n):
    words = [rng.choice(CONTEXT_WORDS) for _ in range(rng.choice([3, 8, 20, 45]))]
    context = "".join(w + rng.choice([" ", " ", " ", "  ", "\t", "\u202f"]) for w in words)
    pairs.append((rng.choice(QUESTIONS), rng.choice(["", " "]) + context.rstrip()))
  return pairs


def _squad_file(path, pairs):
  paragraphs = [{"context": c, "qas": [{"id": f"q{i}", "question": q, "answers": [],
                                        "is_impossible": False}]}
                for i, (q, c) in enumerate(pairs)]
  path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t",
                                                            "paragraphs": paragraphs}]}))
  return str(path)


@pytest.fixture(scope="module")
def span_model(tmp_path_factory):
  d = tmp_path_factory.mktemp("qa")
  vocab = write_vocab(d / "vocab.txt", WORDS)
  config = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                      type_vocab_size=2)
  model = BertSpanLabeler(config)
  randomize(model, seed=3, scale=0.5)
  return model, vocab, d


def test_question_answering_export_gives_the_scripts_answers(span_model):
  """The export's answers are compute_predictions' on the same logits (same strings), with
  windows (--doc_stride), cut questions and get_final_text's alignment in the graph; v2.0
  (v1.1 through run_squad.py in test_squad_export_and_predict_command)."""
  model, vocab, d = span_model
  v2 = True
  seq, stride, query, n_best, max_answer = 24, 5, 4, 6, 7
  pairs = _paragraphs(random.Random(v2), 60)
  examples = squad.read_squad_examples(_squad_file(d / f"dev{v2}.json", pairs), False, v2)
  tokenizer = tokenization.FullTokenizer(vocab)
  features = squad.convert_examples_to_features(examples, tokenizer, seq, stride, query, False)
  arrays = squad.feature_arrays(features, seq, False)
  out = model({k: tf.constant(v, tf.int32) for k, v in arrays.items() if k != "unique_ids"})
  # Positions past a feature's end never rank (the export's documented difference).
  real = arrays["input_mask"] == 1
  logits = {k: np.where(real, out[k].numpy(), -np.inf) for k in ("start_logits", "end_logits")}
  predictions, _, null_odds, _ = squad_predictions.predictions_from_outputs(
      examples, features, {"unique_ids": arrays["unique_ids"], **logits}, n_best, max_answer,
      True, v2, 0.5)
  module = squad_export.TextQuestionAnswerer(model, vocab, True, seq, stride, query, n_best,
                                             max_answer, v2, 0.5)
  served = module.serve(question=tf.constant([q for q, _ in pairs]),
                        context=tf.constant([c for _, c in pairs]))
  texts = [t.decode() for t in served["text"].numpy()]
  want = [predictions[f"q{i}"] for i in range(len(pairs))]
  assert texts == want
  assert any(len(f.tokens) == seq for f in features) and len(features) > len(pairs)
  assert sum(bool(t) for t in texts) > len(pairs) // 3
  for (_, context), text, start, end in zip(pairs, texts, served["start"].numpy(),
                                            served["end"].numpy()):
    if text and " " not in text:  # a span inside one word: the context holds it verbatim
      assert context[start:end] == text
  assert 0 < sum(served["no_answer"].numpy()) < len(pairs)
  np.testing.assert_array_equal(served["no_answer"].numpy(), [not t for t in texts])
  # float32, the graph's logits against eager ones of other batches: one block and the span
  # head (a sum of 16), relative to the largest logit.
  assert_close(served["null_score_diff"].numpy(), [null_odds[f"q{i}"] for i in range(len(pairs))],
               "float32", 4 * (block_ops(model.config, 24) + 16), np.abs(out["start_logits"]).max())


@pytest.mark.slow
def test_squad_export_and_predict_command(tmp_path):
  """run_squad.py --export_dir (v1.1, a few training steps), then predict.py on the dev
  questions as JSON Lines: the answers are predictions.json's, string for string."""
  vocab = write_vocab(tmp_path / "vocab.txt", WORDS)
  config = tmp_path / "bert_config.json"
  BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=64,
             type_vocab_size=2).to_json_file(str(config))
  rng = random.Random(5)
  train = []
  for q, c in _paragraphs(rng, 48):
    word = rng.choice(c.split())
    train.append((q, c, word, c.index(word)))
  data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
      {"context": c, "qas": [{"id": f"t{i}", "question": q,
                              "answers": [{"text": w, "answer_start": at}]}]}
      for i, (q, c, w, at) in enumerate(train)]}]}
  (tmp_path / "train.json").write_text(json.dumps(data))
  pairs = _paragraphs(rng, 40)
  dev = _squad_file(tmp_path / "dev.json", pairs)
  out, export = tmp_path / "out", tmp_path / "export"
  run_script("run_squad.py", f"--vocab_file={vocab}", f"--bert_config_file={config}",
             f"--output_dir={out}", f"--train_file={tmp_path / 'train.json'}",
             f"--predict_file={dev}", "--do_train", "--do_predict", "--max_seq_length=24",
             "--doc_stride=5", "--max_query_length=4", "--n_best_size=6",
             "--max_answer_length=7", "--train_batch_size=8", "--num_train_epochs=1",
             "--learning_rate=1e-3", "--batch_length_multiple=0", f"--export_dir={export}")
  rows = tmp_path / "questions.jsonl"
  rows.write_text("".join(json.dumps({"qid": f"q{i}", "question": q, "context": c}) + "\n"
                          for i, (q, c) in enumerate(pairs)))
  proc = run_script("predict.py", f"--export_dir={export}", f"--input_file={rows}",
                    f"--output_file={tmp_path / 'answers.jsonl'}", "--id_field=qid",
                    "--batch_size=7")
  assert "Predicted 40 rows" in proc.stderr
  answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
  predictions = json.loads((out / "predictions.json").read_text())
  assert [a["qid"] for a in answers] == list(predictions)
  assert {a["qid"]: a["text"] for a in answers} == {
      k: "" if v == "empty" else v for k, v in predictions.items()}
  assert len(set(predictions.values())) > 3  # a model that answers, not one constant
