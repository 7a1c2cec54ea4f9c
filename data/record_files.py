"""TFRecord files known to be whole before they are read to their end.

TensorFlow's TFRecord reader stops without an error when a file ends inside a
record's 12-byte header (8 bytes of length, 4 of its CRC): a copy interrupted
there reads as a shorter file (measured: 114 records cut 3 bytes past record
57 read as 57 records). A file that ends inside a record's data is its
DataLossError "truncated record at N", met only when the reading gets there.
A file cut exactly between two records cannot be told from a shorter file by
anyone: the format holds no record count.

Uncompressed files are checked on the host before reading, at no cost to the
input pipeline: the last bytes of a whole file are a whole record, whose
header gives the length that ends it exactly at the file's end (`file_ends`).
GZIP files cannot be checked from their end (TensorFlow's reader also stops
silently when one is cut, wherever the cut falls in its records), so `read`
counts the uncompressed bytes of each file's records in the tf.data graph and,
at the file's end, compares them with the size its gzip trailer holds; a
mismatch stops the reading with an error `cut_short` turns into a message.
All of it is tf.data graph work there (no py_function): it runs wherever the
input pipeline runs, on TPU hosts and under every tf.distribute strategy.
"""

import concurrent.futures
import re

import numpy as np
import tensorflow as tf

from data import files, tfrecords

# A record's bytes besides its data: 8 of length, 4 of the length's CRC, 4 of the data's CRC.
FRAMING = 16
# Bytes read from the end of an uncompressed file to find its last record, in turn (BERT's
# records are a few KB); a file whose last record is longer is read whole by TensorFlow.
TAILS = (1 << 16, 1 << 20)
# GZIP: records counted at once. tf.data runs a scan's function at about 20-50 us a call
# on this machine's CPU (whatever the function does): once per chunk, not per record.
CHUNK = 1024
# Files checked at once (each is a network round trip or two on gs://).
THREADS = 16
_TAG = "TFRecord end check"  # in the error the graph raises, recognized by cut_short


def file_ends(names, compression=""):
  """Checks the files' ends on the host; returns what `read` needs of each file.

  Uncompressed: ValueError naming the first file (in order) that does not
  end with a whole record, and the byte where its records break; returns the
  sizes. GZIP: returns the last 4 bytes of each file, which in a whole gzip
  file are the uncompressed size mod 2**32 (ISIZE) of its last gzip stream;
  so a file of several joined gzip streams fails the check in `read`.
  """
  if not names:
    return []
  with concurrent.futures.ThreadPoolExecutor(min(THREADS, len(names))) as pool:
    return list(pool.map(lambda path: file_end(path, compression), names))


def file_end(path, compression=""):
  """One file's entry of `file_ends` (its check included)."""
  if compression:
    tail = files.read_tail(path, 4)
    return int.from_bytes(tail, "little") if len(tail) == 4 else -1
  size = files.size(path)
  for tail in TAILS:
    if not size or _ends_with_record(files.read_tail(path, tail)):
      return size
    if tail >= size:
      break
  _raise_at_break(path, size)
  return size


def _ends_with_record(tail):
  """Whether bytes `tail` end with a whole TFRecord: some header in them holds a length
  that ends its record exactly at the end, and that length's CRC. (Bytes of record data
  pass for both with odds of about 2**-32 times those of holding that one length.)"""
  data = np.frombuffer(tail, np.uint8)
  if len(data) < FRAMING:
    return False
  # The little-endian uint64 at every offset o that leaves room for a header and CRC.
  words = np.lib.stride_tricks.sliding_window_view(data[:len(data) - 8], 8)
  lengths = np.ascontiguousarray(words).view("<u8")[:, 0]
  reach = len(data) - FRAMING - np.arange(len(lengths), dtype=np.uint64)
  for o in np.flatnonzero(lengths == reach):
    if tfrecords.masked_crc32c(tail[o:o + 8]) == int.from_bytes(tail[o + 8:o + 12], "little"):
      return True
  return False


def _raise_at_break(path, size):
  """Reads the file with TensorFlow to find where its records break; raises there (returns
  when they fill it: a last record longer than the TAILS)."""
  consumed = 0
  try:
    for chunk in tf.data.TFRecordDataset(path).batch(4096):
      consumed += int(tf.reduce_sum(tf.strings.length(chunk))) + FRAMING * len(chunk)
  except tf.errors.DataLossError as e:
    raise ValueError(data_loss_message(e, path)) from None
  if consumed != size:
    raise ValueError(_header_cut(path, consumed, size))


def _header_cut(path, consumed, size):
  if consumed < size:
    return (f"{path} is cut short: it ends {size - consumed} byte(s) into the header of the "
            f"record at byte {consumed} (an interrupted copy?).")
  return f"{path} has {size} bytes but its records took {consumed}: it changed while read."


def read(path, end, compression=""):
  """The records of one file (scalar tf.string): TensorFlow's reader, and for GZIP a check
  at the file's end that its records fill the size its trailer holds.

  Args:
    path: the file, a tf.string scalar (or str).
    end: its entry of `file_ends`, a tf.int64 scalar (or int); uncompressed
      files were checked there.
  """
  records = tf.data.TFRecordDataset(path, compression)
  if not compression:
    return records
  # An empty chunk marks the file's end: batch() never makes one otherwise.
  chunks = records.batch(CHUNK).concatenate(
      tf.data.Dataset.from_tensors(tf.constant([], tf.string)))
  end = tf.cast(end, tf.int64)

  @tf.autograph.experimental.do_not_convert
  def count(consumed, chunk):
    consumed += tf.reduce_sum(tf.cast(tf.strings.length(chunk), tf.int64) + FRAMING)
    # The trailer holds the size mod 2**32 (both sides are nonnegative: % is exact).
    whole = tf.logical_or(tf.size(chunk) > 0, tf.equal(consumed % (1 << 32), end))
    check = tf.debugging.Assert(whole, [_TAG, path, consumed, end], summarize=1)
    with tf.control_dependencies([check]):
      return tf.identity(consumed), tf.identity(chunk)

  return chunks.scan(tf.constant(0, tf.int64), count).unbatch()


def read_files(names, compression=""):
  """The records of files `names` in order, their ends checked (see `file_ends`, `read`)."""
  ends = tf.constant(file_ends(names, compression), tf.int64)
  if not compression:  # checked: TensorFlow's reader as it is
    return tf.data.TFRecordDataset(names)
  return tf.data.Dataset.from_tensor_slices((names, ends)).flat_map(
      tf.autograph.experimental.do_not_convert(lambda path, end: read(path, end, compression)))


def cut_short(error):
  """The message for a tf.errors.OpError raised by `read`'s check of a GZIP file, or None."""
  found = re.search(rf"assertion failed: \[{_TAG}\] \[(.*)\] \[(\d+)\] \[(-?\d+)\]",
                    error.message or "")
  if not found:
    return None
  path, consumed, end = found.group(1), int(found.group(2)), int(found.group(3))
  return (f"{path}: its records end after {consumed} bytes of uncompressed data but its gzip "
          f"trailer says {end} (the size mod 2**32): the file is cut short (an interrupted "
          "copy?), or it joins several gzip streams (recompress it as one).")


def data_loss_message(error, path, compression=""):
  """The message for TensorFlow's DataLossError met reading file `path`."""
  found = re.search(r"truncated record at (\d+)", error.message or "")
  if not found:
    return f"{path}: corrupt TFRecord data ({op_detail(error)})."
  where = "of its uncompressed data " if compression else ""
  return (f"{path} is cut short inside the record at byte {found.group(1)} {where}"
          "(an interrupted copy?).")


def op_detail(error):
  """A TensorFlow error's own words, without the graph function, op and traceback (a graph
  function's error starts "Graph execution error:" and the trace before its words)."""
  lines = [line for line in error.message.splitlines() if line.strip() and not (
      line.startswith(("Graph execution error", "Detected at node", "  ")))]
  return re.sub(r"\{\{.*?\}\}\s*|\s*\[\[.*|\s*\[Op:.*", "", (lines or [""])[0]).strip()

