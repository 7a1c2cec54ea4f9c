"""TPU readiness on the CPU: every task's steps compiled with XLA at fixed shapes.

For each task, two Trainers start from the same weights and dropout RNG
state: one with jit_compile (the whole per-replica step, forward, backward,
clipping and update, is one XLA function) and one without (packing off, so
both compute the same padded batches). Fed the scripts' own fixed-shape
pipelines (batch_length_multiple 0: full batches of max_seq_length), their
step values (relative 1e-5), weights after four AdamW steps of 1e-2 (absolute
2e-5) and evaluation and prediction outputs (1e-5) agree, and each compiled
step is traced once for all its batches, at fully known shapes (so XLA
compiles it once). A slow test runs run_pretraining.py with --jit_compile on two
replicas against the plain run.

What this cannot show without a TPU: TPU-only limits (int64 and f64 support,
memory, TPUStrategy's compilation of the whole loop); XLA on CPU accepts the
ops TPUs accept for these models, so it is the proxy.
"""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from data import features, pipeline, tfrecords
from helpers import assert_close, block_ops, read_eval_results
from modeling import (classification, language_model, multiple_choice, optimization, pretraining,
                      span_labeling, tagging, training)
from modeling.config import BertConfig

B, S, P, C = 4, 16, 3, 3  # batch, length, masked positions, choices
STEPS = 2  # optimizer steps per call of the training loop

# XLA draws other dropout masks than TensorFlow's kernels from the same RNG state,
# so values are compared without dropout (test_xla_dropout_... covers dropout).
CONFIG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, type_vocab_size=2,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _tokens(rng, n, shape=(), padding=False):
  """Random right-padded token features [n, *shape, S]; with `padding` the last record
  is all padding, as the scripts pad prediction files to whole batches."""
  lengths = rng.integers(P + 3, S + 1, size=(n,) + shape)
  if padding:
    lengths[-1] = 0
  mask = (np.arange(S) < lengths[..., None]).astype(np.int64)
  return {"input_ids": rng.integers(1, CONFIG.vocab_size, size=mask.shape) * mask,
          "input_mask": mask,
          "segment_ids": (np.arange(S) >= lengths[..., None] // 2) * mask}


def _records(kind, rng, n, padding=False):
  """(arrays, spec) of n random records in the layout `kind`'s script writes."""
  if kind == "multiple_choice":
    arrays = _tokens(rng, n, (C,), padding)
    arrays.update(label_ids=rng.integers(0, C, n), is_real_example=np.arange(n) < n - 1)
    return arrays, tfrecords.array_spec(arrays)
  arrays = _tokens(rng, n, padding=padding)
  real = np.arange(n) < n - 1
  if kind == "pretraining":
    lengths = arrays["input_mask"].sum(-1)  # distinct real positions, as records have
    positions = [np.sort(rng.choice(np.arange(1, max(k - 1, P + 1)), P, replace=False))
                 for k in lengths]
    arrays.update(masked_lm_positions=np.array(positions),
                  masked_lm_ids=rng.integers(0, CONFIG.vocab_size, (n, P)),
                  masked_lm_weights=(rng.random((n, P)) < 0.8).astype(np.float32),
                  next_sentence_labels=rng.integers(0, 2, (n, 1)))
    return arrays, features.pretraining_feature_spec(S, P)
  if kind in ("classification", "regression"):
    regression = kind == "regression"
    arrays.update(label_ids=rng.random(n).astype(np.float32) if regression
                  else rng.integers(0, 3, n), is_real_example=real)
    return arrays, tfrecords.array_spec(arrays)
  if kind == "span":
    lengths = np.maximum(arrays["input_mask"].sum(-1), 1)  # answers lie in the real tokens
    arrays.update(unique_ids=np.arange(n), start_positions=rng.integers(0, lengths),
                  end_positions=rng.integers(0, lengths), is_impossible=np.zeros(n, np.int64))
    return arrays, tfrecords.array_spec(arrays)
  arrays.update(label_ids=rng.integers(0, 5, (n, S)) * arrays["input_mask"],
                label_weights=((rng.random((n, S)) < 0.7) * arrays["input_mask"])
                .astype(np.float32))
  return arrays, tfrecords.array_spec(arrays)


def _write(path, arrays, spec):
  """Writes `arrays` as records parsed by `spec` (floats where it reads floats)."""
  floats = [k for k, f in spec.items() if f.dtype == tf.float32]
  tfrecords.write_arrays(str(path), {k: np.asarray(v, np.float32 if k in floats else np.int64)
                                     for k, v in arrays.items()})
  return str(path)


CAUSAL = language_model.causal_config(CONFIG)

# name: (record layout, task, TrainConfig options). Loss scaling and gradient
# accumulation ride on two tasks, so the compiled step is checked with them
# without more compilations; likewise the causal encoder (ltr) and the BiLSTM head. The
# fine-tuned tagger's and the regression head's dense layers are the classifier's kind.
# --next_sentence_weight=0 only drops a term of the pretraining loss (test_ablations).
TASKS = {
    "pretraining": ("pretraining", lambda: pretraining.PretrainingTask(CONFIG), {}),
    "ltr": ("pretraining", lambda: language_model.LanguageModelTask(CAUSAL), {}),
    "classification": ("classification", lambda: classification.ClassificationTask(CONFIG, 3),
                       {"loss_scaling": True}),
    "span_bilstm": ("span", lambda: span_labeling.SpanTask(CONFIG, bilstm_head=True),
                    {"gradient_accumulation_steps": 2}),
    "tagging_feature_based": ("tagging", lambda: tagging.TaggingTask(
        CONFIG, 5, feature_based=True, feature_layers=(-1, 0), feature_combine="weighted",
        lstm_units=8), {}),
    "multiple_choice": ("multiple_choice", lambda: multiple_choice.MultipleChoiceTask(CONFIG), {}),
}

# Biases that shift every logit of one softmax alike: their gradient is 0 but for
# rounding, which Adam scales up to whole steps, so they are not compared.
SHIFT_ONLY = ("/squad/output_bias", "/multiple_choice/output_bias")


def _trainer(task, out, jit_compile, **config):
  return training.Trainer(
      tf.distribute.get_strategy(), task,
      lambda names: optimization.create_optimizer("adamw", 1e-2, 20, 1, names),
      training.TrainConfig(output_dir=str(out), num_train_steps=20, global_batch_size=B,
                           jit_compile=jit_compile, pack_tokens=False, **config))


def _pair(make_task, tmp_path, dropout=False, **config):
  """(XLA trainer, plain trainer) of a task with equal weights and dropout RNG states;
  without dropout, the heads' fixed dropout (0.1) is off too."""
  xla = _trainer(make_task(), tmp_path / "xla", True, **config)
  plain = _trainer(make_task(), tmp_path / "plain", False, **config)
  for layer in (l for t in (xla, plain) for l in t.model._flatten_layers()):
    if isinstance(layer, keras.layers.Dropout) and not dropout:
      layer.rate = 0.0
  rng = np.random.default_rng(0)
  for a, b in zip(xla.model.variables, plain.model.variables):
    value = a.numpy()
    if a.dtype == tf.float32:  # beyond the initializer's scale, so a bad path shows
      value = value + rng.normal(0, 0.05, a.shape).astype(np.float32)
      a.assign(value)
    b.assign(value)
  return xla, plain


def _assert_static(spec):
  for s in tf.nest.flatten(spec):
    assert s.shape.is_fully_defined(), spec


def _train(trainer, path, spec, calls=2):
  """Summed step values of `calls` calls of the compiled loop, STEPS steps each, fed by
  the scripts' training pipeline at fixed shapes."""
  data = pipeline.record_dataset(path, spec, B, True, seed=3, length_multiple=0)
  _assert_static(data.element_spec)
  batches = iter(data)
  return [{k: float(v) for k, v in trainer._train_loop(batches, tf.constant(STEPS))[0].items()}
          for _ in range(calls)]


def _assert_close(got, want, rtol, atol):
  assert got.keys() == want.keys()
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)


# float32 from the same weights, XLA's fusions and orders against TensorFlow's kernels:
# the block, an LSTM head's S steps (gates over up to 4 layers of 16 and 16 units) where
# the task has one, the heads' sums (4 * 16, a vocabulary of 50) and means over a batch.
SAME_WEIGHTS_OPS = block_ops(CONFIG, S) + S * (4 * 16 + 16) + 4 * 16 + 50 + B * S


def _assert_same_outputs(got, want):
  assert got.keys() == want.keys()
  for key in want:
    # Span logits hold -10000 + logit at padding (ulp 1e-3): those relative to themselves,
    # every other value relative to the largest of the others.
    w = np.abs(np.asarray(want[key], np.float64))
    scale = np.maximum(w, w[w < 5000].max(initial=0.0))
    assert_close(got[key], want[key], "float32", SAME_WEIGHTS_OPS, scale, what=key)


@pytest.mark.parametrize("name", list(TASKS))
def test_xla_steps_equal_the_plain_steps(name, tmp_path):
  """Training values and weights after 2 x STEPS steps, prediction (and evaluation)
  outputs agree; each compiled step is traced once, at static shapes."""
  kind, make_task, options = TASKS[name]
  arrays, spec = _records(kind, np.random.default_rng(1), 4 * B)
  path = _write(tmp_path / "train.tf_record", arrays, spec)
  xla, plain = _pair(make_task, tmp_path, **options)
  traces = []
  numerators = xla.task.numerators
  xla.task.numerators = lambda model, batch, training: (
      traces.append(batch["input_ids"].shape), numerators(model, batch, training))[1]

  for got, want in zip(_train(xla, path, spec), _train(plain, path, spec)):
    # Step values (losses, gradient norm) over 2 x STEPS AdamW steps of 1e-2: training,
    # outside helpers.rounding_tolerance's model; measured within 2% of these (AVX2).
    _assert_close(got, want, rtol=1e-5, atol=1e-6)
  # The model's forward was traced once per micro-batch, inside the one compiled step.
  k = options.get("gradient_accumulation_steps", 1)
  assert traces == [tf.TensorShape([B // k] + list(spec["input_ids"].shape))] * k
  assert xla._compiled_step.experimental_get_tracing_count() == 1
  for a, b in zip(xla.model.variables, plain.model.variables):
    if not a.path.endswith(SHIFT_ONLY):  # Adam moves a weight up to 1e-2 per step
      # Training, likewise: measured up to 1.8e-6 with TensorFlow's own kernels on AVX2, and
      # with oneDNN's (the scripts' default) from run to run 2e-6 to 3.1e-5 in a word
      # embedding of the BiLSTM task (2026-11-29, 6 runs); one update is up to 3e-2.
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-4, err_msg=a.path)

  # Prediction as the scripts run it (whole global batches of fixed length, a padding
  # record last), from the same weights.
  for a, b in zip(xla.model.variables, plain.model.variables):
    b.assign(a)
  arrays, _ = _records(kind, np.random.default_rng(2), 3 * B, padding=True)
  predict_path = _write(tmp_path / "predict.tf_record", arrays, spec)
  dataset_fn = lambda ctx: pipeline.global_batches(predict_path, spec, B, ctx,
                                                   length_multiple=0, by_length=True)
  got = [xla.predict(dataset_fn) for _ in range(2)][-1]
  _assert_same_outputs(got, plain.predict(dataset_fn))
  (step,) = [f for key, f in xla.predictor.traced.items() if key[0] == "predict"]
  assert step.experimental_get_tracing_count() == 1
  _assert_static(step.input_signature)

  if kind == "pretraining":  # run_pretraining's evaluation: whole batches under XLA
    traces.clear()
    dataset_fn = lambda ctx: pipeline.record_dataset(path, spec, B, False, drop_remainder=True)
    got = [xla.evaluate(dataset_fn) for _ in range(2)][-1]
    want = plain.evaluate(dataset_fn)
    _assert_same_outputs(got, want)
    assert traces == [tf.TensorShape([B, S])]
    (step,) = [f for key, f in xla.predictor.traced.items() if key[0] == "evaluate"]
    assert step.experimental_get_tracing_count() == 1
    _assert_static(step.input_signature)


def test_xla_dropout_advances_the_rng_like_the_plain_step(tmp_path):
  """With dropout on, the compiled step draws its masks from the model's RNG state and
  advances it exactly as the plain step does (so checkpoints resume the same stream),
  and draws the same masks: dropout's bits come from the stateless, counter-based
  Philox generator, which XLA and TensorFlow's kernel compute alike."""
  arrays, spec = _records("pretraining", np.random.default_rng(1), 4 * B)
  path = _write(tmp_path / "train.tf_record", arrays, spec)
  config = dataclasses.replace(CONFIG, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  xla, plain = _pair(lambda: pretraining.PretrainingTask(config), tmp_path, dropout=True)

  def states(trainer):
    return {k: v.numpy() for k, v in trainer.state.model_state.items()}
  before = states(xla)
  # Exact: RNG states are integers.
  assert before and all(np.array_equal(before[k], v) for k, v in states(plain).items())
  (got,), (want,) = _train(xla, path, spec, calls=1), _train(plain, path, spec, calls=1)
  after = states(xla)
  for key, value in states(plain).items():
    np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert not np.array_equal(after[key], before[key]), key
  # The same masks: the losses agree as the dropout-free steps above do (1e-5 relative);
  # other masks would move them by a few percent.
  np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)


@pytest.mark.parametrize("kind", ["pretraining", "classification", "span", "tagging",
                                  "multiple_choice"])
def test_fixed_shape_pipelines_feed_one_static_shape(kind, tmp_path):
  """At batch_length_multiple 0 the scripts' pipelines give full batches of the records'
  length, with that shape static in the dataset's spec: training (bucketed or not),
  prediction of a file padded to whole batches, and pretraining's evaluation, which
  drops a last partial batch under XLA."""
  arrays, spec = _records(kind, np.random.default_rng(4), 5 * B + 2)
  path = _write(tmp_path / "records.tf_record", arrays, spec)
  want = {k: [B] + list(f.shape) for k, f in spec.items()}

  def check(dataset, count=None):
    _assert_static(dataset.element_spec)
    assert {k: s.shape.as_list() for k, s in dataset.element_spec.items()} == want
    shapes = [{k: v.shape.as_list() for k, v in b.items()} for b in dataset.take(12)]
    assert shapes == [want] * (count or 12)

  for bucket in (False, True):
    check(pipeline.record_dataset(path, spec, B, True, seed=1, length_multiple=0,
                                  bucket_by_length=bucket))
  check(pipeline.record_dataset(path, spec, B, False, drop_remainder=True), count=5)
  padded = {k: v[:4 * B] for k, v in arrays.items()}  # the scripts pad to whole batches
  path = _write(tmp_path / "predict.tf_record", padded, spec)
  check(pipeline.global_batches(path, spec, B, length_multiple=0, by_length=True), count=4)


@pytest.mark.slow
def test_run_pretraining_with_jit_compile_matches_the_plain_run(tmp_path):
  """The script end to end: --jit_compile on two replicas (micro-batch gradients compiled)
  trains and evaluates to the plain run's log and eval_results.txt. One device's whole
  compiled step is test_xla_steps_equal_the_plain_steps[pretraining]'s. No dropout; the
  records make whole batches, so the evaluation under XLA drops none."""
  import csv

  from scripts import run_script
  arrays, spec = _records("pretraining", np.random.default_rng(5), 6 * B)
  records = _write(tmp_path / "train.tf_record", arrays, spec)
  CONFIG.to_json_file(str(tmp_path / "bert_config.json"))
  runs = {}
  for name, extra in (("plain", []), ("mirrored", ["--jit_compile", "--strategy=mirrored"])):
    out = tmp_path / name
    script = ["tests/two_cpus.py", "run_pretraining.py"] if name == "mirrored" else [
        "run_pretraining.py"]
    run_script(*script, f"--bert_config_file={tmp_path / 'bert_config.json'}",
               f"--input_file={records}", f"--output_dir={out}", "--do_train", "--do_eval",
               f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
               f"--train_batch_size={B}", f"--eval_batch_size={B}", "--num_train_steps=6",
               "--num_warmup_steps=1", "--learning_rate=1e-3", "--iterations_per_loop=3",
               "--log_steps=3", "--seed=2", *extra)
    with open(out / "train_log.csv") as f:
      log = [{k: float(v) for k, v in row.items() if k != "step"} for row in csv.DictReader(f)]
    runs[name] = read_eval_results(out / "eval_results.txt"), log
  plain_eval, plain_log = runs.pop("plain")
  for name, (got_eval, got_log) in runs.items():
    assert got_eval.keys() == plain_eval.keys() and len(got_log) == len(plain_log) == 2
    for got, want in zip(got_log, plain_log):
      for key in ("loss", "masked_lm_loss", "next_sentence_loss"):
        # Training (6 steps), outside the rounding model, printed to 6 digits (5e-6).
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=(name, key))
    for key in got_eval:
      # After training, likewise.
      np.testing.assert_allclose(got_eval[key], plain_eval[key], rtol=1e-5, err_msg=(name, key))
  # An evaluation batch the two replicas cannot share is refused before training.
  from scripts import last_error_line
  proc = run_script("tests/two_cpus.py", "run_pretraining.py",
                    f"--bert_config_file={tmp_path / 'bert_config.json'}",
                    f"--input_file={records}", f"--output_dir={tmp_path / 'odd'}", "--do_train",
                    "--do_eval", f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
                    f"--train_batch_size={B}", "--eval_batch_size=3", "--num_train_steps=6",
                    "--strategy=mirrored", expect_ok=False)
  assert last_error_line(proc) == "error: --eval_batch_size=3 must divide evenly into 2 replicas."
  assert not (tmp_path / "odd").exists()
