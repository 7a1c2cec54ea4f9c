"""data/record_files.py through the pipeline's readers: a TFRecord file cut short is named.

TensorFlow's own reader is the reference for what each cut does without the
check: each test first shows that reading (silently shorter, or an error
naming no file), then what every reader of user records says instead.
"""

import gzip
import re
import zlib

import numpy as np
import pytest
import tensorflow as tf

from data import pipeline, record_checks, record_files

SPEC = {"input_ids": tf.io.FixedLenFeature([4], tf.int64),
        "input_mask": tf.io.FixedLenFeature([4], tf.int64)}
N = 30


def _examples(n=N, seed=0):
  """n serialized tf.train.Examples of varying byte sizes (ids of 1 to 3 varint bytes)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    ids = rng.integers(0, 10 ** rng.integers(1, 6), 4)
    out.append(tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
        "input_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 1, 1, i]))}
    )).SerializeToString())
  return out


def _write(path, examples):
  """Writes the records; returns the byte offsets where records start, and the end."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for example in examples:
      writer.write(example)
  return np.cumsum([0] + [len(e) + 16 for e in examples]).tolist()


def _plain_count(path, compression=""):
  return sum(1 for _ in tf.data.TFRecordDataset(str(path), compression))


def _every_reader_says(path, want, pattern=None):
  """Each reader of user records raises ValueError(want) (a string, or a compiled regex)."""
  pattern = pattern or str(path)
  readers = {
      "count_records": lambda: record_checks.count_records(pattern),
      "check_records": lambda: record_checks.check_records(pattern, SPEC),
      "record_dataset (evaluation)": lambda: list(pipeline.record_dataset(pattern, SPEC, 4, False)),
      "record_dataset (training)": lambda: pipeline.record_dataset(pattern, SPEC, 4, True),
      "global_batches": lambda: pipeline.global_batches(pattern, SPEC, 2)}
  for name, read in readers.items():
    with pytest.raises(ValueError) as error:
      with record_checks.naming_bad_files(pattern):
        read()
    if isinstance(want, str):
      assert str(error.value) == want, name
    else:
      assert want.fullmatch(str(error.value)), (name, str(error.value))


@pytest.mark.parametrize("into", [1, 3, 8, 11])
def test_a_file_cut_inside_a_record_header_is_named_with_the_byte(tmp_path, into):
  whole = tmp_path / "whole.tfrecord"
  starts = _write(whole, _examples())
  cut = tmp_path / "cut.tfrecord"
  cut.write_bytes(whole.read_bytes()[:starts[17] + into])
  assert _plain_count(cut) == 17  # TensorFlow alone: a shorter file, no error
  want = (f"{cut} is cut short: it ends {into} byte(s) into the header of the record at byte "
          f"{starts[17]} (an interrupted copy?).")
  _every_reader_says(cut, want)
  _every_reader_says(cut, want, f"{whole},{cut}")  # the cut file named, not the whole one
  assert record_checks.count_records(str(whole)) == N


def test_a_file_cut_inside_a_record_s_data_is_named_before_reading_it(tmp_path):
  whole = tmp_path / "whole.tfrecord"
  starts = _write(whole, _examples())
  cut = tmp_path / "cut.tfrecord"
  cut.write_bytes(whole.read_bytes()[:starts[17] + 12 + 3])
  with pytest.raises(tf.errors.DataLossError, match=f"truncated record at {starts[17]}"):
    _plain_count(cut)  # TensorFlow alone: an error naming no file, met at that record
  _every_reader_says(cut, f"{cut} is cut short inside the record at byte {starts[17]} "
                          "(an interrupted copy?).")


def test_a_file_cut_between_two_records_cannot_be_told_from_a_shorter_file(tmp_path):
  """Documented limit: the format holds no record count, so this cut reads as 17 records."""
  whole = tmp_path / "whole.tfrecord"
  starts = _write(whole, _examples())
  cut = tmp_path / "cut.tfrecord"
  cut.write_bytes(whole.read_bytes()[:starts[17]])
  assert record_checks.count_records(str(cut)) == 17
  assert record_checks.check_records(str(cut), SPEC) == [str(cut)]
  assert sum(len(b["input_ids"]) for b in pipeline.record_dataset(str(cut), SPEC, 4, False)) == 17


def test_files_that_need_more_than_their_tail_or_hold_no_record(tmp_path, monkeypatch):
  """A last record longer than the bytes read from the end: TensorFlow reads the file to
  decide. An empty file is whole; a file shorter than a header is cut at byte 0."""
  monkeypatch.setattr(record_files, "TAILS", (40,))  # shorter than every record here
  whole = tmp_path / "whole.tfrecord"
  starts = _write(whole, _examples())
  assert record_checks.count_records(str(whole)) == N
  cut = tmp_path / "cut.tfrecord"
  cut.write_bytes(whole.read_bytes()[:starts[-2] + 5])
  assert record_files.file_ends([str(whole)]) == [starts[-1]]
  with pytest.raises(ValueError) as error:
    record_files.file_ends([str(whole), str(cut)])
  assert str(error.value) == (f"{cut} is cut short: it ends 5 byte(s) into the header of the "
                              f"record at byte {starts[-2]} (an interrupted copy?).")
  (tmp_path / "empty.tfrecord").write_bytes(b"")
  assert record_checks.count_records(str(tmp_path / "empty.tfrecord")) == 0
  (tmp_path / "tiny.tfrecord").write_bytes(b"12345")
  with pytest.raises(ValueError, match=r"tiny\.tfrecord is cut short: it ends 5 byte\(s\) into "
                                       r"the header of the record at byte 0 "):
    record_checks.count_records(str(tmp_path / "tiny.tfrecord"))


def _inflated_lengths(data):
  """For each prefix of gzip bytes `data` (1, 2, ... bytes), the bytes zlib inflates from it:
  what a reader gets from a file cut there."""
  inflate, total, lengths = zlib.decompressobj(31), 0, []
  for i in range(len(data)):
    total += len(inflate.decompress(data[i:i + 1]))
    lengths.append(total)
  return lengths


def test_gzip_files_cut_anywhere_are_named(tmp_path):
  examples = _examples(200)
  plain = tmp_path / "plain.tfrecord"
  starts = _write(plain, examples)
  data = gzip.compress(plain.read_bytes())
  whole = tmp_path / "whole.tfrecord.gz"
  whole.write_bytes(data)
  # The checked reader passes a whole file's records through unchanged.
  assert [r.numpy() for r in record_files.read_files([str(whole)], "GZIP")] == examples
  # Cuts whose inflated bytes end 1-11 bytes into a record's header, 1 or more into its
  # data, and inside the file's 8-byte trailer (every record there).
  lengths = _inflated_lengths(data[:-8])
  record = lambda n: max(j for j, s in enumerate(starts) if s <= n)  # noqa: E731
  into_header = next(i + 1 for i, n in enumerate(lengths) if 0 < n - starts[record(n)] < 12)
  into_data = next(i + 1 for i, n in enumerate(lengths) if n - starts[record(n)] > 12)
  for at, plain_reads in ((into_header, record(lengths[into_header - 1])),
                          (into_data, "DataLossError"), (len(data) - 3, len(examples))):
    cut = tmp_path / f"cut{at}.tfrecord.gz"
    cut.write_bytes(data[:at])
    if plain_reads == "DataLossError":
      with pytest.raises(tf.errors.DataLossError):
        _plain_count(cut, "GZIP")
    else:  # TensorFlow alone: the records before the cut, no error
      assert _plain_count(cut, "GZIP") == plain_reads
    want = f"^{re.escape(str(cut))}(:| is) .*cut short"
    with pytest.raises(ValueError, match=want):
      record_checks.count_records(str(cut), "GZIP")
    with pytest.raises(ValueError, match=want):  # the input pipelines: met while reading
      with record_checks.naming_bad_files(str(cut), "GZIP"):
        list(pipeline.record_dataset(str(cut), SPEC, 4, False, compression="GZIP"))


def test_gzip_file_whose_records_do_not_fill_its_trailer_s_size(tmp_path):
  """A record stream cut inside a header, then compressed whole; and two gzip streams
  joined (TensorFlow reads both; the trailer gives the last one's size only)."""
  plain = tmp_path / "plain.tfrecord"
  starts = _write(plain, _examples())
  data = plain.read_bytes()
  cut = tmp_path / "cut.gz"
  cut.write_bytes(gzip.compress(data[:starts[17] + 3]))
  assert _plain_count(cut, "GZIP") == 17
  message = (f"{cut}: its records end after {starts[17]} bytes of uncompressed data but its "
             f"gzip trailer says {starts[17] + 3} (the size mod 2**32): the file is cut short "
             "(an interrupted copy?), or it joins several gzip streams (recompress it as one).")
  for read in (lambda: record_checks.count_records(str(cut), "GZIP"),
               lambda: record_checks.check_records(str(cut), SPEC, compression="GZIP",
                                              id_limits={"input_ids": (10 ** 6, "limit")})):
    with pytest.raises(ValueError) as error:
      read()
    assert str(error.value) == message
  # Met inside a graph function (the training loop): the same line.
  iterator = iter(pipeline.record_dataset(str(cut), SPEC, 4, False, compression="GZIP"))

  @tf.function
  def loop():
    for _ in tf.range(10):
      next(iterator)

  with pytest.raises(ValueError) as error:
    with record_checks.naming_bad_files(str(cut), "GZIP"):
      loop()
  assert str(error.value) == message
  joined = tmp_path / "joined.gz"
  joined.write_bytes(gzip.compress(data[:starts[10]]) + gzip.compress(data[starts[10]:]))
  assert _plain_count(joined, "GZIP") == N
  with pytest.raises(ValueError, match=r"joined\.gz: .* or it joins several gzip streams"):
    record_checks.count_records(str(joined), "GZIP")


def test_files_in_a_bucket_are_checked_alike(tmp_path):
  """ram:// goes through tf.io.gfile as gs:// does: sizes and tails read there."""
  whole = tmp_path / "whole.tfrecord"
  starts = _write(whole, _examples())
  tf.io.gfile.makedirs("ram://record_files")
  for name, data in (("whole", whole.read_bytes()), ("cut", whole.read_bytes()[:starts[9] + 4])):
    with tf.io.gfile.GFile(f"ram://record_files/{name}.tfrecord", "wb") as f:
      f.write(data)
  assert record_checks.count_records("ram://record_files/whole.tfrecord") == N
  with pytest.raises(ValueError) as error:
    record_checks.count_records("ram://record_files/*.tfrecord")
  assert str(error.value) == (
      "ram://record_files/cut.tfrecord is cut short: it ends 4 byte(s) into the header of the "
      f"record at byte {starts[9]} (an interrupted copy?).")
