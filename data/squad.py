"""SQuAD v1.1 / v2.0: the original's reading, feature conversion and answer recovery.

Every step follows the original run_squad.py: the whitespace split of the
context with its character-to-word map, the "could not find answer" skip, the
WordPiece re-tokenization maps, the improved answer span, sliding document
spans with the max-context rule, and the n-best post-processing that maps
WordPiece text back to the original text. Options are arguments.
"""

import collections
import dataclasses
import json
import math

from absl import logging

from data import files, tokenization


@dataclasses.dataclass
class SquadExample:
  """A question on a paragraph; positions are whitespace-word indexes."""
  qas_id: str
  question_text: str
  doc_tokens: list
  orig_answer_text: str = None
  start_position: int = None
  end_position: int = None
  is_impossible: bool = False


@dataclasses.dataclass
class InputFeatures:
  """One document span of an example, packed as [CLS] query [SEP] span [SEP]."""
  unique_id: int
  example_index: int
  doc_span_index: int
  tokens: list
  token_to_orig_map: dict
  token_is_max_context: dict
  input_ids: list
  input_mask: list
  segment_ids: list
  start_position: int = None
  end_position: int = None
  is_impossible: bool = False


def _is_whitespace(c):
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def load_json(path):
  """The `data` list of a SQuAD file; ValueError naming the file otherwise."""
  try:
    with files.open_file(path, "rb") as f:
      return json.loads(f.read().decode("utf-8"))["data"]
  except FileNotFoundError:
    raise ValueError(f"{path}: no such file.") from None
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path} is not a SQuAD file: {e}") from None


def read_squad_examples(path, is_training, version_2_with_negative):
  """SquadExamples of a SQuAD json file (answers read only when training).

  Raises ValueError naming the file and question when a field is missing or wrong.
  """
  examples = []
  for entry in load_json(path):
    for paragraph in entry.get("paragraphs", ()):
      where = f"{path}: paragraph of '{entry.get('title', '?')}'"
      try:
        doc_tokens, char_to_word_offset = _whitespace_split(paragraph["context"])
        for qa in paragraph["qas"]:
          where = f"{path}: question {qa.get('id', '?')!r}"
          example = _example(path, qa, doc_tokens, char_to_word_offset, is_training,
                             version_2_with_negative)
          if example is not None:
            examples.append(example)
      except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"{where}: missing or malformed field ({type(e).__name__}: {e}).") \
            from None
  return examples


def _whitespace_split(context):
  """The original's words of a context and the word index of every character."""
  doc_tokens, char_to_word_offset = [], []
  previous_is_whitespace = True
  for c in context:
    if _is_whitespace(c):
      previous_is_whitespace = True
    else:
      if previous_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      previous_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def _example(path, qa, doc_tokens, char_to_word_offset, is_training, version_2_with_negative):
  """One SquadExample, or None for a training answer not found in its context."""
  start = end = answer_text = None
  impossible = False
  if is_training:
    if version_2_with_negative:
      impossible = qa["is_impossible"]
    if len(qa["answers"]) != 1 and not impossible:
      raise ValueError(f"{path}: question {qa['id']} has {len(qa['answers'])} answers; "
                       "training needs exactly one.")
    if impossible:
      start, end, answer_text = -1, -1, ""
    else:
      answer = qa["answers"][0]
      answer_text = answer["text"]
      offset = answer["answer_start"]
      start = char_to_word_offset[offset]
      end = char_to_word_offset[offset + len(answer_text) - 1]
      actual = " ".join(doc_tokens[start:end + 1])
      cleaned = " ".join(tokenization.whitespace_tokenize(answer_text))
      if actual.find(cleaned) == -1:
        logging.warning("Could not find answer: '%s' vs. '%s'", actual, cleaned)
        return None
  return SquadExample(qa["id"], qa["question"], doc_tokens, answer_text, start, end, impossible)


def _improve_answer_span(doc_tokens, start, end, tokenizer, answer_text):
  """The tightest token span inside [start, end] that spells the tokenized answer."""
  answer = " ".join(tokenizer.tokenize(answer_text))
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == answer:
        return new_start, new_end
  return start, end


def _check_is_max_context(doc_spans, current, position):
  """True when span `current` gives `position` more context than any other span."""
  best_score, best_index = None, None
  for index, (start, length) in enumerate(doc_spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return current == best_index


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training):
  """InputFeatures of each document span of each example, unique ids from 1000000000."""
  features, unique_id = [], 1000000000
  paragraphs = {}  # the questions of a paragraph share its doc_tokens: tokenize it once
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    key = id(example.doc_tokens)
    if key not in paragraphs:
      tok_to_orig_index, orig_to_tok_index, all_doc_tokens = [], [], []
      for i, token in enumerate(example.doc_tokens):
        orig_to_tok_index.append(len(all_doc_tokens))
        for sub_token in tokenizer.tokenize(token):
          tok_to_orig_index.append(i)
          all_doc_tokens.append(sub_token)
      paragraphs = {key: (tok_to_orig_index, orig_to_tok_index, all_doc_tokens)}
    tok_to_orig_index, orig_to_tok_index, all_doc_tokens = paragraphs[key]
    tok_start = tok_end = None
    if is_training and example.is_impossible:
      tok_start = tok_end = -1
    if is_training and not example.is_impossible:
      tok_start = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end = len(all_doc_tokens) - 1
      tok_start, tok_end = _improve_answer_span(all_doc_tokens, tok_start, tok_end, tokenizer,
                                                example.orig_answer_text)
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    doc_spans, start_offset = [], 0
    while start_offset < len(all_doc_tokens):
      length = min(len(all_doc_tokens) - start_offset, max_tokens_for_doc)
      doc_spans.append((start_offset, length))
      if start_offset + length == len(all_doc_tokens):
        break
      start_offset += min(length, doc_stride)
    for span_index, (span_start, span_length) in enumerate(doc_spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      token_to_orig_map, token_is_max_context = {}, {}
      for i in range(span_length):
        split_index = span_start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_index]
        token_is_max_context[len(tokens)] = _check_is_max_context(doc_spans, span_index,
                                                                  split_index)
        tokens.append(all_doc_tokens[split_index])
      tokens.append("[SEP]")
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      segment_ids = [0] * (len(query_tokens) + 2) + [1] * (span_length + 1)
      input_mask = [1] * len(input_ids)
      padding = max_seq_length - len(input_ids)
      input_ids, input_mask, segment_ids = (x + [0] * padding for x in
                                            (input_ids, input_mask, segment_ids))
      start_position = end_position = None
      if is_training and not example.is_impossible:
        doc_end = span_start + span_length - 1
        if tok_start >= span_start and tok_end <= doc_end:
          offset = len(query_tokens) + 2
          start_position, end_position = tok_start - span_start + offset, tok_end - span_start + offset
        else:
          start_position = end_position = 0
      if is_training and example.is_impossible:
        start_position = end_position = 0
      features.append(InputFeatures(
          unique_id, example_index, span_index, tokens, token_to_orig_map,
          token_is_max_context, input_ids, input_mask, segment_ids, start_position,
          end_position, example.is_impossible))
      unique_id += 1
  return features


# --- Post-processing ---------------------------------------------------------

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])
_Prelim = collections.namedtuple("PrelimPrediction",
                                 ["feature_index", "start_index", "end_index", "start_logit",
                                  "end_logit"])
_Nbest = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def _get_best_indexes(logits, n_best_size):
  """Indexes of the n best logits, highest first (earlier index on ties)."""
  ranked = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  return [index for index, _ in ranked[:n_best_size]]


def _compute_softmax(scores):
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


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
  {qas_id: score_diff} (v2.0 only, else empty)).
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
    if version_2_with_negative:
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


def apply_null_threshold(answers, null_odds, threshold):
  """v2.0 predictions from each question's best non-null answer: "" where its null odds
  (null score minus best span score) exceed `threshold`, as compute_predictions decides."""
  return {q: "" if null_odds.get(q, 0.0) > threshold else a for q, a in answers.items()}


def write_json(path, value):
  """JSON with indent 4 and a final newline, as the original writes its outputs."""
  with files.atomic_output(path) as f:
    f.write(json.dumps(value, indent=4) + "\n")


def feature_arrays(features, max_seq_length, is_training, pad_to=1):
  """The features as arrays in the original's record layout, padded to a multiple of pad_to.

  Padding features have unique_ids 0 (no example has that id).
  """
  import numpy as np
  n = len(features) + (-len(features)) % pad_to
  arrays = {"unique_ids": np.zeros(n, np.int64)}
  for name in ("input_ids", "input_mask", "segment_ids"):
    arrays[name] = np.zeros((n, max_seq_length), np.int64)
  if is_training:
    for name in ("start_positions", "end_positions", "is_impossible"):
      arrays[name] = np.zeros(n, np.int64)
  for i, f in enumerate(features):
    arrays["unique_ids"][i] = f.unique_id
    arrays["input_ids"][i], arrays["input_mask"][i] = f.input_ids, f.input_mask
    arrays["segment_ids"][i] = f.segment_ids
    if is_training:
      arrays["start_positions"][i], arrays["end_positions"][i] = f.start_position, f.end_position
      arrays["is_impossible"][i] = int(f.is_impossible)
  return arrays
