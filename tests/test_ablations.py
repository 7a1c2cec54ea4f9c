"""The paper's pretraining ablations: masking mixes (Table 8), no NSP pairs, NSP weight."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from data import features, pipeline, tokenization
from data.pretraining import documents, generation, instances
from data.pretraining.streaming import generate_streaming
from helpers import read_eval_results
from modeling import checkpoints, optimization, pretraining, training
from modeling.config import BertConfig
from scripts import last_error_line, run_script
from test_pretraining_data import check_statistics, make_corpus, make_vocab, read_records

TABLE_8 = [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.0, 0.2), (0.8, 0.2, 0.0),
           (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  d = tmp_path_factory.mktemp("ablations")
  vocab_file = make_vocab(d / "vocab.txt")
  text = make_corpus(d / "corpus.txt", documents=40, seed=21, min_sentences=20,
                     max_sentences=80, max_words=8)
  return d, vocab_file, text


def _expected_shares(mix, vocab_size):
  """The summary's [MASK]/kept/random shares: a random word is [MASK] one time in vocab_size."""
  mask, same, rand = mix
  return [mask + rand / vocab_size, same, rand * (1 - 1 / vocab_size)]


@pytest.mark.parametrize("mix", TABLE_8)
def test_observed_shares_follow_the_masking_mix(corpus, mix):
  d, vocab_file, text = corpus
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 8, mix)
  out = str(d / f"mix_{'_'.join(map(str, mix))}")
  summary = generation.generate_exact([text], [out], vocab_file, True, config, 4)
  assert summary.masked > 20_000
  observed = np.array([summary.masked_as_mask, summary.masked_kept, summary.masked_random])
  vocab = tokenization.FullTokenizer(vocab_file).vocab
  # Sampling, not rounding, and seeded (the same on every CPU): about 5 standard errors
  # of a share over 20,000 positions.
  np.testing.assert_allclose(observed / summary.masked, _expected_shares(mix, len(vocab)),
                             atol=0.015)
  records = read_records([out], 64, 10)
  check_statistics(records, None, 2, 3, 4)  # structure and counts as the default's
  real = records["masked_lm_weights"] > 0
  written = records["input_ids"][np.arange(len(real))[:, None], records["masked_lm_positions"]]
  if mix == (1.0, 0.0, 0.0):
    assert (written[real] == vocab["[MASK]"]).all()
  if mix[2] == 0.0:  # nothing random: a masked position holds [MASK] or its own token
    assert ((written == vocab["[MASK]"]) | (written == records["masked_lm_ids"]))[real].all()
  mix_text = "/".join(f"{share * 100:g}%" for share in mix)
  assert any(f"masking mix {mix_text}" in line for line in summary.lines())


def test_default_mix_draws_exactly_the_original(corpus):
  d, vocab_file, text = corpus
  base = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 2)
  explicit = base._replace(masking_mix=tuple(float(s) for s in "0.8,0.1,0.1".split(",")),
                           next_sentence=True)
  a, b = str(d / "default"), str(d / "explicit")
  generation.generate_exact([text], [a], vocab_file, True, base, 9)
  generation.generate_exact([text], [b], vocab_file, True, explicit, 9)
  assert open(a, "rb").read() == open(b, "rb").read()
  assert 0.1 / (0.1 + 0.1) == 0.5  # the second draw's threshold is the original's exactly
  other = str(d / "other")  # and a different mix does change the records
  generation.generate_exact([text], [other], vocab_file, True,
                            base._replace(masking_mix=(0.8, 0.0, 0.2)), 9)
  assert open(a, "rb").read() != open(other, "rb").read()


def test_without_next_sentence_each_instance_is_contiguous_text_of_one_document(corpus):
  d, vocab_file, text = corpus
  tokenizer = tokenization.FullTokenizer(vocab_file)
  vocab = instances.masking_vocab(tokenizer.vocab)
  read = documents.ReadStats()
  data = documents.read_corpus([text], tokenizer, read)
  for short in (0.1, 0.9):
    config = instances.GenerationConfig(64, 10, 0.15, short, False, 2, next_sentence=False)
    store, _, _ = instances.create_training_instances(data, config, vocab, random.Random(3))
    a0, a1, b0, b1, nsp = store.ranges.T
    assert len(store) > 500 and not nsp.any()
    first_token = data.segment_starts[data.documents[:, 0]]
    end_token = data.segment_starts[data.documents[:, 1]]
    document = np.searchsorted(first_token, a0, side="right") - 1
    assert (a0 >= first_token[document]).all() and (b1 <= end_token[document]).all()
    # B follows A (truncation may trim A's end and B's start, never reorder).
    assert (a1 <= b0).all() and (a0 < a1).all() and (b0 <= b1).all()
    untrimmed = (a1 - a0) + (b1 - b0) < config.max_seq_length - 3
    assert (a1[untrimmed] == b0[untrimmed]).all()


@pytest.mark.parametrize("streaming", [False, True])
def test_without_next_sentence_labels_are_all_zero(corpus, streaming):
  d, vocab_file, text = corpus
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 2,
                                      masking_mix=(0.0, 0.2, 0.8), next_sentence=False)
  paths = [str(d / f"nonsp_{streaming}_{i}") for i in range(2)]
  if streaming:
    summary = generate_streaming(
        [text], paths, vocab_file, True, config, 1, num_workers=2, block_tokens=5_000,
        shuffle_buffer_size=100)
  else:
    summary = generation.generate_exact([text], paths, vocab_file, True, config, 1)
  records = read_records(paths, 64, 10)
  assert summary.instances == len(records["input_ids"]) > 500
  assert not records["next_sentence_labels"].any() and summary.random_next == 0
  assert any("next-sentence pairs off" in line for line in summary.lines())
  _, kinds, _ = check_statistics(records, None, 2, 3, 4)
  assert kinds[0] < 0.05  # [MASK] only as a random word


def _generator_args(d, vocab_file, text, *extra):
  return [f"--input_file={text}", f"--output_file={d / 'script.tfrecord'}",
          f"--vocab_file={vocab_file}", "--dupe_factor=1", *extra]


@pytest.mark.parametrize("mix", ["0.8,0.1", "0.8,0.1,0.2", "0.9,0.2,-0.1", "a,b,c", ""])
def test_bad_masking_mix_is_a_one_line_error(corpus, mix):
  d, vocab_file, text = corpus
  proc = run_script("create_pretraining_data.py",
                    *_generator_args(d, vocab_file, text, f"--masking_mix={mix}"),
                    expect_ok=False)
  assert proc.returncode != 0
  line = last_error_line(proc)
  assert line.startswith("error: --masking_mix=") and "Traceback" not in proc.stderr, line


def test_script_reports_the_ablation_settings(corpus):
  d, vocab_file, text = corpus
  proc = run_script("create_pretraining_data.py",
                    *_generator_args(d, vocab_file, text, "--masking_mix=1,0,0",
                                     "--nonext_sentence", "--max_seq_length=32"))
  assert "settings: masking mix 100%/0%/0% [MASK]/kept/random, next-sentence pairs off" \
      in proc.stderr
  records = read_records([str(d / "script.tfrecord")], 32, 20)
  assert not records["next_sentence_labels"].any()


# --- --next_sentence_weight ---------------------------------------------------

L, P = 32, 5
NEXT_SENTENCE_ONLY = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias",
                      "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias")


@pytest.fixture(scope="module")
def model_setup(corpus):
  d, vocab_file, text = corpus
  records = str(d / "train.tfrecord")
  generation.generate_exact(
      [text], [records], vocab_file, True,
      instances.GenerationConfig(L, P, 0.15, 0.1, False, 1), 1)
  size = len(open(vocab_file).read().split())
  config = BertConfig(vocab_size=size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64)
  config.to_json_file(str(d / "bert_config.json"))
  return d, vocab_file, records, config


def _train(records, config, weight, out, steps=4):
  def dataset_fn(ctx):
    return pipeline.record_dataset(records, features.pretraining_feature_spec(L, P),
                                   ctx.get_per_replica_batch_size(8), True, seed=3,
                                   input_context=ctx)
  trainer = training.Trainer(
      tf.distribute.get_strategy(), pretraining.PretrainingTask(config, weight),
      lambda names: optimization.create_optimizer("adamw", 1e-3, 100, 1, names),
      training.TrainConfig(output_dir=str(out), num_train_steps=steps, global_batch_size=8,
                           steps_per_loop=steps, log_steps=steps, save_checkpoints_steps=steps))
  before = {k: np.array(v) for k, v in checkpoints.model_weights(trainer.model).items()}
  trainer.train(dataset_fn)
  return trainer, before, checkpoints.model_weights(trainer.model)


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_zero_next_sentence_weight_leaves_the_next_sentence_head_untouched(
    model_setup, tmp_path, weight):
  _, _, records, config = model_setup
  trainer, before, after = _train(records, config, weight, tmp_path)
  assert set(NEXT_SENTENCE_ONLY) <= set(after)
  for name in after:
    unchanged = np.array_equal(before[name], after[name])  # exact: no update keeps the bits
    if name in NEXT_SENTENCE_ONLY:
      assert unchanged == (weight == 0), name
    else:
      assert not unchanged, f"{name} did not train"
  logged = open(tmp_path / "train_log.csv").readline().strip().split(",")
  assert ("next_sentence_accuracy" in logged) == bool(weight)
  assert ("next_sentence_loss" in logged) == bool(weight)


@pytest.mark.slow
def test_run_json_names_the_trained_objectives(model_setup, tmp_path):
  d, vocab_file, records, _ = model_setup
  out = tmp_path / "run"
  run_script("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
             f"--input_file={records}", f"--output_dir={out}", "--do_train", "--do_eval",
             f"--max_seq_length={L}", f"--max_predictions_per_seq={P}", "--train_batch_size=8",
             "--num_train_steps=3", "--num_warmup_steps=1", "--iterations_per_loop=3",
             "--max_eval_steps=2", "--next_sentence_weight=0", f"--vocab_file={vocab_file}",
             "--dynamic_masking", "--per_word_decision")  # the flags' wiring, at no extra run
  # (the masks themselves: test_dynamic_masking)
  results = read_eval_results(out / "eval_results.txt")  # numbers only, as the original's
  assert list(results) == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"]
  assert json.loads((out / "run.json").read_text())["objectives"] == ["masked_lm"]
  refused = lambda *flags: last_error_line(run_script(  # noqa: E731
      "run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
      f"--input_file={records}", f"--output_dir={tmp_path / 'bad'}", "--do_train", *flags,
      expect_ok=False))
  assert refused("--next_sentence_weight=-1").startswith("error: --next_sentence_weight=-1")
  assert refused("--do_whole_word_mask") == (
      "error: --do_whole_word_mask without --dynamic_masking: training reads the records' own "
      "masks (give it to create_pretraining_data.py), or add --dynamic_masking to mask anew.")
  assert refused("--masked_lm_prob=0.2").startswith(
      "error: --masked_lm_prob without --dynamic_masking")
  # --dynamic_masking takes the vocab wherever a vocab default is found (beside
  # --init_checkpoint, in a resumed --output_dir); with none anywhere, that is what it says.
  assert refused("--dynamic_masking") == ("error: --vocab_file is required when "
                                          "--init_checkpoint is not given and --output_dir "
                                          "holds no trained model's vocab.txt.")
  assert not (tmp_path / "bad").exists()  # each refused before anything is written
