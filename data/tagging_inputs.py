"""The tagger's inputs: windows of WordPiece tokens over CoNLL sentences, and batches of
sentences for the feature-based tagger.

Windows are cut as the original cut SQuAD documents: `max_seq_length - 2`
pieces, each window starting `doc_stride` pieces after the previous one,
over a stream of sentences. A stream is a document (when `-DOCSTART-` lines
mark them), the whole file (when they do not: the files keep sentences in
text order, so neighbours are real context except at the few unmarked
document boundaries), or a single sentence when document context is off. A
word's label sits on its first piece; every word is predicted from the one
window where its first piece has the most context.
"""

import dataclasses
import os

import numpy as np
from absl import logging

from data import conll, windows


@dataclasses.dataclass
class Words:
  """All words of a file in reading order, with their labels and where they came from."""
  words: list
  tags: list  # IOB2 or None
  origins: list  # (path, line number)
  streams: list  # [first word, end) per stream


def flatten(documents, path, document_context):
  """The words of `documents` and the streams (documents, the file, or sentences) they form."""
  words, tags, origins, streams = [], [], [], []
  use_documents = conll.has_document_markers(documents)
  for doc in documents:
    for sentence in doc.sentences:
      if not document_context or not streams or (use_documents and sentence is doc.sentences[0]):
        streams.append([len(words), len(words)])
      words += sentence.words
      tags += sentence.tags or [None] * len(sentence.words)
      origins += [(path, n) for n in sentence.line_numbers]
      streams[-1][1] = len(words)
  return Words(words, tags, origins, [tuple(s) for s in streams])


def check_window_length(max_seq_length):
  """ValueError naming --max_seq_length when a window has no room for a word's piece
  between [CLS] and [SEP]."""
  if max_seq_length < 3:
    raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for words.")


def word_piece_ids(tokenizer, words, origins):
  """WordPiece ids of each word; a word with no piece (say, only control characters) gets
  [UNK] so it keeps a place, and is reported."""
  unk = tokenizer.vocab["[UNK]"]
  ids, empty = [], []
  for word, origin in zip(words, origins):
    pieces = tokenizer.tokenize_to_ids(word)
    if not pieces:
      empty.append(origin)
      pieces = [unk]
    ids.append(pieces)
  if empty:
    logging.warning("%d word(s) have no WordPiece and are read as [UNK]; the first at %s:%d.",
                    len(empty), *empty[0])
  return ids


def window_arrays(tokenizer, flat, labels, max_seq_length, doc_stride, training, pad_to=1):
  """Model inputs of every window, and which word each max-context first piece predicts.

  Returns (arrays, the number of real windows): arrays is a dict of int32
  [N, max_seq_length] arrays: input_ids, input_mask,
  segment_ids, label_ids, word_positions (the word index at first pieces
  predicted from this window, else -1), and float32 label_weights (1 at first
  pieces: all of them when training, the max-context ones otherwise). N is
  rounded up to a multiple of pad_to with empty windows.
  """
  label_index = {label: i for i, label in enumerate(labels)}
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  pieces = word_piece_ids(tokenizer, flat.words, flat.origins)
  rows = []
  for first_word, end_word in flat.streams:
    ids, word_of, first = [], [], []
    for w in range(first_word, end_word):
      ids += pieces[w]
      word_of += [w] * len(pieces[w])
      first += [True] + [False] * (len(pieces[w]) - 1)
    spans = windows.doc_spans(len(ids), max_seq_length - 2, doc_stride)
    owner = windows.max_context_windows(spans, len(ids))
    for index, (start, length) in enumerate(spans):
      rows.append((ids[start:start + length], word_of[start:start + length],
                   first[start:start + length], owner[start:start + length] == index))
  n = -(-len(rows) // pad_to) * pad_to
  shape = (n, max_seq_length)
  out = {k: np.zeros(shape, np.int32) for k in ("input_ids", "input_mask", "segment_ids",
                                                "label_ids")}
  out["label_weights"] = np.zeros(shape, np.float32)
  out["word_positions"] = np.full(shape, -1, np.int32)
  for i, (ids, word_of, first, mine) in enumerate(rows):
    length = len(ids) + 2
    out["input_ids"][i, :length] = [cls_id] + ids + [sep_id]
    out["input_mask"][i, :length] = 1
    for j, (w, is_first, is_mine) in enumerate(zip(word_of, first, mine), 1):
      if not is_first:
        continue
      out["label_ids"][i, j] = label_index.get(flat.tags[w], 0)
      if training or is_mine:
        out["label_weights"][i, j] = 1.0
      if is_mine:
        out["word_positions"][i, j] = w
  placed = np.zeros(len(flat.words), np.int64)
  np.add.at(placed, out["word_positions"][out["word_positions"] >= 0], 1)
  if (placed != 1).any():  # cannot happen with the max-context rule; never drop words silently
    w = int(np.flatnonzero(placed != 1)[0])
    raise ValueError(f"{flat.origins[w][0]}:{flat.origins[w][1]}: the word {flat.words[w]!r} "
                     f"is predicted from {placed[w]} windows instead of one.")
  logging.info("%d words in %d stream(s) -> %d windows of %d tokens (stride %d).",
               len(flat.words), len(flat.streams), len(rows), max_seq_length, doc_stride)
  return out, len(rows)


def record_arrays(arrays):
  """window_arrays' model inputs, as written to records (word_positions stays in memory)."""
  return {k: v for k, v in arrays.items() if k != "word_positions"}


def sentence_lengths(documents):
  """Words per sentence, in file order (flatten's word order)."""
  return [len(s.words) for doc in documents for s in doc.sentences]


def sentence_dataset(lengths, label_ids, batch_size, seed, context=None, bucket_by_length=False,
                     pool_batches=64):
  """Training batches of `batch_size` sentences, reshuffled every epoch (seeded), repeating.

  Words are rows of a cached feature array (tagging.word_features), sentence
  after sentence. Each batch: `word_index` int32 [B, W] (a word's row; 0 at
  padding), `label_ids` int32 [B, W] and `label_weights` float32 [B, W] (1 at
  real words, which come first in a row), W the longest sentence of the batch.
  context: a tf.distribute.InputContext, whose pipeline reads its own share.
  bucket_by_length: each run of `pool_batches` batches' worth of shuffled
  sentences is sorted by length, cut into batches, and those batches are
  shuffled: sentences of similar length share a batch, so the BiLSTM's
  steps (as many as the batch's longest sentence) are fewer.
  """
  import tensorflow as tf

  from data import pipeline
  lengths = np.asarray(lengths, np.int32)
  starts = tf.constant(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32))
  labels, lengths = tf.constant(np.asarray(label_ids, np.int32)), tf.constant(lengths)
  sentences = tf.data.Dataset.range(len(lengths))
  if context is not None and context.num_input_pipelines > 1:
    sentences = sentences.shard(context.num_input_pipelines, context.input_pipeline_id)
  sentences = sentences.shuffle(len(lengths), seed=seed, reshuffle_each_iteration=True)

  @pipeline.no_autograph
  def batch(ids):
    count = tf.gather(lengths, ids)  # [B]
    mask = tf.range(tf.reduce_max(count))[None, :] < count[:, None]  # [B, W]
    index = tf.where(mask, tf.gather(starts, ids)[:, None] + tf.range(tf.shape(mask)[1]), 0)
    return {"word_index": index, "label_ids": tf.where(mask, tf.gather(labels, index), 0),
            "label_weights": tf.cast(mask, tf.float32)}
  sentences = sentences.repeat()
  if bucket_by_length:
    @pipeline.no_autograph
    def sorted_batches(pool, ids):  # [pool_batches * batch_size] -> batches of similar lengths
      ids = tf.gather(ids, tf.argsort(tf.gather(lengths, ids), stable=True))
      # The batches' order: a stateless draw per pool (a shuffle op here would keep
      # the iterator out of checkpoints).
      key = tf.random.stateless_uniform([pool_batches], [seed or 0, tf.cast(pool, tf.int32)])
      return tf.data.Dataset.from_tensor_slices(
          tf.gather(tf.reshape(ids, [pool_batches, batch_size]), tf.argsort(key)))
    batches = sentences.batch(pool_batches * batch_size, drop_remainder=True).enumerate(
        ).flat_map(sorted_batches)
  else:
    batches = sentences.batch(batch_size, drop_remainder=True)
  return batches.map(batch).prefetch(2)


def with_word_features(dataset, features_file):
  """sentence_dataset's batches plus `word_features` float32 [B, W, F]: the word_index rows
  of the .npy file `features_file` (tagging.word_features), a local file.

  The rows are read on the host (a numpy function, stateless, so iterators still
  go into checkpoints) from a memory map opened per batch: the file's pages are
  the system's to keep or drop, so the features need not fit in memory, and
  nothing holds the file once the dataset is done.
  """
  import tensorflow as tf

  from data import pipeline
  width = np.load(features_file, mmap_mode="r").shape[1]  # local scratch: memory-mapped

  def read(index):
    return np.asarray(np.load(features_file, mmap_mode="r")[index], np.float32)

  @pipeline.no_autograph
  def add(batch):
    rows = tf.numpy_function(read, [batch["word_index"]], tf.float32, stateful=False)
    return {**batch, "word_features": tf.ensure_shape(rows, [None, None, width])}
  return dataset.map(add)



def word_predictions(logits, word_positions, num_words):
  """The label index of every word, from [N, T, C] logits and [N, S] word_positions."""
  positions = word_positions[:len(logits), :logits.shape[1]]
  rows, cols = np.nonzero(positions >= 0)
  predicted = np.full(num_words, -1, np.int64)
  predicted[positions[rows, cols]] = logits[rows, cols].argmax(-1)
  if (predicted < 0).any():
    raise ValueError(f"{int((predicted < 0).sum())} word(s) received no prediction.")
  return predicted


def read_split(data_dir, split, document_context):
  """(documents, flat words) of a split's file in data_dir; ValueError when the file is
  missing or holds no words."""
  path = conll.find_split_file(data_dir, split)
  if path is None:
    raise ValueError(f"--data_dir={data_dir} has no {split} file "
                     f"({' or '.join(conll.SPLIT_FILES[split])}).")
  documents = conll.read_conll(path)
  flat = flatten(documents, path, document_context)
  if not flat.words:
    raise ValueError(f"{path} holds no words to tag.")
  return documents, flat


@dataclasses.dataclass
class TrainingFile:
  """The training file: its conll documents, the tag set they define, their words in
  reading order (flatten) and the words in each sentence."""
  path: str
  documents: list
  labels: list
  words: Words
  sentence_lengths: list


def read_training(data_dir, document_context):
  """data_dir's training file as a TrainingFile; ValueError naming the directory when it
  has none."""
  path, documents, labels = conll.read_training_file(data_dir)
  return TrainingFile(path, documents, labels, flatten(documents, path, document_context),
                      sentence_lengths(documents))


def read_training_and_labels(data_dir, document_context, do_train, output_dir):
  """(TrainingFile or None, the tag set): with do_train, data_dir's training file and its
  tags; otherwise no training file and the tags of output_dir's label_list.txt, written
  when the model was trained."""
  if do_train:
    train = read_training(data_dir, document_context)
    return train, train.labels
  return None, conll.read_labels(os.path.join(output_dir, "label_list.txt"))


def read_held_out(data_dir, do_eval, do_predict, document_context, labels):
  """{split: (documents, flat words)} of the dev file (do_eval) and the test file
  (do_predict) in data_dir, read and checked against the model's `labels`
  (check_held_out_tags)."""
  held_out = {split: read_split(data_dir, split, document_context)
              for wanted, split in ((do_eval, "dev"), (do_predict, "test")) if wanted}
  check_held_out_tags(held_out, labels)
  return held_out


def check_held_out_tags(held_out, labels):
  """Before training: a dev file ({split: (documents, flat)}) must have tags to score; tags
  the model cannot predict (types absent from training) are warned about, since they can
  only count as missed."""
  for split, (_, flat) in held_out.items():
    path = flat.origins[0][0]
    if split == "dev" and any(t is None for t in flat.tags):
      raise ValueError(f"{path} has no tag column to score; --do_eval needs the dev file's "
                       "gold tags (to tag a file without scoring it, use it as the test "
                       "file with --do_predict).")
    unknown = [i for i, t in enumerate(flat.tags) if t is not None and t not in labels]
    if unknown:
      first = unknown[0]
      logging.warning("%s:%d: tag %s is not one the model was trained on (%s); its %d "
                      "word(s) can only be scored as missed.", *flat.origins[first],
                      flat.tags[first], " ".join(labels), len(unknown))
