"""Mixed precision: float16's dynamic loss scale (Keras' LossScaleOptimizer in our loop),
and bfloat16/float16 training through the scripts' --dtype flag against float32."""

import csv
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from data import features, pipeline
from helpers import block_ops, rounding_tolerance
from modeling import checkpoints, distribution, layers, optimization, pretraining, training
from scripts import run_script
from test_classifier import _common, _sst2, classifier_files
from test_training import L, P, training_files


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return training_files(tmp_path_factory.mktemp("train"))


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
  return classifier_files(tmp_path_factory.mktemp("clf"))


@pytest.fixture
def float16():
  keras.mixed_precision.set_global_policy("mixed_float16")
  yield
  keras.mixed_precision.set_global_policy("float32")


def _trainer(setup, out, steps, loss_scaling=True, growth=2):
  config = setup[3]
  return training.Trainer(
      tf.distribute.get_strategy(), pretraining.PretrainingTask(config),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 2, names),
      training.TrainConfig(output_dir=str(out), num_train_steps=steps, global_batch_size=8,
                           steps_per_loop=1, log_steps=1, save_checkpoints_steps=steps,
                           loss_scaling=loss_scaling, loss_scale_growth_steps=growth))


def _dataset_fn(records):
  return lambda ctx: pipeline.record_dataset(records, features.pretraining_feature_spec(L, P),
                                             ctx.get_per_replica_batch_size(8), True, seed=3,
                                             input_context=ctx)


def test_float16_loss_scale_grows_shrinks_and_is_checkpointed(setup, tmp_path, float16):
  records, init = setup[2], setup[4]
  first = _trainer(setup, tmp_path, steps=3)
  assert first.loss_scale == 2.0 ** 15
  first.train(_dataset_fn(records), init_checkpoint=init)
  # Doubled after 2 finite steps; step 3 counts 1 toward the next doubling.
  assert first.global_step == 3 and first.loss_scale == 2.0 ** 16
  assert int(first.scaler.step_counter.numpy()) == 1
  resumed = _trainer(setup, tmp_path, steps=4)
  resumed.train(_dataset_fn(records))
  # Only a restored scale (2^16) and count (1) double to 2^17 at step 4.
  assert resumed.global_step == 4 and resumed.loss_scale == 2.0 ** 17
  # Overflow: at 2^40 the float16 activation gradients exceed 65504.
  resumed.scaler.dynamic_scale.assign(2.0 ** 40)
  before = checkpoints.model_weights(resumed.model)
  iterator = iter(resumed.strategy.distribute_datasets_from_function(_dataset_fn(records)))
  totals, first_bad, first_bad_loss = resumed._train_loop(iterator, tf.constant(1))
  assert int(first_bad) == 5 and int(first_bad_loss) == -1  # step 5, tried and skipped
  assert float(totals["loss"]) == 0.0  # a skipped step counts nowhere
  assert resumed.global_step == 4 and resumed.loss_scale == 2.0 ** 39  # skipped and halved
  after = checkpoints.model_weights(resumed.model)
  for name in before:
    # Exact: a skipped step leaves every weight's bits alone.
    np.testing.assert_array_equal(before[name], after[name], err_msg=name)


def test_float16_gradients_are_unscaled(setup, tmp_path, float16):
  """The step's gradients in float16 with a 2^15 loss scale match float32's to 1%."""
  records, init = setup[2], setup[4]
  half = _trainer(setup, tmp_path / "half", steps=1)
  half.restore(init)
  got = half.summed_gradients(_dataset_fn(records))
  keras.mixed_precision.set_global_policy("float32")
  full = _trainer(setup, tmp_path / "full", steps=1, loss_scaling=False)
  full.restore(init)
  want = full.summed_gradients(_dataset_fn(records))
  norm = lambda grads: np.sqrt(sum(np.sum(np.square(g, dtype="float64")) for g in grads.values()))
  diff = {k: got[k] - want[k] for k in want}
  # float16 against float32, forward and backward through 2 blocks and the heads (the
  # masked LM's and next sentence's dense layers, 4 roundings each, and an activation),
  # relative to the gradients' norm; the 2^15 loss scale
  # and its removal are exact (a power of 2). A missing unscaling is off by 2^15.
  ops = 2 * (2 * block_ops(setup[3], 32, "float16") + 3 * 4 + 1)
  assert norm(diff) < rounding_tolerance("float16", ops, norm(want)), (norm(diff), norm(want))


def _losses(out):
  with open(out / "train_log.csv") as f:
    return {int(row["step"]): float(row["loss"]) for row in csv.DictReader(f)}


@pytest.mark.slow
@pytest.mark.bfloat16
def test_dtype_flag_trains_like_float32(model_files, tmp_path):
  """run_classifier.py --dtype: bfloat16 and float16 losses follow float32's step by step."""
  d, vocab = model_files
  config = json.loads((d / "bert_config.json").read_text())
  # No encoder dropout: its masks are drawn in the compute dtype, so they would differ.
  config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  (tmp_path / "bert_config.json").write_text(json.dumps(config))
  _sst2(tmp_path / "data", seed=4, n_train=96)
  losses = {}
  for dtype in ("float32", "bfloat16", "float16"):
    out = tmp_path / dtype
    run_script("run_classifier.py", *_common(
        d, vocab, tmp_path / "data", out, "--task_name=SST-2", "--do_train",
        f"--bert_config_file={tmp_path / 'bert_config.json'}", "--train_batch_size=16",
        "--learning_rate=1e-3", "--num_train_epochs=2", "--log_steps=1", f"--dtype={dtype}"))
    losses[dtype] = _losses(out)
  scale = tf.train.load_variable(tf.train.latest_checkpoint(str(tmp_path / "float16")),
                                 "state/by_name/loss_scale/.ATTRIBUTES/VARIABLE_VALUE")
  assert scale == 2.0 ** 15  # no overflow in these 12 steps
  steps = sorted(losses["float32"])
  assert steps == list(range(1, 13))
  want = np.array([losses["float32"][s] for s in steps])
  # Each step's loss, 16-bit against float32, over 12 Adam steps. From step 2 on the
  # weights differ by Adam's treatment of rounding noise, so no bound follows from the
  # arithmetic (helpers.adam_step). The tolerance is built from the rounding that sets
  # the loss instead: a mean of 16 cross entropies (near ln 2) at logits of about 0.1
  # (the head's initial scale), each logit rounded at u = 2**-8 (2**-11): 0.1 * u * 0.5
  # (the softmax's slope) / sqrt(16) / ln 2 = 7e-5 (9e-6) relative; the bound is 14x
  # (22x) that, for the rounding the encoder carries and 12 steps of drift. A wrong step
  # is seen: the loss moves by 1e-2 between steps. (1.3e-4 and 2e-5 on AVX2.)
  for dtype, tolerance in (("bfloat16", 1e-3), ("float16", 2e-4)):
    got = np.array([losses[dtype][s] for s in steps])
    np.testing.assert_allclose(got, want, rtol=tolerance, err_msg=dtype)


def test_bfloat16_warning_only_where_it_is_emulated_or_rounds_toward_zero():
  from modeling import distribution
  amd_avx2 = "flags\t\t: fpu sse sse2 avx avx2 fma\n"
  intel_avx512 = "flags\t\t: fpu avx2 avx512f avx512bw\n"  # oneDNN's kernels, no units
  amd_bf16 = "flags\t\t: fpu avx2 avx512f avx512_bf16\n"
  intel_amx = "flags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"
  warn = distribution.bfloat16_warning
  # TensorFlow's own kernels (an AVX2 CPU, as TensorFlow decides): emulated and truncating.
  warning = warn("bfloat16", False, amd_avx2, False)
  assert "slower than float32" in warning and "float32 is faster" in warning
  assert "round every one toward zero" in warning
  # oneDNN's kernels without bfloat16 units: emulated, rounded to nearest.
  warning = warn("bfloat16", False, intel_avx512, True)
  assert "slower than float32" in warning and "toward zero" not in warning
  assert "toward zero" in warn("bfloat16", False, intel_avx512, False)  # kernels off
  for cpuinfo in (amd_bf16, intel_amx):
    assert warn("bfloat16", False, cpuinfo, True) is None
    warning = warn("bfloat16", False, cpuinfo, False)  # TF_ENABLE_ONEDNN_OPTS=0 or false
    assert "toward zero" in warning and "TF_ENABLE_ONEDNN_OPTS=1" in warning
    assert "slower" not in warning  # TensorFlow's own bfloat16 products are not slower there
  # Elsewhere (ARM, no /proc/cpuinfo) only what TensorFlow says of its kernels.
  assert warn("bfloat16", False, "Features\t: fp asimd bf16\n", False, x86=False) == (
      "bfloat16: TensorFlow's own kernels compute the bfloat16 products here and round every "
      "one toward zero (not under --jit_compile, whose XLA rounds to nearest).")
  assert warn("bfloat16", False, None, True) is None
  assert "toward zero" in warn("bfloat16", False, None, False)
  assert warn("bfloat16", False, amd_avx2, None) == warn("bfloat16", False, intel_avx512, True)
  assert warn("bfloat16", True, amd_avx2, False) is None  # a GPU does it
  for dtype in ("float32", "float16"):
    assert warn(dtype, False, amd_avx2, False) is None
  # This process: TensorFlow's own answer, a bool in TensorFlow 2.20.
  assert distribution.onednn_bfloat16() in (True, False)


def test_precision_line_names_what_stays_float32_and_the_units():
  assert distribution.precision_line("float32", "AMX") == "float32 throughout."
  line = distribution.precision_line("bfloat16", distribution.cpu_units("flags : amx_bf16"))
  assert "bfloat16 matrix products, forward and backward, on the CPU's AMX units" in line
  assert "LayerNorm and losses stay float32" in line
  assert distribution.cpu_units("flags : avx512_bf16 avx2") == "AVX-512 BF16"
  assert distribution.cpu_units("flags : avx2") is None and distribution.cpu_units(None) is None
  assert ", on the TPU;" in distribution.precision_line("bfloat16", "TPU")
  assert "forward and backward;" in distribution.precision_line("bfloat16", None)
  assert distribution.precision_line("float16", None) == (
      "float16 matrix products, forward and backward; the weights, optimizer state, residual "
      "stream, LayerNorm and losses stay float32; dynamic loss scaling skips a step whose "
      "gradients overflow.")
  assert distribution.precision_line("bfloat16", "AVX-512 BF16", training=False) == (
      "bfloat16 matrix products, on the CPU's AVX-512 BF16 units; the residual stream, "
      "LayerNorm and losses stay float32.")  # not the weights: an export's are 16-bit


@pytest.mark.parametrize("onednn", [True, False])
def test_the_log_names_the_units_only_where_onednn_runs_the_products(onednn, monkeypatch):
  """describe's Precision line names the CPU's bfloat16 units only where TensorFlow hands
  its bfloat16 products to oneDNN; where its own kernels run them, the warning says so."""
  if tf.config.list_logical_devices("GPU"):
    pytest.skip("a GPU runs the products")
  monkeypatch.setattr(distribution, "read_cpuinfo", lambda: "flags : avx2 avx512f avx512_bf16")
  monkeypatch.setattr(distribution, "onednn_bfloat16", lambda: onednn)
  monkeypatch.setattr(distribution.platform, "machine", lambda: "x86_64")
  logged = []  # what describe logs, whatever logging handlers other tests left behind
  monkeypatch.setattr(distribution.logging, "info", lambda f, *a: logged.append(f % a))
  monkeypatch.setattr(distribution.logging, "warning", lambda f, *a: logged.append(
      f % a if a else f))
  distribution.set_precision("bfloat16")
  try:
    distribution.describe(tf.distribute.get_strategy())
  finally:
    distribution.set_precision("float32")
  text = "\n".join(logged)
  assert ("on the CPU's AVX-512 BF16 units" in text) == onednn
  assert ("round every one toward zero" in text) != onednn
  logged.clear()
  distribution.set_precision("float16")  # no bfloat16 units for it, and a warning instead
  try:
    distribution.describe(tf.distribute.get_strategy())
  finally:
    distribution.set_precision("float32")
  text = "\n".join(logged)
  assert "units" not in text.split("Precision: ")[1].split("\n")[0]
  assert "--dtype=float16 on a CPU" in text and "dynamic loss scaling" in text


@pytest.mark.bfloat16
@pytest.mark.parametrize("rows", [4096, 100])
def test_bfloat16_bias_gradient_is_summed_in_float32(rows):
  """In bfloat16 training a dense layer's bias gradient, the sum of the upstream gradient's
  rows, is the float32 sum of the bfloat16 values rounded once to bfloat16 (as the weight
  gradients' products are), not a bfloat16 running sum, whose total stops growing once
  the terms fall below half its spacing (4,096 rows of ones summed so come to 256)."""
  rng = np.random.default_rng(0)
  distribution.set_precision("bfloat16")
  try:
    dense = layers.dense(8, 0.02, "d")
    dense.build((None, 4))
    x = tf.constant(rng.standard_normal((rows, 4)), tf.float32)
    # Positive terms of mean 1: a bfloat16 running sum loses most of them.
    dy = tf.constant(rng.uniform(0.5, 1.5, (rows, 8)), tf.bfloat16)
    with tf.GradientTape() as tape:
      y = dense(x, training=True)
    got = tape.gradient(y, dense.bias, output_gradients=dy)
  finally:
    distribution.set_precision("float32")
  exact = np.sum(np.asarray(tf.cast(dy, tf.float64)), axis=0)
  # The float32 sum of `rows` positive terms is within rows * 2^-24 of the exact sum
  # (relative), and rounding it to bfloat16 (8 significant bits) at most 2^-8 of that.
  bound = (2.0 ** -8 + rows * 2.0 ** -24) * (1 + 2.0 ** -8) * exact
  assert got.dtype == tf.float32
  np.testing.assert_array_less(np.abs(got.numpy() - exact), bound)


def _poisoned(records, at):
  """The batches of _dataset_fn with NaN masked LM weights in batch `at` (0-based): its
  loss is NaN, whatever the loss scale."""
  spec = features.pretraining_feature_spec(L, P)
  return lambda ctx: pipeline.record_dataset(records, spec, 8, True, seed=3).enumerate().map(
      lambda i, b: {**b, "masked_lm_weights": b["masked_lm_weights"] *
                    tf.where(i == at, np.nan, 1.0)})


def test_float16_nan_loss_stops_the_run_as_float32_does(setup, tmp_path, float16):
  """Loss scaling skips a step whose gradients overflow; a loss that is not finite is not
  the scale's doing (skipped, it would be skipped forever): it stops the run."""
  trainer = _trainer(setup, tmp_path, steps=4)
  with pytest.raises(ValueError) as e:
    trainer.train(_poisoned(setup[2], at=1), init_checkpoint=setup[4])
  assert str(e.value) == ("The loss became NaN or infinite at step 2; stopping. Try a lower "
                          "--learning_rate or --dtype=float32.")
  assert trainer.global_step == 1


def test_float16_skipped_steps_are_not_logged_saved_or_evaluated_again(setup, tmp_path, float16):
  """Overflowing gradients (a finite loss) skip steps at step 0 until the scale fits: those
  calls write no row, checkpoint or evaluation of step 0, and no row's values are theirs."""
  trainer = _trainer(setup, tmp_path, steps=3)
  trainer.build_optimizer()
  trainer.scaler.dynamic_scale.assign(2.0 ** 40)  # overflows in float16 (test above)
  evaluations = []

  class Evaluator:
    every, stopped = 1, False
    start = lambda self, step: None
    due = lambda self, step, last: True
    __call__ = lambda self, state, step: evaluations.append(step)
  trainer.train(_dataset_fn(setup[2]), init_checkpoint=setup[4], evaluator=Evaluator())
  assert trainer.global_step == 3 and trainer.loss_scale < 2.0 ** 38  # steps were skipped
  assert evaluations == [1, 2, 3]
  saved = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
  assert [int(p.rsplit("-", 1)[1]) for p in saved] == [1, 2, 3]
  with open(tmp_path / "train_log.csv") as f:
    rows = list(csv.DictReader(f))
  assert [int(r["step"]) for r in rows] == [1, 2, 3]
  assert all(np.isfinite(float(r["grad_norm"])) and float(r["loss"]) > 0 for r in rows)
