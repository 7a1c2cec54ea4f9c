"""The feature-based tagger's word features: computed once per file by the frozen encoder,
kept in a local scratch file, read back batch by batch.

A file's features take words x width x 4 bytes (float32): 1.25 GB for
CoNLL-2003's training words with MiniLM's last four layers, 2.5 GB with
BERT-Base's. They go to a memory-mapped .npy file, so the operating system
keeps in memory only what it has room for; each file's features replace the
previous file's.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from data import path_checks, tagging_inputs


def check_local_input(feature_based, on_tpu, tpu_address):
  """Raises ValueError when a feature-based run's features could not be read where the
  input runs: a remote TPU's input pipeline runs on the TPU's host, which cannot read this
  machine's scratch."""
  if feature_based and on_tpu and (tpu_address or "local") != "local":
    raise ValueError("--feature_based reads its features in this process, which a remote "
                     "TPU's input pipeline cannot: run it on the TPU VM (no --tpu_name).")


class ScratchFeatures:
  """Local scratch files of word features: the training file's, read while it trains, and
  one for each held-out file in turn (evaluations during training included).

  Checks now that `directory` has room for both at their largest (`width` float32 per
  word: the tagging_inputs.TrainingFile `training` if any, and the longest of the
  held-out files, {split: (documents, tagging_inputs.Words)}), so a run that would run
  out of disk stops before any work.
  """

  def __init__(self, directory, width, held_out, training=None):
    self.train_path = os.path.join(directory, "train_features.npy")
    self.path = os.path.join(directory, "features.npy")
    self.width = width
    held_out_words = max([len(words.words) for _, words in held_out.values()], default=0)
    training_words = len(training.words.words) if training else 0
    path_checks.check_free_space(directory, (held_out_words + training_words) * width * 4,
                                 "The encoder's features (--feature_based)",
                                 ": point TMPDIR at a larger local disk")

  def compute(self, model, arrays, num_words, batch_size, path=None):
    """word_features of `model` over window arrays, into scratch file `path` (default:
    the held-out one, replacing the previous file's); returns them memory-mapped."""
    path = path or self.path
    if os.path.exists(path):  # local scratch, not a user path
      os.remove(path)
    logging.info("Features of %d words x %d (%.2f GB) into %s", num_words, self.width,
                 num_words * self.width * 4 / 1e9, path)
    return word_features(model, arrays, num_words, batch_size, path)

  def train_input(self, model, arrays, training, batch_size, seed, bucket_by_length):
    """(dataset_fn, load_fn) training the BiLSTM: the features of the training file (a
    tagging_inputs.TrainingFile, whose window `arrays` the encoder reads) computed now,
    then shuffled batches of `batch_size` sentences (tagging_inputs.sentence_dataset),
    whose words' features are read from the scratch file batch by batch."""
    self.compute(model, arrays, len(training.words.words), batch_size, self.train_path)
    label_ids = [training.labels.index(t) for t in training.words.tags]
    return (lambda ctx: tagging_inputs.sentence_dataset(
                training.sentence_lengths, label_ids, ctx.get_per_replica_batch_size(batch_size),
                seed, ctx, bucket_by_length),
            lambda batches: tagging_inputs.with_word_features(batches, self.train_path))

  def tag(self, model, arrays, words, documents, batch_size):
    """The label index of every word of a held-out file (int64 [num_words]): its features
    computed (window `arrays` of its tagging_inputs.Words `words`), then the BiLSTM run
    sentence by sentence of its conll `documents`."""
    features = self.compute(model, arrays, len(words.words), batch_size)
    return tag_sentences(model, features, tagging_inputs.sentence_lengths(documents),
                         batch_size)


def word_features(model, arrays, num_words, batch_size, path=None):
  """Every word's features from its max-context window: float32 [num_words, F].

  A prediction pass of the frozen encoder over window_arrays' `arrays` in
  batches of `batch_size`; from each batch only the word_positions' first
  pieces are kept, so the windows' outputs are never all held at once.
  path: a local .npy file to hold the features, returned memory-mapped
  read-only; the operating system then keeps in memory only the rows in use,
  so the features may exceed the machine's memory. None: a numpy array.
  """
  from data import progress
  encode = tf.function(model.encode, reduce_retracing=True)
  shape = (num_words, model.feature_width)
  if path is None:
    out = np.zeros(shape, np.float32)
  else:
    # `path` is local scratch (cli.app.scratch_dir): a memory map needs a local file.
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    if hasattr(os, "posix_fallocate"):  # a full disk: an OSError now, not a crash mid-write
      with open(path, "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
  total = len(arrays["input_ids"])
  windows = int(arrays["input_mask"].any(axis=1).sum())  # the empty padding windows come last
  report = progress.Progress("features", windows)
  for start in range(0, total, batch_size):
    report.update(min(start, windows), windows=min(start, windows))
    rows = slice(start, start + batch_size)
    positions = arrays["word_positions"][rows]
    if not (positions >= 0).any():
      continue
    length = int(arrays["input_mask"][rows].sum(axis=1).max())  # padding cut
    x = encode({k: tf.constant(arrays[k][rows, :length])
                for k in ("input_ids", "input_mask", "segment_ids")})  # [b, length, F]
    r, c = np.nonzero(positions[:, :length] >= 0)
    out[positions[r, c]] = tf.gather_nd(x, np.stack([r, c], axis=1)).numpy()
  report.update(windows, force=True, windows=windows)
  if path is None:
    return out
  out.flush()
  del out
  return np.load(path, mmap_mode="r")


def tag_sentences(model, features, lengths, batch_size):
  """The label index of every word: tag_words over sentences of `lengths` words, whose
  features are consecutive rows of float32 `features` [num_words, F]; int64 [num_words]."""
  tag = tf.function(lambda x, mask: tf.argmax(model.tag_words(x, mask)["logits"], axis=-1),
                    reduce_retracing=True)
  lengths = np.asarray(lengths)
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
  out = np.full(len(features), -1, np.int64)
  order = np.argsort(-lengths, kind="stable")  # similar lengths share a batch: less padding
  for first in range(0, len(order), batch_size):
    chosen = order[first:first + batch_size]
    width = max(int(lengths[chosen].max()), 1)
    mask = np.arange(width)[None, :] < lengths[chosen][:, None]  # [b, W]
    index = np.where(mask, starts[chosen][:, None] + np.arange(width)[None, :], 0)
    predicted = tag(tf.constant(features[index]), tf.constant(mask)).numpy()
    out[index[mask]] = predicted[mask]
  return out
