"""run_pretraining's machinery: losses, accumulation, replicas, workers, resume, export."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.special
import tensorflow as tf

from data import features, pipeline
from helpers import read_eval_results
from data.pretraining import generation, instances
from helpers import assert_close, block_ops
from modeling import checkpoints, optimization, pretraining, training
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.pretraining import BertPretrainer
from scripts import ROOT, last_error_line, run_script
from test_pretraining_data import make_corpus, make_vocab

L, P = 32, 5


def training_files(d):
  """Records from the generator, a tiny config without dropout, and initial weights, in
  directory `d`: (d, vocab, records, config, init)."""
  vocab = make_vocab(d / "vocab.txt")
  corpus = make_corpus(d / "corpus.txt", documents=20, seed=5)
  records = str(d / "train.tfrecord")
  generation.generate_exact(
      [corpus], [records], vocab, True, instances.GenerationConfig(L, P, 0.15, 0.1, False, 2), 1)
  size = len(open(vocab).read().split())
  config = BertConfig(vocab_size=size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64, type_vocab_size=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  config.to_json_file(str(d / "bert_config.json"))
  model = BertPretrainer(BertEncoder(config))
  model.build()
  init = checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), str(d / "init"))
  return d, vocab, records, config, init


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return training_files(tmp_path_factory.mktemp("train"))


def _batches(records, size, count):
  spec = features.pretraining_feature_spec(L, P)
  ds = tf.data.TFRecordDataset(records).batch(size).take(count)
  return [{k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
           for k, v in tf.io.parse_example(r, spec).items()} for r in ds]


def test_losses_match_a_hand_computation(setup):
  _, _, records, config, init = setup
  task = pretraining.PretrainingTask(config)
  model = task.build_model()
  checkpoints.load_checkpoint(model, init)
  batch = _batches(records, 6, 1)[0]
  out = model(batch)
  sums, metrics = task.numerators(model, batch, training=False)
  loss, parts = task.losses(sums, task.denominators(batch))
  logits = out["masked_lm_logits"].numpy()
  w = batch["masked_lm_weights"].numpy()
  nll = -np.take_along_axis(scipy.special.log_softmax(logits, -1),
                            batch["masked_lm_ids"].numpy()[..., None], -1)[..., 0]
  mlm = (w * nll).sum() / (w.sum() + 1e-5)
  nsp_logits = out["next_sentence_logits"].numpy()
  labels = batch["next_sentence_labels"].numpy()[:, 0]
  nsp = -scipy.special.log_softmax(nsp_logits, -1)[np.arange(6), labels].mean()
  # float32 both, from the same logits: a log-softmax over the vocabulary and a weighted
  # mean over 6 * 5 predictions.
  ops = config.vocab_size + 6 * P + 16
  assert_close(float(parts["masked_lm_loss"]), mlm, "float32", ops)
  assert_close(float(parts["next_sentence_loss"]), nsp, "float32", ops)
  assert_close(float(loss), mlm + nsp, "float32", ops)
  accuracy = (w * (logits.argmax(-1) == batch["masked_lm_ids"].numpy())).sum() / w.sum()
  assert_close(float(task.metric_values(metrics, task.denominators(batch))["masked_lm_accuracy"]),
               accuracy, "float32", 1)  # counts: one division


def _train_in_process(setup, tmp_path, accumulation, steps=3, batch=8, strategy=None, **config):
  _, _, records, model_config, init = setup

  def dataset_fn(ctx):
    return pipeline.record_dataset(records, features.pretraining_feature_spec(L, P),
                                   ctx.get_per_replica_batch_size(batch), True, seed=3,
                                   input_context=ctx)
  trainer = training.Trainer(
      strategy or tf.distribute.get_strategy(), pretraining.PretrainingTask(model_config),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
      training.TrainConfig(output_dir=str(tmp_path), num_train_steps=steps, global_batch_size=batch,
                           steps_per_loop=steps, log_steps=steps, save_checkpoints_steps=steps,
                           gradient_accumulation_steps=accumulation, **config))
  trainer.train(dataset_fn, init_checkpoint=init)
  return trainer


def test_one_replica_strategies_train_like_the_default(setup, tmp_path):
  """--strategy=one_device (and mirrored on one device) give distributed iterators, which
  cannot go into a checkpoint: training must still run, resume by skipping, and match."""
  base = _train_in_process(setup, tmp_path / "default", 1)
  one = _train_in_process(setup, tmp_path / "one", 1,
                          strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
  assert one.global_step == base.global_step == 3
  for a, b in zip(base.model.weights, one.model.weights):
    # Training (Adam): outside helpers.rounding_tolerance's model. The same step program on the same
    # batches (equal here); 1e-6 leaves room for other kernels, far below one update of
    # up to 1e-3 * 3.2.
    np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6, err_msg=a.path)


def test_a_checkpoint_without_input_position_resumes_under_the_default_strategy(setup, tmp_path):
  """Checkpoints of another strategy (as of several workers) hold no iterator: a run under
  the default strategy resumes them by skipping, as often as it is restarted, and ends
  with the weights of one uninterrupted run."""
  whole = _train_in_process(setup, tmp_path / "whole", 1, steps=9)
  _train_in_process(setup, tmp_path / "parts", 1, steps=3,
                    strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
  _train_in_process(setup, tmp_path / "parts", 1, steps=6)
  parts = _train_in_process(setup, tmp_path / "parts", 1, steps=9)
  assert parts.global_step == 9
  for a, b in zip(whole.model.weights, parts.model.weights):
    # As in the test above: the same batches, restored bits; 1e-6 far below an update.
    np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6, err_msg=a.path)


def test_evaluation_alone_builds_no_optimizer_and_restores_a_training_checkpoint(setup, tmp_path):
  """An eval-only Trainer over a training run's --output_dir: no optimizer is made (nor its
  Adam moments), yet the model's weights and the step come back from the checkpoint."""
  _, _, records, model_config, _ = setup
  trained = _train_in_process(setup, tmp_path, 1)
  made = []

  def make_optimizer(names):
    made.append(names)
    return optimization.create_optimizer("adamw", 1e-3, 100, 2, names)
  evaluator = training.Trainer(
      tf.distribute.get_strategy(), pretraining.PretrainingTask(model_config), make_optimizer,
      training.TrainConfig(output_dir=str(tmp_path), num_train_steps=1, global_batch_size=1))
  assert evaluator.restore(for_training=False) == (
      f"resumed from {tmp_path / 'ckpt-3'} at step 3")
  want = checkpoints.model_weights(trained.model)
  got = checkpoints.model_weights(evaluator.model)
  assert got.keys() == want.keys()
  for name in want:
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # exact: restored bits
  batch = _batches(records, 4, 1)[0]
  predicted = evaluator.predict(lambda ctx: tf.data.Dataset.from_tensors(batch))
  # float32, the same weights traced and eager: 2 blocks and the masked LM's head (4 * 16).
  assert_close(predicted["masked_lm_logits"], trained.model(batch)["masked_lm_logits"].numpy(),
               "float32", 2 * block_ops(model_config, L) + 4 * 16)
  assert evaluator.evaluate(lambda ctx: tf.data.Dataset.from_tensors(batch))["global_step"] == 3
  assert made == [] and evaluator.state.optimizer is None
  # Training from there builds the optimizer and restores its moments too.
  evaluator.restore()
  assert len(made) == 1 and evaluator.global_step == 3
  name = "bert/encoder/layer_0/attention/self/query/kernel"
  var = evaluator.state.table[name]
  np.testing.assert_array_equal(evaluator.optimizer.slots(var)[0].numpy(),  # exact: restored
                                trained.optimizer.slots(trained.state.table[name])[0].numpy())


def test_damaged_checkpoint_in_output_dir_is_one_line(setup, tmp_path):
  """Resuming from a cut checkpoint names it instead of failing deep inside TensorFlow."""
  _train_in_process(setup, tmp_path / "run", 1)
  data = next((tmp_path / "run").glob("ckpt-3.data-*"))
  data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  with pytest.raises(ValueError, match=r"ckpt-3: the checkpoint to resume from cannot be read"):
    _train_in_process(setup, tmp_path / "run", 1, steps=6)


@pytest.mark.parametrize("change", [{"intermediate_size": 48}, {"num_hidden_layers": 3}])
def test_a_checkpoint_of_another_model_does_not_fit_rather_than_cannot_be_read(
    setup, tmp_path, change):
  """Resuming under another config says the checkpoint does not fit, not that its (good)
  files should be removed."""
  _train_in_process(setup, tmp_path / "run", 1)
  other = (*setup[:3], dataclasses.replace(setup[3], **change), setup[4])
  with pytest.raises(ValueError, match=r"ckpt-3: the checkpoint to resume from does not fit "
                     r"this model \(.+\); it was trained with another bert_config.json") as e:
    _train_in_process(other, tmp_path / "run", 1, steps=6)
  assert "Remove its files" not in str(e.value)


def test_gradient_accumulation_equals_the_large_batch(setup, tmp_path):
  one = _train_in_process(setup, tmp_path / "one", accumulation=1)
  four = _train_in_process(setup, tmp_path / "four", accumulation=4)
  a, b = checkpoints.model_weights(one.model), checkpoints.model_weights(four.model)
  for name in a:
    # Training (Adam): outside helpers.rounding_tolerance's model. Gradients summed over 4 micro-
    # batches differ by rounding (measured: weights within 1e-8 after 3 steps); 2e-6 is
    # a thousandth of one update (up to 1e-3 * 3.2).
    np.testing.assert_allclose(a[name], b[name], atol=2e-6, err_msg=name)
  assert one.global_step == four.global_step == 3


def _worker(mode, setup, out, batch=8, steps=4, accumulation=1, env=None):
  d, _, records, _, init = setup
  return subprocess.Popen(
      [sys.executable, os.path.join(ROOT, "tests", "distributed_worker.py"), mode, records,
       str(d / "bert_config.json"), init, str(out), str(steps), str(batch), str(accumulation)],
      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _weights(out):
  return dict(np.load(os.path.join(out, "weights.npz")))


def _finish(*procs):
  for p in procs:
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]


def _pretrain_args(setup, out, *extra):
  d, vocab, records, _, _ = setup
  return ["--bert_config_file=" + str(d / "bert_config.json"), f"--input_file={records}",
          f"--output_dir={out}", "--do_train", f"--max_seq_length={L}",
          f"--max_predictions_per_seq={P}", "--train_batch_size=8", "--num_train_steps=30",
          "--num_warmup_steps=5", "--learning_rate=1e-3", "--save_checkpoints_steps=10",
          "--iterations_per_loop=5", "--log_steps=5", "--seed=7", f"--vocab_file={vocab}", *extra]


def _with_dropout(setup, tmp_path):
  d = setup[0]
  config = json.load(open(d / "bert_config.json"))
  config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  path = tmp_path / "dropout_config.json"
  path.write_text(json.dumps(config))
  return str(path)


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(setup, tmp_path):
  """SIGKILL after a checkpoint, restart: same final weights (dropout and data order included)."""
  config = _with_dropout(setup, tmp_path)
  run_script("run_pretraining.py", *_pretrain_args(setup, tmp_path / "a"),
             f"--bert_config_file={config}")
  args = _pretrain_args(setup, tmp_path / "b") + [f"--bert_config_file={config}"]
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "run_pretraining.py"), *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=ROOT)
  deadline = time.time() + 300
  while (tf.train.latest_checkpoint(str(tmp_path / "b")) or "").split("-")[-1] != "10":
    assert proc.poll() is None and time.time() < deadline, "no checkpoint appeared"
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (tmp_path / "b" / "export").exists()
  out = run_script("run_pretraining.py", *args)
  assert "resumed from" in out.stderr
  assert "could not be found" not in out.stderr  # no warning about the restored iterator
  a = checkpoints.read_checkpoint(str(tmp_path / "a" / "export")).weights
  b = checkpoints.read_checkpoint(str(tmp_path / "b" / "export")).weights
  for name in a:
    # Training (Adam): outside helpers.rounding_tolerance's model. The same
    # program on the same batches from restored bits; 1e-6 leaves room for a restarted
    # loop compiled to other kernels, far below one update (up to 1e-3 * 3.2).
    np.testing.assert_allclose(b[name], a[name], atol=1e-6, err_msg=name)


def test_sigterm_saves_a_checkpoint_and_exits(setup, tmp_path):
  args = _pretrain_args(setup, tmp_path / "t", "--num_train_steps=100000",
                        "--save_checkpoints_steps=100000")
  proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "run_pretraining.py"), *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=ROOT)
  deadline = time.time() + 300
  while not (tmp_path / "t" / "train_log.csv").exists():
    assert proc.poll() is None and time.time() < deadline
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 143, err[-2000:]
  assert "SIGTERM: saved a checkpoint at step" in err
  assert tf.train.latest_checkpoint(str(tmp_path / "t"))


def test_a_run_without_next_sentence_is_evaluated_and_resumed_as_trained(setup, tmp_path):
  """--next_sentence_weight=0 leaves the head out: an evaluation without the flag takes it
  from run.json (no next-sentence scores), a resumed training without it is refused."""
  out = tmp_path / "run"
  args = [a for a in _pretrain_args(setup, out, "--next_sentence_weight=0")
          if a != "--num_train_steps=30"]
  run_script("run_pretraining.py", *args, "--num_train_steps=5")
  proc = run_script("run_pretraining.py", *[a for a in args if a not in (
      "--do_train", "--next_sentence_weight=0")], "--do_eval", "--max_eval_steps=2")
  assert f"--next_sentence_weight=0.0, as {out}/run.json records" in proc.stderr
  assert "next_sentence_loss" not in read_eval_results(out / "eval_results.txt")
  proc = run_script("run_pretraining.py", *[a for a in args if a != "--next_sentence_weight=0"],
                    "--num_train_steps=10", expect_ok=False)
  assert last_error_line(proc) == (
      f"error: --output_dir={out} holds a model trained with next_sentence_weight 0.0, not "
      "1.0; it would be reused. Pass --next_sentence_weight=0.0 to use it, or a new "
      "--output_dir to start afresh.")


@pytest.mark.slow
def test_outputs_eval_results_export_and_plot(setup, tmp_path):
  out = tmp_path / "run"
  proc = run_script("run_pretraining.py", *_pretrain_args(setup, out, "--do_eval",
                                                          "--max_eval_steps=3"))
  results = read_eval_results(out / "eval_results.txt")  # numbers only, as the original's
  assert list(results) == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                           "next_sentence_accuracy", "next_sentence_loss"]
  assert (out / "eval_results.txt").read_text().splitlines()[0] == "global_step = 30"
  from cli import run_identity
  assert json.loads((out / "run.json").read_text()) == {
      "objective": "mlm", "next_sentence_weight": 1.0, "optimizer": "adamw",
      **run_identity.vocab_entry(str(setup[1])), "objectives": ["masked_lm", "next_sentence"]}
  assert (out / "training_curves.png").stat().st_size > 1000
  assert "sequences/s" in proc.stderr and "ETA" in proc.stderr
  assert list((out / "train").glob("events.out.tfevents.*"))
  # The export is the original layout and reloads into a model with the same outputs.
  names = dict(tf.train.list_variables(str(out / "export" / "bert_model.ckpt")))
  assert "cls/predictions/output_bias" in names and "bert/pooler/dense/kernel" in names
  config = BertConfig.from_json_file(str(out / "export" / "bert_config.json"))
  model = BertPretrainer(BertEncoder(config))
  checkpoints.load_checkpoint(model, str(out / "export"))
  trained = BertPretrainer(BertEncoder(config))
  checkpoints.load_checkpoint(trained, str(out))  # our TF2 checkpoint of the same run
  batch = _batches(setup[2], 4, 1)[0]
  # float32, the same weights (the export copies their bits) through the same layers.
  assert_close(model(batch)["masked_lm_logits"], trained(batch)["masked_lm_logits"], "float32",
               2 * block_ops(config, L) + 4 * 16)


def test_nan_loss_stops_naming_the_step(setup, tmp_path):
  _, _, records, config, init = setup

  def poisoned(ctx):
    ds = pipeline.record_dataset(records, features.pretraining_feature_spec(L, P), 8, True, seed=3)
    return ds.enumerate().map(lambda i, b: {
        **b, "masked_lm_weights": b["masked_lm_weights"] * tf.where(i == 2, np.nan, 1.0)})
  trainer = training.Trainer(
      tf.distribute.get_strategy(), pretraining.PretrainingTask(config),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
      training.TrainConfig(output_dir=str(tmp_path), num_train_steps=10, global_batch_size=8,
                           steps_per_loop=5, log_steps=5, save_checkpoints_steps=5))
  with pytest.raises(ValueError) as e:
    trainer.train(poisoned, init_checkpoint=init)
  # float32 already: the advice is the learning rate alone.
  assert str(e.value) == ("The loss became NaN or infinite at step 3; stopping. Try a lower "
                          "--learning_rate.")
  assert not tf.train.latest_checkpoint(str(tmp_path))


def test_record_length_mismatch_is_one_line(setup, tmp_path):
  args = _pretrain_args(setup, tmp_path / "x")
  args = [a for a in args if not a.startswith("--max_seq_length")] + ["--max_seq_length=64"]
  proc = run_script("run_pretraining.py", *args, expect_ok=False)
  assert last_error_line(proc) == (
      f"error: {setup[2]}: input_ids has 32 values per record but --max_seq_length expects 64;"
      " regenerate the data or pass the matching flag.")


def test_compiled_loop_traces_its_step_once_and_sums_every_step(setup, tmp_path):
  """One call of the loop runs k steps from one traced step: its summed values and final
  weights equal k calls of one step each, on the same batches."""
  _, _, records, model_config, init = setup

  def trainer_and_batches(name):
    trainer = training.Trainer(
        tf.distribute.get_strategy(), pretraining.PretrainingTask(model_config),
        lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
        training.TrainConfig(output_dir=str(tmp_path / name), num_train_steps=100,
                             global_batch_size=4))
    checkpoints.load_checkpoint(trainer.model, init)
    batches = pipeline.record_dataset(records, features.pretraining_feature_spec(L, P), 4, True,
                                      seed=3)
    return trainer, iter(batches)

  looped, batches = trainer_and_batches("looped")
  traces = []
  step = looped._replica_step
  looped._replica_step = lambda batch: (traces.append(1), step(batch))[1]
  totals, first_bad, _ = looped._train_loop(batches, tf.constant(3))
  assert len(traces) == 1 and int(first_bad) == -1

  single, batches = trainer_and_batches("single")
  losses = [float(single._train_loop(batches, tf.constant(1))[0]["loss"]) for _ in range(3)]
  # The same step program looped or called (equal here): float32 orders of the forward
  # pass (2 blocks, the heads) and a sum of 3 losses, on the same weights (next assert).
  assert_close(float(totals["loss"]), sum(losses), "float32",
               2 * block_ops(model_config, L) + 4 * 16 + 3)
  assert int(looped.optimizer.iterations) == int(single.optimizer.iterations) == 3
  for a, b in zip(looped.model.trainable_variables, single.model.trainable_variables):
    # Training (Adam): outside helpers.rounding_tolerance's model; equal here, 1e-6 is
    # far below one update (up to 1e-3 * 3.2).
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)


def test_masked_lm_terms_equal_tensorflows_cross_entropy_and_argmax():
  """The fused masked-LM terms against TensorFlow's softmax cross-entropy kernel and a NumPy
  argmax (first index on ties), values and logit gradients within 1e-5."""
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(2, 3, 50)).astype("float32") * 4
  logits[0, 0, [7, 9]] = 30.0  # a tie: the first of the two counts
  ids = rng.integers(0, 50, (2, 3)).astype("int32")
  ids[0, 0], ids[0, 1] = 9, int(np.argmax(logits[0, 1]))
  x = tf.constant(logits)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    nll, correct = pretraining.masked_lm_terms(x, tf.constant(ids))
    reference = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, x)
    ours_sum, reference_sum = tf.reduce_sum(nll * 1.5), tf.reduce_sum(reference * 1.5)
  # float32, two implementations of a log-softmax over 50 logits, relative to the logits
  # (up to 30); its gradient (softmax minus one-hot, times 1.5) relative to 1.5.
  assert_close(nll.numpy(), reference.numpy(), "float32", 50 + 8, np.abs(logits).max())
  assert_close(tape.gradient(ours_sum, x).numpy(), tape.gradient(reference_sum, x).numpy(),
               "float32", 50 + 8, 1.5)
  # Exact: 0/1 from comparisons.
  np.testing.assert_array_equal(correct.numpy(), (np.argmax(logits, -1) == ids).astype("float32"))
  assert correct.numpy()[0, 0] == 0.0 and correct.numpy()[0, 1] == 1.0


def test_eval_results_hold_numbers_only_as_the_original_s(tmp_path):
  """`key = value` lines, keys sorted, values numbers: a reader parses each as a float."""
  from modeling import reports
  path = tmp_path / "eval_results.txt"
  reports.write_eval_results(str(path), {"loss": np.float32(0.5), "global_step": 30,
                                         "masked_lm_accuracy": 0.25})
  assert path.read_text() == "global_step = 30\nloss = 0.5\nmasked_lm_accuracy = 0.25\n"
  assert read_eval_results(path) == {"global_step": 30.0, "loss": 0.5, "masked_lm_accuracy": 0.25}
  with pytest.raises(TypeError, match="objectives = 'masked_lm' is not a number"):
    reports.write_eval_results(str(tmp_path / "other.txt"), {"objectives": "masked_lm"})
  assert not (tmp_path / "other.txt").exists()


def test_sigterm_logs_the_steps_since_the_last_row_and_a_resumed_run_goes_on(setup, tmp_path):
  """The stop's checkpoint comes with a row for the steps since the last one, so every step
  is logged once: the resumed run's rows start after it."""
  _, _, records, model_config, init = setup

  def trainer(steps):
    return training.Trainer(
        tf.distribute.get_strategy(), pretraining.PretrainingTask(model_config),
        lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
        training.TrainConfig(output_dir=str(tmp_path), num_train_steps=steps,
                             global_batch_size=8, steps_per_loop=1, log_steps=3,
                             save_checkpoints_steps=100))

  def dataset_fn(ctx):
    return pipeline.record_dataset(records, features.pretraining_feature_spec(L, P), 8, True,
                                   seed=3, input_context=ctx)
  first = trainer(10)
  loop = first._train_loop

  def stopped_at_5(iterator, steps):  # as SIGTERM's handler does, after step 5
    out = loop(iterator, steps)
    first._stop_requested = first.global_step == 5
    return out
  first._train_loop = stopped_at_5
  with pytest.raises(SystemExit) as e:
    first.train(dataset_fn, init_checkpoint=init)
  assert e.value.code == 143 and tf.train.latest_checkpoint(str(tmp_path)).endswith("-5")
  rows = lambda: [int(r.split(",")[0]) for r in (tmp_path / "train_log.csv").read_text().split()[1:]]
  assert rows() == [3, 5]
  trainer(7).train(dataset_fn)
  assert rows() == [3, 5, 6, 7]


def test_a_resumed_step_log_drops_the_lost_runs_rows_after_its_step(tmp_path):
  from modeling import reports
  path = str(tmp_path / "train_log.csv")
  for step in (2, 4, 6):
    reports.CsvLog(path).append(step, {"loss": 1.0})
  reports.CsvLog(path, start=2).append(8, {"loss": 0.5})  # resumed at 2, first row at 8
  assert (tmp_path / "train_log.csv").read_text().split() == ["step,loss", "2,1", "8,0.5"]
