"""data/tfrecords.py's encoder against protobuf's own tf.train.Example serialization."""

import numpy as np
import pytest
import tensorflow as tf

from data import tfrecords


def test_encoded_examples_parse_to_what_protobuf_builds():
  rng = np.random.default_rng(0)
  features = {
      "input_ids": rng.integers(0, 1 << 40, (5, 7)),
      "label_ids": np.array([0, 1, -1, 127, 128]),  # one value per record, a negative one
      "no_values": np.zeros((5, 0), np.int64),
      "weights": rng.standard_normal((5, 3)).astype(np.float32),
  }
  encoder = tfrecords.ExampleEncoder(["input_ids", "label_ids", "no_values"], ["weights"])
  records = encoder.encode(features)
  assert len(records) == 5
  for i, record in enumerate(records):
    want = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(
            value=features["input_ids"][i])),
        "label_ids": tf.train.Feature(int64_list=tf.train.Int64List(
            value=[features["label_ids"][i]])),
        "no_values": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
        "weights": tf.train.Feature(float_list=tf.train.FloatList(value=features["weights"][i])),
    }))
    assert tf.train.Example.FromString(record) == want


def test_record_writers_leave_nothing_when_a_file_cannot_be_opened_or_finished(tmp_path, monkeypatch):
  records = np.frombuffer(b"abcdef", np.uint8), np.array([0, 3, 6])
  with pytest.raises(FileNotFoundError):  # the second file's folder does not exist
    tfrecords.RecordWriters([str(tmp_path / "a.tfrecord"), str(tmp_path / "no" / "b.tfrecord")])
  assert list(tmp_path.iterdir()) == []
  writers = tfrecords.RecordWriters([str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")])
  writers.write_batch(*records)
  def fail():
    raise OSError("upload failed")
  monkeypatch.setattr(writers.streams[1], "close", fail)
  with pytest.raises(OSError, match="upload failed"):
    writers.close()
  assert list(tmp_path.iterdir()) == []  # neither file published, no temporary left
  with tfrecords.RecordWriters([str(tmp_path / "a.tfrecord")]) as writers:
    writers.write_batch(*records)
  assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "a.tfrecord"))] == [b"abc", b"def"]


def test_masked_crc_is_the_one_tensorflow_writes(tmp_path):
  """masked_crc32c of a record's length and of its data: the two CRCs TFRecordWriter frames
  it with (little-endian uint32 after each)."""
  path = str(tmp_path / "r.tfrecord")
  payloads = [b"", b"x", bytes(range(256)) * 3]
  with tf.io.TFRecordWriter(path) as writer:
    for payload in payloads:
      writer.write(payload)
  raw, pos = open(path, "rb").read(), 0
  for payload in payloads:
    header, n = raw[pos:pos + 8], len(payload)
    assert tfrecords.masked_crc32c(header) == int.from_bytes(raw[pos + 8:pos + 12], "little")
    data_crc = raw[pos + 12 + n:pos + 16 + n]
    assert tfrecords.masked_crc32c(payload) == int.from_bytes(data_crc, "little")
    pos += 16 + n
  assert pos == len(raw)
