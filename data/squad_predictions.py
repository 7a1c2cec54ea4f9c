"""SQuAD post-processing: the original's write_predictions, from logits to answer texts.

Each feature's n best start and end positions give candidate spans; spans in
the question, outside the document, ending before they start, longer than
max_answer_length or starting where another window gives the token more
context are dropped. Candidates of all windows of a question are ranked
together by start + end logit, mapped back to the original text
(get_final_text) and deduplicated. v2.0 adds the null answer with the lowest
null score over the windows. Options are arguments.
"""

import collections
import json
import math

from absl import logging

from data import files, tokenization

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])
_Prelim = collections.namedtuple("PrelimPrediction",
                                 ["feature_index", "start_index", "end_index", "start_logit",
                                  "end_logit"])
_Nbest = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def _get_best_indexes(logits, n_best_size):
  """Indexes of the n best logits, highest first (earlier index on ties)."""
  ranked = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  return [index for index, _ in ranked[:n_best_size]]




def get_final_text(pred_text, orig_text, do_lower_case, verbose=False):
  """Maps normalized WordPiece text back to the span of the original text it came from.

  Re-runs the basic tokenizer on the original words, aligns the two strings
  character by character without spaces, and returns the original substring;
  falls back to the whole original text on any mismatch.
  """
  def strip_spaces(text):
    chars, ns_to_s = [], collections.OrderedDict()
    for i, c in enumerate(text):
      if c == " ":
        continue
      ns_to_s[len(chars)] = i
      chars.append(c)
    return "".join(chars), ns_to_s

  tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case).tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    if verbose:
      logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end = start + len(pred_text) - 1
  orig_ns, orig_ns_to_s = strip_spaces(orig_text)
  tok_ns, tok_ns_to_s = strip_spaces(tok_text)
  if len(orig_ns) != len(tok_ns):
    if verbose:
      logging.info("Length not equal after stripping spaces: '%s' vs '%s'", orig_ns, tok_ns)
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
  orig_start = orig_end = None
  if start in tok_s_to_ns and tok_s_to_ns[start] in orig_ns_to_s:
    orig_start = orig_ns_to_s[tok_s_to_ns[start]]
  if end in tok_s_to_ns and tok_s_to_ns[end] in orig_ns_to_s:
    orig_end = orig_ns_to_s[tok_s_to_ns[end]]
  if orig_start is None or orig_end is None:
    if verbose:
      logging.info("Couldn't map start or end position")
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def compute_predictions(examples, features, results, n_best_size, max_answer_length,
                        do_lower_case, version_2_with_negative, null_score_diff_threshold,
                        verbose=False):
  """The original's write_predictions without the writing.

  Returns (predictions {qas_id: text}, nbest {qas_id: [entries]}, null odds
  {qas_id: score_diff} (v2.0 only, else empty)). In v2.0 a question left with
  no valid span in any window predicts "" with null odds 0.0 (the original
  raises there); tests/test_squad_windows.py checks the rest against the
  original line by line.
  """
  by_example = collections.defaultdict(list)
  for feature in features:
    by_example[feature.example_index].append(feature)
  by_id = {r.unique_id: r for r in results}
  predictions, all_nbest, null_odds = (collections.OrderedDict() for _ in range(3))
  for example_index, example in enumerate(examples):
    example_features = by_example[example_index]
    prelim = []
    score_null, null_feature, null_start, null_end = 1000000, 0, 0, 0
    for feature_index, feature in enumerate(example_features):
      result = by_id[feature.unique_id]
      if version_2_with_negative:
        feature_null = result.start_logits[0] + result.end_logits[0]
        if feature_null < score_null:
          score_null, null_feature = feature_null, feature_index
          null_start, null_end = result.start_logits[0], result.end_logits[0]
      for start in _get_best_indexes(result.start_logits, n_best_size):
        for end in _get_best_indexes(result.end_logits, n_best_size):
          if start >= len(feature.tokens) or end >= len(feature.tokens):
            continue
          if start not in feature.token_to_orig_map or end not in feature.token_to_orig_map:
            continue
          if not feature.token_is_max_context.get(start, False):
            continue
          if end < start or end - start + 1 > max_answer_length:
            continue
          prelim.append(_Prelim(feature_index, start, end, result.start_logits[start],
                                result.end_logits[end]))
    if version_2_with_negative and example_features:
      prelim.append(_Prelim(null_feature, 0, 0, null_start, null_end))
    prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)
    seen, nbest = set(), []
    for pred in prelim:
      if len(nbest) >= n_best_size:
        break
      feature = example_features[pred.feature_index]
      if pred.start_index > 0:  # a span, not the null answer
        tok_text = " ".join(feature.tokens[pred.start_index:pred.end_index + 1])
        tok_text = tok_text.replace(" ##", "").replace("##", "")
        tok_text = " ".join(tok_text.strip().split())
        orig_start = feature.token_to_orig_map[pred.start_index]
        orig_end = feature.token_to_orig_map[pred.end_index]
        orig_text = " ".join(example.doc_tokens[orig_start:orig_end + 1])
        final_text = get_final_text(tok_text, orig_text, do_lower_case, verbose)
        if final_text in seen:
          continue
      else:
        final_text = ""
      seen.add(final_text)
      nbest.append(_Nbest(final_text, pred.start_logit, pred.end_logit))
    if version_2_with_negative and "" not in seen:
      nbest.append(_Nbest("", null_start, null_end))
    if not nbest:  # a nonce, as the original, for the rare example without a valid span
      nbest.append(_Nbest("empty", 0.0, 0.0))
    probabilities = _compute_softmax([e.start_logit + e.end_logit for e in nbest])
    all_nbest[example.qas_id] = [
        collections.OrderedDict([("text", e.text), ("probability", p),
                                 ("start_logit", e.start_logit), ("end_logit", e.end_logit)])
        for e, p in zip(nbest, probabilities)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0].text
    else:
      best = next((e for e in nbest if e.text), None)
      if best is None:  # only the null answer survived
        null_odds[example.qas_id] = 0.0
        predictions[example.qas_id] = ""
        continue
      score_diff = score_null - best.start_logit - best.end_logit
      null_odds[example.qas_id] = score_diff
      predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else best.text
  return predictions, all_nbest, null_odds


def _compute_softmax(scores):
  """The original's softmax of the n-best scores, in its order of operations (Python
  floats, max subtracted, one pass of sums), so that nbest_predictions.json's probabilities
  equal the original's bit for bit; numpy's summation differs in the last bits."""
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(score - top) for score in scores]
  total = 0.0
  for x in exps:
    total += x
  return [x / total for x in exps]


def predictions_from_outputs(examples, features, outputs, n_best_size, max_answer_length,
                             do_lower_case, version_2_with_negative, null_score_diff_threshold,
                             verbose=False):
  """The model's outputs (unique_ids [N], start_logits, end_logits [N, S], padding
  features with unique id 0) to (predictions, nbest, null odds, answers).

  v2.0: the outputs are post-processed once, keeping every question's best
  non-null answer (`answers`); the predictions apply the threshold to them, and
  any other threshold is a cheap pass over the null odds (apply_null_threshold).
  v1.1: `answers` are the predictions.
  """
  results = [RawResult(int(u), [float(x) for x in s], [float(x) for x in e])
             for u, s, e in zip(outputs["unique_ids"], outputs["start_logits"],
                                outputs["end_logits"]) if u]
  v2 = version_2_with_negative
  answers, nbest, null_odds = compute_predictions(
      examples, features, results, n_best_size, max_answer_length, do_lower_case, v2,
      float("inf") if v2 else null_score_diff_threshold, verbose)
  predictions = (apply_null_threshold(answers, null_odds, null_score_diff_threshold) if v2
                 else answers)
  return predictions, nbest, null_odds, answers


def apply_null_threshold(answers, null_odds, threshold):
  """v2.0 predictions from each question's best non-null answer: "" where its null odds
  (null score minus best span score) exceed `threshold`, as compute_predictions decides."""
  return {q: "" if null_odds.get(q, 0.0) > threshold else a for q, a in answers.items()}


def write_predictions(path_of, predictions, nbest, null_odds=None):
  """predictions.json, nbest_predictions.json and, given null_odds (v2.0), null_odds.json,
  as the original names them; path_of(name) is each file's path."""
  write_json(path_of("predictions.json"), predictions)
  write_json(path_of("nbest_predictions.json"), nbest)
  if null_odds is not None:
    write_json(path_of("null_odds.json"), null_odds)


def write_json(path, value):
  """JSON with indent 4 and a final newline, as the original writes its outputs."""
  with files.atomic_output(path) as f:
    f.write(json.dumps(value, indent=4) + "\n")
