"""Writing tf.train.Example records fast, round-robin across TFRecord files, all or nothing.

`ExampleEncoder` serializes whole batches of fixed-name features with a
numba-compiled protobuf encoder: the bytes a tf.train.Example with those
features serializes to (packed int64 / float lists), parsed by any protobuf
reader, about ten times faster than building protos in Python.
`RecordWriters` frames them in the TFRecord format (length, masked CRC-32C,
data, masked CRC-32C), optionally GZIP-compressed, without TensorFlow
(files are opened through data/files.py, which loads it only for URLs).
"""

import gzip

import numba
import numpy as np

from data import files

_VARINT, _FIXED32 = 0, 1


@numba.njit(cache=True)
def _varint_size(v):
  if v < 0:
    return 10  # negative int64: ten bytes of two's complement
  n = 1
  while v >= 128:
    v >>= 7
    n += 1
  return n


@numba.njit(cache=True)
def _put_varint(buf, pos, v):
  u = np.uint64(v)
  while u >= np.uint64(128):
    buf[pos] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
    u >>= np.uint64(7)
    pos += 1
  buf[pos] = np.uint8(u)
  return pos + 1


@numba.njit(cache=True)
def _field_sizes(payload, key_length):
  """Byte sizes of a feature's value list, Feature message and map entry."""
  value_list = 1 + _varint_size(payload) + payload if payload else 0
  feature = 1 + _varint_size(value_list) + value_list
  entry = 1 + _varint_size(key_length) + key_length + 1 + _varint_size(feature) + feature
  return value_list, feature, entry


@numba.njit(cache=True)
def _encode(values, starts, kinds, keys, key_starts):
  """Serializes N examples of F features held side by side in int64 values [N, C]:
  feature f is columns starts[f]:starts[f + 1] (fixed32 bits for floats), named by
  the bytes keys[key_starts[f]:key_starts[f + 1]]. Flat arrays, not lists of
  arrays: one compiled signature, cached on disk, for any set of features.

  Returns the concatenated records and their offsets [N + 1].
  """
  n_records, n_features = values.shape[0], len(kinds)
  payload = np.zeros((n_records, n_features), np.int64)
  bodies = np.zeros(n_records, np.int64)
  sizes = np.zeros(n_records, np.int64)
  for r in range(n_records):  # sizes first: protobuf prefixes every message by its length
    for f in range(n_features):
      if kinds[f] == _FIXED32:
        p = 4 * (starts[f + 1] - starts[f])
      else:
        p = 0
        for v in values[r, starts[f]:starts[f + 1]]:
          p += _varint_size(v)
      payload[r, f] = p
      entry = _field_sizes(p, key_starts[f + 1] - key_starts[f])[2]
      bodies[r] += 1 + _varint_size(entry) + entry
    sizes[r] = 1 + _varint_size(bodies[r]) + bodies[r]
  offsets = np.zeros(n_records + 1, np.int64)
  offsets[1:] = np.cumsum(sizes)
  buf = np.empty(offsets[-1], np.uint8)
  for r in range(n_records):
    buf[offsets[r]] = 0x0A  # Example.features
    pos = _put_varint(buf, offsets[r] + 1, bodies[r])
    for f in range(n_features):
      p, key = payload[r, f], keys[key_starts[f]:key_starts[f + 1]]
      value_list, feature, entry = _field_sizes(p, len(key))
      buf[pos] = 0x0A  # Features.feature map entry
      pos = _put_varint(buf, pos + 1, entry)
      buf[pos] = 0x0A  # its key
      pos = _put_varint(buf, pos + 1, len(key))
      buf[pos:pos + len(key)] = key
      pos += len(key)
      buf[pos] = 0x12  # its value, a Feature
      pos = _put_varint(buf, pos + 1, feature)
      buf[pos] = 0x12 if kinds[f] == _FIXED32 else 0x1A  # float_list or int64_list
      pos = _put_varint(buf, pos + 1, value_list)
      if p:
        buf[pos] = 0x0A  # the packed values
        pos = _put_varint(buf, pos + 1, p)
        for v in values[r, starts[f]:starts[f + 1]]:
          if kinds[f] == _FIXED32:
            for b in range(4):
              buf[pos] = np.uint8((v >> (8 * b)) & 0xFF)
              pos += 1
          else:
            pos = _put_varint(buf, pos, v)
  return buf, offsets


class ExampleEncoder:
  """Serializes batches of named features into tf.train.Example bytes.

  Args:
    int_features: names of int64 features, in record order.
    float_features: names of float features.
  """

  def __init__(self, int_features, float_features=()):
    self.names = list(int_features) + list(float_features)
    self.kinds = np.array([_VARINT] * len(int_features) + [_FIXED32] * len(float_features))
    keys = [n.encode() for n in self.names]
    self.keys = np.frombuffer(b"".join(keys), np.uint8)
    self.key_starts = np.cumsum([0] + [len(k) for k in keys]).astype(np.int64)

  def encode_batch(self, features):
    """dict name -> array [N, L_name] -> (uint8 buffer, offsets [N + 1]) of N examples."""
    columns = []
    for name, kind in zip(self.names, self.kinds):
      array = np.asarray(features[name])
      if kind == _FIXED32:
        array = array.astype("<f4").view("<u4")
      columns.append(array.astype(np.int64)[:, None] if array.ndim == 1 else
                     array.astype(np.int64))
    starts = np.cumsum([0] + [c.shape[1] for c in columns]).astype(np.int64)
    return _encode(np.concatenate(columns, axis=1), starts, self.kinds, self.keys,
                   self.key_starts)

  def encode(self, features):
    """dict name -> array [N, L_name] -> list of N serialized examples (bytes)."""
    buf, offsets = self.encode_batch(features)
    data, offsets = buf.tobytes(), offsets.tolist()
    return [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def _crc32c_table():
  table = np.zeros(256, np.uint32)
  for i in range(256):
    crc = i
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    table[i] = crc
  return table


_CRC_TABLE = _crc32c_table()


@numba.njit(cache=True)
def _masked_crc32c(data, table):
  crc = np.uint32(0xFFFFFFFF)
  for b in data:
    crc = table[(crc ^ b) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
  crc ^= np.uint32(0xFFFFFFFF)
  return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def masked_crc32c(data):
  """The TFRecord format's masked CRC-32C of `data` (bytes)."""
  return int(_masked_crc32c(np.frombuffer(data, np.uint8), _CRC_TABLE)) & 0xFFFFFFFF


@numba.njit(cache=True)
def _frame(buf, offsets, table):
  """TFRecord framing of each record: (framed buffer, framed offsets [N + 1])."""
  n = len(offsets) - 1
  framed_offsets = np.zeros(n + 1, np.int64)
  for i in range(n):
    framed_offsets[i + 1] = framed_offsets[i] + offsets[i + 1] - offsets[i] + 16
  out = np.empty(framed_offsets[-1], np.uint8)
  for i in range(n):
    pos, length = framed_offsets[i], offsets[i + 1] - offsets[i]
    for b in range(8):
      out[pos + b] = np.uint8((length >> (8 * b)) & 0xFF)
    header_crc = _masked_crc32c(out[pos:pos + 8], table)
    data_crc = _masked_crc32c(buf[offsets[i]:offsets[i + 1]], table)
    for b in range(4):
      out[pos + 8 + b] = np.uint8((header_crc >> np.uint32(8 * b)) & np.uint32(0xFF))
      out[pos + 12 + length + b] = np.uint8((data_crc >> np.uint32(8 * b)) & np.uint32(0xFF))
    out[pos + 12:pos + 12 + length] = buf[offsets[i]:offsets[i + 1]]
  return out, framed_offsets


def frame(buf, offsets):
  """TFRecord framing of serialized records: (framed uint8 buffer, framed offsets [N + 1])."""
  return _frame(buf, np.asarray(offsets, np.int64), _CRC_TABLE)


def frame_records(records):
  """`frame` for a list of serialized records (bytes)."""
  offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.int64)
  return frame(np.frombuffer(b"".join(records), np.uint8), offsets)


class RecordWriters:
  """Writes records round-robin across TFRecord files, each under a temporary name.

  `close()` renames every file into place; `abort()` removes them. As a
  context manager an exception aborts, so no output looks complete.

  Args:
    paths: output files; record i goes to paths[i % len(paths)].
    compression: "" or "GZIP".
  """

  def __init__(self, paths, compression=""):
    self.paths = list(paths)
    self.temporary = [files.temporary_name(p) for p in self.paths]
    self.raw = []
    try:
      for tmp in self.temporary:
        self.raw.append(files.open_file(tmp, "wb"))
    except BaseException:  # one cannot be opened: the ones already made go
      self.streams = self.raw
      self.abort()
      raise
    # No file name (it would be the temporary one) and no time in the gzip
    # header, as TensorFlow's own GZIP writer: a seed gives the same bytes.
    self.streams = ([gzip.GzipFile(filename="", fileobj=f, mode="wb", compresslevel=6, mtime=0)
                     for f in self.raw] if compression == "GZIP" else self.raw)
    self.next = 0
    self.count = 0

  def write_batch(self, buf, offsets):
    """Writes serialized records given as one uint8 buffer and their offsets [N + 1]."""
    self.write_framed(*frame(buf, offsets))

  def write_framed(self, framed, offsets):
    """Writes records already in TFRecord framing (see `frame`)."""
    n, k = len(offsets) - 1, len(self.streams)
    if k == 1:
      self.streams[0].write(framed.tobytes())
    else:
      data, offsets = framed.tobytes(), offsets.tolist()
      for j in range(k):
        stream = self.streams[(self.next + j) % k]
        stream.write(b"".join(data[offsets[i]:offsets[i + 1]] for i in range(j, n, k)))
    self.next = (self.next + n) % k
    self.count += n

  def close(self):
    """Finishes every file, then renames each into place; if one cannot be finished
    (a failed upload), all are removed."""
    try:
      for stream, raw in zip(self.streams, self.raw):
        stream.close()
        raw.close()
    except BaseException:
      self.abort()
      raise
    for tmp, path in zip(self.temporary, self.paths):
      files.rename(tmp, path)

  def abort(self):
    for stream, raw, tmp in zip(self.streams, self.raw, self.temporary):
      try:
        stream.close()
        raw.close()
      except OSError:
        pass  # the file goes anyway
      finally:
        if files.exists(tmp):
          files.remove(tmp)

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is None:
      self.close()
    else:
      self.abort()


def write_arrays(path, arrays, compression=""):
  """Writes dict name -> array [N, ...] as N tf.train.Example records.

  Integer arrays become int64 features, floating ones float features; each
  record holds its row flattened (array_spec reads it back in its shape).
  """
  columns = {k: np.asarray(v) for k, v in arrays.items()}
  columns = {k: v.reshape(len(v), -1) for k, v in columns.items()}
  floats = [k for k, v in columns.items() if np.issubdtype(v.dtype, np.floating)]
  encoder = ExampleEncoder([k for k in columns if k not in floats], floats)
  total = len(next(iter(columns.values())))
  with RecordWriters([path], compression) as writers:
    for first in range(0, total, 4096):
      writers.write_batch(*encoder.encode_batch({k: v[first:first + 4096]
                                                 for k, v in columns.items()}))


def array_spec(arrays):
  """The parsing spec of the records write_arrays writes from `arrays`: each feature in
  its row's shape ([] for one value per record), int64 or float32."""
  import tensorflow as tf
  return {k: tf.io.FixedLenFeature(np.shape(v)[1:],
                                   tf.float32 if np.issubdtype(np.asarray(v).dtype, np.floating)
                                   else tf.int64)
          for k, v in arrays.items()}
