"""SQuAD over many document windows: our features and post-processing against the original's.

The functions prefixed `original_` render the original run_squad.py's
convert_examples_to_features (prediction side), _check_is_max_context,
_get_best_indexes, _compute_softmax, get_final_text and write_predictions step
by step, with the original's flags turned into arguments; tokenization comes
from tests/original_tokenizer.py. Long generated contexts with a short
max_seq_length and doc_stride give every question many windows, so the null
score's minimum over windows, the max-context rule and the n-best merge across
windows all decide the outcome. Random logits cover every position, padding
included: both sides see the same numbers, so no position needs special values.
"""

import collections
import json
import math
import random

import pytest

import original_tokenizer
from conftest import write_vocab
from data import squad, squad_predictions, tokenization

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "sat", "on", "mat",
         "steve", "smith", "'", "s", ",", ".", "who", "where", "what", "did", "is", "un",
         "##believ", "##able", "##s", "hello", "world", "cafe", "zebra", "in", "park", "!", "(",
         ")", "1", "##9", "##5", "-", "x", "ray", "run", "##ning", "##n", "Steve", "Smith",
         "The", "Cat", "u", "?"]
# Case, accents, punctuation inside words, WordPiece splits, unknown words and the
# SQuAD-only whitespace U+202F all appear, so get_final_text meets every branch.
CONTEXT_WORDS = ["the", "cat", "sat", "on", "the", "mat", "Steve", "Smith's", "unbelievable",
                 "cats", "Hello", "world!", "café", "(1995).", "x-ray", "running", "zebra",
                 "in", "park", "qwzx", "runs", "a", "U.S.", "Héllo", "The", "Cat,", "1995"]
SEPARATORS = [" "] * 12 + ["  ", "\t", "\n", "\u202f"]


# --- The original, rendered literally --------------------------------------------------------

class OriginalTokenizer:
  def __init__(self, vocab, do_lower_case):
    self.vocab = {t: i for i, t in enumerate(vocab)}
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    return [p for w in original_tokenizer.basic_tokens(text, self.do_lower_case)
            for p in original_tokenizer.wordpiece(w, self.vocab)]

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[t] for t in tokens]


OriginalFeature = collections.namedtuple(
    "OriginalFeature", ["unique_id", "example_index", "doc_span_index", "tokens",
                        "token_to_orig_map", "token_is_max_context", "input_ids", "input_mask",
                        "segment_ids"])


def original_convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                          max_query_length):
  unique_id = 1000000000
  features = []
  for (example_index, example) in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)
    if len(query_tokens) > max_query_length:
      query_tokens = query_tokens[0:max_query_length]
    tok_to_orig_index = []
    orig_to_tok_index = []
    all_doc_tokens = []
    for (i, token) in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(all_doc_tokens))
      sub_tokens = tokenizer.tokenize(token)
      for sub_token in sub_tokens:
        tok_to_orig_index.append(i)
        all_doc_tokens.append(sub_token)
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    _DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
    doc_spans = []
    start_offset = 0
    while start_offset < len(all_doc_tokens):
      length = len(all_doc_tokens) - start_offset
      if length > max_tokens_for_doc:
        length = max_tokens_for_doc
      doc_spans.append(_DocSpan(start=start_offset, length=length))
      if start_offset + length == len(all_doc_tokens):
        break
      start_offset += min(length, doc_stride)
    for (doc_span_index, doc_span) in enumerate(doc_spans):
      tokens = []
      token_to_orig_map = {}
      token_is_max_context = {}
      segment_ids = []
      tokens.append("[CLS]")
      segment_ids.append(0)
      for token in query_tokens:
        tokens.append(token)
        segment_ids.append(0)
      tokens.append("[SEP]")
      segment_ids.append(0)
      for i in range(doc_span.length):
        split_token_index = doc_span.start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
        is_max_context = original_check_is_max_context(doc_spans, doc_span_index,
                                                       split_token_index)
        token_is_max_context[len(tokens)] = is_max_context
        tokens.append(all_doc_tokens[split_token_index])
        segment_ids.append(1)
      tokens.append("[SEP]")
      segment_ids.append(1)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      input_mask = [1] * len(input_ids)
      while len(input_ids) < max_seq_length:
        input_ids.append(0)
        input_mask.append(0)
        segment_ids.append(0)
      features.append(OriginalFeature(unique_id, example_index, doc_span_index, tokens,
                                      token_to_orig_map, token_is_max_context, input_ids,
                                      input_mask, segment_ids))
      unique_id += 1
  return features


def original_check_is_max_context(doc_spans, cur_span_index, position):
  best_score = None
  best_span_index = None
  for (span_index, doc_span) in enumerate(doc_spans):
    end = doc_span.start + doc_span.length - 1
    if position < doc_span.start:
      continue
    if position > end:
      continue
    num_left_context = position - doc_span.start
    num_right_context = end - position
    score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
    if best_score is None or score > best_score:
      best_score = score
      best_span_index = span_index
  return cur_span_index == best_span_index


def original_get_best_indexes(logits, n_best_size):
  index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  best_indexes = []
  for i in range(len(index_and_score)):
    if i >= n_best_size:
      break
    best_indexes.append(index_and_score[i][0])
  return best_indexes


def original_compute_softmax(scores):
  if not scores:
    return []
  max_score = None
  for score in scores:
    if max_score is None or score > max_score:
      max_score = score
  exp_scores = []
  total_sum = 0.0
  for score in scores:
    x = math.exp(score - max_score)
    exp_scores.append(x)
    total_sum += x
  probs = []
  for score in exp_scores:
    probs.append(score / total_sum)
  return probs


def original_get_final_text(pred_text, orig_text, do_lower_case):
  def _strip_spaces(text):
    ns_chars = []
    ns_to_s_map = collections.OrderedDict()
    for (i, c) in enumerate(text):
      if c == " ":
        continue
      ns_to_s_map[len(ns_chars)] = i
      ns_chars.append(c)
    ns_text = "".join(ns_chars)
    return (ns_text, ns_to_s_map)

  tok_text = " ".join(original_tokenizer.basic_tokens(orig_text, do_lower_case))
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    return orig_text
  end_position = start_position + len(pred_text) - 1
  (orig_ns_text, orig_ns_to_s_map) = _strip_spaces(orig_text)
  (tok_ns_text, tok_ns_to_s_map) = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    return orig_text
  tok_s_to_ns_map = {}
  for (i, tok_index) in tok_ns_to_s_map.items():
    tok_s_to_ns_map[tok_index] = i
  orig_start_position = None
  if start_position in tok_s_to_ns_map:
    ns_start_position = tok_s_to_ns_map[start_position]
    if ns_start_position in orig_ns_to_s_map:
      orig_start_position = orig_ns_to_s_map[ns_start_position]
  if orig_start_position is None:
    return orig_text
  orig_end_position = None
  if end_position in tok_s_to_ns_map:
    ns_end_position = tok_s_to_ns_map[end_position]
    if ns_end_position in orig_ns_to_s_map:
      orig_end_position = orig_ns_to_s_map[ns_end_position]
  if orig_end_position is None:
    return orig_text
  output_text = orig_text[orig_start_position:(orig_end_position + 1)]
  return output_text


def original_write_predictions(all_examples, all_features, all_results, n_best_size,
                               max_answer_length, do_lower_case, output_prediction_file,
                               output_nbest_file, output_null_log_odds_file,
                               version_2_with_negative, null_score_diff_threshold):
  """Returns the question ids where the original raises (no non-null answer in v2.0)."""
  example_index_to_features = collections.defaultdict(list)
  for feature in all_features:
    example_index_to_features[feature.example_index].append(feature)
  unique_id_to_result = {}
  for result in all_results:
    unique_id_to_result[result.unique_id] = result
  _PrelimPrediction = collections.namedtuple(
      "PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit",
                           "end_logit"])
  all_predictions = collections.OrderedDict()
  all_nbest_json = collections.OrderedDict()
  scores_diff_json = collections.OrderedDict()
  raised = []
  for (example_index, example) in enumerate(all_examples):
    features = example_index_to_features[example_index]
    prelim_predictions = []
    score_null = 1000000
    min_null_feature_index = 0
    null_start_logit = 0
    null_end_logit = 0
    for (feature_index, feature) in enumerate(features):
      result = unique_id_to_result[feature.unique_id]
      start_indexes = original_get_best_indexes(result.start_logits, n_best_size)
      end_indexes = original_get_best_indexes(result.end_logits, n_best_size)
      if version_2_with_negative:
        feature_null_score = result.start_logits[0] + result.end_logits[0]
        if feature_null_score < score_null:
          score_null = feature_null_score
          min_null_feature_index = feature_index
          null_start_logit = result.start_logits[0]
          null_end_logit = result.end_logits[0]
      for start_index in start_indexes:
        for end_index in end_indexes:
          if start_index >= len(feature.tokens):
            continue
          if end_index >= len(feature.tokens):
            continue
          if start_index not in feature.token_to_orig_map:
            continue
          if end_index not in feature.token_to_orig_map:
            continue
          if not feature.token_is_max_context.get(start_index, False):
            continue
          if end_index < start_index:
            continue
          length = end_index - start_index + 1
          if length > max_answer_length:
            continue
          prelim_predictions.append(_PrelimPrediction(
              feature_index=feature_index, start_index=start_index, end_index=end_index,
              start_logit=result.start_logits[start_index],
              end_logit=result.end_logits[end_index]))
    if version_2_with_negative:
      prelim_predictions.append(_PrelimPrediction(
          feature_index=min_null_feature_index, start_index=0, end_index=0,
          start_logit=null_start_logit, end_logit=null_end_logit))
    prelim_predictions = sorted(prelim_predictions, key=lambda x: (x.start_logit + x.end_logit),
                                reverse=True)
    _NbestPrediction = collections.namedtuple("NbestPrediction",
                                              ["text", "start_logit", "end_logit"])
    seen_predictions = {}
    nbest = []
    for pred in prelim_predictions:
      if len(nbest) >= n_best_size:
        break
      feature = features[pred.feature_index]
      if pred.start_index > 0:
        tok_tokens = feature.tokens[pred.start_index:(pred.end_index + 1)]
        orig_doc_start = feature.token_to_orig_map[pred.start_index]
        orig_doc_end = feature.token_to_orig_map[pred.end_index]
        orig_tokens = example.doc_tokens[orig_doc_start:(orig_doc_end + 1)]
        tok_text = " ".join(tok_tokens)
        tok_text = tok_text.replace(" ##", "")
        tok_text = tok_text.replace("##", "")
        tok_text = tok_text.strip()
        tok_text = " ".join(tok_text.split())
        orig_text = " ".join(orig_tokens)
        final_text = original_get_final_text(tok_text, orig_text, do_lower_case)
        if final_text in seen_predictions:
          continue
        seen_predictions[final_text] = True
      else:
        final_text = ""
        seen_predictions[final_text] = True
      nbest.append(_NbestPrediction(text=final_text, start_logit=pred.start_logit,
                                    end_logit=pred.end_logit))
    if version_2_with_negative:
      if "" not in seen_predictions:
        nbest.append(_NbestPrediction(text="", start_logit=null_start_logit,
                                      end_logit=null_end_logit))
    if not nbest:
      nbest.append(_NbestPrediction(text="empty", start_logit=0.0, end_logit=0.0))
    assert len(nbest) >= 1
    total_scores = []
    best_non_null_entry = None
    for entry in nbest:
      total_scores.append(entry.start_logit + entry.end_logit)
      if not best_non_null_entry:
        if entry.text:
          best_non_null_entry = entry
    probs = original_compute_softmax(total_scores)
    nbest_json = []
    for (i, entry) in enumerate(nbest):
      output = collections.OrderedDict()
      output["text"] = entry.text
      output["probability"] = probs[i]
      output["start_logit"] = entry.start_logit
      output["end_logit"] = entry.end_logit
      nbest_json.append(output)
    assert len(nbest_json) >= 1
    if not version_2_with_negative:
      all_predictions[example.qas_id] = nbest_json[0]["text"]
    else:
      if best_non_null_entry is None:
        # The original raises AttributeError here; the rendering notes the question and
        # goes on so that the other questions can still be compared.
        raised.append(example.qas_id)
        all_nbest_json[example.qas_id] = nbest_json
        continue
      score_diff = score_null - best_non_null_entry.start_logit - (
          best_non_null_entry.end_logit)
      scores_diff_json[example.qas_id] = score_diff
      if score_diff > null_score_diff_threshold:
        all_predictions[example.qas_id] = ""
      else:
        all_predictions[example.qas_id] = best_non_null_entry.text
    all_nbest_json[example.qas_id] = nbest_json
  with open(output_prediction_file, "w") as writer:
    writer.write(json.dumps(all_predictions, indent=4) + "\n")
  with open(output_nbest_file, "w") as writer:
    writer.write(json.dumps(all_nbest_json, indent=4) + "\n")
  if version_2_with_negative:
    with open(output_null_log_odds_file, "w") as writer:
      writer.write(json.dumps(scores_diff_json, indent=4) + "\n")
  return raised


# --- Generated data ------------------------------------------------------------------------

def _squad_file(tmp_path, rng, num_paragraphs):
  """A SQuAD file of long contexts, one to three questions each (questions share contexts)."""
  paragraphs = []
  for p in range(num_paragraphs):
    words = [rng.choice(CONTEXT_WORDS) for _ in range(rng.randint(15, 70))]
    context = "".join(w + rng.choice(SEPARATORS) for w in words).strip()
    qas = [{"id": f"p{p}q{q}", "question": " ".join(rng.choice(CONTEXT_WORDS) for _ in
                                                  range(rng.randint(1, 9))) + " ?",
            "answers": []} for q in range(rng.randint(1, 3))]
    paragraphs.append({"context": context, "qas": qas})
  path = tmp_path / f"dev{rng.random()}.json"
  path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t",
                                                           "paragraphs": paragraphs}]}))
  return str(path)


def _logits(rng, length, kind):
  """Random logits; 'ties' draws small integers, 'trimmed' ends with -inf (a cut batch)."""
  if kind == "ties":
    return [float(rng.randint(-3, 3)) for _ in range(length)]
  values = [rng.gauss(0.0, 3.0) for _ in range(length)]
  if kind == "trimmed":
    keep = rng.randint(length // 2, length)
    values[keep:] = [-math.inf] * (length - keep)
  return values


CASES = [  # seed, max_seq_length, doc_stride, max_query_length, n_best, max_answer, lower, kind
    (0, 24, 4, 6, 20, 30, True, "normal"),
    (1, 20, 3, 4, 5, 3, True, "ties"),
    (2, 32, 8, 8, 1, 30, True, "normal"),
    (3, 18, 2, 3, 3, 1, False, "trimmed"),
    (4, 28, 16, 10, 10, 5, False, "ties"),
    (5, 24, 5, 6, 20, 30, True, "trimmed"),
]


@pytest.mark.parametrize("version_2", [False, True], ids=["v1.1", "v2.0"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_many_windows_match_the_original(tmp_path, case, version_2):
  seed, max_seq_length, doc_stride, max_query_length, n_best, max_answer, lower, kind = case
  rng = random.Random(seed)
  path = _squad_file(tmp_path, rng, num_paragraphs=8)
  examples = squad.read_squad_examples(path, False, version_2)
  ours = squad.convert_examples_to_features(
      examples, tokenization.FullTokenizer(write_vocab(tmp_path / "vocab.txt", VOCAB), lower),
      max_seq_length, doc_stride, max_query_length, False)
  theirs = original_convert_examples_to_features(
      examples, OriginalTokenizer(VOCAB, lower), max_seq_length, doc_stride, max_query_length)

  # Features: the same windows, maps and max-context flags.
  assert len(ours) == len(theirs)
  windows = collections.Counter(f.example_index for f in theirs)
  assert min(windows.values()) >= 2 and max(windows.values()) >= 8, windows
  for a, b in zip(ours, theirs):
    assert (a.unique_id, a.example_index, a.doc_span_index, a.tokens, a.input_ids,
            a.input_mask, a.segment_ids) == (b.unique_id, b.example_index, b.doc_span_index,
                                             b.tokens, b.input_ids, b.input_mask, b.segment_ids)
    assert a.token_to_orig_map == b.token_to_orig_map
    assert a.token_is_max_context == b.token_is_max_context

  results = [squad_predictions.RawResult(f.unique_id, _logits(rng, max_seq_length, kind),
                                         _logits(rng, max_seq_length, kind)) for f in theirs]
  for threshold in ([0.0] if not version_2 else [0.0, -2.5, 1.5]):
    files = {n: tmp_path / f"original_{n}.json" for n in ("predictions", "nbest", "null_odds")}
    raised = original_write_predictions(
        examples, theirs, results, n_best, max_answer, lower, files["predictions"],
        files["nbest"], files["null_odds"], version_2, threshold)
    predictions, nbest, null_odds = squad_predictions.compute_predictions(
        examples, ours, results, n_best, max_answer, lower, version_2, threshold)
    want = {n: json.loads(files[n].read_text()) for n in files if files[n].exists()}
    assert nbest.keys() == want["nbest"].keys()
    for qid, entries in nbest.items():
      want_entries = want["nbest"][qid]
      assert [(e["text"], e["start_logit"], e["end_logit"]) for e in entries] == \
          [(e["text"], e["start_logit"], e["end_logit"]) for e in want_entries], qid
      # The original's softmax, in its order of operations: the same bits.
      assert [e["probability"] for e in entries] == [e["probability"] for e in want_entries]
    # Where the original raises (v2.0, no non-null candidate at all) we predict "" with
    # null odds 0.0; everywhere else the answers and odds are the original's exactly.
    assert {q: p for q, p in predictions.items() if q not in raised} == want["predictions"]
    assert all(predictions[q] == "" and null_odds[q] == 0.0 for q in raised)
    if version_2:
      assert {q: o for q, o in null_odds.items() if q not in raised} == want["null_odds"]
      # run_squad.py's path: post-process once with +inf, then apply the threshold.
      answers, _, odds = squad_predictions.compute_predictions(
          examples, ours, results, n_best, max_answer, lower, True, math.inf)
      assert squad_predictions.apply_null_threshold(answers, odds, threshold) == predictions
    else:
      assert not null_odds
      # The files themselves, as run_squad.py writes them.
      squad_predictions.write_json(str(tmp_path / "predictions.json"), predictions)
      assert (tmp_path / "predictions.json").read_text() == files["predictions"].read_text()
