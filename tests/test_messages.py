"""Error messages that say what happened: each would mislead if it came back as it was."""

import types

import numpy as np
import pytest
import scipy.special
import tensorflow as tf

from cli.runner import make_trainer
from data import glue
from helpers import assert_close, block_ops, random_features
from modeling import classification, optimization, pretraining, training
from modeling.config import BertConfig

SMALL = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)


def _trainer(tmp_path, batch=8, accumulation=1, task=None, jit_compile=False):
  return training.Trainer(
      tf.distribute.get_strategy(), task or classification.ClassificationTask(SMALL, 3),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 10, 1, names),
      training.TrainConfig(output_dir=str(tmp_path), num_train_steps=10, global_batch_size=batch,
                           gradient_accumulation_steps=accumulation, jit_compile=jit_compile))


def test_evaluation_keeps_a_partial_batch_and_says_no_records_only_when_empty(tmp_path):
  """It used to say "no complete batch", although a partial batch is evaluated."""
  trainer = _trainer(tmp_path, task=pretraining.PretrainingTask(SMALL))
  rng = np.random.default_rng(0)
  records = {**random_features(rng, 3, 6, SMALL.vocab_size),
             "masked_lm_positions": np.array([[1, 2], [0, 3], [2, 1]], np.int32),
             "masked_lm_ids": rng.integers(0, SMALL.vocab_size, (3, 2)).astype(np.int32),
             "masked_lm_weights": np.ones((3, 2), np.float32),
             "next_sentence_labels": np.array([[0], [1], [1]], np.int32)}
  dataset = tf.data.Dataset.from_tensor_slices(records)
  results = trainer.evaluate(lambda ctx: dataset.batch(8))  # one batch of 3 < 8
  logits = trainer.model(records, training=False)["next_sentence_logits"].numpy()
  loss = -scipy.special.log_softmax(logits, -1)[np.arange(3), [0, 1, 1]].mean()
  # float32, the evaluation's graph against eager: 1 block, the pooler and the head (sums
  # of 8), a log-softmax over 2 and a mean of 3; a cross entropy moves by at most twice its
  # logits' change (four times the roundings), relative to the logits; the log-softmax's
  # log and the mean round at the loss's own size (about log 2), so that adds to the scale.
  # A mean of 2 of the 3 examples would be off by O(0.1).
  assert_close(results["next_sentence_loss"], loss, "float32",
               4 * (block_ops(SMALL, 6) + 2 * 8) + 16, np.abs(logits).max() + abs(loss))
  with pytest.raises(ValueError) as error:
    trainer.evaluate(lambda ctx: dataset.take(0).batch(8))
  assert str(error.value) == "The evaluation data holds no records."
  # With static shapes the scripts drop a last partial batch: records, but no batch.
  compiled = _trainer(tmp_path, task=pretraining.PretrainingTask(SMALL), jit_compile=True)
  with pytest.raises(ValueError, match=r"^The evaluation data holds no complete batch, and "
                                       r"with static shapes \(XLA, TPUs\) a last partial "
                                       r"batch is not evaluated\.$"):
    compiled.evaluate(lambda ctx: dataset.batch(8, drop_remainder=True))


def _flags(**overrides):
  values = dict(do_train=False, init_checkpoint=None, output_dir="", optimizer="adamw",
                learning_rate=1e-3, iterations_per_loop=10, log_steps=10,
                save_checkpoints_steps=10, keep_checkpoint_max=1,
                gradient_accumulation_steps=3, jit_compile=False, dtype="float32")
  return types.SimpleNamespace(**{**values, **overrides})


def test_the_training_batch_split_is_checked_by_flag_and_only_when_training(tmp_path):
  """Evaluation alone was refused because --train_batch_size did not split into
  --gradient_accumulation_steps; training is refused naming both flags."""
  strategy, task = tf.distribute.get_strategy(), classification.ClassificationTask(SMALL, 3)
  flags = _flags(output_dir=str(tmp_path))
  assert make_trainer(strategy, task, 0, 0, 32, flags).model is not None
  with pytest.raises(ValueError, match=r"^--train_batch_size=32 must divide evenly into 1 "
                                       r"replica\(s\) x --gradient_accumulation_steps=3\.$"):
    make_trainer(strategy, task, 10, 1, 32, _flags(do_train=True,
                                                                 output_dir=str(tmp_path)))
  # The library names no flag: it does not know where its numbers came from.
  with pytest.raises(ValueError, match=r"^The global batch size \(10\) must divide evenly into "
                                       r"1 replica\(s\) x 3 micro-batch\(es\) \(gradient "
                                       r"accumulation steps\)\.$"):
    _trainer(tmp_path, batch=10, accumulation=3)


def test_a_short_glue_row_names_the_missing_column(tmp_path):
  """A dev file without its label column said only how many columns it lacked."""
  (tmp_path / "dev.tsv").write_text("sentence\nthe film\n")
  with pytest.raises(ValueError, match=r"dev\.tsv:2: expected at least 2 tab-separated "
                                       r"columns, found 1: no label \(column 2\)\.$"):
    glue.examples(glue.get_task("sst-2"), str(tmp_path), "dev")
  (tmp_path / "dev.tsv").write_text("id\tqid1\tqid2\tq1\n0\t1\t2\twhat ?\n")
  with pytest.raises(ValueError, match=r"found 4: no second text \(column 5\), label "
                                       r"\(column 6\)\.$"):
    glue.examples(glue.get_task("qqp"), str(tmp_path), "dev")


def test_an_error_of_several_lines_is_printed_as_one():
  """TensorFlow's file errors go on after a line break and a tab; the scripts print one
  line per error."""
  from cli import app
  error = OSError("Could not resolve host: b\n\t when reading metadata of gs://b/x")
  assert app.one_line(error) == "Could not resolve host: b when reading metadata of gs://b/x"
  assert app.one_line(ValueError("two  spaces stay")) == "two  spaces stay"
  assert app.one_line(ValueError("a\n  b\r\nc\n")) == "a b c"


def test_a_tpu_that_cannot_be_found_is_one_line(monkeypatch):
  """TensorFlow's TPU resolver asks GCP's servers; off a TPU VM it fails with a network
  traceback, which becomes one line naming --tpu_name."""
  import tensorflow as tf
  from modeling import distribution

  def unreachable(**_):
    raise OSError("<urlopen error [Errno -2] Name or service not known>\nmore detail")
  monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", unreachable)
  with pytest.raises(ValueError, match=r"^Cannot find --tpu_name=my-tpu: OSError: <urlopen "
                     r"error \[Errno -2\] Name or service not known> \(run on a TPU VM, or "
                     r"name a TPU this machine can reach\)\.$"):
    distribution.make_strategy("tpu", tpu="my-tpu")
  # No --tpu_name: the TPU_NAME variable, else the TPU VM's own TPU, "local" to TensorFlow.
  asked = []
  monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver",
                      lambda **kw: (asked.append(kw["tpu"]), unreachable())[1])
  for environment, want in ((None, "local"), ("v3-named", "v3-named")):
    if environment:
      monkeypatch.setenv("TPU_NAME", environment)
    else:
      monkeypatch.delenv("TPU_NAME", raising=False)
    with pytest.raises(ValueError, match="^Cannot find the TPU of TPU_NAME or of this TPU VM"):
      distribution.make_strategy("tpu")
    assert asked[-1] == want
