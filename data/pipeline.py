"""tf.data input pipelines: TFRecord files to batched feature dicts.

Each pipeline is built per input pipeline of a tf.distribute strategy
(`distribute_datasets_from_function`): files are sharded across pipelines
(workers) when there are enough of them, records otherwise, and batches have
the per-replica size.
"""

import tensorflow as tf

from data import path_checks, record_checks, record_files

# The functions these pipelines hand tf.data have no Python control flow on
# tensors, so AutoGraph has nothing to convert in them; its source rewriting
# doubled the time a process took to build its first prediction pipeline (0.11 s
# instead of 0.23-0.26 s, benchmarks/investigations/update_and_startup.py). Each is marked
# do_not_convert: traced as written.
no_autograph = tf.autograph.experimental.do_not_convert


def sequence_features(spec, length_feature="input_mask"):
  """Names of the features in `spec` whose last axis runs along the tokens.

  They are the ones whose last dimension equals that of `length_feature`
  (input_ids, segment_ids, per-token labels; [C, S] for multiple choice).
  """
  length = spec[length_feature].shape[-1]
  return sorted(name for name, feature in spec.items()
                if feature.shape and feature.shape[-1] == length)


def trimmer(spec, multiple, length_feature="input_mask"):
  """A map function cutting a batch's token axis to its longest sequence.

  The kept length is the batch's longest `length_feature` sum rounded up to
  a multiple of `multiple` (so compiled functions meet at most S / multiple
  shapes), and never more than the records' length. Only padding is cut: the
  mask is 0 there, attention ignores it and no loss counts it. Returns None
  when `multiple` is 0 (batches keep the records' fixed length).
  """
  if not multiple:
    return None
  if multiple < 0:
    raise ValueError(f"The batch length multiple must be 0 (off) or positive, not {multiple}.")
  names = sequence_features(spec, length_feature)

  @no_autograph
  def trim(batch):
    mask = batch[length_feature]
    longest = tf.reduce_max(tf.reduce_sum(mask, axis=-1))
    length = tf.minimum(tf.shape(mask)[-1], (longest + multiple - 1) // multiple * multiple)
    length = tf.maximum(length, 1)
    return {k: v[..., :length] if k in names else v for k, v in batch.items()}
  return trim


# Bucket edges of --bucket_by_length, independent of the trimming multiple:
# 16-wide buckets fill quickly and leave little padding once trimmed.
BUCKET_WIDTH = 16


def _parse(spec):
  @no_autograph
  def parse(records):
    parsed = tf.io.parse_example(records, spec)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}
  return parse


# Files one pipeline reads at once: the original's num_cpu_threads. A constant, not
# the host's core count, so that a seeded order is the same on any machine; reading
# is not what limits a step (benchmarks/speed/pretraining_input.py).
CYCLE_LENGTH = 4


def pipeline_shard(names, input_context=None):
  """This pipeline's files, and the (count, index) record shard it keeps of each.

  With at least as many files as input pipelines, pipeline i of n reads files
  i, i + n, ... whole (record shard None); with fewer, it reads every file and
  keeps records i, i + n, ... of each. Either way the pipelines read disjoint
  records that together cover every file, in any file order.
  """
  pipelines = input_context.num_input_pipelines if input_context else 1
  index = input_context.input_pipeline_id if input_context else 0
  if pipelines == 1:
    return list(names), None
  if len(names) >= pipelines:
    return list(names[index::pipelines]), None
  return list(names), (pipelines, index)


def record_dataset(file_patterns, spec, batch_size, is_training, seed=None,
                   input_context=None, compression="", shuffle_buffer=100,
                   cycle_length=CYCLE_LENGTH, length_multiple=0, bucket_by_length=False,
                   drop_remainder=None):
  """Batched, parsed records from TFRecord files.

  Training: each epoch reads this pipeline's files (see `pipeline_shard`) in a
  fresh shuffled order, `cycle_length` at a time interleaved, then shuffles
  records and batches with drop_remainder; it repeats forever. With a seed the
  order is reproducible; without one, files and batches come in whichever
  order is ready first (the original's sloppy interleave), for throughput.
  Otherwise: files and records in order, one pass, the last partial batch
  kept. int64 features become int32. tf.data's auto-sharding is off: the
  dataset is already this pipeline's share. A file cut short is an error
  naming it (see record_files): uncompressed files are checked here, GZIP
  files as they are read (wrap the reading in `record_checks.naming_bad_files`).

  Args:
    file_patterns: comma-separated paths or globs.
    spec: dict name -> tf.io.FixedLenFeature.
    batch_size: per-replica batch size.
    seed: makes shuffling (and so the whole order) reproducible.
    input_context: a tf.distribute.InputContext, or None for a single pipeline.
    cycle_length: training: files read at once (at most this pipeline's count).
    shuffle_buffer: training: records shuffled after the interleave (100, the original's
      run_pretraining.py and run_classifier.py buffer).
    length_multiple: when positive, each batch's token axis is cut to its
      longest sequence rounded up to this multiple (see `trimmer`); the
      examples and their order do not change.
    bucket_by_length: training only: batches are drawn from buckets of
      similar length (BUCKET_WIDTH positions wide), which changes which
      examples share a batch.
    drop_remainder: whether a last partial batch is dropped (default: when
      training); True gives every batch one static shape, as XLA and TPUs need.
  """
  if drop_remainder is None:
    drop_remainder = is_training
  # Files without records are left out before the sharding: a pipeline given only such
  # files would wait forever for its first training batch.
  every = path_checks.expand_file_patterns(file_patterns, "records")
  kept = [(name, end) for name, end in zip(every, record_files.file_ends(every, compression))
          if not record_checks.holds_nothing(name, end, compression)]
  names, record_shard = pipeline_shard([name for name, _ in kept], input_context)
  end_of = dict(kept)
  ends = tf.constant([end_of[name] for name in names], tf.int64)

  @no_autograph
  def read(path, end):
    records = record_files.read(path, end, compression)
    return records.shard(*record_shard) if record_shard else records

  dataset = tf.data.Dataset.from_tensor_slices((names, ends))
  if is_training:
    # Shuffle, then repeat: every epoch reads each file once, in a new order.
    dataset = dataset.shuffle(len(names), seed=seed).repeat()
    dataset = dataset.interleave(
        read, cycle_length=min(cycle_length, len(names)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=seed is not None)
    dataset = dataset.shuffle(shuffle_buffer, seed=seed)
  else:
    dataset = dataset.flat_map(read)
  if bucket_by_length and is_training:
    dataset = _bucketed(dataset, spec, batch_size, BUCKET_WIDTH)
  else:
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(_parse(spec), num_parallel_calls=tf.data.AUTOTUNE)
  trim = trimmer(spec, length_multiple)
  if trim is not None:
    dataset = dataset.map(trim, num_parallel_calls=tf.data.AUTOTUNE)
  options = tf.data.Options()
  # Not re-sharded by tf.distribute (experimental_distribute_dataset, Keras fit):
  # pipeline_shard has already given this pipeline its share.
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  if is_training and seed is None:
    options.deterministic = False
  return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


def _numbered_and_sorted(start, batch, length_feature="input_mask"):
  """scan step: numbers a window's records from `start` and sorts them by length (stable)."""
  count = tf.shape(batch[length_feature], out_type=tf.int64)[0]
  batch = {**batch, RECORD_INDEX: tf.range(start, start + count)}
  lengths = tf.reduce_sum(batch[length_feature], axis=-1)
  if lengths.shape.rank > 1:  # [C, S] multiple choice: a record's longest choice
    lengths = tf.reduce_max(lengths, axis=list(range(1, lengths.shape.rank)))
  order = tf.argsort(lengths, stable=True)
  return start + count, {k: tf.gather(v, order) for k, v in batch.items()}


def _bucketed(records, spec, batch_size, width, length_feature="input_mask"):
  """Full batches of parsed records grouped by length into buckets `width` wide."""
  full = spec[length_feature].shape[-1]
  parsed = records.batch(256).map(_parse(spec), num_parallel_calls=tf.data.AUTOTUNE).unbatch()
  boundaries = list(range(width + 1, full + 1, width))  # lengths 1..w, w+1..2w, ...
  batches = parsed.bucket_by_sequence_length(
      no_autograph(lambda r: tf.reduce_max(tf.reduce_sum(r[length_feature], axis=-1))), boundaries,
      [batch_size] * (len(boundaries) + 1), drop_remainder=True, no_padding=True)
  # Every batch is full, but the bucketing leaves the batch size unknown in the
  # dataset's spec; stated, compiled steps (XLA, TPUs) see one static shape.
  return batches.map(no_autograph(lambda b: {k: tf.ensure_shape(v, [batch_size] + v.shape[1:])
                                           for k, v in b.items()}))


# The feature global_batches(by_length=True) adds: each row's record number.
RECORD_INDEX = "record_index"


def global_batches(file_patterns, spec, global_batch_size, input_context=None, compression="",
                   length_multiple=0, by_length=False, window=64):
  """Records in file order as global batches, each input pipeline keeping its rows.

  The record count must be a multiple of global_batch_size (pad the data).
  Pipeline i of n keeps rows [i * k, (i + 1) * k) of every global batch
  (k = global / n) and splits them into per-replica batches, so gathering the
  replicas' outputs in order restores the file order. With `length_multiple`,
  each global batch is trimmed as a whole (see `trimmer`), so all replicas of
  a step see one shape. With `by_length` too, the records of every `window`
  global batches are sorted by length before batching, so a batch holds
  similar lengths and little padding; each row then carries its record number
  as RECORD_INDEX, by which Trainer.predict puts its outputs back in file order.
  """
  names = path_checks.expand_file_patterns(file_patterns, "records")
  dataset = record_files.read_files(names, compression)
  parse, trim = _parse(spec), trimmer(spec, length_multiple) or no_autograph(lambda batch: batch)
  # Few traced functions: building them is much of a short prediction pass's set-up.
  if by_length and length_multiple:
    dataset = dataset.batch(global_batch_size * window)
    dataset = dataset.scan(tf.constant(0, tf.int64), no_autograph(
        lambda start, records: _numbered_and_sorted(start, parse(records))))
    dataset = dataset.unbatch().batch(global_batch_size, drop_remainder=True).map(trim)
  else:
    dataset = dataset.batch(global_batch_size, drop_remainder=True)
    dataset = dataset.map(no_autograph(lambda records: trim(parse(records))))
  pipelines = input_context.num_input_pipelines if input_context else 1
  index = input_context.input_pipeline_id if input_context else 0
  replicas = input_context.num_replicas_in_sync if input_context else 1
  per_pipeline, per_replica = global_batch_size // pipelines, global_batch_size // replicas
  if pipelines > 1:
    dataset = dataset.map(no_autograph(lambda b: {
        k: v[index * per_pipeline:(index + 1) * per_pipeline] for k, v in b.items()}))
  if replicas > 1:
    dataset = dataset.unbatch().batch(per_replica, drop_remainder=True)
  dataset = dataset.prefetch(2)
  # Measured: with tf.data's autotuner on, about one fresh pipeline in three fed
  # small prediction batches at half speed for its whole pass (MiniLM, batches of
  # 8, 2 CPU cores: 100 instead of 180-230 sequences/s); this light pipeline does
  # not need it. Training pipelines showed no such effect and keep it.
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)
