"""Raw-text exports: the question-answering export against the script's Python path, the
predict command, long documents for the classifier, saved_model_cli."""

import json
import os
import random
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import squad, squad_predictions, tokenization
from helpers import assert_close, block_ops, randomize, read_eval_results
from scripts import last_error_line, run_script
from modeling import checkpoints, squad_export
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
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
  model = BertSpanLabeler(BertEncoder(config))
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
    # The offsets are the span's: the text is the context there, its whitespace runs (the
    # original's whitespace) made one space, as get_final_text rebuilds it from the words.
    assert re.sub("[ \t\r\n\u202f]+", " ", context[start:end]) == text
  assert 0 < sum(served["no_answer"].numpy()) < len(pairs)
  np.testing.assert_array_equal(served["no_answer"].numpy(), [not t for t in texts])
  # float32, the graph's logits against eager ones of other batches: one block and the span
  # head (a sum of 16), relative to the largest logit; the difference sums four logits.
  assert_close(served["null_score_diff"].numpy(), [null_odds[f"q{i}"] for i in range(len(pairs))],
               "float32", 4 * (block_ops(model.config, 24) + 16), np.abs(out["start_logits"]).max())


def test_question_answering_export_without_words(span_model):
  """No question, or contexts without a word (empty, whitespace, bytes that are not UTF-8):
  no answer and no error, beside a context that has one."""
  model, vocab, _ = span_model
  for v2 in (False, True):
    module = squad_export.TextQuestionAnswerer(model, vocab, True, 24, 5, 4, 6, 7, v2, 0.5)
    served = module.serve(question=tf.constant([], tf.string), context=tf.constant([], tf.string))
    assert all(v.shape == (0,) for v in served.values())
    contexts = [b"", b" \t\n\xe2\x80\xaf", b"\xff\xc3", b"the cat sat on the mat"]
    served = module.serve(question=tf.constant(["who sat"] * 4), context=tf.constant(contexts))
    assert served["text"].numpy().tolist()[:3] == [b""] * 3
    assert served["start"].numpy().tolist()[:3] == served["end"].numpy().tolist()[:3] == [-1] * 3
    assert np.isneginf(served["score"].numpy()[:3]).all() and served["score"].numpy()[3] > -1e9
    served = module.serve(question=tf.constant(["who sat"] * 3), context=tf.constant(contexts[:3]))
    assert served["text"].numpy().tolist() == [b""] * 3  # no question of the batch has a span


def _planted_logits(rng, features, width, max_answer):
  """Start and end logits [F, width] float32 for `features`, with the spans each selection
  rule must refuse planted above the rest.

  The base is uniform in [-3, 3], in half of the windows rounded to halves (tied logits,
  tied spans across windows). Each window then gets one to three traps, each at 3 plus 1, 2
  or 3 (tied across the windows of a question): a span in the question, one ending before
  it starts, one a piece longer than max_answer beside the longest allowed one, one starting
  where another window has more context, the null position, the final [SEP], two valid spans
  with equal logits, a one-piece span. Positions past a window's end get the highest logits:
  the graph must never rank them (the Python side receives each window's own positions).
  """
  start = rng.uniform(-3, 3, (len(features), width)).astype(np.float32)
  end = rng.uniform(-3, 3, (len(features), width)).astype(np.float32)
  kinds = ["question", "reversed", "long", "other_context", "null", "sep", "tie", "single"]
  for i, f in enumerate(features):
    if rng.random() < 0.5:
      start[i], end[i] = np.round(start[i] * 2) / 2, np.round(end[i] * 2) / 2
    start[i, len(f.tokens):] = end[i, len(f.tokens):] = 9.0
    doc = sorted(f.token_to_orig_map)
    own = [p for p in doc if f.token_is_max_context[p]]
    other = [p for p in doc if not f.token_is_max_context[p]]
    question = range(1, doc[0] - 1)
    for kind in rng.choice(kinds, size=rng.integers(1, 4), replace=False):
      high = 3.0 + rng.integers(1, 4)
      if kind == "question" and len(question) > 0:
        a, b = sorted(rng.choice(question, size=2))
        start[i, a] = end[i, b] = high
      elif kind == "reversed" and len(doc) > 1:
        a, b = sorted(rng.choice(doc, size=2, replace=False))
        start[i, b] = end[i, a] = high
      elif kind == "long" and own and own[0] + max_answer <= doc[-1]:
        a = rng.choice([p for p in own if p + max_answer <= doc[-1]])
        start[i, a], end[i, a + max_answer], end[i, a + max_answer - 1] = high, high, high - 0.5
      elif kind == "other_context" and other:
        a = rng.choice(other)
        start[i, a] = end[i, a] = high
      elif kind == "null":
        start[i, 0] = end[i, 0] = high
      elif kind == "sep":
        start[i, len(f.tokens) - 1] = end[i, len(f.tokens) - 1] = high
      elif kind == "tie" and len(own) > 1:
        a, b = sorted(rng.choice(own, size=2, replace=False))
        start[i, [a, b]] = end[i, [a, b]] = high
      elif kind == "single" and own:
        a = rng.choice(own)
        start[i, a] = end[i, a] = high
  return start, end


@pytest.mark.parametrize("v2", [False, True])
def test_squad_selection_in_graph_and_python_agree_on_the_same_logits(span_model, monkeypatch,
                                                                      v2):
  """The n-best and final-text rules in two forms, data/squad_predictions.py's
  compute_predictions and modeling/squad_export.py's graph (the model replaced by the
  planted logits of _planted_logits), pick the same answer for every question, with the
  same score and, for v2.0, the same null odds and no-answer decision. Windows overlap
  (doc_stride 5 on 24 positions); the graph gives no n-best list nor probabilities, so only
  the chosen answer is compared."""
  from modeling import export
  model, vocab, d = span_model
  seq, stride, query, n_best, max_answer = 24, 5, 4, 4, 3
  pairs = _paragraphs(random.Random(10 + v2), 40)
  examples = squad.read_squad_examples(_squad_file(d / f"parity{v2}.json", pairs), False, v2)
  features = squad.convert_examples_to_features(
      examples, tokenization.FullTokenizer(vocab), seq, stride, query, False)
  width = max(len(f.tokens) for f in features)
  start, end = _planted_logits(np.random.default_rng(v2), features, width, max_answer)
  results = [squad_predictions.RawResult(f.unique_id, start[i, :len(f.tokens)].tolist(),
                                         end[i, :len(f.tokens)].tolist())
             for i, f in enumerate(features)]
  threshold = 0.0
  if v2:  # a threshold that some question's null odds equal exactly (both sides keep the
    # answer there), the median of the questions with a span
    _, first, odds = squad_predictions.compute_predictions(
        examples, features, results, n_best, max_answer, True, v2, threshold)
    odds = sorted(odds[q] for q, entries in first.items() if any(e["text"] for e in entries))
    threshold = odds[len(odds) // 2]
  predictions, nbest, null_odds = squad_predictions.compute_predictions(
      examples, features, results, n_best, max_answer, True, v2, threshold)

  input_ids = np.array([f.input_ids[:width] for f in features], np.int32)

  def planted(unused_model, windows):  # the same windows as the Python features, then logits
    with tf.control_dependencies([tf.debugging.assert_equal(windows["input_ids"], input_ids)]):
      return {"start_logits": tf.identity(start), "end_logits": tf.identity(end)}
  monkeypatch.setattr(export, "served_outputs", planted)
  module = squad_export.TextQuestionAnswerer(model, vocab, True, seq, stride, query, n_best,
                                             max_answer, v2, threshold)
  served = module.serve(question=tf.constant([q for q, _ in pairs]),
                        context=tf.constant([c for _, c in pairs]))

  ids = [f"q{i}" for i in range(len(pairs))]
  # A question without any valid span: Python's nonce "empty" (v1.1) or "" with null odds 0
  # (v2.0); the graph's "" with score -inf (squad_export's documented difference).
  spans = [[e for e in nbest[q] if e["text"]] for q in ids]
  has_span = [bool(s) and not (s[0]["text"] == "empty" and s[0]["start_logit"] == 0.0)
              for s in spans]
  texts = [t.decode() for t in served["text"].numpy()]
  assert texts == [predictions[q] if found else "" for q, found in zip(ids, has_span)]
  score = served["score"].numpy()
  np.testing.assert_array_equal(np.isfinite(score), has_span)
  want = np.array([s[0]["start_logit"] + s[0]["end_logit"] for s, found in zip(spans, has_span)
                   if found])
  # Both sides sum the same two float32 logits in float64 (bit for bit the same); the graph
  # then rounds the score to float32 once: within u * |score|, inside the bound 2 * u * |score|.
  assert_close(score[has_span], want, "float32", 1, np.abs(want), what="score")
  assert 0 < sum(has_span) and sum(bool(t) for t in texts) > len(pairs) // 4
  if v2:
    np.testing.assert_array_equal(served["no_answer"].numpy(), [not t for t in texts])
    assert 0 < sum(not t for t in texts) < len(pairs)
    assert any(found and null_odds[q] == threshold for q, found in zip(ids, has_span))
    # The same float64 difference of three float32 logits on both sides, rounded to float32
    # once by the graph.
    want = np.array([null_odds[q] for q in ids])
    assert_close(served["null_score_diff"].numpy(), want, "float32", 1, np.abs(want),
                 what="null odds")


@pytest.fixture(scope="module")
def trained_squad(tmp_path_factory):
  """run_squad.py --do_train --do_predict --export_dir (v1.1, a few steps) once for the file:
  (predictions.json as a dict, export directory, dev (question, context) pairs)."""
  tmp_path = tmp_path_factory.mktemp("squad")
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
  return json.loads((out / "predictions.json").read_text()), str(export), pairs


@pytest.mark.slow
def test_squad_export_and_predict_command(trained_squad, tmp_path):
  """run_squad.py --export_dir (v1.1, a few training steps), then predict.py on the dev
  questions as JSON Lines: the answers are predictions.json's, string for string."""
  predictions, export, pairs = trained_squad
  rows = tmp_path / "questions.jsonl"
  rows.write_text("".join(json.dumps({"qid": f"q{i}", "question": q, "context": c}) + "\n"
                          for i, (q, c) in enumerate(pairs)))
  proc = run_script("predict.py", f"--export_dir={export}", f"--input_file={rows}",
                    f"--output_file={tmp_path / 'answers.jsonl'}", "--id_field=qid",
                    "--batch_size=7")
  assert "Predicted 40 rows" in proc.stderr
  answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
  assert [a["qid"] for a in answers] == list(predictions)
  assert {a["qid"]: a["text"] for a in answers} == {
      k: "" if v == "empty" else v for k, v in predictions.items()}
  assert len(set(predictions.values())) > 3  # a model that answers, not one constant
  # The export records the run's window settings (what squad_requests.py gives its peer).
  windows = tf.saved_model.load(export).windows
  assert {k: int(getattr(windows, k).numpy()) for k in (
      "max_seq_length", "doc_stride", "max_query_length", "max_answer_length")} == {
      "max_seq_length": 24, "doc_stride": 5, "max_query_length": 4, "max_answer_length": 7}
  # Rows are checked before the export loads: beside saved_model.pb alone (no variables,
  # which no load survives) a bad row is still what the one line names.
  bare = tmp_path / "bare"
  bare.mkdir()
  shutil.copy(os.path.join(export, "saved_model.pb"), bare)
  with open(rows, "a") as f:
    f.write('{"qid": "q40", "question": "why?"}\n')
  proc = run_script("predict.py", f"--export_dir={bare}", f"--input_file={rows}",
                    f"--output_file={tmp_path / 'again.jsonl'}", "--id_field=qid",
                    expect_ok=False)
  assert last_error_line(proc) == (f"error: {rows}:41: 'context' must be a string, not "
                                   "missing.")
  assert not (tmp_path / "again.jsonl").exists()
  # Good rows, then the load fails: one line too.
  (tmp_path / "one.jsonl").write_text(rows.read_text().splitlines()[0] + "\n")
  proc = run_script("predict.py", f"--export_dir={bare}", f"--input_file={tmp_path}/one.jsonl",
                    f"--output_file={tmp_path / 'again.jsonl'}", "--id_field=qid",
                    expect_ok=False)
  assert last_error_line(proc).startswith(f"error: --export_dir={bare}: cannot load the "
                                          "SavedModel (")
  assert proc.stderr.count("Traceback") == 0 and not (tmp_path / "again.jsonl").exists()


def test_an_unreadable_export_is_one_line(tmp_path):
  from modeling import served_model
  (tmp_path / "saved_model.pb").mkdir()  # a directory where the file should be
  with pytest.raises(ValueError, match=r"^--export_dir=\S+: cannot read saved_model\.pb \(.+\)\.$"):
    served_model.signature_inputs(str(tmp_path))
  with pytest.raises(ValueError, match=r"holds no SavedModel \(saved_model\.pb\)\.$"):
    served_model.signature_inputs(str(tmp_path / "nowhere"))
  (tmp_path / "cut").mkdir()
  (tmp_path / "cut" / "saved_model.pb").write_bytes(b"\x0a\xff\xff")  # a field cut short
  with pytest.raises(ValueError, match=r"saved_model\.pb is not a SavedModel \(.*\)\.$"):
    served_model.signature_inputs(str(tmp_path / "cut"))


def _tiny_export(path, dtype, outputs):
  """A SavedModel whose serving_default takes one input, `text_a` of `dtype` [N], and
  returns {name: function of it} for `outputs` (not one of our exports: no weights)."""
  class Module(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], dtype, name="text_a")])
    def serve(self, text_a):
      return {name: make(text_a) for name, make in outputs.items()}
  module = Module()
  tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
  return str(path)


def test_predict_refuses_an_export_of_other_inputs_before_reading_rows(tmp_path):
  """An export whose input is not a string (not a raw-text export) is one line naming it,
  before the rows are read (this file's only row is not JSON) or the export loads."""
  export = _tiny_export(tmp_path / "floats", tf.float32, {"y": lambda x: 2 * x})
  (tmp_path / "rows.jsonl").write_text("1.5 not json\n")
  proc = run_script("predict.py", f"--export_dir={export}",
                    f"--input_file={tmp_path / 'rows.jsonl'}",
                    f"--output_file={tmp_path / 'out.jsonl'}", expect_ok=False)
  assert last_error_line(proc) == (f"error: --export_dir={export}: input 'text_a' is float32; "
                                   "predict.py runs raw-text exports (string inputs) only.")
  assert "Traceback" not in proc.stderr and not (tmp_path / "out.jsonl").exists()


def test_predict_refuses_an_id_field_named_like_an_output(tmp_path):
  """--id_field=label beside an export's `label` output would lose the id (JSON Lines) or
  write two label columns (TSV): refused, before predicting; another name runs."""
  export = _tiny_export(tmp_path / "labels", tf.string, {
      "label": tf.strings.upper, "length": lambda t: tf.strings.length(t)})
  (tmp_path / "rows.jsonl").write_text('{"label": "q1", "key": "k1", "text_a": "good"}\n')
  for out in ("out.jsonl", "out.tsv"):
    proc = run_script("predict.py", f"--export_dir={export}",
                      f"--input_file={tmp_path / 'rows.jsonl'}",
                      f"--output_file={tmp_path / out}", "--id_field=label", expect_ok=False)
    assert last_error_line(proc) == (
        "error: --id_field=label is also the name of one of the export's outputs (label, "
        "length), which the id's column would clash with; rename that column or key in the "
        "input.")
    assert not (tmp_path / out).exists()
  run_script("predict.py", f"--export_dir={export}", f"--input_file={tmp_path / 'rows.jsonl'}",
             f"--output_file={tmp_path / 'out.jsonl'}", "--id_field=key")
  assert json.loads((tmp_path / "out.jsonl").read_text()) == {"key": "k1", "label": "GOOD",
                                                              "length": 4}


GOOD, BAD = ["good", "great"], ["bad", "awful"]
FILLER = ["the", "a", "film", "was", "very", "and", "plot", "actors", "music", "quite"]


def _late_label_document(rng, label, lead=20):
  """A document whose only label-bearing word comes after `lead` filler words."""
  words = [rng.choice(FILLER) for _ in range(lead + rng.randint(0, 12))]
  words.insert(rng.randint(lead, len(words)), rng.choice(GOOD if label else BAD))
  return " ".join(words + [rng.choice(FILLER) for _ in range(rng.randint(0, 6))])


@pytest.fixture(scope="module")
def classifier_files(tmp_path_factory):
  d = tmp_path_factory.mktemp("long")
  vocab = write_vocab(d / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + GOOD
                      + BAD + FILLER)
  config = BertConfig(vocab_size=len(GOOD + BAD + FILLER) + 5, hidden_size=16,
                      num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=32, type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  return d, vocab, config


def test_classifier_export_averages_the_windows_logits(classifier_files):
  """The export's windows (--doc_stride) are glue.window_arrays' and its probabilities the
  softmax of the mean of their logits."""
  from data import glue
  from modeling import export
  from modeling.classification import BertClassifier
  d, vocab, config = classifier_files
  model = BertClassifier(BertEncoder(config), 2)
  randomize(model, seed=4, scale=0.5)
  rng = random.Random(2)
  texts = [_late_label_document(rng, i % 2, lead=rng.choice([0, 5, 30])) for i in range(12)]
  texts += ["", "good"]
  task = glue.get_task("sst-2")
  examples = [glue.InputExample(str(i), t, None, "0") for i, t in enumerate(texts)]
  arrays, example_of = glue.window_arrays(task, examples, tokenization.FullTokenizer(vocab),
                                          16, 5)
  assert np.bincount(example_of).max() >= 5  # long texts: several windows
  logits = model({k: tf.constant(arrays[k], tf.int32)
                  for k in ("input_ids", "input_mask", "segment_ids")})["logits"].numpy()
  want = tf.nn.softmax(glue.mean_over_windows(logits, example_of, len(texts))).numpy()
  module = export.TextClassifier(model, vocab, True, 16, ["0", "1"], False, doc_stride=5)
  got = module.serve(text_a=tf.constant(texts))["probabilities"].numpy()
  # float32, the graph against eager: one block and the classifier (a sum of 16), averaged.
  assert_close(got, want, "float32", 4 * (block_ops(config, 16) + 16), np.abs(logits).max())


def _warm_up_requests(directory):
  """The Predict requests of an export's TensorFlow Serving warm-up file, read with
  TensorFlow Serving's own protos: [(signature name, {input name: array})]."""
  from tensorflow_serving.apis import prediction_log_pb2
  from modeling import export
  out = []
  for record in tf.data.TFRecordDataset(os.path.join(directory, export.WARM_UP_FILE)):
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    assert log.WhichOneof("log_type") == "predict_log"
    request = log.predict_log.request
    out.append((request.model_spec.signature_name,
                {k: tf.make_ndarray(v) for k, v in request.inputs.items()}))
  return out


def test_exports_carry_warm_up_requests_of_every_padded_length(classifier_files, tmp_path):
  """An export holds TensorFlow Serving's warm-up file: Predict requests of serving_default
  that the loaded export answers and whose features together take every length a request of
  one text (one row), or of one question of four endings (four rows), is padded to."""
  from modeling import export
  from modeling.classification import BertClassifier
  from modeling.multiple_choice import BertMultipleChoice
  d, vocab, config = classifier_files
  modules = {  # (module, rows of the model per request)
      "classifier": (export.TextClassifier(BertClassifier(BertEncoder(config), 2), vocab, True,
                                           32, ["0", "1"], False), 1),
      "multiple_choice": (export.TextMultipleChoice(BertMultipleChoice(BertEncoder(config)),
                                                    vocab, True, 32), 4)}
  for kind, (module, rows) in modules.items():
    directory = export.save(module, str(tmp_path / kind))
    requests = _warm_up_requests(directory)
    serve = tf.saved_model.load(directory).signatures["serving_default"]
    widths = set()
    for signature, inputs in requests:
      assert signature == "serving_default"
      assert set(inputs) == set(serve.structured_input_signature[1])
      assert all(v.dtype == object and v.shape[0] == 1 for v in inputs.values())
      outputs = serve(**{k: tf.constant(v) for k, v in inputs.items()})
      assert all(v.shape[0] == 1 for v in outputs.values())
      if kind == "classifier":
        features = module._windows(tf.constant(inputs["text_a"]))["features"]
        widths.add(features["input_ids"].shape[1])
      else:  # [CLS] sent1 [SEP] ending [SEP], each ending one word
        widths.add(len(inputs["sent1"][0].split()) + 4)
    # Every length from the shortest request there is ([CLS] a [SEP], or [CLS] a [SEP] a
    # [SEP]) to 32, rounded up so that rows x length is a multiple of 8.
    step = 8 // np.gcd(rows, 8)
    padded = lambda n: min(-(-n // step) * step, 32)  # noqa: E731
    want = {padded(n) for n in range({"classifier": 3, "multiple_choice": 5}[kind], 33)}
    assert {padded(n) for n in widths} == want, (kind, sorted(widths), sorted(want))


def test_question_answering_warm_up_ends_with_full_windows(span_model):
  """The question-answering export's warm-up requests: one window of every padded length,
  the shortest first, then contexts of two and of three windows (the longest request's
  kernels, built last)."""
  model, vocab, _ = span_model
  module = squad_export.TextQuestionAnswerer(model, vocab, True, 24, 5, 4, 6, 7, True, 0.0)
  shapes = [tuple(module._windows(**{k: tf.constant(v) for k, v in r.items()})[
      "features"]["input_ids"].shape) for r in module.warm_up_requests()]
  # [CLS] a [SEP] context [SEP]: one window of every multiple of 8 up to 24, then more.
  assert shapes == [(1, 8), (1, 16), (1, 24), (2, 24), (3, 24)]


@pytest.mark.bfloat16
def test_bfloat16_export_stores_its_weights_and_records_its_precision(classifier_files):
  """A model trained under --dtype=bfloat16 exports its products' weights in bfloat16
  (each rounded once from the float32 weights; no cast of a weight per request) and
  records its precision; its probabilities are float32's within bfloat16's rounding."""
  from modeling import export
  from modeling.classification import BertClassifier
  _, vocab, config = classifier_files
  full = BertClassifier(BertEncoder(config), 2)
  weights = randomize(full, seed=5, scale=0.5)
  mixed = BertClassifier(BertEncoder(config, dtype="mixed_bfloat16"), 2)
  mixed.build()
  for name, variable in checkpoints.variable_map(mixed).items():
    variable.assign(weights[name])
  texts = tf.constant(["good", "the cat sat on the mat", ""])
  half = export.TextClassifier(mixed, vocab, True, 16, ["0", "1"], False)
  want = export.TextClassifier(full, vocab, True, 16, ["0", "1"], False).serve(
      text_a=texts)["probabilities"].numpy()
  assert half.precision.dtype.numpy() == b"bfloat16"
  served = half._model
  kernel = served.encoder.blocks[0].attention.joined_kernel
  assert kernel.dtype == tf.bfloat16 and served.encoder.blocks[0].intermediate.kernel.dtype == \
      "bfloat16"
  # Rounded once: the query's part is the float32 kernel in bfloat16 (at inference the
  # scores take 1 / sqrt(D), in the product's post-ops).
  query = weights["bert/encoder/layer_0/attention/self/query/kernel"]
  np.testing.assert_array_equal(
      kernel.numpy()[:, :config.hidden_size].astype(np.float32),
      tf.cast(tf.cast(query, tf.float32), tf.bfloat16).numpy().astype(np.float32))
  # No weight is cast per request: no cast in the serving graph reads a variable (the
  # mixed-precision model's own graph casts every kernel and bias at every call).
  def weight_casts(module):
    definition = module.serve.get_concrete_function().graph.as_graph_def()
    count = 0
    for nodes in [definition.node] + [f.node_def for f in definition.library.function]:
      reads = {n.name for n in nodes if n.op == "ReadVariableOp"}
      count += sum(n.op == "Cast" and n.input[0].split(":")[0] in reads for n in nodes)
    return count
  assert weight_casts(half) == 0
  unconverted = export.TextClassifier(mixed, vocab, True, 16, ["0", "1"], False)
  unconverted._model = mixed
  unconverted.serve = tf.function(unconverted._classify,
                                  input_signature=[tf.TensorSpec([None], tf.string)])
  assert weight_casts(unconverted) > 0
  got = half.serve(text_a=texts)["probabilities"].numpy()
  # bfloat16 against float32 through one block and the pooler and classifier (two dense
  # layers, 4 bfloat16 roundings each), on probabilities (at most 1).
  assert_close(got, want, "bfloat16", block_ops(config, 16, "bfloat16") + 2 * 4, 1.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_export_holds_each_weight_once(classifier_files, tmp_path, dtype):
  """A saved export's variables are the model's weights, each once, in the dtype it computes
  in (attention's query, key and value joined, as the served graph reads them), plus its
  precision; it answers as the module it was saved from."""
  from data import fast_tokenization
  from modeling import export
  from modeling.classification import BertClassifier
  _, vocab, config = classifier_files
  policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
  model = BertClassifier(BertEncoder(config, dtype=policy), 2)
  model.build()
  weights = randomize(model, seed=6, scale=0.5)
  module = export.TextClassifier(model, vocab, True, 16, ["0", "1"], False)
  path = export.save(module, str(tmp_path / "export"))
  saved = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
  shapes = {k: v for k, v in saved.get_variable_to_shape_map().items()
            if "VARIABLE_VALUE" in k}
  assert sum(int(np.prod(s)) for s in shapes.values()) == \
      sum(w.size for w in weights.values()) + 1  # and the precision's string
  dtypes = saved.get_variable_to_dtype_map()
  kernels = [k for k in shapes if k.endswith("intermediate.Sdense.Skernel/.ATTRIBUTES/VARIABLE_VALUE")
             or "joined_kernel" in k]
  assert len(kernels) == 2 * config.num_hidden_layers
  assert {dtypes[k] for k in kernels} == {tf.as_dtype(dtype)}
  texts = tf.constant(["good", "the cat sat on the mat"])
  np.testing.assert_array_equal(
      fast_tokenization.load_serving(path)(text_a=texts)["probabilities"].numpy(),
      module.serve(text_a=texts)["probabilities"].numpy())


def test_predict_converts_weights_once_and_gives_the_exports_outputs(classifier_files,
                                                                     tmp_path):
  """predict.py lets the dense layers convert their weights once (cli/app.py
  use_inference_defaults: oneDNN's blocked-layout kernels, the cached weights) and says so; its
  probabilities are the export's own, called here in a process that converts at every
  call, up to float32 rounding (other kernels, other orders of the sums). Its requests of
  several lengths and batch sizes reuse each layer's converted weights."""
  from modeling import export
  from modeling.classification import BertClassifier
  d, vocab, config = classifier_files
  model = BertClassifier(BertEncoder(config), 2)
  randomize(model, seed=6, scale=0.5)
  module = export.TextClassifier(model, vocab, True, 16, ["0", "1"], False)
  directory = export.save(module, str(tmp_path / "export"))
  rng = random.Random(3)
  texts = [_late_label_document(rng, i % 2, lead=rng.choice([0, 2, 6])) for i in range(11)]
  (tmp_path / "rows.txt").write_text("".join(t + "\n" for t in texts))
  proc = run_script("predict.py", f"--export_dir={directory}",
                    f"--input_file={tmp_path / 'rows.txt'}",
                    f"--output_file={tmp_path / 'out.jsonl'}", "--batch_size=4")
  assert "dense layers convert their weights once" in proc.stderr
  got = [json.loads(line)["probabilities"]
         for line in (tmp_path / "out.jsonl").read_text().splitlines()]
  want = tf.saved_model.load(directory).signatures["serving_default"](
      text_a=tf.constant(texts))["probabilities"].numpy()
  assert len(got) == len(texts) and np.abs(want - 0.5).max() > 0.05  # not a constant model
  # float32, two kernels of the same products, each side rounding: one block and the
  # classifier, twice. A probability moves at most half as much as the logits, whose size
  # is at most the log-odds'.
  odds = float(np.abs(np.log(want[:, 0] / want[:, 1])).max())
  assert_close(np.array(got), want, "float32", 2 * (block_ops(config, 16) + 16), max(odds, 1.0))


@pytest.fixture(scope="module")
def windows_run(classifier_files, tmp_path_factory):
  """run_classifier.py --doc_stride on documents whose label word lies past the first
  --max_seq_length tokens (train, eval, predict, export): (output dir, export dir, test
  texts, dev size)."""
  d, vocab, _ = classifier_files
  tmp_path = tmp_path_factory.mktemp("windows")
  rng = random.Random(7)
  data = tmp_path / "data"
  data.mkdir()
  n_dev = 40
  for name, n in (("train", 80), ("dev", n_dev)):
    rows = [f"{_late_label_document(rng, i % 2)}\t{i % 2}" for i in range(n)]
    (data / f"{name}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
  tests = [_late_label_document(rng, i % 2) for i in range(10)]
  (data / "test.tsv").write_text("index\tsentence\n" + "".join(
      f"{i}\t{t}\n" for i, t in enumerate(tests)))
  tokenizer = tokenization.FullTokenizer(vocab)
  assert not any(w in tokenizer.tokenize(line.split("\t")[0])[:16 - 2]
                 for line in (data / "train.tsv").read_text().splitlines()[1:]
                 for w in GOOD + BAD)  # cutting keeps no label word
  out, export_dir = tmp_path / "out", tmp_path / "export"
  run_script("run_classifier.py", "--task_name=SST-2", f"--data_dir={data}",
             f"--bert_config_file={d / 'bert_config.json'}", f"--vocab_file={vocab}",
             f"--output_dir={out}", "--max_seq_length=16", "--doc_stride=6", "--do_train",
             "--do_eval", "--do_predict", "--train_batch_size=16", "--learning_rate=1e-3",
             "--num_train_epochs=30", "--seed=1", f"--export_dir={export_dir}")
  from modeling.served_model import ServedModel
  return out, str(export_dir), ServedModel(str(export_dir)), tests, n_dev


@pytest.mark.slow
def test_windows_learn_a_label_that_cutting_never_sees(classifier_files, windows_run):
  """Documents whose label word lies past the first --max_seq_length tokens: cut, no
  training text holds it (chance at best); with --doc_stride the model learns it, and its
  export (windows in the graph) agrees with test_results.tsv. Evaluated again from
  --output_dir and the data alone, it is scored on the same windows (run.json)."""
  from scipy import stats
  d, vocab, config = classifier_files
  out, _, served, tests, n_dev = windows_run
  results = read_eval_results(out / "eval_results.txt")
  proc = run_script("run_classifier.py", "--task_name=SST-2", f"--data_dir={out.parent / 'data'}",
                    f"--vocab_file={vocab}", f"--output_dir={out}", "--do_eval")
  assert "--doc_stride=6, as" in proc.stderr and "--max_seq_length=16, as" in proc.stderr
  assert read_eval_results(out / "eval_results.txt") == results
  # Cut documents give predictions independent of the (balanced) labels: a binomial count of
  # correct ones, which passes this bound with probability under 1e-3.
  assert results["eval_accuracy"] * n_dev > stats.binom.isf(1e-3, n_dev, 0.5), results
  probabilities = np.loadtxt(out / "test_results.tsv")
  got = [row["probabilities"] for row in served({"text_a": tests})]
  # float32, two batchings of one block and the classifier; probabilities of 2 classes.
  assert_close(got, probabilities, "float32", 4 * (block_ops(config, 16) + 16), 1.0)


def _exports(root, span_model, trained_squad, windows_run):
  """One export of each kind, (kind, ServedModel or None, directory, input rows) as each is
  ready: the scripts' (trained) for question answering and the classifier (--doc_stride),
  then the others from random tiny models."""
  from modeling import export
  from modeling.multiple_choice import BertMultipleChoice
  from modeling.served_model import ServedModel
  from modeling.tagging import BertTagger
  model, vocab, _ = span_model
  config = model.config
  rows = {"tagger": [{"text": "steve smith sat"}, {"text": "hello"}],
          "multiple_choice": [{"sent1": "the cat", "sent2": "sat", "endings": ["on", "in", "a"]},
                              {"sent1": "who", "sent2": "", "endings": ["is", "did", "what"]}]}
  # Cased (do_lower_case False): a much smaller graph to trace; the inputs are lower case.
  modules = {
      "tagger": export.TextTagger(BertTagger(BertEncoder(config), 3), vocab, False, 24,
                                  ["O", "B", "I"]),
      "multiple_choice": export.TextMultipleChoice(BertMultipleChoice(BertEncoder(config)), vocab,
                                                   False, 24)}
  # predict.py runs this one in test_squad_export_and_predict_command.
  yield "squad", None, trained_squad[1], [
      {"question": "who sat ?", "context": "steve smith sat on the mat."},
      {"question": "where", "context": "in the park"}]
  yield "classifier", windows_run[2], windows_run[1], [{"text_a": windows_run[3][0]},
                                                       {"text_a": ""}]
  for kind, module in modules.items():
    directory = export.save(module, str(root / kind))
    yield kind, ServedModel(directory), directory, rows[kind]


# A plain interpreter (not the fork server, which preloads tensorflow-text) runs each export
# through saved_model_cli's `run` (TF1 session loader, as TF Serving loads a SavedModel), one
# JSON line [directory, {input: values}] at a time as the test writes them.
_SAVED_MODEL_CLI = """
import json, sys
import numpy as np
from tensorflow.python.tools import saved_model_cli
for line in sys.stdin:
  directory, feeds = json.loads(line)
  print("Export", directory, flush=True)
  saved_model_cli.run_saved_model_with_feed_dict(
      directory, "serve", "serving_default", {k: np.array(v) for k, v in feeds.items()},
      None, False)
assert "tensorflow_text" not in sys.modules, "tensorflow_text was imported"
"""


@pytest.mark.slow
def test_every_export_runs_under_predict_and_saved_model_cli(span_model, trained_squad,
                                                             windows_run, tmp_path):
  """Each kind of export: predict.py's rows (TSV, JSON Lines) equal the signature's outputs
  called directly, its warm-up requests run, and TensorFlow's saved_model_cli (which loads
  no tensorflow-text) runs it, with oneDNN's kernels on as the scripts run them, without
  TensorFlow's error line for an op its oneDNN rewriter does not take ("oneDNN supports
  DT_INT64 only on ...": integer and boolean transposes and ragged concatenations along
  rows)."""
  import subprocess
  import sys
  from data import text_rows
  # Started first: its TensorFlow import and its runs overlap the exports' tracing.
  cli = subprocess.Popen([sys.executable, "-c", _SAVED_MODEL_CLI], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                              "TF_ENABLE_ONEDNN_OPTS": "1"})
  try:
    outputs = {}
    for kind, served, directory, rows in _exports(tmp_path, span_model, trained_squad,
                                                  windows_run):
      cli.stdin.write(json.dumps([directory, {k: [r[k] for r in rows] for k in rows[0]}])
                      + "\n")
      cli.stdin.flush()
      # Its warm-up requests, as TensorFlow Serving replays them when it loads the export.
      serve = tf.saved_model.load(directory).signatures["serving_default"]
      warm_up = _warm_up_requests(directory)
      assert len(warm_up) >= 2
      for signature, inputs in warm_up:
        assert signature == "serving_default"
        serve(**{k: tf.constant(v) for k, v in inputs.items()})
      if served is None:
        outputs[directory] = ["text", "start", "end", "score"]  # a v1.1 export's
        continue
      assert set(served.inputs) == set(rows[0])
      path = tmp_path / f"{kind}.jsonl"
      path.write_text("".join(json.dumps(r) + "\n" for r in rows))
      ids, values, _ = text_rows.read_rows(str(path), "jsonl", served.inputs)
      want = served(values)
      out = tmp_path / f"{kind}.out.jsonl"
      text_rows.write_rows(str(out), ids, want)
      assert [json.loads(line) for line in out.read_text().splitlines()] == [
          {"id": i + 1, **w} for i, w in enumerate(want)]
      outputs[directory] = [name for name in want[0] if name != "num_words"]
    stdout, stderr = cli.communicate(timeout=300)
  finally:
    if cli.poll() is None:
      cli.kill()
      cli.communicate()
  assert cli.returncode == 0, stderr[-2000:]
  assert "oneDNN supports" not in stderr, stderr[-2000:]
  runs = stdout.split("Export ")[1:]
  assert [r.split("\n", 1)[0] for r in runs] == list(outputs)
  for run, names in zip(runs, outputs.values()):
    for name in names:
      assert f"Result for output key {name}:" in run, run[-500:]


@pytest.mark.parametrize("content, fmt, extra, message", [
    ("a\tb\nc\n", "tsv", {"fields": ["text_a", "text_b"]}, r"r\.tsv:2: 1 column\(s\), expected 2"),
    ('{"text_a": "x"}\n{"text_a": 3}\n', "jsonl", {}, r"r\.tsv:2: 'text_a' must be a string"),
    ('{"text_a": "x"}\nnot json\n', "jsonl", {}, r"r\.tsv:2: not JSON"),
    ('{"text_a": "x", "id": NaN}\n', "jsonl", {}, r"r\.tsv:1: not JSON \(NaN is not JSON\)"),
    ("id\ttext_a\n1\tx\n", "tsv", {"header": True, "id_field": "key"},
     r"no column named key \(columns: id, text_a\); name every column in order with --fields, "
     r"the export's inputs \(text_a\) among them\.$"),
    ("x\n", "tsv", {}, r"name the TSV columns with --fields or --header"),
    ("text_a\nx\n", "lines", {"header": True}, r"r\.tsv is read as lines: --header and --fields"),
    ('{"text_a": "x"}\n', "jsonl", {"fields": ["text_a"]}, r"is read as jsonl: --header and"),
    ("x\n", "lines", {"id_field": "id"}, r"is read as plain lines, which have no --id_field"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, content, fmt, extra, message):
  from data import text_rows
  path = tmp_path / "r.tsv"
  path.write_text(content)
  with pytest.raises(ValueError, match=message):
    text_rows.read_rows(str(path), fmt, {"text_a": 1}, **extra)


def test_an_empty_list_of_endings_is_refused_by_line(tmp_path):
  """A multiple-choice row without endings names its line (the export would fail on it
  after loading, in an argmax over no items)."""
  from data import text_rows
  path = tmp_path / "r.jsonl"
  path.write_text('\n{"sent1": "a", "endings": []}\n{"sent1": "a", "endings": []}\n')
  with pytest.raises(ValueError, match=r"^\S+r\.jsonl:2: 'endings' is an empty list; give at "
                     r"least one item\.$"):
    text_rows.read_rows(str(path), "jsonl", {"sent1": 1, "endings": 2})


def test_rows_from_lines_tsv_and_json_lines(tmp_path):
  from data import text_rows
  (tmp_path / "a.txt").write_text("one\n\ntwo words\n \n\n")  # blank lines skipped
  assert text_rows.read_rows(str(tmp_path / "a.txt"), "lines", {"text": 1}) == (
      [1, 3], {"text": ["one", "two words"]}, 3)
  (tmp_path / "b.tsv").write_text("key\tsent1\tendings\tsent2\nk1\tx\ta|||b\t\n\n")
  assert text_rows.read_rows(str(tmp_path / "b.tsv"), "tsv", {"sent1": 1, "sent2": 1,
                                                             "endings": 2},
                             header=True, id_field="key") == (
      ["k1"], {"sent1": ["x"], "sent2": [""], "endings": [["a", "b"]]}, 1)
  (tmp_path / "d.tsv").write_text("\t\n")  # tabs alone: a row of empty cells, not blank
  assert text_rows.read_rows(str(tmp_path / "d.tsv"), "tsv", {"a": 1, "b": 1},
                             fields=["a", "b"]) == ([1], {"a": [""], "b": [""]}, 0)
  (tmp_path / "c.jsonl").write_text('{"text": "x"}\n\n{"text": "y"}\n')
  assert text_rows.read_rows(str(tmp_path / "c.jsonl"), "jsonl", {"text": 1}) == (
      [1, 3], {"text": ["x", "y"]}, 1)
  out = tmp_path / "o.tsv"
  text_rows.write_rows(str(out), ["k1"], [{"label": "b", "probabilities": [0.25, 0.75]}], "key")
  assert out.read_text() == "key\tlabel\tprobabilities\nk1\tb\t0.25 0.75\n"
  # A tab, line break or backslash in a cell is escaped, so every row stays one line of
  # the header's columns.
  text_rows.write_rows(str(out), ["a\tb\nc"], [{"text": "x\\y\r\nz", "score": 1.5}])
  assert out.read_text() == "id\ttext\tscore\na\\tb\\nc\tx\\\\y\\r\\nz\t1.5\n"
  # Booleans (v2.0's no_answer) as JSON Lines writes them.
  text_rows.write_rows(str(out), [1], [{"no_answer": True, "flags": [False, True]}])
  assert out.read_text() == "id\tno_answer\tflags\n1\ttrue\tfalse true\n"
  # JSON has no infinity: a question without a valid span scores null.
  out = tmp_path / "o.jsonl"
  text_rows.write_rows(str(out), [1], [{"text": "", "score": float("-inf"),
                                        "scores": [float("nan"), 2.0]}])
  assert json.loads(out.read_text()) == {"id": 1, "text": "", "score": None,
                                         "scores": [None, 2.0]}
  assert "Infinity" not in out.read_text() and "NaN" not in out.read_text()
  assert text_rows.input_format("x.JSONL") == "jsonl" and text_rows.input_format("x.txt") == "lines"


def test_packing_needs_rows_positions_and_padding_by_dtype():
  """export.packs_tokens: several rows, PACKED_FROM_POSITIONS positions and at most the
  compute dtype's share of them real; bfloat16 packs with more padding only."""
  from modeling import export
  def mask(rows, length, real):  # `real` of the positions real, the first row full
    m = np.zeros((rows, length), np.int32)
    m[0] = 1
    m.flat[length:length + round(real * rows * length) - length] = 1
    return m
  big = export.PACKED_FROM_POSITIONS // 64 + 1  # rows of 64 positions, enough of them
  # The last case: multiple choice [N, C, S], every choice a row.
  for m, dtype, want in ((mask(big, 64, 0.5), "float32", True),
                         (mask(big, 64, 0.5), "bfloat16", True),
                         (mask(big, 64, 0.65), "float32", True),
                         (mask(big, 64, 0.65), "bfloat16", False),
                         (mask(big, 64, 0.8), "float32", False),
                         (mask(big, 64, 1.0), "float32", False),
                         (mask(8, 64, 0.3), "float32", False),  # 512 positions: too few
                         (mask(1, 2048, 0.1), "float32", False),  # one row
                         (mask(20, 64, 0.5).reshape(5, 4, 64), "float32", True)):
    assert bool(export.packs_tokens(tf.constant(m), dtype)) == want, (m.shape, m.mean(), dtype)


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.bfloat16)])
def test_float32_batches_either_side_of_onednn_small_rows_run_ops_of_their_own(dtype):
  """oneDNN keeps each float32 weight in the layout of its op's first call, and products of
  up to export.ONEDNN_SMALL_ROWS rows want another layout than larger ones: so in float32
  the unpacked batches on each side of that bound run a copy of the model's ops of their
  own, the same copy for every size on one side; bfloat16 runs one copy for all."""
  from modeling import export

  class Model:  # records which traced copy of its ops ran
    compute_dtype = dtype

    def __init__(self):
      self.copies, self.ran = [], tf.Variable(-1)

    def __call__(self, features, training, pack_tokens, blocked_attention):
      assert not training and pack_tokens == blocked_attention
      self.copies.append(pack_tokens)
      with tf.control_dependencies([self.ran.assign(len(self.copies) - 1)]):
        return {"logits": tf.cast(features["input_mask"], tf.float32)}
  model = Model()
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  served = tf.function(lambda f: export.served_outputs(model, f)["logits"],
                       input_signature=[spec])

  def copy_run(mask):
    mask = np.asarray(mask, np.int32)
    np.testing.assert_array_equal(served({"input_ids": mask, "input_mask": mask,
                                          "segment_ids": 0 * mask}).numpy(), mask)
    return int(model.ran.numpy())
  bound = export.ONEDNN_SMALL_ROWS
  small = {copy_run(np.ones(shape)) for shape in ((1, 8), (1, bound), (bound // 8, 8))}
  large = {copy_run(np.ones(shape)) for shape in ((1, bound + 8), (1, 384), (8, 130))}
  padded = np.arange(130) < np.arange(1, 17)[:, None] * 8  # 16 rows, mostly padding: packed
  packed = copy_run(padded)
  assert model.copies[packed] is True
  assert len(small) == len(large) == 1 and packed not in small | large
  assert (small == large) == (dtype != "float32")
  assert len(model.copies) == (3 if dtype == "float32" else 2)


def test_served_outputs_pick_a_branch_by_padding_and_size(monkeypatch):
  """Each batch runs one of two branches at run time (packed with attention in blocks when
  it has several rows, export.PACKED_FROM_POSITIONS positions or more and at most
  PACKED_MAX_REAL_SHARE of them real; else as is, whatever its length) and each gives the
  model's own outputs at real positions."""
  from modeling import attention, export
  config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=640)
  model = BertSpanLabeler(BertEncoder(config))
  randomize(model, 3)
  monkeypatch.setattr(attention, "BLOCK_SCORES", 2 * 130 * 130)  # blocks of 2 examples
  ran = tf.Variable(0)  # layers that ran blocked_attention, counted at run time
  blocked_attention = attention.blocked_attention

  def counted(*args, **kwargs):
    with tf.control_dependencies([ran.assign_add(1)]):
      return tf.identity(blocked_attention(*args, **kwargs))
  monkeypatch.setattr(attention, "blocked_attention", counted)
  spec = {k: tf.TensorSpec([None, None], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}
  served = tf.function(lambda f: export.served_outputs(model, f)["start_logits"],
                       input_signature=[spec])
  rng = np.random.default_rng(4)
  share = export.PACKED_MAX_REAL_SHARE["float32"]
  # (rows, length, shortest row, layers that attend in blocks): few positions; no padding;
  # much padding (half the positions real); little padding (over 85% real); one row; one
  # row of at most export.ONEDNN_SMALL_ROWS positions (float32's other copy of the ops).
  for rows, length, shortest, blocked in ((8, 20, 1, 0), (8, 130, 130, 0), (8, 130, 1, 2),
                                          (8, 130, 110, 0), (1, 600, 1, 0), (1, 40, 40, 0)):
    lengths = rng.integers(shortest, length + 1, size=rows)
    lengths[0] = length
    mask = (np.arange(length) < lengths[:, None]).astype(np.int32)
    if rows > 1 and mask.size >= export.PACKED_FROM_POSITIONS:  # the cases are what they say
      assert (mask.mean() <= share) == (shortest == 1)
    padded = shortest < length
    f = {"input_ids": rng.integers(1, 60, size=mask.shape).astype(np.int32) * mask,
         "input_mask": mask, "segment_ids": np.zeros_like(mask)}
    ran.assign(0)
    got = served(f).numpy()
    assert ran.numpy() == blocked, (rows, length, shortest)
    want = model(f, training=False)["start_logits"].numpy()
    # float32, other summation orders through 2 blocks and the span head (H terms).
    assert_close(got * mask, want * mask, "float32",
                 2 * block_ops(config, length) + config.hidden_size, what=(length, padded))
  # Multiple choice [N, C, S]: a question's four choices are four rows, so two padded
  # questions of 2 x 4 x 130 positions run packed.
  from modeling.multiple_choice import BertMultipleChoice
  chooser = BertMultipleChoice(model.encoder)
  chooser.build()
  lengths = rng.integers(1, 60, size=(2, 4))
  mask = (np.arange(130) < lengths[..., None]).astype(np.int32)
  f = {"input_ids": rng.integers(1, 60, size=mask.shape).astype(np.int32) * mask,
       "input_mask": mask, "segment_ids": np.zeros_like(mask)}
  ran.assign(0)
  got = tf.function(lambda f: export.served_outputs(chooser, f)["logits"])(f).numpy()
  assert ran.numpy() == 2
  want = chooser(f, training=False)["logits"].numpy()
  # As above, then the pooler and the choice unit (2 H terms).
  assert_close(got, want, "float32", 2 * block_ops(config, 130) + 2 * config.hidden_size)
