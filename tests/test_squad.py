"""SQuAD: the original's alignment, features, post-processing and the official metrics."""

import json
import random

import numpy as np
import pytest

from conftest import write_vocab
from data import squad, squad_evaluation, squad_predictions, tokenization, windows
from helpers import assert_close, block_ops, read_eval_results, rounding_tolerance
from modeling.config import BertConfig
from scripts import last_error_line, run_script

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "sat", "on", "mat",
         "steve", "smith", "'", "s", ",", ".", "who", "where", "what", "did", "is", "un",
         "##believ", "##able", "##s", "hello", "world", "cafe", "zebra", "in", "park", "!", "(",
         ")", "1", "##9", "##5", "-"]


@pytest.fixture
def tokenizer(tmp_path):
  return tokenization.FullTokenizer(write_vocab(tmp_path / "vocab.txt", WORDS))


def _dataset(contexts_and_qas):
  return {"version": "v2.0", "data": [{"title": "t", "paragraphs": [
      {"context": c, "qas": qas} for c, qas in contexts_and_qas]}]}


def _write(tmp_path, data, name="data.json"):
  path = tmp_path / name
  path.write_text(json.dumps(data))
  return str(path)


def _qa(qid, question, answers, impossible=False):
  return {"id": qid, "question": question, "is_impossible": impossible,
          "answers": [{"text": t, "answer_start": s} for t, s in answers]}


def test_reading_whitespace_and_answer_positions(tmp_path):
  context = "Steve  Smith's cat\tsat\u202fon the\nmat (in 1995)."
  data = _dataset([(context, [
      _qa("q1", "Who?", [("Steve Smith's", 0)]),
      _qa("q2", "Where?", [("the\nmat", context.index("the"))]),
      _qa("q3", "When?", [("1995", context.index("1995"))]),
      _qa("q4", "Bad?", [("not in text", 3)]),
      _qa("q5", "None?", [], impossible=True)])])
  examples = squad.read_squad_examples(_write(tmp_path, data), True, True)
  assert examples[0].doc_tokens == ["Steve", "Smith's", "cat", "sat", "on", "the", "mat",
                                    "(in", "1995)."]
  by_id = {e.qas_id: e for e in examples}
  assert (by_id["q1"].start_position, by_id["q1"].end_position) == (0, 1)
  assert (by_id["q2"].start_position, by_id["q2"].end_position) == (5, 6)
  assert (by_id["q3"].start_position, by_id["q3"].end_position) == (8, 8)
  assert "q4" not in by_id  # "could not find answer": skipped, as the original
  assert (by_id["q5"].start_position, by_id["q5"].orig_answer_text) == (-1, "")
  # Without training, answers are not read.
  plain = squad.read_squad_examples(_write(tmp_path, data), False, True)
  assert len(plain) == 5 and plain[0].start_position is None


def test_features_improve_the_span_and_slide_over_long_contexts(tmp_path, tokenizer):
  words = ("the cat sat on the mat . " * 6 + "steve smith's unbelievable cat sat . "
           + "hello world . " * 5).split()
  context = " ".join(words)
  answer = "unbelievable cat"
  data = _dataset([(context, [_qa("q", "where is the cat ?", [(answer, context.index(answer))])])])
  (example,) = squad.read_squad_examples(_write(tmp_path, data), True, False)
  features = squad.convert_examples_to_features([example], tokenizer, max_seq_length=24,
                                                doc_stride=8, max_query_length=4, is_training=True)
  assert len(features) > 3 and [f.doc_span_index for f in features] == list(range(len(features)))
  query = tokenizer.tokenize("where is the cat ?")[:4]
  hits = 0
  for f in features:
    assert f.tokens[:len(query) + 2] == ["[CLS]"] + query + ["[SEP]"] and f.tokens[-1] == "[SEP]"
    assert len(f.input_ids) == 24 and f.input_mask == [1] * len(f.tokens) + [0] * (24 - len(f.tokens))
    assert f.segment_ids[:len(f.tokens)] == [0] * (len(query) + 2) + [1] * (len(f.tokens) - len(query) - 2)
    if f.start_position:
      hits += 1
      span = " ".join(f.tokens[f.start_position:f.end_position + 1]).replace(" ##", "")
      assert span == "unbelievable cat"  # the improved span, not the whitespace word "smith's"
    else:
      assert f.end_position == 0
  assert hits >= 1
  # Each document token is the max-context token of exactly one span.
  counts = {}
  for f in features:
    for position, is_max in f.token_is_max_context.items():
      original = f.token_to_orig_map[position]
      counts[(original, f.tokens[position])] = counts.get((original, f.tokens[position]), 0) + is_max
  assert set(counts.values()) == {1}


def test_max_context_prefers_the_centred_span():
  spans = [(0, 10), (5, 10), (10, 10)]
  # Token 9: 9 left/0 right in span 0, 4/5 in span 1, outside span 2.
  owner = windows.max_context_windows(spans, 20)
  assert owner[9] == 1 and owner[19] == 2
  # Token 7: 7/2 in span 0 (score 2.1), 2/7 in span 1 (2.1): the first wins the tie.
  assert owner[7] == 0 and owner[0] == 0


@pytest.mark.parametrize("pred,orig,lower,want", [
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("smith ' s", "Smith's", True, "Smith's"),
    ("hello world", "Héllo Wörld!", True, "Héllo Wörld"),
    ("1995", "(1995).", True, "1995"),
    ("zebra", "Steve Smith's", True, "Steve Smith's"),  # not found: the whole original
])
def test_get_final_text(pred, orig, lower, want):
  assert squad_predictions.get_final_text(pred, orig, lower) == want


def _feature(unique_id, example_index, tokens, doc_start, orig_indexes, max_context=None):
  token_to_orig = {doc_start + i: o for i, o in enumerate(orig_indexes)}
  is_max = {p: (max_context is None or p in max_context) for p in token_to_orig}
  return squad.InputFeatures(unique_id, example_index, 0, tokens, token_to_orig, is_max,
                             [0] * len(tokens), [1] * len(tokens), [0] * len(tokens))


def test_post_processing_filters_and_null_answers():
  example = squad.SquadExample("q", "who ?", ["Steve", "Smith's", "cat", "sat."])
  tokens = ["[CLS]", "who", "?", "[SEP]", "steve", "smith", "'", "s", "cat", "sat", ".", "[SEP]"]
  feature = _feature(1000000000, 0, tokens, 4, [0, 1, 1, 1, 2, 3, 3], max_context={4, 5, 6, 7, 8, 9})
  n = len(tokens)
  start, end = np.full(n, -5.0), np.full(n, -5.0)
  start[1], end[2] = 9.0, 9.0            # inside the query: filtered
  start[8], end[5] = 8.0, 8.0            # end before start: filtered
  start[10] = 7.0                        # not max context: filtered
  start[4], end[5] = 6.0, 7.0            # "steve smith"
  start[0], end[0] = 1.0, 1.0            # the null score
  result = squad_predictions.RawResult(1000000000, list(start), list(end))
  preds, nbest, odds = squad_predictions.compute_predictions([example], [feature], [result], 5, 30, True,
                                                 False, 0.0)
  assert preds["q"] == "Steve Smith"
  assert nbest["q"][0]["text"] == "Steve Smith" and len({e["text"] for e in nbest["q"]}) == len(nbest["q"])
  # float64: a softmax over 5 scores and their sum.
  assert_close(sum(e["probability"] for e in nbest["q"]), 1.0, "float64", 16)
  assert not odds
  # max_answer_length 1 removes the two-token span; no one-token span is left among the top
  # 5 starts x top 5 ends, so the original's nonce answer "empty" remains.
  short, short_nbest, _ = squad_predictions.compute_predictions([example], [feature], [result],
                                                                5, 1, True, False, 0.0)
  assert short["q"] == "empty" and [e["text"] for e in short_nbest["q"]] == ["empty"]
  preds, nbest, odds = squad_predictions.compute_predictions([example], [feature], [result], 5, 30, True,
                                                 True, 0.0)
  # Exact: sums of small integers in float64, null (1 + 1) minus best span (6 + 7).
  assert odds["q"] == 2.0 - 13.0
  assert preds["q"] == "Steve Smith" and "" in [e["text"] for e in nbest["q"]]
  preds, _, _ = squad_predictions.compute_predictions([example], [feature], [result], 5, 30, True, True, -12.0)
  assert preds["q"] == ""  # score_diff -11 > threshold -12: no answer
  # A question whose context has no pieces has no window: v2.0 answers "" with odds 0.0, v1.1
  # the nonce (the original raised in v2.0).
  blank = squad.SquadExample("b", "who ?", ["\u200b"])
  for v2, want in ((True, ""), (False, "empty")):
    preds, _, odds = squad_predictions.compute_predictions([example, blank], [feature],
                                                           [result], 5, 30, True, v2, 0.0)
    assert preds["b"] == want and (odds["b"] == 0.0 if v2 else not odds)


def test_official_metrics_by_hand():
  assert squad_evaluation.normalize_answer("The  Cat's, (a) DOG!") == "cats dog"
  assert_close(squad_evaluation.f1("the cat sat", "a cat sat down"),  # float64, ratios of counts
               2 * (2 / 3) * 1 / (2 / 3 + 1), "float64", 8)
  data = [{"paragraphs": [{"context": "x", "qas": [
      {"id": "1", "answers": [{"text": "Steve Smith"}, {"text": "Smith"}]},
      {"id": "2", "answers": [{"text": "the park"}]},
      {"id": "3", "answers": [], "is_impossible": True},
      {"id": "4", "answers": [], "is_impossible": True}]}]}]
  answerable = [{"paragraphs": [{"qas": data[0]["paragraphs"][0]["qas"][:2]}]}]
  v1 = squad_evaluation.evaluate_v1(answerable, {"1": "smith", "2": "park bench"})
  assert v1["exact_match"] == 50.0  # exact: 100 * 1 / 2
  assert_close(v1["f1"], 100 * (1 + 2 / 3) / 2, "float64", 8)  # float64, ratios of counts
  preds = {"1": "Steve Smith", "2": "", "3": "", "4": "a cat"}
  odds = {"1": -3.0, "2": 1.0, "3": 2.0, "4": 0.5}
  v2 = squad_evaluation.evaluate_v2(data, preds, odds)
  assert v2["exact"] == 50.0 and v2["total"] == 4
  assert v2["HasAns_exact"] == 50.0 and v2["NoAns_exact"] == 50.0
  # Thresholds: sorted odds -3 (q1 +1), 0.5 (q4: wrong answer -1), 1 (q2 has answer, pred "": 0),
  # 2 (q3 correct null: 0). Starting from 2 (the no-answer count): best 3 at threshold -3.
  assert (v2["best_exact"], v2["best_exact_thresh"]) == (75.0, -3.0)


def test_null_threshold_search_uses_the_best_non_null_answers():
  """Both null scores beat the spans (odds +1 and +3), so threshold 0 answers nothing; the
  search over the best non-null answers finds threshold 1: q1 answered, q2 left empty."""
  tokens = ["[CLS]", "who", "?", "[SEP]", "steve", "smith", "sat", "[SEP]"]
  examples, feats, results = [], [], []
  for i, (qid, odds) in enumerate((("q1", 1.0), ("q2", 3.0))):
    examples.append(squad.SquadExample(qid, "who ?", ["Steve", "Smith", "sat"]))
    feats.append(_feature(1000000000 + i, i, tokens, 4, [0, 1, 2], max_context={4, 5, 6}))
    start, end = np.full(len(tokens), -5.0), np.full(len(tokens), -5.0)
    start[4], end[5] = 2.0, 2.0                        # "Steve Smith", score 4
    start[0], end[0] = (4.0 + odds) / 2, (4.0 + odds) / 2  # null score 4 + odds
    results.append(squad_predictions.RawResult(1000000000 + i, list(start), list(end)))
  data = [{"paragraphs": [{"context": "Steve Smith sat", "qas": [
      {"id": "q1", "answers": [{"text": "Steve Smith"}]}, {"id": "q2", "answers": []}]}]}]

  def predict(threshold):
    return squad_predictions.compute_predictions(examples, feats, results, 5, 30, True, True, threshold)[0]

  answers, _, odds = squad_predictions.compute_predictions(examples, feats, results, 5, 30, True, True,
                                               float("inf"))
  assert answers == {"q1": "Steve Smith", "q2": "Steve Smith"}
  assert predict(0.0) == {"q1": "", "q2": ""}
  threshold = squad_evaluation.tune_null_threshold(data, answers, odds)
  assert_close(threshold, 1.0, "float64", 4)  # float64: a difference of scores
  for t in (-1.0, 0.0, threshold, 2.0, 5.0):  # the cheap path decides as the full one
    assert squad_predictions.apply_null_threshold(answers, odds, t) == predict(t)
  assert predict(threshold) == {"q1": "Steve Smith", "q2": ""}
  assert squad_evaluation.evaluate_v2(data, predict(threshold))["f1"] == 100.0


def test_tuned_scores_are_those_of_the_tuned_predictions_as_written():
  """A tuned threshold above 1.0 (evaluate-v2.0.py's default --na-prob-thresh): the tuned
  predictions are scored as written, with no second cut on the odds."""
  data = [{"paragraphs": [{"context": "x", "qas": [
      {"id": "a", "answers": [{"text": "cat"}]}, {"id": "b", "answers": [{"text": "dog"}]},
      {"id": "c", "answers": [], "is_impossible": True}]}]}]
  answers = {"a": "cat", "b": "dog", "c": "fish"}
  odds = {"a": 2.0, "b": 3.0, "c": 5.0}
  # Sorted odds 2 (+1), 3 (+1), 5 (a wrong answer to c: -1): best at threshold 3.
  predictions = squad_predictions.apply_null_threshold(answers, odds, 0.0)
  scores, tuned = squad_evaluation.score(data, predictions, answers, odds, True, True)
  assert scores["null_score_diff_threshold"] == 3.0 and tuned == {"a": "cat", "b": "dog", "c": ""}
  assert scores["tuned_exact"] == scores["tuned_f1"] == 100.0


def _zebra_data(rng, n):
  fillers = ["the", "cat", "sat", "on", "mat", "in", "park", "hello", "world"]
  qas_contexts = []
  for i in range(n):
    words = [rng.choice(fillers) for _ in range(rng.randint(6, 14))]
    words.insert(rng.randint(0, len(words)), "zebra")
    context = " ".join(words) + " ."
    qas_contexts.append((context, [_qa(f"q{i}", "where is the zebra ?",
                                       [("zebra", context.index("zebra"))])]))
  return _dataset(qas_contexts)


def _fine_tune(tmp_path, train_data, dev_data, *extra):
  """run_squad.py on a tiny model: trains on train_data, predicts and scores dev_data."""
  vocab = write_vocab(tmp_path / "vocab.txt", WORDS)
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps(
      {"vocab_size": len(WORDS), "hidden_size": 32, "num_hidden_layers": 2,
       "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
       "type_vocab_size": 2}))
  train, dev = _write(tmp_path, train_data, "train.json"), _write(tmp_path, dev_data, "dev.json")
  out = tmp_path / "out"
  run_script("run_squad.py", f"--vocab_file={vocab}", f"--bert_config_file={config}",
             f"--output_dir={out}", f"--train_file={train}", f"--predict_file={dev}", "--do_train",
             "--do_predict", "--max_seq_length=32", "--doc_stride=16", "--max_query_length=8",
             "--train_batch_size=16", "--learning_rate=2e-3", "--seed=2", *extra)
  return out, json.loads((out / "eval_results.json").read_text())


@pytest.mark.slow
def test_end_to_end_learns_to_point_at_the_span(tmp_path):
  rng = random.Random(0)
  out, scores = _fine_tune(tmp_path, _zebra_data(rng, 400), _zebra_data(rng, 60),
                           "--num_train_epochs=4", "--batch_length_multiple=4")
  assert scores["exact_match"] > 90.0, scores
  preds = json.loads((out / "predictions.json").read_text())
  assert len(preds) == 60 and list(preds.values()).count("zebra") >= 54
  nbest = json.loads((out / "nbest_predictions.json").read_text())
  assert list(nbest["q0"][0]) == ["text", "probability", "start_logit", "end_logit"]
  assert list(read_eval_results(out / "eval_results.txt")) == ["exact_match", "f1", "global_step"]
  # The same model predicting full-length batches (the original's way) gives the same n-best
  # lists: trimmed batches only drop padding.
  fixed = tmp_path / "fixed"
  run_script("run_squad.py", f"--vocab_file={tmp_path / 'vocab.txt'}",
             f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--init_checkpoint={out}",
             f"--output_dir={fixed}", f"--predict_file={tmp_path / 'dev.json'}", "--do_predict",
             "--max_seq_length=32", "--doc_stride=16", "--max_query_length=8",
             "--batch_length_multiple=0")
  assert json.loads((fixed / "predictions.json").read_text()) == preds
  fixed_nbest = json.loads((fixed / "nbest_predictions.json").read_text())
  assert fixed_nbest.keys() == nbest.keys()
  config = BertConfig.from_json_file(str(tmp_path / "bert_config.json"))
  scale = max(abs(e["start_logit"]) for entries in nbest.values() for e in entries)
  # float32, other batch widths: 2 blocks and the span head (a sum of 32), relative to
  # the largest logit.
  ops = 2 * block_ops(config, 32) + 32
  for qid, entries in nbest.items():
    fixed_entries = {e["text"]: e for e in fixed_nbest[qid]}
    assert len(entries) == len(fixed_nbest[qid]), qid
    # Entries whose scores are within rounding of each other may come in either order, and a
    # tie at the list's end may keep one other entry, of the last entry's score. A score is
    # two logits, each within the bound of the other run's: it moves by up to 2 bounds, and
    # the gap between two scores by up to 4.
    tolerance = 4 * rounding_tolerance("float32", ops, scale)
    for group, fixed_group, last in _rank_groups(entries, fixed_nbest[qid], tolerance):
      if last:
        kept = fixed_group - group
        assert len(kept) <= 1, qid
        assert all(abs(_score(fixed_entries[t]) - _score(entries[-1])) <= tolerance
                   for t in kept), qid
      else:
        assert group == fixed_group, qid
    both = [e for e in entries if e["text"] in fixed_entries]
    assert len(both) >= len(entries) - 1, qid
    for key in ("start_logit", "end_logit"):
      assert_close([e[key] for e in both], [fixed_entries[e["text"]][key] for e in both],
                   "float32", ops, scale, what=qid)


def _score(entry):
  return entry["start_logit"] + entry["end_logit"]


def _rank_groups(entries, other, tolerance):
  """The texts of `entries` and `other` (two n-best lists of one question, of one length)
  in groups of entries whose scores (start + end logit) in `entries` are within `tolerance`
  of the next, with whether the group is the last."""
  start = 0
  for end in range(1, len(entries) + 1):
    if end == len(entries) or _score(entries[end - 1]) - _score(entries[end]) > tolerance:
      yield ({e["text"] for e in entries[start:end]}, {e["text"] for e in other[start:end]},
             end == len(entries))
      start = end


def _zebra_or_nobody(rng, n):
  """v2.0 data: 'where is the zebra ?', answered when the context has one (even ids)."""
  data = _zebra_data(rng, n)
  for i, paragraph in enumerate(data["data"][0]["paragraphs"]):
    if i % 2:
      paragraph["context"] = paragraph["context"].replace("zebra", "cat")
      paragraph["qas"] = [_qa(f"q{i}", "where is the zebra ?", [], impossible=True)]
  return data


@pytest.mark.slow
def test_v2_threshold_tuning_recovers_from_a_bad_threshold(tmp_path):
  """With --null_score_diff_threshold=-1000 every question gets 'no answer'; the
  search runs over each question's best non-null answer, so it can still find the threshold
  that answers the zebra questions and leaves the others empty."""
  rng = random.Random(1)
  out, scores = _fine_tune(tmp_path, _zebra_or_nobody(rng, 400), _zebra_or_nobody(rng, 60),
                           "--num_train_epochs=8", "--version_2_with_negative",
                           "--null_score_diff_threshold=-1000", "--tune_null_threshold")
  assert scores["f1"] == 50.0 and scores["HasAns_f1"] == 0.0, scores  # all 'no answer'
  assert scores["tuned_f1"] > 90.0 and scores["null_score_diff_threshold"] > -1000, scores
  preds = json.loads((out / "predictions.json").read_text())  # written with the tuned threshold
  assert sum(preds[f"q{i}"] == "zebra" for i in range(0, 60, 2)) >= 27
  assert sum(preds[f"q{i}"] == "" for i in range(1, 60, 2)) >= 27
  # Exported alone afterwards, the model answers with the tuned threshold (eval_results.txt's).
  proc = run_script("run_squad.py", f"--vocab_file={tmp_path / 'vocab.txt'}",
                    f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--output_dir={out}",
                    "--max_seq_length=32", "--doc_stride=16", "--max_query_length=8",
                    "--version_2_with_negative", f"--export_dir={tmp_path / 'export'}")
  assert f"--null_score_diff_threshold={scores['null_score_diff_threshold']}, as " in proc.stderr
  import tensorflow as tf
  from data import fast_tokenization
  serve = fast_tokenization.load_serving(str(tmp_path / "export"))
  pairs = [(qa, p["context"]) for p in json.loads((tmp_path / "dev.json").read_text())[
      "data"][0]["paragraphs"] for qa in p["qas"]]
  served = serve(question=tf.constant([qa["question"] for qa, _ in pairs]),
                 context=tf.constant([context for _, context in pairs]))["text"].numpy()
  assert [t.decode() for t in served] == [preds[qa["id"]] for qa, _ in pairs]


def test_bad_squad_files_name_the_file_and_question(tmp_path):
  missing = tmp_path / "none.json"
  with pytest.raises(ValueError, match=r"none\.json: no such file\."):
    squad.read_squad_examples(str(missing), True, False)
  truncated = tmp_path / "cut.json"
  truncated.write_text('{"data": [{"title": "t", "paragraphs": [')
  with pytest.raises(ValueError, match=r"cut\.json is not a SQuAD file"):
    squad.read_squad_examples(str(truncated), False, False)
  no_flag = _write(tmp_path, _dataset([("a b c", [{"id": "q1", "question": "q?",
                                                     "answers": []}])]))
  with pytest.raises(ValueError, match=r"question 'q1': missing or malformed field "
                                       r"\(KeyError: 'is_impossible'\)"):
    squad.read_squad_examples(no_flag, True, True)
  outside = _write(tmp_path, _dataset([("a b c", [_qa("q2", "q?", [("b", 99)])])]))
  with pytest.raises(ValueError, match=r"question 'q2': answer_start 99 and its 1-character "
                                       r"text run past the context \(5 characters\)\.$"):
    squad.read_squad_examples(outside, True, False)
  for qa, said in (({"id": "q3", "question": None, "answers": []}, "its question is NoneType"),
                   (_qa("q4", "q?", [("b", 2)]) | {"answers": "b"}, "answers is str, not a list")):
    with pytest.raises(ValueError, match=f"question '{qa['id']}': {said}"):
      squad.read_squad_examples(_write(tmp_path, _dataset([("a b c", [qa])]), "typed.json"),
                                True, False)
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps({"vocab_size": len(WORDS), "hidden_size": 8,
                                "num_hidden_layers": 1, "num_attention_heads": 1,
                                "intermediate_size": 8}))
  proc = run_script("run_squad.py", f"--vocab_file={write_vocab(tmp_path / 'v.txt', WORDS)}",
                    f"--bert_config_file={config}", f"--output_dir={tmp_path / 'out'}",
                    "--do_train", f"--train_file={outside}", expect_ok=False)
  assert last_error_line(proc) == (f"error: {outside}: question 'q2': answer_start 99 and its "
                                   "1-character text run past the context (5 characters).")


@pytest.mark.parametrize("content,message", [
    ('{"data": []}', r"data\.json: no questions\."),
    ('{"data": {"title": "t"}}', r'data\.json: "data" is a dict; expected a list\.'),
    ('[1, 2]', r'data\.json is not a SQuAD file: expected an object with a "data" list\.'),
    ('{"data": ["t"]}', r'data\.json: article 0 of "data" is a str; expected a JSON object\.'),
    ('{"data": [{"title": "t", "paragraphs": [{"context": " \\n ", "qas": [{"id": "q7"}]}]}]}',
     r"data\.json: question 'q7': the context is empty\."),
    ('{"data": [{"title": "t", "paragraphs": [{"context": "a b", "qas": {"id": "q"}}]}]}',
     r"data\.json: \"qas\" of paragraph 0 of article 't' is a dict; expected a list\."),
])
def test_malformed_squad_files_fail_in_one_line(tmp_path, content, message):
  path = tmp_path / "data.json"
  path.write_text(content)
  for is_training in (False, True):
    with pytest.raises(ValueError, match=message) as info:
      squad.read_squad_examples(str(path), is_training, False)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_undecodable_json_and_byte_order_mark(tmp_path):
  latin1 = tmp_path / "latin1.json"
  latin1.write_bytes('{"data": [{"paragraphs": [{"context": "café", "qas": []}]}]}'
                     .encode("latin-1"))
  with pytest.raises(ValueError, match=r"latin1\.json is not a SQuAD file: 'utf-8' codec "
                                       r"can't decode byte 0xe9"):
    squad.read_squad_examples(str(latin1), False, False)
  # A UTF-8 byte order mark (as some editors write) is read like plain UTF-8.
  bom = tmp_path / "bom.json"
  bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(_dataset([("a cat", [_qa("q", "what ?", [])])]))
                  .encode("utf-8"))
  (example,) = squad.read_squad_examples(str(bom), False, False)
  assert (example.qas_id, example.doc_tokens) == ("q", ["a", "cat"])


def test_training_answers_must_be_one_and_found(tmp_path, caplog):
  none = _write(tmp_path, _dataset([("a b c", [_qa("q3", "q?", [])])]))
  with pytest.raises(ValueError, match=r"data\.json: question 'q3' has 0 answers; training "
                                       r"needs exactly one \(unanswerable questions need "
                                       r"SQuAD 2\.0 mode\)\.$"):
    squad.read_squad_examples(none, True, False)
  negative = _write(tmp_path, _dataset([("a b c", [_qa("q4", "q?", [("a", -2)])])]))
  with pytest.raises(ValueError, match=r"question 'q4': answer_start -2 is not a character"):
    squad.read_squad_examples(negative, True, False)
  # Answer texts not at their answer_start are skipped as the original does, each with a
  # warning naming the question, and counted once.
  mixed = _write(tmp_path, _dataset([("the cat sat on the mat", [
      _qa("ok", "q?", [("cat", 4)]), _qa("moved", "q?", [("mat", 4)]),
      _qa("typo", "q?", [("dog", 8)])])]))
  with caplog.at_level("WARNING", logger="absl"):
    examples = squad.read_squad_examples(mixed, True, False)
  assert [e.qas_id for e in examples] == ["ok"]
  text = caplog.text
  assert "question 'moved': could not find answer: 'cat' vs. 'mat'" in text
  assert "question 'typo'" in text
  assert f"{mixed}: skipped 2 of 3 training questions" in text


@pytest.mark.parametrize("content", [
    '{"data": []}',
    '{"data": [{"paragraphs": [{"context": "", "qas": [{"id": "q1", "question": "x"}]}]}]}',
    # A word of format characters only: the tokenizer leaves no token, so no feature.
    '{"data": [{"paragraphs": [{"context": "\\u200b", "qas": [{"id": "q1", "question": "x"}]}]}]}',
])
def test_run_squad_stops_on_a_bad_predict_file(tmp_path, content):
  """Each of these gave a traceback (KeyError 'unique_ids') before."""
  predict = tmp_path / "dev.json"
  predict.write_text(content)
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps({"vocab_size": len(WORDS), "hidden_size": 8,
                                "num_hidden_layers": 1, "num_attention_heads": 1,
                                "intermediate_size": 8}))
  out = tmp_path / "out"
  proc = run_script("run_squad.py", f"--vocab_file={write_vocab(tmp_path / 'v.txt', WORDS)}",
                    f"--bert_config_file={config}", f"--output_dir={out}", "--do_predict",
                    f"--predict_file={predict}", "--max_seq_length=16", "--max_query_length=4",
                    expect_ok=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert last_error_line(proc).startswith(f"error: {predict}")
  assert not (out / "predictions.json").exists()


def test_tuning_where_no_answer_everywhere_is_best_answers_nothing():
  """The official search keeps 0.0 when answering "no answer" everywhere is never beaten;
  the tuned threshold lies below every question's odds instead, so the tuned predictions
  score that best F1."""
  data = [{"paragraphs": [{"context": "x", "qas": [
      {"id": "a", "answers": [{"text": "cat"}]},
      {"id": "b", "answers": [], "is_impossible": True},
      {"id": "c", "answers": [], "is_impossible": True}]}]}]
  answers = {"a": "dog", "b": "fish", "c": "bird"}  # every span wrong
  odds = {"a": -2.0, "b": -1.0, "c": 3.0}
  assert squad_evaluation.evaluate_v2(data, answers, odds)["best_f1_thresh"] == 0.0  # official
  predictions = squad_predictions.apply_null_threshold(answers, odds, 0.0)
  scores, tuned = squad_evaluation.score(data, predictions, answers, odds, True, True)
  assert scores["null_score_diff_threshold"] < -2.0 and tuned == {"a": "", "b": "", "c": ""}
  assert scores["tuned_f1"] == scores["best_f1"] == 100.0 * 2 / 3
