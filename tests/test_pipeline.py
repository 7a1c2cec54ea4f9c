"""data/pipeline.py: trimmed batches, length buckets and in-order global batches."""

import numpy as np
import pytest
import tensorflow as tf

from data import pipeline, tfrecords
from helpers import assert_close, block_ops

S = 40


def _records(path, lengths, seed=0):
  """Classifier records whose example i has lengths[i] real tokens (ids 1..n), label i."""
  rng = np.random.default_rng(seed)
  n = len(lengths)
  mask = (np.arange(S)[None] < np.asarray(lengths)[:, None]).astype(np.int64)
  arrays = {"input_ids": rng.integers(5, 99, (n, S)) * mask, "input_mask": mask,
            "segment_ids": (np.arange(S)[None] >= 3) * mask, "label_ids": np.arange(n),
            "is_real_example": np.ones(n, np.int64)}
  tfrecords.write_arrays(str(path), arrays)
  return arrays


def test_trimmer_cuts_every_token_axis_to_the_rounded_longest_sequence():
  spec = {"input_ids": tf.io.FixedLenFeature([2, S], tf.int64),
          "input_mask": tf.io.FixedLenFeature([2, S], tf.int64),
          "label_ids": tf.io.FixedLenFeature([S], tf.int64),
          "positions": tf.io.FixedLenFeature([5], tf.int64),
          "label": tf.io.FixedLenFeature([], tf.int64)}
  assert pipeline.sequence_features(spec) == ["input_ids", "input_mask", "label_ids"]
  mask = np.zeros((3, 2, S), np.int32)
  mask[0, 1, :17] = 1  # the longest: 17 tokens, in the second choice
  mask[2, 0, :4] = 1
  batch = {"input_ids": np.arange(3 * 2 * S).reshape(3, 2, S), "input_mask": mask,
           "label_ids": np.arange(3 * S).reshape(3, S), "positions": np.ones((3, 5)),
           "label": np.arange(3)}
  for multiple, want in ((8, 24), (1, 17), (16, 32), (64, S)):
    out = pipeline.trimmer(spec, multiple)({k: tf.constant(v) for k, v in batch.items()})
    assert out["input_ids"].shape == (3, 2, want) and out["label_ids"].shape == (3, want)
    np.testing.assert_array_equal(out["input_ids"], batch["input_ids"][..., :want])
    np.testing.assert_array_equal(out["label_ids"], batch["label_ids"][..., :want])
    np.testing.assert_array_equal(out["positions"], batch["positions"])
  assert pipeline.trimmer(spec, 0) is None
  with pytest.raises(ValueError, match="not -2"):
    pipeline.trimmer(spec, -2)


def test_trimmed_datasets_keep_examples_and_order(tmp_path):
  lengths = [3, 9, 4, 30, 2, 5, 7, 8, 11, 6, 2, 40]
  arrays = _records(tmp_path / "r.tf_record", lengths)
  spec = tfrecords.array_spec(arrays)
  for trimmed, fixed in (
      (pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 4, length_multiple=8),
       pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 4)),
      (pipeline.record_dataset(str(tmp_path / "r.tf_record"), spec, 4, True, seed=7,
                               length_multiple=8).take(6),
       pipeline.record_dataset(str(tmp_path / "r.tf_record"), spec, 4, True, seed=7).take(6))):
    widths = []
    for a, b in zip(trimmed, fixed):
      width = a["input_ids"].shape[1]
      widths.append(width)
      assert width == min(S, -(-int(b["input_mask"].numpy().sum(1).max()) // 8) * 8)
      for name in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(a[name], b[name][:, :width])
        assert not b[name][:, width:].numpy().any()  # only padding was cut
      np.testing.assert_array_equal(a["label_ids"], b["label_ids"])
    assert len(set(widths)) > 1
  # In-order prediction batches: file order, widths from each batch's own longest example.
  widths = [b["input_ids"].shape[1] for b in pipeline.global_batches(
      str(tmp_path / "r.tf_record"), spec, 4, length_multiple=8)]
  assert widths == [32, 8, 40]
  assert arrays["label_ids"].tolist() == list(range(12))


def test_length_sorted_prediction_batches_number_every_record_once(tmp_path):
  lengths = [3, 30, 4, 5, 2, 2, 3, 9, 17, 40, 1, 6, 8, 8, 2, 5]
  spec = tfrecords.array_spec(_records(tmp_path / "r.tf_record", lengths))
  batches = list(pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 4,
                                         length_multiple=1, by_length=True, window=2))
  index = np.concatenate([b[pipeline.RECORD_INDEX].numpy() for b in batches])
  labels = np.concatenate([b["label_ids"].numpy() for b in batches])
  real = [b["input_mask"].numpy().sum(1) for b in batches]
  np.testing.assert_array_equal(index, labels)  # record i is labelled i
  assert sorted(index.tolist()) == list(range(16))
  # Each window of 2 batches (8 records) is sorted by length, stably, and each
  # batch is then cut to its own longest record.
  for window in (index[:8], index[8:]):
    assert sorted(window.tolist()) == list(range(window.min(), window.min() + 8))
    assert [lengths[i] for i in window] == sorted(lengths[i] for i in window)
  assert index[:4].tolist() == [4, 5, 0, 6]  # lengths 2, 2, 3, 3: ties keep file order
  assert [b["input_ids"].shape[1] for b in batches] == [int(r.max()) for r in real]
  assert [b["input_ids"].shape[1] for b in batches] == [3, 30, 6, 40]
  # Without trimming, sorting would gain nothing: file order, no record numbers.
  plain = list(pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 4, by_length=True))
  assert pipeline.RECORD_INDEX not in plain[0]
  assert np.concatenate([b["label_ids"] for b in plain]).tolist() == list(range(16))


def test_predict_restores_record_order_and_traces_once(tmp_path):
  """Sorted prediction gives the unsorted outputs in file order; later passes reuse the step."""
  import keras
  from modeling import classification, optimization, training
  from modeling.config import BertConfig
  lengths = [3, 30, 4, 5, 2, 2, 3, 9, 17, 40, 1, 6, 8, 8, 2, 5]
  spec = tfrecords.array_spec(_records(tmp_path / "r.tf_record", lengths))
  config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=S)
  keras.utils.set_random_seed(0)
  trainer = training.Trainer(
      tf.distribute.get_strategy(), classification.ClassificationTask(config, 3),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 10, 1, names),
      training.TrainConfig(output_dir=str(tmp_path / "out"), num_train_steps=10,
                           global_batch_size=4))
  run = lambda by_length: trainer.predict(lambda ctx: pipeline.global_batches(
      str(tmp_path / "r.tf_record"), spec, 4, ctx, length_multiple=1, by_length=by_length,
      window=2), keep=("label_ids",))
  plain, first, second = run(False), run(True), run(True)
  assert sorted(first) == ["label_ids", "logits"]  # the record numbers are not returned
  assert first["label_ids"].tolist() == list(range(16))
  # float32, batches of other rows and widths: 2 blocks, the pooler and the classifier.
  assert_close(first["logits"], plain["logits"], "float32", 2 * block_ops(config, S) + 2 * 16)
  # Exact: the same traced step on the same batches.
  np.testing.assert_array_equal(second["logits"], first["logits"])
  # One traced step per input layout and kept features, each traced once for all lengths.
  steps = list(trainer.predictor.traced.values())
  assert len(steps) == 2 and [f.experimental_get_tracing_count() for f in steps] == [1, 1]


def test_global_batches_give_every_replica_of_a_step_one_shape(tmp_path):
  lengths = [3, 30, 4, 5, 2, 2, 3, 9]
  spec = tfrecords.array_spec(_records(tmp_path / "r.tf_record", lengths))
  shapes = []
  for index in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index,
                                         num_replicas_in_sync=2)
    shapes.append([(b["input_ids"].shape[1], b["label_ids"].numpy().tolist())
                   for b in pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 4,
                                                    context, length_multiple=8)])
  # Global batch 1 holds the 30-token example (pipeline 0's rows): both pipelines get 32.
  assert shapes == [[(32, [0, 1]), (16, [4, 5])], [(32, [2, 3]), (16, [6, 7])]]


def test_prediction_pipeline_runs_without_the_autotuner(tmp_path):
  # With the autotuner on, some prediction passes ran at half speed from start to end
  # (benchmarks/investigations/predict_passes.py); training pipelines keep it.
  spec = tfrecords.array_spec(_records(tmp_path / "r.tf_record", [3, 4, 5, 6]))
  predict = pipeline.global_batches(str(tmp_path / "r.tf_record"), spec, 2, length_multiple=8)
  train = pipeline.record_dataset(str(tmp_path / "r.tf_record"), spec, 2, True, seed=1)
  assert predict.options().autotune.enabled is False
  assert train.options().autotune.enabled is not False
  assert [b["label_ids"].numpy().tolist() for b in predict] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("multiple", [1, 8])
def test_buckets_group_similar_lengths_and_keep_every_example(tmp_path, multiple):
  rng = np.random.default_rng(1)
  lengths = rng.integers(1, S + 1, 400)
  spec = tfrecords.array_spec(_records(tmp_path / "r.tf_record", lengths))
  dataset = pipeline.record_dataset(str(tmp_path / "r.tf_record"), spec, 8, True, seed=2,
                                    length_multiple=multiple, bucket_by_length=True)
  seen = []
  for batch in dataset.take(200):
    real = batch["input_mask"].numpy().sum(1)
    assert batch["input_ids"].shape[0] == 8
    # Every example of a batch falls in one bucket, 16 positions wide whatever the
    # multiple, and the batch is then trimmed to its longest rounded up to the multiple.
    assert len(set((real - 1) // pipeline.BUCKET_WIDTH)) == 1, real
    assert batch["input_ids"].shape[1] == min(S, -(-real.max() // multiple) * multiple)
    np.testing.assert_array_equal(real, lengths[batch["label_ids"].numpy()])
    seen.extend(batch["label_ids"].numpy().tolist())
  # 200 batches of 8 = four passes: every example comes back, none is stuck in a bucket.
  counts = np.bincount(seen, minlength=400)
  assert counts.min() >= 1 and counts.sum() == 1600


def test_the_unset_multiple_is_chosen_for_the_hardware(monkeypatch):
  from cli.runner import batch_length_multiple
  # Whatever this machine has: a host with a GPU gets 8, one without 1.
  for gpus, want in (([], 1), (["/device:GPU:0"], 8)):
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None, gpus=gpus: gpus if kind == "GPU" else [])
    assert batch_length_multiple(None) == want  # CPU: exact lengths; GPU: 8
    assert batch_length_multiple(None, jit_compile=True) == 16  # XLA: few shapes
  monkeypatch.undo()
  assert batch_length_multiple(0, jit_compile=True) == 0  # as the original
  assert batch_length_multiple(4) == 4
  strategy = tf.distribute.get_strategy()
  assert batch_length_multiple(None, False, strategy) == 1
  # TPUs need one static shape, whatever was asked (an uninitialised instance is enough
  # for the isinstance check; no TPU is reached).
  tpu = tf.distribute.TPUStrategy.__new__(tf.distribute.TPUStrategy)
  assert batch_length_multiple(None, False, tpu) == 0
  assert batch_length_multiple(8, True, tpu) == 0


def test_two_replicas_predict_trimmed_batches_as_one_device(tmp_path):
  """Under MirroredStrategy (2 logical CPUs) prediction gives one device's rows, in file order."""
  import json
  import os
  import subprocess
  import sys
  lengths = [3, 30, 4, 5, 2, 2, 3, 9, 17, 40, 1, 6]
  _records(tmp_path / "r.tf_record", lengths)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, os.path.join(root, "tests", "predict_worker.py"),
                         str(tmp_path / "r.tf_record"), str(S), "4"],
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PYTHONPATH": root})
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  # One device, then two replicas; each with records in file order, then sorted by length.
  assert result["rows"] == [12] * 4 and result["file_order"] == [True] * 4, result
  assert result["keys"] == [["label_ids", "logits"]] * 4, result
  assert result["max_difference"] < 1e-5, result


@pytest.mark.parametrize("script,flag", [
    ("run_classifier.py", "--train_batch_size=0"), ("run_classifier.py", "--eval_batch_size=-1"),
    ("run_squad.py", "--doc_stride=0"), ("run_squad.py", "--predict_batch_size=0"),
    ("run_ner.py", "--lstm_units=0"), ("run_ner.py", "--batch_length_multiple=-16"),
    ("run_swag.py", "--num_choices=1"), ("run_swag.py", "--max_seq_length=0"),
    # Learning rates, epochs and warmup shares of every training script.
    ("run_classifier.py", "--learning_rate=-0.001"), ("run_classifier.py", "--learning_rate=0.0"),
    ("run_classifier.py", "--num_train_epochs=0.0"), ("run_classifier.py", "--warmup_proportion=1.5"),
    ("run_squad.py", "--learning_rate=-0.5"), ("run_squad.py", "--warmup_proportion=-0.1"),
    ("run_ner.py", "--learning_rate=-0.001"), ("run_ner.py", "--num_train_epochs=-1.0"),
    ("run_swag.py", "--learning_rate=0.0"), ("run_swag.py", "--num_train_epochs=0.0"),
    ("run_pretraining.py", "--learning_rate=-0.0001"),
    # Batch sizes, lengths and step counts of the scripts without bounds before.
    ("extract_features.py", "--batch_size=-1"), ("extract_features.py", "--batch_size=0"),
    ("extract_features.py", "--max_seq_length=1"),
    ("run_pretraining.py", "--train_batch_size=0"), ("run_pretraining.py", "--eval_batch_size=-8"),
    ("run_pretraining.py", "--max_seq_length=0"),
    ("run_pretraining.py", "--max_predictions_per_seq=-1"),
    ("run_pretraining.py", "--num_warmup_steps=-1"), ("run_pretraining.py", "--max_eval_steps=0"),
    ("run_pretraining.py", "--save_checkpoints_steps=0"),
    # Runtime flags shared by the training scripts.
    ("run_classifier.py", "--gradient_accumulation_steps=0"), ("run_squad.py", "--log_steps=0"),
    ("run_pretraining.py", "--keep_checkpoint_max=0"), ("run_ner.py", "--num_tpu_cores=0")])
def test_zero_or_negative_numbers_stop_at_start_naming_the_flag(script, flag):
  from scripts import last_error_line, run_script
  proc = run_script(script, flag, expect_ok=False)
  assert proc.returncode == 1
  assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
  assert last_error_line(proc).startswith(f"error: flag {flag}:")
