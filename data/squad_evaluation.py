"""The official SQuAD metrics (the v1.1 and v2.0 evaluation scripts' definitions).

Answers are normalised by lower-casing and removing punctuation, the
articles a/an/the and extra whitespace; a question scores the best exact
match and token F1 over its gold answers. v2.0 adds the HasAns / NoAns
splits and, given the null odds, the best exact and F1 over all thresholds.
"""

import collections
import re
import string

from data import squad, squad_predictions

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(s):
  """Lower case, no punctuation, no articles, single spaces."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", s).split())


def _tokens(s):
  return normalize_answer(s).split() if s else []


def exact(gold, prediction):
  return int(normalize_answer(gold) == normalize_answer(prediction))


def f1(gold, prediction):
  """Token F1; with an empty side, 1 if both are empty, else 0 (the v2.0 rule)."""
  gold_tokens, pred_tokens = _tokens(gold), _tokens(prediction)
  if not gold_tokens or not pred_tokens:
    return float(gold_tokens == pred_tokens)
  same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
  if not same:
    return 0.0
  precision, recall = same / len(pred_tokens), same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def _questions(dataset):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      yield from paragraph["qas"]


def has_answers(dataset):
  """True when the dataset carries answers to score against."""
  return any(qa.get("answers") or qa.get("is_impossible") for qa in _questions(dataset))


def read_gold(path, version_2_with_negative, tune_null_threshold, evaluates_during_training):
  """The `data` of a predict file, checked now when it has answers (it is scored after
  prediction); ValueError when --tune_null_threshold or evaluation during training
  (--eval_every_*) has no answers to score."""
  gold = squad.load_json(path)
  if has_answers(gold):
    check_scorable(gold, version_2_with_negative, path)
  elif tune_null_threshold:
    raise ValueError(f"--tune_null_threshold: --predict_file={path} has no answers to tune on.")
  elif evaluates_during_training:
    raise ValueError(f"--eval_every_*: --predict_file={path} has no answers to score.")
  return gold


def check_scorable(dataset, version_2_with_negative, path):
  """Raises ValueError naming the first question of `dataset` whose answers cannot be scored.

  Every question needs an `answers` list of objects with a `text`; v1.1
  scoring needs at least one per question (an empty list is SQuAD 2.0's "no
  answer"). Called before training, so a file that cannot be scored does not
  cost the run.
  """
  for qa in _questions(dataset):
    where = f"{path}: question {qa.get('id', '?')!r}"
    answers = qa.get("answers")
    if not isinstance(answers, list) or not all(
        isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
      raise ValueError(f"{where}: \"answers\" is not a list of objects with a \"text\"; "
                       "the predictions could not be scored.")
    if not answers and not version_2_with_negative:
      raise ValueError(f"{where} has no answer to score against; questions without one "
                       "need --version_2_with_negative (SQuAD 2.0).")


def evaluate_v1(dataset, predictions):
  """{"exact_match", "f1"} in percent, as evaluate-v1.1.py (unanswered count as 0)."""
  total = em = f = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      continue
    golds = [a["text"] for a in qa["answers"]]
    prediction = predictions[qa["id"]]
    em += max(exact(g, prediction) for g in golds)
    f += max(_f1_v1(g, prediction) for g in golds)
  return {"exact_match": 100.0 * em / total, "f1": 100.0 * f / total}


def _f1_v1(gold, prediction):
  """evaluate-v1.1.py's F1: no empty-answer rule (an empty side scores 0)."""
  gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
  same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
  if not same:
    return 0.0
  precision, recall = same / len(pred_tokens), same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def _best_threshold(predictions, scores, null_odds, has_answer, start=0.0):
  """(best score in percent, its threshold) over thresholds on the null odds; `start` when
  none beats answering "no answer" everywhere (the official scorer reports 0.0)."""
  current = best = sum(1 for k in has_answer if not has_answer[k])
  threshold = start
  for qid in sorted(null_odds, key=lambda k: null_odds[k]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      diff = scores[qid]
    else:
      diff = -1 if predictions[qid] else 0
    current += diff
    if current > best:
      best, threshold = current, null_odds[qid]
  return 100.0 * best / len(scores), threshold


def _raw_scores(dataset, predictions):
  """({qid: has an answer}, {qid: exact}, {qid: f1}) of the predicted questions, each the
  best over the gold answers (no answer: the gold is "")."""
  has_answer = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
  exact_raw, f1_raw = {}, {}
  for qa in _questions(dataset):
    golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
    if qa["id"] not in predictions:
      continue
    prediction = predictions[qa["id"]]
    exact_raw[qa["id"]] = max(exact(g, prediction) for g in golds)
    f1_raw[qa["id"]] = max(f1(g, prediction) for g in golds)
  return has_answer, exact_raw, f1_raw


def evaluate_v2(dataset, predictions, null_odds=None, null_odds_threshold=1.0):
  """evaluate-v2.0.py's results: exact, f1, total, HasAns_*, NoAns_* and, with null
  odds, best_exact(_thresh) and best_f1(_thresh)."""
  has_answer, exact_raw, f1_raw = _raw_scores(dataset, predictions)
  odds = null_odds if null_odds is not None else {k: 0.0 for k in predictions}

  def thresholded(scores):
    return {k: float(not has_answer[k]) if odds[k] > null_odds_threshold else v
            for k, v in scores.items()}

  exact_t, f1_t = thresholded(exact_raw), thresholded(f1_raw)

  def summary(ids):
    return {"exact": 100.0 * sum(exact_t[k] for k in ids) / len(ids),
            "f1": 100.0 * sum(f1_t[k] for k in ids) / len(ids), "total": len(ids)}

  out = collections.OrderedDict(summary(list(exact_t)))
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    ids = [k for k, v in has_answer.items() if v == wanted]
    if ids:
      out.update({f"{prefix}_{k}": v for k, v in summary(ids).items()})
  if null_odds is not None:
    out["best_exact"], out["best_exact_thresh"] = _best_threshold(predictions, exact_raw, odds,
                                                                  has_answer)
    out["best_f1"], out["best_f1_thresh"] = _best_threshold(predictions, f1_raw, odds, has_answer)
  return out


def tune_null_threshold(dataset, answers, null_odds):
  """The null-score threshold with the best v2.0 F1 on `dataset`.

  answers: every question's best non-null answer (squad_predictions.compute_predictions
  with threshold +inf), as evaluate-v2.0.py's search expects, so the result may lie on either
  side of any threshold used so far.
  """
  has_answer, _, f1s = _raw_scores(dataset, answers)
  # Where "no answer" everywhere is best, a threshold below every question's odds gives it.
  below = min(null_odds.values(), default=1.0) - 1.0
  return _best_threshold(answers, f1s, null_odds, has_answer, start=below)[1]


def score(dataset, predictions, answers, null_odds, version_2_with_negative,
          tune_threshold=False):
  """(official scores, predictions) of `predictions` on `dataset`; (None, predictions)
  when `dataset` has no answers to score.

  v2.0 with tune_threshold: also the scores at the threshold with the best F1
  (null_score_diff_threshold, tuned_exact, tuned_f1), whose predictions are
  returned instead; `answers` are every question's best non-null answer.
  """
  if not has_answers(dataset):
    return None, predictions
  if not version_2_with_negative:
    return evaluate_v1(dataset, predictions), predictions
  scores = evaluate_v2(dataset, predictions, null_odds)
  if tune_threshold:
    threshold = tune_null_threshold(dataset, answers, null_odds)
    predictions = squad_predictions.apply_null_threshold(answers, null_odds, threshold)
    tuned = evaluate_v2(dataset, predictions)  # as written: no second cut on the odds
    scores.update({"null_score_diff_threshold": threshold, "tuned_exact": tuned["exact"],
                   "tuned_f1": tuned["f1"]})
  return scores, predictions
