"""tf.data input pipelines: TFRecord files to batched feature dicts.

Each pipeline is built per input pipeline of a tf.distribute strategy
(`distribute_datasets_from_function`): files are sharded across pipelines
(workers) when there are enough of them, records otherwise, and batches have
the per-replica size.
"""

import tensorflow as tf

from data import files


def check_record_lengths(path, spec, flag_hint, compression=""):
  """Raises ValueError when the first record of `path` does not fit `spec`'s lengths.

  Args:
    spec: dict name -> tf.io.FixedLenFeature, the expected layout.
    flag_hint: dict feature name -> the flag that sets its length, for the message.
  """
  try:
    first = next(iter(tf.data.TFRecordDataset(path, compression).take(1)), None)
  except tf.errors.OpError as e:
    raise ValueError(f"Cannot read records from {path}: {e.message}") from None
  if first is None:
    raise ValueError(f"{path} holds no records.")
  example = tf.train.Example.FromString(first.numpy())
  for name, feature in spec.items():
    if name not in example.features.feature:
      raise ValueError(f"{path}: records have no feature {name!r}; expected "
                       f"{', '.join(sorted(spec))}.")
    entry = example.features.feature[name]
    kind = entry.WhichOneof("kind")
    length = len(getattr(entry, kind).value) if kind else 0
    want = feature.shape[0] if feature.shape else 1
    if length != want:
      flag = flag_hint.get(name, "")
      raise ValueError(f"{path}: {name} has {length} values per record but {flag or 'the spec'}"
                       f" expects {want}; regenerate the data or pass the matching flag.")


def _parse(spec):
  def parse(records):
    parsed = tf.io.parse_example(records, spec)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}
  return parse


def record_dataset(file_patterns, spec, batch_size, is_training, seed=None,
                   input_context=None, compression="", shuffle_buffer=1000, cycle_length=4):
  """Batched, parsed records from TFRecord files.

  Training: files shuffled, repeated, read interleaved, records shuffled,
  batched with drop_remainder. Otherwise: files and records in order, one
  pass, the last partial batch kept. int64 features become int32.

  Args:
    file_patterns: comma-separated paths or globs.
    spec: dict name -> tf.io.FixedLenFeature.
    batch_size: per-replica batch size.
    seed: makes shuffling (and so the whole order) reproducible.
    input_context: a tf.distribute.InputContext, or None for a single pipeline.
  """
  names = files.expand_file_patterns(file_patterns, "--input_file")
  dataset = tf.data.Dataset.from_tensor_slices(names)
  shards = input_context.num_input_pipelines if input_context else 1
  index = input_context.input_pipeline_id if input_context else 0
  shard_files = shards > 1 and len(names) >= shards
  if shard_files:
    dataset = dataset.shard(shards, index)
  if is_training:
    dataset = dataset.shuffle(len(names), seed=seed).repeat()
    dataset = dataset.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression),
        cycle_length=min(cycle_length, len(names)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)
  else:
    dataset = dataset.flat_map(lambda f: tf.data.TFRecordDataset(f, compression))
  if shards > 1 and not shard_files:
    dataset = dataset.shard(shards, index)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed)
  dataset = dataset.batch(batch_size, drop_remainder=is_training)
  return dataset.map(_parse(spec), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
      tf.data.AUTOTUNE)


def global_batches(file_patterns, spec, global_batch_size, input_context=None, compression=""):
  """Records in file order as global batches, each input pipeline keeping its rows.

  The record count must be a multiple of global_batch_size (pad the data).
  Pipeline i of n keeps rows [i * k, (i + 1) * k) of every global batch
  (k = global / n) and splits them into per-replica batches, so gathering the
  replicas' outputs in order restores the file order.
  """
  names = files.expand_file_patterns(file_patterns, "--input_file")
  dataset = tf.data.TFRecordDataset(names, compression).batch(global_batch_size,
                                                               drop_remainder=True)
  dataset = dataset.map(_parse(spec))
  pipelines = input_context.num_input_pipelines if input_context else 1
  index = input_context.input_pipeline_id if input_context else 0
  replicas = input_context.num_replicas_in_sync if input_context else 1
  per_pipeline, per_replica = global_batch_size // pipelines, global_batch_size // replicas
  if pipelines > 1:
    dataset = dataset.map(lambda b: {k: v[index * per_pipeline:(index + 1) * per_pipeline]
                                     for k, v in b.items()})
  return dataset.unbatch().batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
