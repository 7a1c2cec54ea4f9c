"""SQuAD v1.1 / v2.0: the original's reading and feature conversion.

Every step follows the original run_squad.py: the whitespace split of the
context with its character-to-word map, the "could not find answer" skip, the
WordPiece re-tokenization maps, the improved answer span, and sliding
document spans with the max-context rule. Turning logits back into answers is
data/squad_predictions.py. Options are arguments.
"""

import dataclasses
import json

from absl import logging

from data import files, path_checks, tokenization, windows


def check_options(do_train, train_file, do_predict, predict_file, version_2_with_negative,
                  tune_null_threshold, max_seq_length, max_query_length):
  """Raises ValueError naming the run_squad.py flag that is missing or does not fit."""
  if do_train and not train_file:
    raise ValueError("--do_train needs --train_file.")
  if do_predict and not predict_file:
    raise ValueError("--do_predict needs --predict_file.")
  path_checks.check_input_files(train_file=do_train and train_file,
                                predict_file=do_predict and predict_file)
  if tune_null_threshold and not (version_2_with_negative and do_predict):
    raise ValueError("--tune_null_threshold needs --version_2_with_negative and --do_predict "
                     "(it tunes SQuAD 2.0's no-answer threshold on --predict_file).")
  if max_seq_length <= max_query_length + 3:
    raise ValueError(f"--max_seq_length={max_seq_length} must exceed "
                     f"--max_query_length ({max_query_length}) + 3.")


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
      value = json.loads(f.read().decode("utf-8-sig"))
  except FileNotFoundError:
    raise ValueError(f"{path}: no such file.") from None
  except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
    raise ValueError(f"{path} is not a SQuAD file: {e}") from None
  if not isinstance(value, dict) or "data" not in value:
    raise ValueError(f"{path} is not a SQuAD file: expected an object with a \"data\" list.")
  return _checked(value["data"], list, path, '"data"')


def _checked(value, kind, path, what):
  """value when it is a `kind`; ValueError naming the file and the field otherwise."""
  if not isinstance(value, kind):
    raise ValueError(f"{path}: {what} is a {type(value).__name__}; expected a "
                     f"{'list' if kind is list else 'JSON object'}.")
  return value


def read_squad_examples(path, is_training, version_2_with_negative):
  """SquadExamples of a SQuAD json file (answers read only when training).

  Training questions whose answer text is not at answer_start are skipped, as
  the original does; their number is logged. Raises ValueError naming the file
  and question when a field is missing or wrong, a context is empty, or the
  file has no questions.
  """
  examples, num_questions = [], 0
  for i, entry in enumerate(load_json(path)):
    entry = _checked(entry, dict, path, f"article {i} of \"data\"")
    title = entry.get("title", i)
    for j, paragraph in enumerate(_checked(entry.get("paragraphs", []), list, path,
                                           f"\"paragraphs\" of article {title!r}")):
      where = f"{path}: paragraph {j} of article {title!r}"
      try:
        paragraph = _checked(paragraph, dict, path, f"paragraph {j} of article {title!r}")
        qas = _checked(paragraph["qas"], list, path,
                       f"\"qas\" of paragraph {j} of article {title!r}")
        doc_tokens, char_to_word_offset = _whitespace_split(paragraph["context"])
        for qa in qas:
          qa = _checked(qa, dict, path, f"a question of paragraph {j} of article {title!r}")
          where = f"{path}: question {qa.get('id', '?')!r}"
          if not doc_tokens:
            raise ValueError(f"{where}: the context is empty.")
          num_questions += 1
          example = _example(where, qa, doc_tokens, char_to_word_offset, is_training,
                             version_2_with_negative)
          if example is not None:
            examples.append(example)
      except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ValueError(f"{where}: missing or malformed field ({type(e).__name__}: {e}).") \
            from None
  if not num_questions:
    raise ValueError(f"{path}: no questions.")
  if len(examples) < num_questions:
    logging.warning("%s: skipped %d of %d training questions whose answer text is not at its "
                    "answer_start, as the original does.", path, num_questions - len(examples),
                    num_questions)
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


def _example(where, qa, doc_tokens, char_to_word_offset, is_training, version_2_with_negative):
  """One SquadExample, or None for a training answer not found in its context."""
  start = end = answer_text = None
  impossible = False
  if not isinstance(qa["question"], str):
    raise ValueError(f"{where}: its question is {type(qa['question']).__name__}, not text.")
  if is_training:
    if version_2_with_negative:
      impossible = qa["is_impossible"]
    if not isinstance(qa["answers"], list):
      raise ValueError(f"{where}: answers is {type(qa['answers']).__name__}, not a list.")
    if len(qa["answers"]) != 1 and not impossible:
      hint = "" if version_2_with_negative else " (unanswerable questions need SQuAD 2.0 mode)"
      raise ValueError(f"{where} has {len(qa['answers'])} answers; training needs exactly "
                       f"one{hint}.")
    if impossible:
      start, end, answer_text = -1, -1, ""
    else:
      answer = qa["answers"][0]
      answer_text = answer["text"]
      offset = answer["answer_start"]
      if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"{where}: answer_start {offset!r} is not a character position.")
      if offset + max(len(answer_text), 1) > len(char_to_word_offset):
        raise ValueError(f"{where}: answer_start {offset} and its {len(answer_text)}-character "
                         f"text run past the context ({len(char_to_word_offset)} characters).")
      start = char_to_word_offset[offset]
      end = char_to_word_offset[offset + len(answer_text) - 1]
      actual = " ".join(doc_tokens[start:end + 1])
      cleaned = " ".join(tokenization.whitespace_tokenize(answer_text))
      if actual.find(cleaned) == -1:
        logging.warning("%s: could not find answer: '%s' vs. '%s'", where, actual, cleaned)
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
    doc_spans = windows.doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    owner = windows.max_context_windows(doc_spans, len(all_doc_tokens))
    for span_index, (span_start, span_length) in enumerate(doc_spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      token_to_orig_map, token_is_max_context = {}, {}
      for i in range(span_length):
        split_index = span_start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_index]
        token_is_max_context[len(tokens)] = bool(owner[split_index] == span_index)
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
