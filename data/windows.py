"""Windows over long inputs, as the original cut SQuAD documents (doc spans and max context).

A sequence of pieces longer than a model input is cut into windows of at
most `max_pieces`, each starting `doc_stride` pieces after the previous one;
every piece is then predicted from the one window where it has the most
context. run_squad (document tokens after the question) and run_ner (a stream
of sentences) use the same two functions.
"""

import numpy as np


def doc_spans(num_pieces, max_pieces, doc_stride):
  """(start, length) windows over num_pieces pieces, as the original cut SQuAD documents."""
  spans, start = [], 0
  while start < num_pieces:
    length = min(num_pieces - start, max_pieces)
    spans.append((start, length))
    if start + length == num_pieces:
      break
    start += min(length, doc_stride)
  return spans


def max_context_windows(spans, num_pieces):
  """For each piece, the index of the span where it has the most context: int64 [num_pieces].

  The original's `_check_is_max_context` rule: score = min(pieces left,
  pieces right) + 0.01 * span length; the first best span wins ties. Computed
  span by span so a long input costs O(pieces * overlap), not O(pieces * spans).
  """
  best = np.full(num_pieces, -np.inf)
  owner = np.full(num_pieces, -1, np.int64)
  for index, (start, length) in enumerate(spans):
    position = np.arange(start, start + length)
    score = np.minimum(position - start, start + length - 1 - position) + 0.01 * length
    better = score > best[position]
    best[position[better]] = score[better]
    owner[position[better]] = index
  return owner
