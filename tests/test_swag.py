"""SWAG multiple choice: csv reading, packing, the per-question softmax loss, run_swag.py."""

import csv
import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import fast_tokenization, pipeline, swag, tfrecords, tokenization
from helpers import assert_close, block_ops, read_eval_results
from modeling import checkpoints, conversion
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.multiple_choice import BertMultipleChoice, MultipleChoiceTask
from scripts import last_error_line, run_script

COLORS = ["red", "blue", "green", "yellow", "black", "white"]
FILLER = ["the", "a", "man", "woman", "dog", "walks", "sees", "car", "house", "then", "and",
          "runs", "to", "it", "is"]
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!"] + COLORS + FILLER
HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
  d = tmp_path_factory.mktemp("swag_model")
  vocab = write_vocab(d / "vocab.txt", WORDS)
  config = BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                      type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  return d, vocab, config


def _write_csv(path, rows, header=HEADER, index_column=False):
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(([""] if index_column else []) + header)
    for i, row in enumerate(rows):
      w.writerow(([str(i)] if index_column else []) + row)
  return str(path)


def _row(i, sent1, sent2, endings, label):
  return [f"v{i}", str(100 + i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings,
          "" if label is None else str(label)]


def test_reading_quoted_fields_index_column_and_unlabelled_test(tmp_path):
  rows = [_row(0, "He said, \"stop\", and left.", "Then", ["a, b", "c\nd", "e", "f"], 2),
          _row(1, "Plain.", "", ["w", "x", "y", "z"], 0)]
  for index_column in (False, True):
    path = _write_csv(tmp_path / f"t{index_column}.csv", rows, index_column=index_column)
    examples = swag.read_examples(path)
    assert [e.guid for e in examples] == (["0", "1"] if index_column else ["100", "101"])
    assert examples[0].context == "He said, \"stop\", and left."
    assert examples[0].endings == ["a, b", "c\nd", "e", "f"] and examples[0].label == 2
    assert (examples[1].start, examples[1].label) == ("", 0)
  # Test files: no label column at all, or an empty one.
  path = _write_csv(tmp_path / "test.csv", [r[:-1] for r in rows], HEADER[:-1])
  assert [e.label for e in swag.read_examples(path, require_labels=False)] == [None, None]
  path = _write_csv(tmp_path / "test2.csv", [_row(0, "A.", "B", list("wxyz"), -1),
                                              _row(1, "A.", "B", list("wxyz"), None)])
  assert [e.label for e in swag.read_examples(path, require_labels=False)] == [None, None]
  with pytest.raises(ValueError, match=r"test2.csv:2: label '-1' is not an ending index"):
    swag.read_examples(path)  # where labels are needed, -1 is not one
  # Five endings with --num_choices=5.
  header = HEADER[:-1] + ["ending4", "label"]
  path = _write_csv(tmp_path / "five.csv", [_row(0, "A.", "B", list("vwxyz"), 4)], header)
  assert swag.read_examples(path, num_choices=5)[0].endings == list("vwxyz")


def test_bad_rows_name_file_and_line(tmp_path):
  good = _row(0, "A.", "B", list("wxyz"), 1)
  # Row 2 holds a quoted line break, so the short row starts on line 4.
  path = _write_csv(tmp_path / "short.csv", [_row(1, "A.", "B", ["x\ny", "1", "2", "3"], 0),
                                             good[:-2]])
  with pytest.raises(ValueError, match=rf"^{path}:4: expected 11 comma-separated fields"):
    swag.read_examples(path)
  # A quote left open swallows the rows after it into one field.
  path = tmp_path / "open.csv"
  path.write_text(",".join(HEADER) + "\n" + ",".join(map(str, good)).replace("A.", '"A.', 1)
                  + "\n" + ",".join(map(str, good)) + "\n")
  with pytest.raises(ValueError, match=r"open.csv:2: expected 11 comma-separated fields as "
                     r"in the header, found \d+ \(a quote left open"):
    swag.read_examples(str(path))
  path = _write_csv(tmp_path / "label.csv", [good, _row(1, "A.", "B", list("wxyz"), 7)])
  with pytest.raises(ValueError, match=rf"^{path}:3: label '7' is not an ending index 0 to 3"):
    swag.read_examples(path)
  path = _write_csv(tmp_path / "nolabel.csv", [_row(1, "A.", "B", list("wxyz"), None)])
  with pytest.raises(ValueError, match=rf"^{path}:2: label ''"):
    swag.read_examples(path)
  path = _write_csv(tmp_path / "cols.csv", [good[:-2] + good[-1:]], HEADER[:-2] + ["label"])
  with pytest.raises(ValueError, match=rf"^{path}:1: the header has no column ending3"):
    swag.read_examples(path)


def _original_truncate_seq_pair(tokens_a, tokens_b, max_length):
  """The original run_classifier's pair truncation, as written there."""
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_length:
      break
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def test_segment_layout_and_truncation_match_the_original(tmp_path):
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path / "v.txt", WORDS))
  rng = random.Random(0)
  sentence = lambda n: " ".join(rng.choice(COLORS + FILLER) for _ in range(n))
  examples = [swag.SwagExample(str(i), sentence(rng.randint(0, 14)), sentence(rng.randint(0, 3)),
                               [sentence(rng.randint(0, 12)) for _ in range(4)], rng.randint(0, 3))
              for i in range(40)]
  max_seq_length = 16
  arrays = swag.feature_arrays(examples, tokenizer, max_seq_length, 4, pad_to=16)
  assert arrays["input_ids"].shape == (48, 4, 16)
  for q, example in enumerate(examples):
    for c in range(4):
      tokens_a = tokenizer.tokenize(example.context)
      tokens_b = tokenizer.tokenize(example.start) + tokenizer.tokenize(example.endings[c])
      _original_truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
      tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
      ids = tokenizer.convert_tokens_to_ids(tokens)
      pad = [0] * (max_seq_length - len(ids))
      np.testing.assert_array_equal(arrays["input_ids"][q, c], ids + pad)
      np.testing.assert_array_equal(arrays["input_mask"][q, c], [1] * len(ids) + pad)
      np.testing.assert_array_equal(arrays["segment_ids"][q, c],
                                    [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1) + pad)
    assert arrays["label_ids"][q] == example.label
  # Padding questions: all zero and not real.
  assert arrays["is_real_example"].tolist() == [1] * 40 + [0] * 8
  assert not arrays["input_ids"][40:].any() and not arrays["label_ids"][40:].any()
  # Records keep [C, S] per question; the pipeline trims S to the batch's longest.
  path = str(tmp_path / "r.tf_record")
  tfrecords.write_arrays(path, arrays)
  spec = tfrecords.array_spec(arrays)
  batches = list(pipeline.global_batches(path, spec, 16, length_multiple=4))
  longest = arrays["input_mask"][:16].sum(-1).max()
  assert batches[0]["input_ids"].shape == (16, 4, -(-longest // 4) * 4)
  got = np.concatenate([np.pad(b["input_ids"].numpy(), [(0, 0), (0, 0),
                                                       (0, 16 - b["input_ids"].shape[2])])
                        for b in batches])
  np.testing.assert_array_equal(got, arrays["input_ids"])


def test_question_loss_by_hand_and_padding_counts_nothing(model_files):
  _, _, config = model_files
  task = MultipleChoiceTask(config)
  tf.keras.utils.set_random_seed(3)
  model = task.build_model()
  rng = np.random.default_rng(1)
  ids = rng.integers(5, len(WORDS), size=(3, 4, 10)).astype("int32")
  mask = np.ones_like(ids)
  mask[:, :, 7:] = 0
  ids *= mask
  segments = np.zeros_like(ids)
  segments[:, :, 4:7] = 1
  batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
           "label_ids": np.array([2, 0, 3], "int32"), "is_real_example": np.array([1, 1, 0])}
  # Independent reference: each choice scored alone, pooled . w + b, then a softmax per question.
  weights, bias = model.choice.output_weights.numpy(), model.choice.output_bias.numpy()
  scores = np.zeros((3, 4))
  for q in range(3):
    for c in range(4):
      one = {k: batch[k][q, c][None] for k in ("input_ids", "input_mask", "segment_ids")}
      pooled = model.encoder(one, training=False)["pooled_output"].numpy()[0]
      scores[q, c] = pooled @ weights[0] + bias[0]
  # float32, 12 choices in a batch against one at a time: 2 blocks, the pooler and the
  # choice layer (sums of 32).
  ops = 2 * block_ops(config, 10) + 2 * 32
  assert_close(model(batch)["logits"].numpy(), scores, "float32", ops)
  log_probs = scores - np.log(np.exp(scores).sum(-1, keepdims=True))
  want = -(log_probs[0, 2] + log_probs[1, 0]) / 2
  sums, metrics = task.numerators(model, batch, training=False)
  denominators = task.denominators(batch)
  loss, _ = task.losses(sums, denominators)
  assert float(denominators["loss"]) == 2.0  # exact: a count
  # The same, then a log-softmax over 4 and a mean of 2: a cross entropy moves by at most
  # twice its logits' change (four times the roundings), relative to the loss (> the logits).
  loss_ops = 4 * ops + 16
  assert_close(float(loss), want, "float32", loss_ops)
  correct = (scores[:2].argmax(-1) == [2, 0]).mean()
  assert float(task.metric_values(metrics, denominators)["accuracy"]) == correct  # a count / 2
  # The padding question's inputs and label change nothing.
  batch["input_ids"][2] = 6
  batch["label_ids"][2] = 1
  sums, _ = task.numerators(model, batch, training=False)
  assert_close(float(task.losses(sums, task.denominators(batch))[0]), want, "float32", loss_ops)
  # The head has its own original-style checkpoint names.
  names = checkpoints.variable_map(model)
  assert names["cls/multiple_choice/output_weights"] is model.choice.output_weights
  assert names["cls/multiple_choice/output_bias"] is model.choice.output_bias
  assert {id(v) for v in names.values()} == {id(v) for v in model.trainable_weights}


def _question(rng, i, label=None):
  """A context naming a color; only the right ending names it again (the others no color)."""
  color = rng.choice(COLORS)
  label = rng.randint(0, 3) if label is None else label
  words = lambda: " ".join(rng.choice(FILLER) for _ in range(rng.randint(1, 4)))
  endings = [f"{words()} {words()}." for _ in range(3)]
  endings.insert(label, f"{words()} {color} {words()}.")
  return _row(i, f"{words()} {color} {words()}.", rng.choice(["then", "", "and"]), endings,
              label)


@pytest.mark.slow
def test_learns_a_separable_task_predicts_and_exports(model_files, tmp_path):
  d, vocab, config = model_files
  rng = random.Random(7)
  data = tmp_path / "data"
  data.mkdir()
  _write_csv(data / "train.csv", [_question(rng, i) for i in range(320)], index_column=True)
  _write_csv(data / "val.csv", [_question(rng, i) for i in range(60)])
  test_rows = [_question(rng, i)[:-1] for i in range(13)]
  _write_csv(data / "test.csv", test_rows, HEADER[:-1])
  out, export = tmp_path / "out", tmp_path / "export"
  proc = run_script("run_swag.py", f"--data_dir={data}", f"--bert_config_file={d / 'bert_config.json'}",
                    f"--vocab_file={vocab}", f"--output_dir={out}", "--max_seq_length=32",
                    "--seed=2", "--do_train", "--do_eval", "--do_predict",
                    "--train_batch_size=16", "--learning_rate=2e-3", "--num_train_epochs=5",
                    "--eval_batch_size=16", "--predict_batch_size=5", "--log_steps=40",
                    f"--export_dir={export}")
  results = read_eval_results(out / "eval_results.txt")
  assert list(results) == ["eval_accuracy", "eval_loss", "global_step"]
  # The log's rate counts sequences: 16 questions of 4 endings a step (each value to 6
  # significant digits in the file).
  for row in csv.DictReader(open(out / "train_log.csv")):
    ratio = float(row["sequences_per_second"]) / float(row["steps_per_second"])
    assert abs(ratio - 64) < 64 * 2e-5, row
  assert results["eval_accuracy"] > 0.9, proc.stderr[-3000:]
  assert results["global_step"] == int(320 / 16 * 5)
  probs = np.loadtxt(out / "test_results.tsv")
  assert probs.shape == (13, 4)
  assert_close(probs.sum(1), np.ones(13), "float32", 8)  # a float32 softmax over 4, summed
  lines = (out / "test_predictions.tsv").read_text().splitlines()
  assert lines == ["id\tlabel"] + [f"{100 + i}\t{p.argmax()}" for i, p in enumerate(probs)]
  # The raw-string SavedModel gives what the Python path gives on the test questions.
  examples = swag.read_examples(str(data / "test.csv"), require_labels=False)
  served = fast_tokenization.load_serving(str(export))(
      sent1=tf.constant([e.context for e in examples]),
      sent2=tf.constant([e.start for e in examples]),
      endings=tf.constant([e.endings for e in examples]))
  # The checkpoint reloads into a fresh model by its names.
  model = BertMultipleChoice(BertEncoder(config))
  checkpoints.load_checkpoint(model, str(out))
  arrays = swag.feature_arrays(examples, tokenization.FullTokenizer(vocab), 32, 4)
  logits = model({k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})["logits"]
  # float32, the SavedModel's graph against the script's batches of 5: 2 blocks, the
  # pooler and the choice layer (sums of 32); a probability moves by at most twice its
  # logits' change (four times the roundings), relative to the logits.
  assert_close(served["probabilities"].numpy(), probs, "float32",
               4 * (2 * block_ops(config, 32) + 2 * 32), np.abs(logits).max())
  np.testing.assert_array_equal(served["label"].numpy(), probs.argmax(-1))  # exact: classes
  ckpt = checkpoints.read_checkpoint(str(out))
  assert isinstance(conversion.model_for(ckpt, config), BertMultipleChoice)
  # Exported alone: the run's --output_dir, no data (--data_dir is not required).
  run_script("run_swag.py", f"--output_dir={out}", f"--export_dir={tmp_path / 'again'}")
  again = fast_tokenization.load_serving(str(tmp_path / "again"))(
      sent1=tf.constant([e.context for e in examples]),
      sent2=tf.constant([e.start for e in examples]),
      endings=tf.constant([e.endings for e in examples]))
  np.testing.assert_array_equal(again["probabilities"].numpy(), served["probabilities"].numpy())


def test_bad_input_is_one_line(model_files, tmp_path):
  d, vocab, _ = model_files
  data = tmp_path / "data"
  data.mkdir()
  path = _write_csv(data / "train.csv", [_row(0, "A.", "B", list("wxyz"), 1),
                                         _row(1, "A.", "B", list("wxyz"), "x")])
  common = [f"--data_dir={data}", f"--bert_config_file={d / 'bert_config.json'}",
            f"--vocab_file={vocab}", f"--output_dir={tmp_path / 'o'}", "--do_train",
            "--max_seq_length=32"]
  proc = run_script("run_swag.py", *common, expect_ok=False)
  assert last_error_line(proc) == (f"error: {path}:3: label 'x' is not an ending index "
                                   "0 to 3.")
  proc = run_script("run_swag.py", *common, "--num_choices=5", expect_ok=False)
  assert last_error_line(proc).startswith(f"error: {path}:1: the header has no column ending4")


def test_questions_from_a_book_skip_its_licence_and_read_back(tmp_path):
  rng = random.Random(2)
  body = ["\n".join(f"Sentence {p} {s} of the {rng.choice(COLORS)} house is here." for s in range(4))
          for p in range(30)]
  text = "\n".join(["The Project Gutenberg Etext of Nothing", "",
                    "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***",
                    "Licence words are here and long enough.", "",
                    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*", "",
                    "\n\n".join(body), "", "End of The Project Gutenberg Etext of Nothing",
                    "Footer words are here and long enough."])
  sentences = swag.book_sentences(text)
  assert len(sentences) == 120 and sentences[0] == (body[0].split("\n")[0], 0)
  assert sentences[-1] == (body[-1].split("\n")[-1], 29)
  questions = swag.book_questions("book", sentences, random.Random(0), min_distance=10)
  assert len(questions) > 60  # 3 of the 4 sentences of a paragraph have a successor there
  for name, i, sent1, endings, label in questions:
    assert sent1 == sentences[i][0] and endings[label] == sentences[i + 1][0]
    assert sentences[i][1] == sentences[i + 1][1]
    others = [sentences.index(next(s for s in sentences if s[0] == e)) for e in endings
              if e != endings[label]]
    assert len(others) == 3 and all(abs(j - i) >= 10 for j in others)
  path = str(tmp_path / "q.csv")
  swag.write_questions(path, questions[:5])
  read = swag.read_examples(path)
  assert [(e.guid, e.context, e.start, e.endings, e.label) for e in read] == [
      (str(n), q[2], "", q[3], q[4]) for n, q in enumerate(questions[:5])]
  swag.write_questions(path, questions[:5], with_labels=False)
  assert [e.label for e in swag.read_examples(path, require_labels=False)] == [None] * 5
