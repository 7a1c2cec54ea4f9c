"""Evaluation and prediction files with two mirrored replicas against one device's.

run_classifier.py and run_squad.py run as a user would, once on one device and
once with --strategy=mirrored over two logical CPUs (tests/two_cpus.py), from
the same random checkpoint. Dataset sizes are multiples of neither the one-device
batch (3) nor the two-replica global batch (6), so both runs pad their last
batch, with different numbers of padding examples.
"""

import json
import random

import numpy as np
import pytest

from conftest import write_vocab
from data import glue, squad, tokenization
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.span_labeling import BertSpanLabeler
from helpers import assert_close, assert_same_numbers, block_ops, randomize, read_eval_results
from scripts import run_script

WORDS = ["the", "a", "cat", "sat", "on", "mat", "film", "was", "good", "bad", "very", "plot",
         "where", "is", "who", "zebra", "park", "in", "hello", "world", "steve", "smith", "'",
         "s", "un", "##believ", "##able", "##s", ".", ",", "!", "?"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """(directory, vocab, random-weight models): config and vocab are written beside each."""
  root = tmp_path_factory.mktemp("replicas")
  vocab = write_vocab(root / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)
  config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                      type_vocab_size=2)
  models = {"classifier": BertClassifier(BertEncoder(config), 2),
            "span": BertSpanLabeler(BertEncoder(config))}
  for seed, model in enumerate(models.values()):
    model.build()
    randomize(model, seed=seed, scale=0.3)  # far from uniform outputs: every row differs
  return root, config, vocab, models


def _save(model_dir, name):
  root, config, vocab, models = model_dir
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(models[name]), str(root / name),
                                  config, vocab)
  return root / name


def _two_runs(script, out_root, *args):
  """The output directories of a one-device run and of a two-replica run."""
  single, mirrored = out_root / "single", out_root / "mirrored"
  run_script(script, f"--output_dir={single}", *args)
  proc = run_script("tests/two_cpus.py", script, f"--output_dir={mirrored}",
                    "--strategy=mirrored", *args)
  assert "MirroredStrategy with 2 replica(s)" in proc.stderr
  return single, mirrored


def _sentences(rng, n, header, labelled):
  rows = [header]
  for i in range(n):
    words = " ".join(rng.choice(WORDS[:12]) for _ in range(rng.randint(2, 12)))
    rows.append(f"{words}\t{rng.randint(0, 1)}" if labelled else f"{i}\t{words}")
  return "\n".join(rows) + "\n"


@pytest.mark.slow
def test_glue_eval_and_predict_files_match_one_device(model_dir, tmp_path):
  rng = random.Random(0)
  data = tmp_path / "data"
  data.mkdir()
  (data / "dev.tsv").write_text(_sentences(rng, 31, "sentence\tlabel", True))
  (data / "test.tsv").write_text(_sentences(rng, 22, "index\tsentence", False))
  # Centre the classifier's bias on the test rows, so that both classes are predicted.
  task = glue.get_task("SST-2")
  model = model_dir[3]["classifier"]
  arrays = glue.feature_arrays(task, glue.examples(task, str(data), "test"),
                               tokenization.FullTokenizer(model_dir[2]), 16)
  logits = np.asarray(model({k: arrays[k].astype("int32") for k in
                             ("input_ids", "input_mask", "segment_ids")})["logits"])
  bias = checkpoints.variable_map(model)["output_bias"]
  shift = [0.0, float(np.median(logits[:, 1] - logits[:, 0]))]
  bias.assign(bias.numpy() - shift)
  scale = np.abs(logits - shift).max()  # the logits' magnitude
  single, mirrored = _two_runs(
      "run_classifier.py", tmp_path, "--task_name=SST-2", f"--data_dir={data}",
      f"--init_checkpoint={_save(model_dir, 'classifier')}", "--do_eval", "--do_predict",
      "--max_seq_length=16", "--eval_batch_size=3", "--predict_batch_size=3")
  probabilities = np.loadtxt(single / "test_results.tsv")
  assert probabilities.shape == (22, 2) and len(np.unique(probabilities[:, 0])) == 22
  assert 5 < probabilities.argmax(-1).sum() < 17  # both classes predicted
  # Equal up to float rounding: the last layer computes only [CLS] rows, so its
  # matrix products have as many rows as a replica's batch, and oneDNN may sum
  # a 2-row and a 3-row product in different orders. float32 through 2 blocks, the
  # pooler and the classifier (sums of 16), relative to the logits: a probability
  # moves by at most half the change of the logits' difference, a loss by twice a
  # logit's, summed over 31 examples.
  ops = 2 * block_ops(model_dir[1], 16) + 2 * 16
  assert_close(np.loadtxt(mirrored / "test_results.tsv"), probabilities, "float32", ops, scale)
  # Exact: the same predicted classes.
  assert (mirrored / "SST-2.tsv").read_text() == (single / "SST-2.tsv").read_text()
  results = [read_eval_results(run / "eval_results.txt") for run in (single, mirrored)]
  assert sorted(results[0]) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  assert_same_numbers(results[1], results[0], "float32", 4 * ops + 31, scale, "eval_results")
  submission = (single / "SST-2.tsv").read_text().splitlines()
  assert submission[1:] == [f"{i}\t{p}" for i, p in enumerate(probabilities.argmax(-1))]


def _squad_data(rng, n):
  """v2.0 questions on contexts of a few windows; odd ones unanswerable."""
  paragraphs = []
  for i in range(n):
    words = [rng.choice(WORDS[:22]) for _ in range(rng.randint(8, 40))]
    at = rng.randint(0, len(words))
    words.insert(at, "zebra")
    context = " ".join(words)
    start = len(" ".join(words[:at])) + (1 if at else 0)
    qa = {"id": f"q{i}", "question": "where is the zebra ?", "is_impossible": bool(i % 2),
          "answers": [] if i % 2 else [{"text": "zebra", "answer_start": start}]}
    paragraphs.append({"context": context, "qas": [qa]})
  return {"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}


@pytest.mark.slow
def test_squad_prediction_files_match_one_device(model_dir, tmp_path):
  dev = tmp_path / "dev.json"
  dev.write_text(json.dumps(_squad_data(random.Random(1), 18)))
  flags = ["--max_seq_length=24", "--doc_stride=6", "--max_query_length=6"]
  examples = squad.read_squad_examples(str(dev), False, True)
  tokenizer = tokenization.FullTokenizer(model_dir[2])
  features = squad.convert_examples_to_features(examples, tokenizer, 24, 6, 6, False)
  assert len(features) % 3 and len(features) % 6 and len(features) > 2 * len(examples)
  single, mirrored = _two_runs(
      "run_squad.py", tmp_path, f"--predict_file={dev}", "--do_predict",
      f"--init_checkpoint={_save(model_dir, 'span')}", "--version_2_with_negative",
      "--predict_batch_size=3", "--n_best_size=5", *flags)
  predictions = json.loads((single / "predictions.json").read_text())
  assert len(predictions) == 18 and len(set(predictions.values())) > 3
  # Parsed and compared as numbers, never as text: logits computed with other batch
  # layouts differ in the last digits (1.2e-6 in an end logit of 1.22 on AVX2 and AMX).
  # float32 through 2 blocks and the span head (sums of 16), relative to the largest
  # logit; probabilities, null odds and thresholds combine up to four logits (four
  # times the roundings). Texts and scores of texts are exact.
  nbest = json.loads((single / "nbest_predictions.json").read_text())
  scale = max(abs(e[k]) for entries in nbest.values() for e in entries
              for k in ("start_logit", "end_logit"))
  ops = 4 * (2 * block_ops(model_dir[1], 24) + 16)
  for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
    assert_same_numbers(json.loads((mirrored / name).read_text()),
                        json.loads((single / name).read_text()), "float32", ops, scale, name)
  assert_same_numbers(read_eval_results(mirrored / "eval_results.txt"),
                      read_eval_results(single / "eval_results.txt"), "float32", ops, scale,
                      "eval_results")
