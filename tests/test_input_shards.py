"""record_dataset over many shards: files or records split across input pipelines,
patterns expanded, file order shuffled per epoch, no re-sharding by tf.distribute."""

import numpy as np
import pytest
import tensorflow as tf

from data import pipeline, record_checks, tfrecords

SPEC = {"x": tf.io.FixedLenFeature([2], tf.int64)}  # (file number, record number)


def _shards(directory, counts, stem="shard"):
  """Files stem-00000.tfrecord, ... where file f holds counts[f] records x = (f, r)."""
  paths = []
  for f, count in enumerate(counts):
    path = str(directory / f"{stem}-{f:05d}.tfrecord")
    tfrecords.write_arrays(path, {"x": np.stack([np.full(count, f), np.arange(count)], 1)})
    paths.append(path)
  return paths


def _context(pipelines, index):
  return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                    num_replicas_in_sync=pipelines)


def _pairs(dataset, batches=None):
  rows = [b["x"].numpy() for b in (dataset if batches is None else dataset.take(batches))]
  return [tuple(r) for r in np.concatenate(rows).tolist()]


def test_two_pipelines_over_four_files_read_disjoint_files_covering_all(tmp_path):
  _shards(tmp_path, [6, 6, 6, 6])
  pattern = str(tmp_path / "shard-*.tfrecord")
  everything = {(f, r) for f in range(4) for r in range(6)}
  seen = []
  for index in range(2):
    # Evaluation: one pass over this pipeline's files, in order.
    got = _pairs(pipeline.record_dataset(pattern, SPEC, 4, False, input_context=_context(2, index)))
    assert got == [(f, r) for f in (index, index + 2) for r in range(6)]
    # Training, seeded, no record shuffle: the first 12 records are one epoch of this
    # pipeline's two files.
    train = pipeline.record_dataset(pattern, SPEC, 3, True, seed=5, shuffle_buffer=1,
                                    input_context=_context(2, index))
    epoch = _pairs(train, 4)
    assert sorted(epoch) == got
    seen.append(set(epoch))
    # Unseeded (sloppy interleave): still only this pipeline's files, and all of them.
    sloppy = _pairs(pipeline.record_dataset(pattern, SPEC, 3, True,
                                            input_context=_context(2, index)), 40)
    assert set(sloppy) == set(got)
  assert not seen[0] & seen[1] and seen[0] | seen[1] == everything


@pytest.mark.parametrize("pipelines,counts", [(2, [7]), (4, [5, 9, 2])])
def test_fewer_files_than_pipelines_split_every_file_by_record(tmp_path, pipelines, counts):
  pattern = ",".join(_shards(tmp_path, counts))
  everything = {(f, r) for f, count in enumerate(counts) for r in range(count)}
  parts = []
  for index in range(pipelines):
    got = _pairs(pipeline.record_dataset(pattern, SPEC, 1, False,
                                         input_context=_context(pipelines, index)))
    # Records index, index + n, ... of each file, files in order.
    assert got == [(f, r) for f, count in enumerate(counts) for r in range(index, count, pipelines)]
    # Training reads the same share (order aside), whatever order the files come in.
    train = pipeline.record_dataset(pattern, SPEC, 1, True, seed=3,
                                    input_context=_context(pipelines, index))
    assert set(_pairs(train, 40 * len(got))) == set(got)
    parts.append(set(got))
  assert sum(len(p) for p in parts) == len(everything) and set().union(*parts) == everything


def test_globs_and_comma_lists_expand_in_order(tmp_path):
  _shards(tmp_path, [2, 3], stem="a")
  _shards(tmp_path, [1], stem="b")
  pattern = f"{tmp_path}/b-*.tfrecord, {tmp_path}/a-*.tfrecord"
  got = _pairs(pipeline.record_dataset(pattern, SPEC, 10, False))
  # b first (pattern order), then a's files sorted by name; file numbers restart per stem.
  assert got == [(0, 0), (0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
  with pytest.raises(ValueError, match="no file matches"):
    pipeline.record_dataset(f"{tmp_path}/a-*.tfrecord,{tmp_path}/c-*", SPEC, 1, True)


def _file_order(pattern, seed, epochs=6):
  """Files in the order a one-file-at-a-time training pipeline reads them."""
  dataset = pipeline.record_dataset(pattern, SPEC, 3, True, seed=seed, shuffle_buffer=1,
                                    cycle_length=1)
  order = []
  for batch in dataset.take(4 * epochs):  # a batch is one whole file (3 records, in order)
    x = batch["x"].numpy()
    assert len(set(x[:, 0])) == 1 and x[:, 1].tolist() == [0, 1, 2]
    order.append(int(x[0, 0]))
  return [order[e * 4:(e + 1) * 4] for e in range(epochs)]


def test_file_order_is_shuffled_every_epoch_and_seeded(tmp_path):
  pattern = str(tmp_path / "shard-*.tfrecord")
  _shards(tmp_path, [3, 3, 3, 3])
  epochs = _file_order(pattern, seed=11)
  assert all(sorted(e) == [0, 1, 2, 3] for e in epochs)  # each epoch reads every file once
  assert len({tuple(e) for e in epochs}) > 1  # in a new order
  assert epochs == _file_order(pattern, seed=11)  # the same for the same seed
  assert epochs != _file_order(pattern, seed=12)


def test_no_resharding_by_tf_distribute_and_sloppy_order_only_unseeded(tmp_path):
  from tensorflow.python.distribute import input_ops  # what experimental_distribute_dataset runs
  pattern = ",".join(_shards(tmp_path, [4, 4]))
  ours = pipeline.record_dataset(pattern, SPEC, 1, False, input_context=_context(2, 1))
  policy = ours.options().experimental_distribute.auto_shard_policy
  assert policy == tf.data.experimental.AutoShardPolicy.OFF
  assert _pairs(input_ops.auto_shard_dataset(ours, 2, 1)) == [(1, r) for r in range(4)]
  # The same auto-shard halves a dataset left at the default policy: the check can fail.
  plain = tf.data.TFRecordDataset(pattern.split(",")).batch(1).map(
      lambda r: tf.io.parse_example(r, SPEC))
  assert len(_pairs(input_ops.auto_shard_dataset(plain, 2, 1))) == 4
  assert pipeline.record_dataset(pattern, SPEC, 1, True).options().deterministic is False
  assert pipeline.record_dataset(pattern, SPEC, 1, True, seed=1).options().deterministic is not False


def test_checks_of_many_files_name_the_first_bad_one(tmp_path):
  paths = _shards(tmp_path, [3] * 24)  # x = (file, record): file f holds values up to f
  tfrecords.write_arrays(paths[13], {"x": np.zeros((3, 3), np.int64)})  # another length
  limits = {"x": (9, "the limit")}  # files 9 and up hold a value of 9 or more
  pattern = str(tmp_path / "shard-*.tfrecord")
  with pytest.raises(ValueError, match=f"^{paths[9]}: x holds 9, outside 0..8 .the limit.;"):
    record_checks.check_records(pattern, SPEC, id_limits=limits)
  with pytest.raises(ValueError, match=f"^{paths[13]}: x has 3 values per record but the spec"):
    record_checks.check_records(pattern, SPEC)
  assert record_checks.check_records(",".join(paths[:9]), SPEC, id_limits=limits) == paths[:9]
