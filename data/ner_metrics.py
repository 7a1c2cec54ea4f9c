"""Entity-level precision, recall and F1 as conlleval computes them.

Chunks come from seqeval's `get_entities` in its default mode, a port of
conlleval's startOfChunk/endOfChunk rules: an I- tag after O or after another
type opens a chunk, a type change closes one, and a sentence end closes any
open chunk. A predicted chunk counts as correct when a gold chunk has the same
type, start and end. Scores are fractions (conlleval prints percentages).
"""

import collections

from seqeval.metrics.sequence_labeling import get_entities


def chunks(sentences):
  """The set of (type, start, end) chunks of a list of tag sequences, sentences kept apart."""
  # For a list of lists get_entities puts an O between sentences, so no
  # chunk crosses a sentence end, and positions count those separators.
  return set(get_entities([list(s) for s in sentences]))


def _prf(correct, guessed, gold):
  precision = correct / guessed if guessed else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return precision, recall, f1


def conll_scores(gold_sentences, predicted_sentences):
  """Overall and per-type precision/recall/F1, token accuracy and chunk counts.

  Args:
    gold_sentences, predicted_sentences: lists of tag lists (IOB1 or IOB2),
      sentence by sentence, the same lengths.
  Returns:
    dict: precision, recall, f1, accuracy, num_gold, num_predicted,
    num_correct, and `{TYPE}_precision/_recall/_f1` for every type seen.
  """
  if [len(s) for s in gold_sentences] != [len(s) for s in predicted_sentences]:
    raise ValueError("Gold and predicted tags differ in their sentence lengths.")
  gold, guessed = chunks(gold_sentences), chunks(predicted_sentences)
  correct = gold & guessed
  tokens = sum(len(s) for s in gold_sentences)
  same = sum(g == p for gs, ps in zip(gold_sentences, predicted_sentences)
             for g, p in zip(gs, ps))
  p, r, f = _prf(len(correct), len(guessed), len(gold))
  results = {"precision": p, "recall": r, "f1": f, "accuracy": same / tokens if tokens else 0.0,
             "num_gold": len(gold), "num_predicted": len(guessed), "num_correct": len(correct)}
  count = lambda found: collections.Counter(c[0] for c in found)
  by_gold, by_guess, by_correct = count(gold), count(guessed), count(correct)
  for kind in sorted(set(by_gold) | set(by_guess)):
    p, r, f = _prf(by_correct[kind], by_guess[kind], by_gold[kind])
    results.update({f"{kind}_precision": p, f"{kind}_recall": r, f"{kind}_f1": f})
  return results


def file_scores(documents, predicted_tags, prefix=""):
  """conll_scores of a file's predicted tags (one per word, in file order) against the
  file's own tags (data/conll.py documents), keys prefixed; {} when the file has no tags
  of its own (a file to tag, not to score)."""
  gold = [s.tags for d in documents for s in d.sentences]
  if any(tags is None for tags in gold):  # a words-only file
    return {}
  guessed, start = [], 0
  for sentence in gold:
    guessed.append(predicted_tags[start:start + len(sentence)])
    start += len(sentence)
  return {prefix + k: v for k, v in conll_scores(gold, guessed).items()}
