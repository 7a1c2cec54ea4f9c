"""modeling/prediction.py: sorted prediction batches joined into fewer calls."""

import numpy as np
import tensorflow as tf

from data import pipeline, tfrecords
from helpers import assert_close, block_ops
from modeling import prediction

S = 40
# Sorted in windows of 4 batches of 2, the batches are 2, 3, 5, 30 then 2, 6, 8, 40 long.
LENGTHS = [3, 30, 4, 5, 2, 2, 3, 9, 17, 40, 1, 6, 8, 8, 2, 5]


def test_joined_calls_give_the_outputs_of_one_call_per_batch(tmp_path):
  """Per-token outputs too: values within 1e-5, `fill` past each row's own batch length."""
  import keras
  from modeling import optimization, tagging, training
  from modeling.config import BertConfig
  rng = np.random.default_rng(0)
  n = len(LENGTHS)
  mask = (np.arange(S)[None] < np.asarray(LENGTHS)[:, None]).astype(np.int64)
  path = str(tmp_path / "r.tf_record")
  tfrecords.write_arrays(path, {
      "input_ids": rng.integers(5, 99, (n, S)) * mask, "input_mask": mask,
      "segment_ids": np.zeros((n, S), np.int64), "label_ids": rng.integers(0, 3, (n, S)) * mask,
      "label_weights": mask.astype(np.float32)})
  spec = {k: tf.io.FixedLenFeature([S], tf.float32 if k == "label_weights" else tf.int64)
          for k in ("input_ids", "input_mask", "segment_ids", "label_ids", "label_weights")}
  config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=S)
  keras.utils.set_random_seed(0)
  trainer = training.Trainer(
      tf.distribute.get_strategy(), tagging.TaggingTask(config, 3),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 10, 1, names),
      training.TrainConfig(output_dir=str(tmp_path / "out"), num_train_steps=10,
                           global_batch_size=2))
  dataset_fn = lambda ctx: pipeline.global_batches(path, spec, 2, ctx, length_multiple=1,
                                                   by_length=True, window=4)
  # Greedy within 2 * JOIN_LENGTH = 256 positions: 8 rows x 30, 6 rows x 8, then 2 x 40.
  groups = list(prediction._joined(dataset_fn(None), 2 * prediction.JOIN_LENGTH))
  assert [len(g) for g in groups] == [4, 3, 1]
  joined = trainer.predict(dataset_fn, keep=("label_ids",), fill=-1.0)
  # Static shapes take the batch-by-batch path (no joining) with the same model.
  one_by_one = prediction.Predictor(trainer.strategy, trainer.task, trainer.model,
                                    static_shapes=True).predict(
      dataset_fn, keep=("label_ids",), fill=-1.0)
  assert joined["logits"].shape == one_by_one["logits"].shape == (n, S, 3)
  # float32, joined batches against one by one (other shapes): 2 blocks and the tagger's
  # layer (a sum of 16); filled positions hold -1 in both.
  assert_close(joined["logits"], one_by_one["logits"], "float32", 2 * block_ops(config, S) + 16)
  np.testing.assert_array_equal(joined["label_ids"], one_by_one["label_ids"])
  # Row 4 (2 tokens) sat in a batch 2 long, row 1 (30) in one 30 long: fill follows.
  assert (joined["logits"][4, 2:] == -1).all() and (joined["logits"][4, :2] != -1).all()
  assert (joined["logits"][1, 30:] == -1).all() and (joined["logits"][1, :30] != -1).all()
  assert len(trainer.predictor.traced) == 1  # one step for every joined shape
