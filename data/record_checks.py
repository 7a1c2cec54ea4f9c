"""Checks of TFRecord files before any work: each file's layout, its first ids, that it is
whole, and enough records for a batch; every problem named by its file (a ValueError),
rather than met deep inside a training step.
"""

import concurrent.futures
import contextlib

import numpy as np
import tensorflow as tf
from absl import logging

from data import files, path_checks, record_files


# Files check_records reads at once.
CHECK_THREADS = 16


def check_records(file_patterns, spec, flag_hint=None, compression="", id_limits=None,
                  source="records", count=64):
  """Raises ValueError naming the file whose first records do not fit `spec`.

  Every file is checked, so a second file written with another length or
  other keys is named before training starts rather than failing mid-run. A
  file of few records is read to its end, which is checked too (see
  record_files).

  Args:
    file_patterns: comma-separated paths or globs.
    spec: dict name -> tf.io.FixedLenFeature, the expected layout.
    flag_hint: dict feature name -> what sets its length (e.g. a flag), for the message.
    id_limits: dict feature name -> (limit, what sets it): the first `count`
      records of each file must hold values in [0, limit).
    source: what the files are, for the message when a pattern matches nothing.
  Returns:
    the file names.
  """
  names = path_checks.expand_file_patterns(file_patterns, source)

  def check(path):
    """False for a file without records (a generator's shard that got no instance)."""
    end = _check_first_record(path, spec, flag_hint or {}, compression)
    if end is _EMPTY:
      return False
    if id_limits:
      _check_ids(path, end, spec, id_limits, compression, count)
    return True

  # Several files at once: a pod's input can be thousands of shards in a bucket,
  # where each open waits on the network. The first bad file in order is named.
  with concurrent.futures.ThreadPoolExecutor(min(CHECK_THREADS, len(names))) as pool:
    checks = [pool.submit(check, path) for path in names]
    try:
      empty = [path for path, done in zip(names, checks) if not done.result()]
    except BaseException:
      for pending in checks:
        pending.cancel()
      raise
  if len(empty) == len(names):
    raise ValueError(f"{names[0]} holds no records." if len(names) == 1 else
                     f"None of the {len(names)} files of {file_patterns} holds records.")
  if empty:  # as the original, which reads them as no examples
    logging.warning("%d of the %d files of %s hold no records (%s%s); read as no examples.",
                    len(empty), len(names), file_patterns, empty[0],
                    ", ..." if len(empty) > 1 else "")
  return names


_op_detail = record_files.op_detail


_EMPTY = object()  # _check_first_record's answer for a file without records


def holds_nothing(path, end, compression):
  """Whether a file (its record_files.file_end `end`) is a whole file of no records: 0 bytes,
  or one gzip stream of nothing (its trailer's size 0, and a few bytes: a size of 0 mod 2**32
  in a large file is data)."""
  return end == 0 and (not compression or files.size(path) <= 64)
_LIST_KINDS = {tf.int64: "int64_list", tf.float32: "float_list", tf.string: "bytes_list"}


def _check_first_record(path, spec, flag_hint, compression):
  """Returns the file's entry of record_files.file_ends (_EMPTY: the file holds no record)."""
  try:
    first = next(iter(tf.data.TFRecordDataset(path, compression).take(1)), None)
  except tf.errors.OpError as e:
    what = "GZIP-compressed TFRecords" if compression else "TFRecords"
    guess = ("were they written without compression?" if compression
             else "is it another kind of file, or GZIP-compressed?")
    raise ValueError(f"Cannot read {path} as {what} ({_op_detail(e)}); {guess}") from None
  end = record_files.file_end(path, compression)  # an uncompressed file cut short: named here
  if first is None:
    if not holds_nothing(path, end, compression):  # GZIP: its data ends before a record
      raise ValueError(f"{path} holds no whole record though its gzip trailer says {end} "
                       "bytes: the file is cut short (an interrupted copy?).")
    return _EMPTY
  problem = _layout_problem(first.numpy(), spec, flag_hint)
  if problem:
    raise ValueError(f"{path}: {problem}")
  return end


def _layout_problem(record, spec, flag_hint):
  """What keeps serialized `record` from `spec`'s layout, as a message; None if it fits."""
  try:
    example = tf.train.Example.FromString(record)
  except Exception:  # protobuf's DecodeError: not tf.train.Example records
    return "a record is not a tf.train.Example."
  for name, feature in spec.items():
    if name not in example.features.feature:
      return f"records have no feature {name!r}; expected {', '.join(sorted(spec))}."
    entry = example.features.feature[name]
    kind = entry.WhichOneof("kind")
    want_kind = _LIST_KINDS.get(feature.dtype)
    if kind and want_kind and kind != want_kind:
      return (f"{name} is stored as {kind} but read as {feature.dtype.name} ({want_kind}); "
              "regenerate the data.")
    length = len(getattr(entry, kind).value) if kind else 0
    want = feature.shape[0] if feature.shape else 1
    if length != want:
      return (f"{name} has {length} values per record but "
              f"{flag_hint.get(name) or 'the spec'} expects {want}; regenerate the data or "
              "pass the matching flag.")
  return None


def _check_ids(path, end, spec, id_limits, compression, count):
  records = record_files.read(path, end, compression)  # GZIP: checked if read to its end
  try:
    batch = tf.io.parse_example(next(iter(records.take(count).batch(count))),
                                {k: spec[k] for k in id_limits})
  except tf.errors.OpError as e:
    _raise_if_cut_short(e, path, compression)
    raise ValueError(f"Cannot read records from {path}: {_op_detail(e)}.") from None
  for name, (limit, what) in id_limits.items():
    values = batch[name].numpy()
    if values.size and (values.min() < 0 or values.max() >= limit):
      bad = values.max() if values.max() >= limit else values.min()
      raise ValueError(f"{path}: {name} holds {bad}, outside 0..{limit - 1} ({what}); "
                       "were the records made with another vocab or model?")


def count_records(file_patterns, compression="", limit=None):
  """Records in the files, counted up to `limit` (reading no further).

  ValueError naming the file when one read to its end is cut short.
  """
  names = path_checks.expand_file_patterns(file_patterns, "records")
  dataset = record_files.read_files(names, compression)
  if limit is not None:
    dataset = dataset.take(limit)
  # Counted per batch: tf.data's reduce costs tens of microseconds an element.
  with naming_bad_files(file_patterns, compression):
    return int(dataset.batch(4096).reduce(
        tf.constant(0, tf.int64), lambda count, batch: count + tf.size(batch, tf.int64)))


def check_whole_batch(file_patterns, compression, batch_size):
  """Raises ValueError when the files hold fewer records than one batch: evaluation
  compiled for one shape (XLA, TPUs) runs whole batches only, so none would count."""
  found = count_records(file_patterns, compression, batch_size)
  if found < batch_size:
    raise ValueError(f"{file_patterns} holds {found} record(s), fewer than "
                     f"--eval_batch_size={batch_size}: with --jit_compile or on a TPU "
                     "evaluation runs whole batches only, so none would be evaluated.")


@contextlib.contextmanager
def naming_bad_files(file_patterns, compression="", checks=None):
  """Turns a corrupt or cut-short TFRecord file met while reading into one ValueError.

  A file whose end check failed (see record_files) is named by the check. For
  TensorFlow's own DataLossError, which names no file, the files are scanned
  for those that cannot be read to their end (only on this error path). With
  `checks` (spec, flag_hint, id_limits: check_records' arguments), so is a record
  past those check_records reads that does not parse or holds an id out of range
  (TensorFlow's InvalidArgumentError, raised deep in a step).
  """
  try:
    yield
  except tf.errors.OpError as e:
    message = record_files.cut_short(e)
    if message:
      raise ValueError(message) from None
    if checks and isinstance(e, tf.errors.InvalidArgumentError):
      names = path_checks.expand_file_patterns(file_patterns, "records")
      found = _first_bad_record(names, compression, *checks)
      if found:
        raise ValueError(found) from None
      raise
    if not isinstance(e, tf.errors.DataLossError):
      raise
    names = path_checks.expand_file_patterns(file_patterns, "records")
    bad = [path for path in names if not _readable(path, compression)] or names
    if len(bad) == 1:
      raise ValueError(record_files.data_loss_message(e, bad[0], compression)) from None
    raise ValueError(f"{', '.join(bad)}: corrupt or truncated TFRecord data "
                     f"({_op_detail(e)}).") from None


def _raise_if_cut_short(error, path, compression):
  """A damaged file met while checking it, as the message naming it."""
  message = record_files.cut_short(error)
  if message or isinstance(error, tf.errors.DataLossError):
    raise ValueError(message or record_files.data_loss_message(error, path, compression)
                     ) from None


def _readable(path, compression):
  try:
    for _ in tf.data.TFRecordDataset(path, compression).batch(4096):
      pass
  except tf.errors.DataLossError:
    return False
  return True


# _first_bad_record reads at most this many bytes of records looking for the bad one.
SCAN_BYTES = 4 << 30


def _first_bad_record(names, compression, spec, flag_hint, id_limits):
  """A message naming the first record of `names` that does not fit `spec` or whose ids
  are out of `id_limits` (check_records' arguments); None if there is none in the files'
  first SCAN_BYTES bytes."""
  logging.info("Looking for the record that failed among %d file(s).", len(names))
  budget = SCAN_BYTES
  for path in names:
    if budget <= 0:
      return None
    budget -= files.size(path)
    index = 0
    for batch in tf.data.TFRecordDataset(path, compression).batch(1024):
      records = batch.numpy()
      try:
        parsed = tf.io.parse_example(batch, spec)
      except tf.errors.InvalidArgumentError:
        for i, record in enumerate(records):
          problem = _layout_problem(record, spec, flag_hint)
          if problem:
            return f"{path}: record {index + i + 1}: {problem}"
        raise
      for name, (limit, what) in (id_limits or {}).items():
        values = parsed[name].numpy()
        bad = np.flatnonzero(((values < 0) | (values >= limit)).any(axis=-1))
        if bad.size:
          row = values[bad[0]]
          value = row[(row < 0) | (row >= limit)][0]
          return (f"{path}: record {index + bad[0] + 1}: {name} holds {value}, outside "
                  f"0..{limit - 1} ({what}); were the records made with another vocab or "
                  "model?")
      index += len(records)
  return None
