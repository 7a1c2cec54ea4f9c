"""Inputs wrong in ways knowable before training stop the run before its first step.

Each case runs an entry script with --do_train (or what else would do work
first) and input that only a later stage used to read: a dev file without
gold tags or labels, a predict file that cannot be scored, a checkpoint of
another model, an export path that cannot be written. The run must end in
one line `error: ...` (exit 1, no traceback) and leave --output_dir exactly
as it was: no checkpoint, no train.tf_record, nothing but what was there.
"""

import csv
import json

import numpy as np
import pytest

from conftest import write_vocab
from data import tfrecords
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from scripts import last_error_line, run_script

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "the", "a", "good", "bad",
         "film", "man", "walks", "john", "lives", "in", "paris", "who"]
L, P = 16, 3
SWAG_HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
               "ending0", "ending1", "ending2", "ending3", "label"]


def _config(hidden):
  return BertConfig(vocab_size=len(WORDS), hidden_size=hidden, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=16, max_position_embeddings=32,
                    type_vocab_size=2)


def _swag(path, labels):
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(SWAG_HEADER)
    for i, label in enumerate(labels):
      writer.writerow([f"v{i}", str(i), "the man", "the man", "walks", "gold", "a", "the",
                       "film", "good", label])


def _squad(path, questions):
  """A SQuAD file of one paragraph; questions: (id, answers list or None for no key)."""
  qas = [{"id": qid, "question": "who lives in paris ?", "is_impossible": answers == [],
          **({} if answers is None else {"answers": answers})} for qid, answers in questions]
  path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
      {"context": "john lives in paris .", "qas": qas}]}]}))


@pytest.fixture(scope="module")
def d(tmp_path_factory):
  """A tiny model, a checkpoint of another size, and data that fails only past training."""
  d = tmp_path_factory.mktemp("checks")
  config = _config(8)
  config.to_json_file(str(d / "bert_config.json"))
  write_vocab(d / "vocab.txt", WORDS)
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(config)),
                                  str(d / "model"), config=config, vocab_file=str(d / "vocab.txt"))
  other = _config(16)
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(other)),
                                  str(d / "other"), config=other)
  (d / "pairs.txt").write_text("the film\n")
  rows = "".join(f"the film {w}\t{i % 2}\n" for i, w in enumerate(["good", "bad"] * 4))
  for name, dev in (("sst2_unlabelled", "sentence\nthe film good\n"),
                    ("sst2_bad_label", "sentence\tlabel\nthe film\t2\n"),
                    ("sst2", "sentence\tlabel\nthe film good\t1\n")):
    (d / name).mkdir()
    (d / name / "train.tsv").write_text("sentence\tlabel\n" + rows)
    (d / name / "dev.tsv").write_text(dev)
  (d / "conll").mkdir()
  (d / "conll" / "train.txt").write_text("john B-PER\nlives O\nin O\nparis B-LOC\n\n" * 4)
  (d / "conll" / "valid.txt").write_text("john\nlives\nin\nparis\n\n")  # words, no tags
  (d / "swag").mkdir()
  _swag(d / "swag" / "train.csv", ["0", "1", "2", "3"])
  _swag(d / "swag" / "val.csv", ["1", ""])  # a question without its label
  answer = [{"text": "john", "answer_start": 0}]
  _squad(d / "train.json", [("t1", answer)])
  _squad(d / "v2_dev.json", [("q1", answer), ("q2", [])])  # q2: SQuAD 2.0's no answer
  _squad(d / "unscored.json", [("q1", None)])
  _squad(d / "half_scored.json", [("q1", answer), ("q2", None)])
  rng = np.random.default_rng(0)
  tfrecords.write_arrays(str(d / "records.tfrecord"), {
      "input_ids": rng.integers(5, len(WORDS), (8, L)), "input_mask": np.ones((8, L), np.int64),
      "segment_ids": np.zeros((8, L), np.int64),
      "masked_lm_positions": np.tile(np.arange(1, P + 1), (8, 1)),
      "masked_lm_ids": rng.integers(5, len(WORDS), (8, P)),
      "masked_lm_weights": np.ones((8, P), np.float32),
      "next_sentence_labels": np.zeros(8, np.int64)})
  return d


def _model(d, init="model/bert_model.ckpt"):
  return [f"--bert_config_file={d / 'bert_config.json'}", f"--vocab_file={d / 'vocab.txt'}",
          f"--init_checkpoint={d / init}", f"--max_seq_length={L}"]


def _classifier(d, data, *extra):
  return ("run_classifier.py", "--task_name=sst-2", f"--data_dir={d / data}", *_model(d),
          "--do_train", "--train_batch_size=2", *extra)


def _ner(d, *extra):
  return ("run_ner.py", f"--data_dir={d / 'conll'}", *_model(d), "--do_train",
          "--train_batch_size=2", *extra)


def _squad_run(d, predict, *extra):
  return ("run_squad.py", *_model(d), "--max_query_length=4", "--do_train",
          f"--train_file={d / 'train.json'}", "--train_batch_size=1", "--do_predict",
          f"--predict_file={d / predict}", *extra)


def _pretraining(d, *extra):
  return ("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
          f"--input_file={d / 'records.tfrecord'}", f"--max_seq_length={L}",
          f"--max_predictions_per_seq={P}", "--train_batch_size=2", "--num_train_steps=2",
          *extra)


def _corrupt_checkpoint(out):
  """A checkpoint to resume whose index is garbage."""
  (out / "ckpt-1.index").write_bytes(b"not an index")
  (out / "ckpt-1.data-00000-of-00001").write_bytes(b"\0" * 64)
  (out / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n'
                                  'all_model_checkpoint_paths: "ckpt-1"\n')


def _checkpoint_of_another_config(out):
  """A checkpoint to resume, of a model wider than the flags' (its config beside it)."""
  _corrupt_checkpoint(out)
  _config(16).to_json_file(str(out / "bert_config.json"))


def _best_by_accuracy(out):
  (out / "best").mkdir()
  (out / "best" / "best.json").write_text(json.dumps({"metric": "eval_accuracy"}))


# (case id, args from the data dir and --output_dir, expected error line (a template
# with {d} and {out}; a trailing "..." matches a prefix), set-up of --output_dir or None).
CASES = [
    ("ner dev file without tags, --do_eval",
     lambda d, out: _ner(d, f"--output_dir={out}", "--do_eval"),
     "error: {d}/conll/valid.txt has no tag column to score; --do_eval needs the dev file's "
     "gold tags (to tag a file without scoring it, use it as the test file with "
     "--do_predict).", None),
    ("ner init_checkpoint of another model size",
     lambda d, out: _ner(d, f"--output_dir={out}", f"--init_checkpoint={d}/other"),
     "error: Checkpoint {d}/other/bert_model.ckpt (tf1) does not fit the model: ...", None),
    ("ner export_dir under a file",
     lambda d, out: _ner(d, f"--output_dir={out}", f"--export_dir={d}/pairs.txt/export"),
     "error: --export_dir={d}/pairs.txt/export cannot be created: {d}/pairs.txt is not a "
     "writable directory.", None),
    ("classifier dev.tsv without its label column",
     lambda d, out: _classifier(d, "sst2_unlabelled", f"--output_dir={out}", "--do_eval"),
     "error: {d}/sst2_unlabelled/dev.tsv:2: expected at least 2 tab-separated columns, "
     "found 1: no label (column 2).", None),
    ("classifier dev label outside the task's labels",
     lambda d, out: _classifier(d, "sst2_bad_label", f"--output_dir={out}", "--do_eval"),
     "error: {d}/sst2_bad_label/dev.tsv:2: label '2' is not one of 0, 1.", None),
    ("classifier init_checkpoint of another model size",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}",
                                f"--init_checkpoint={d}/other/bert_model.ckpt"),
     "error: Checkpoint {d}/other/bert_model.ckpt (tf1) does not fit the model: ...", None),
    ("classifier export_dir is a file",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}",
                                f"--export_dir={d}/pairs.txt"),
     "error: --export_dir={d}/pairs.txt is a file; name a directory for the SavedModel.",
     None),
    ("classifier batch not divisible into micro-batches",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}",
                                "--gradient_accumulation_steps=3"),
     "error: --train_batch_size=2 must divide evenly into 1 replica(s) x "
     "--gradient_accumulation_steps=3.", None),
    ("classifier resuming an unreadable checkpoint",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}"),
     "error: {out}/ckpt-1: the checkpoint to resume from cannot be read ...",
     _corrupt_checkpoint),
    ("classifier resuming a checkpoint of another config",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}"),
     "error: --output_dir={out} holds a model of another config ({out}/bert_config.json: "
     "hidden_size 16, not 8); it would be reused. Pass that file as --bert_config_file to use "
     "it, or a new --output_dir to start afresh.", _checkpoint_of_another_config),
    ("classifier best checkpoint chosen by another metric",
     lambda d, out: _classifier(d, "sst2", f"--output_dir={out}", "--do_eval",
                                "--eval_every_steps=1", "--best_metric=eval_loss"),
     "error: --best_metric=eval_loss: this --output_dir's best checkpoint was chosen by "
     "eval_accuracy; keep that metric or use a new --output_dir.", _best_by_accuracy),
    ("swag val.csv question without a label, --do_eval",
     lambda d, out: ("run_swag.py", f"--data_dir={d}/swag", *_model(d), f"--output_dir={out}",
                     "--do_train", "--train_batch_size=2", "--do_eval"),
     "error: {d}/swag/val.csv:3: label '' is not an ending index 0 to 3.", None),
    ("squad v2.0 predict file scored as v1.1",
     lambda d, out: _squad_run(d, "v2_dev.json", f"--output_dir={out}"),
     "error: {d}/v2_dev.json: question 'q2' has no answer to score against; questions "
     "without one need --version_2_with_negative (SQuAD 2.0).", None),
    ("squad predict file with answers missing from a question",
     lambda d, out: _squad_run(d, "half_scored.json", f"--output_dir={out}"),
     "error: {d}/half_scored.json: question 'q2': \"answers\" is not a list of objects with "
     "a \"text\"; the predictions could not be scored.", None),
    ("squad threshold tuning without answers",
     lambda d, out: _squad_run(d, "unscored.json", f"--output_dir={out}",
                               "--version_2_with_negative", "--tune_null_threshold"),
     "error: --tune_null_threshold: --predict_file={d}/unscored.json has no answers to tune "
     "on.", None),
    ("squad threshold tuning in v1.1 mode",
     lambda d, out: _squad_run(d, "v2_dev.json", f"--output_dir={out}",
                               "--tune_null_threshold"),
     "error: --tune_null_threshold needs --version_2_with_negative and --do_predict (it tunes "
     "SQuAD 2.0's no-answer threshold on --predict_file).", None),
    ("pretraining missing init_checkpoint",
     lambda d, out: _pretraining(d, f"--output_dir={out}", "--do_train",
                                 f"--init_checkpoint={d}/nowhere/bert_model.ckpt"),
     "error: --init_checkpoint: Checkpoint {d}/nowhere/bert_model.ckpt does not exist (no "
     "{d}/nowhere/bert_model.ckpt.index, no directory or .safetensors file of that name).",
     None),
    ("pretraining init_checkpoint of another model size",
     lambda d, out: _pretraining(d, f"--output_dir={out}", "--do_train",
                                 f"--init_checkpoint={d}/other"),
     "error: Checkpoint {d}/other/bert_model.ckpt (tf1) does not fit the model: ...", None),
    ("pretraining evaluation under XLA of fewer records than a batch",
     lambda d, out: _pretraining(d, f"--output_dir={out}", "--do_train", "--do_eval",
                                 "--jit_compile", "--eval_batch_size=16"),
     "error: {d}/records.tfrecord holds 8 record(s), fewer than --eval_batch_size=16: with "
     "--jit_compile or on a TPU evaluation runs whole batches only, so none would be "
     "evaluated.", None),
    ("classifier evaluation with a pretrained checkpoint's untrained head",
     lambda d, out: ("run_classifier.py", "--task_name=sst-2", f"--data_dir={d / 'sst2'}",
                     *_model(d), f"--output_dir={out}", "--do_eval"),
     "error: Checkpoint {d}/model/bert_model.ckpt (tf1) does not fit the model: missing from "
     "the checkpoint (2): output_weights, output_bias. Without --do_train every weight, the "
     "task's head included, comes from --init_checkpoint: give a fine-tuned run's, or train.",
     None),
    ("squad prediction with a pretrained checkpoint's untrained head",
     lambda d, out: ("run_squad.py", *_model(d), "--max_query_length=4", "--do_predict",
                     f"--predict_file={d / 'v2_dev.json'}", "--version_2_with_negative",
                     f"--output_dir={out}"),
     "error: Checkpoint {d}/model/bert_model.ckpt (tf1) does not fit the model: missing from "
     "the checkpoint (2): cls/squad/...", None),
    ("pretraining evaluation of untrained weights",
     lambda d, out: _pretraining(d, f"--output_dir={out}", "--do_eval"),
     "error: Evaluating or predicting without --do_train needs trained weights: pass "
     "--init_checkpoint, or an --output_dir holding a checkpoint.", None),
]


def _snapshot(directory):
  return {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_stops_before_training_leaving_output_dir_as_it_was(d, tmp_path, case):
  _, make_args, want, prepare = case
  out = tmp_path / "out"
  out.mkdir()
  (out / "notes.txt").write_text("the user's own file\n")
  if prepare:
    prepare(out)
  before = _snapshot(out)
  script, *args = make_args(d, out)
  proc = run_script(script, *args, expect_ok=False)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  line = last_error_line(proc)
  want = want.format(d=d, out=out)
  if want.endswith("..."):
    assert line.startswith(want[:-3]), line
  else:
    assert line == want
  assert _snapshot(out) == before  # no checkpoint, records, label list or run.json
