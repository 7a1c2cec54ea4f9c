"""Predicts trimmed global batches with one device and with two mirrored replicas.

Run as a script by the tests (logical devices must be set before TensorFlow
starts): python predict_worker.py RECORDS MAX_SEQ_LENGTH BATCH. Prints a JSON
line with the largest difference between the runs' logits and whether the
rows came back in file order, each way with records in file order and sorted
by length.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(records, max_seq_length, batch):
  import tensorflow as tf
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  import keras
  import numpy as np
  from data import pipeline
  from modeling import classification, optimization, training
  from modeling.config import BertConfig

  config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=max_seq_length)
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)  # the classifier's layout
          for name in ("input_ids", "input_mask", "segment_ids")}
  spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in ("label_ids",
                                                                       "is_real_example")})
  outputs = []
  for strategy in (tf.distribute.get_strategy(),
                   tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])):
    keras.utils.set_random_seed(0)  # the same initial weights in both runs
    trainer = training.Trainer(
        strategy, classification.ClassificationTask(config, 3),
        lambda names: optimization.create_optimizer("adamw", 1e-3, 10, 1, names),
        training.TrainConfig(output_dir="/tmp/unused", num_train_steps=10,
                             global_batch_size=batch))
    for by_length in (False, True):  # file order; sorted by length in windows of 2 batches
      outputs.append(trainer.predict(lambda ctx: pipeline.global_batches(
          records, spec, batch, ctx, length_multiple=4, by_length=by_length, window=2),
          keep=("label_ids",)))
  single = outputs[0]
  in_order = lambda out: out["label_ids"].tolist() == list(range(len(out["label_ids"])))
  print(json.dumps({
      "replicas": 2, "rows": [len(out["logits"]) for out in outputs],
      "max_difference": max(float(np.abs(single["logits"] - out["logits"]).max())
                            for out in outputs),
      "file_order": [in_order(out) for out in outputs],
      "keys": [sorted(out) for out in outputs]}))


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
