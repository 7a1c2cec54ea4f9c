"""run_ner.py and its library: CoNLL reading, windows, the conlleval metric, both models, export."""

import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import conll, fast_tokenization, ner_metrics, tagging_inputs, tokenization, windows
from helpers import assert_close, block_ops, randomize, read_eval_results
from modeling import checkpoints, word_features
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.tagging import BertTagger
from scripts import last_error_line, run_script

# --- Reading -----------------------------------------------------------------

WORDS = ["EU", "rejects", "German", "call", "Peter", "Blackburn", "BRUSSELS", "1996-08-22"]
IOB2 = ["B-ORG", "O", "B-MISC", "O", "B-PER", "I-PER", "B-LOC", "O"]
IOB1 = ["I-ORG", "O", "I-MISC", "O", "I-PER", "I-PER", "I-LOC", "O"]


def _write(path, lines):
  path.write_text("\n".join(lines) + "\n")
  return str(path)


@pytest.mark.parametrize("layout", ["four_iob1_docstart", "two_iob2", "word_tag_0", "tabs"])
def test_reads_every_layout_and_tag_scheme(tmp_path, layout):
  first, second = slice(0, 4), slice(4, 8)
  if layout == "four_iob1_docstart":
    rows = lambda s: [f"{w} NNP I-NP {t}" for w, t in zip(WORDS[s], IOB1[s])]
    lines = ["-DOCSTART- -X- -X- O", ""] + rows(first) + [""] + rows(second) + [""]
  elif layout == "two_iob2":
    rows = lambda s: [f"{w} {t}" for w, t in zip(WORDS[s], IOB2[s])]
    lines = rows(first) + ["", ""] + rows(second)  # two blank lines: still one boundary
  elif layout == "word_tag_0":
    rows = lambda s: [f"{w} {t} 0" for w, t in zip(WORDS[s], IOB2[s])]
    lines = rows(first) + [""] + rows(second)
  else:
    rows = lambda s: [f"{w}\tNN\t{t}" for w, t in zip(WORDS[s], IOB1[s])]
    lines = rows(first) + [""] + rows(second)
  docs = conll.read_conll(_write(tmp_path / "train.txt", lines))
  sentences = [s for d in docs for s in d.sentences]
  assert [s.words for s in sentences] == [WORDS[:4], WORDS[4:]]
  assert [s.tags for s in sentences] == [IOB2[:4], IOB2[4:]]
  assert conll.has_document_markers(docs) == (layout == "four_iob1_docstart")
  assert conll.labels_of(docs, "x") == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG",
                                        "I-ORG", "B-PER", "I-PER"]


def test_iob1_to_iob2_keeps_every_span():
  assert conll.to_iob2(["I-PER", "I-PER", "B-PER", "I-LOC", "O", "I-LOC", "I-ORG"]) == [
      "B-PER", "I-PER", "B-PER", "B-LOC", "O", "B-LOC", "B-ORG"]
  assert conll.to_iob2(IOB2) == IOB2  # IOB2 is left alone
  rng = random.Random(0)
  for _ in range(300):
    tags = [rng.choice(["O", "B-A", "I-A", "B-B", "I-B"]) for _ in range(rng.randint(1, 12))]
    assert ner_metrics.chunks([conll.to_iob2(tags)]) == ner_metrics.chunks([tags])


def test_iob2_to_iob1_keeps_every_span_and_round_trips():
  assert conll.to_iob1(IOB2) == IOB1
  assert conll.to_iob1(["B-PER", "I-PER", "B-PER", "B-LOC", "O", "I-LOC"]) == [
      "I-PER", "I-PER", "B-PER", "I-LOC", "O", "I-LOC"]
  rng = random.Random(1)
  for _ in range(300):  # predictions may open an entity with I- too
    tags = [rng.choice(["O", "B-A", "I-A", "B-B", "I-B"]) for _ in range(rng.randint(1, 12))]
    assert ner_metrics.chunks([conll.to_iob1(tags)]) == ner_metrics.chunks([tags])
    assert conll.to_iob2(conll.to_iob1(conll.to_iob2(tags))) == conll.to_iob2(tags)


def test_predictions_file_is_what_conlleval_reads(tmp_path):
  """One space between columns (conlleval's default delimiter), however the file separated
  them; a -DOCSTART- line with as many columns as the rows; predictions in the file's own
  scheme (here IOB1), so that conlleval's token accuracy compares like with like."""
  rows = lambda s: [f"{w}\tNNP\tI-NP\t{t}" for w, t in zip(WORDS[s], IOB1[s])]
  path = _write(tmp_path / "test.txt", ["-DOCSTART-", ""] + rows(slice(0, 4)) + [""]
                + rows(slice(4, 8)))
  docs = conll.read_conll(path)
  predicted = ["B-ORG", "O", "B-MISC", "O", "B-PER", "B-PER", "I-LOC", "O"]  # IOB2, or not
  conll.write_predictions(str(tmp_path / "out.txt"), docs, predicted)
  lines = (tmp_path / "out.txt").read_text().splitlines()
  assert lines[:2] == ["-DOCSTART- -X- -X- O O", ""]
  want = ["I-ORG", "O", "I-MISC", "O", "I-PER", "B-PER", "I-LOC", "O"]
  rows = [line.split(" ") for line in lines[2:] if line]
  assert [r[:4] for r in rows] == [line.split("\t") for line in (
      (tmp_path / "test.txt").read_text().splitlines()[2:]) if line]
  assert [r[4] for r in rows] == want and all(len(r) == 5 for r in rows)
  # An IOB2 file with one stray I- opening an entity stays IOB2: its predictions too.
  noisy = ["EU B-ORG", "rejects O", "German I-MISC", "call O"]
  docs = conll.read_conll(_write(tmp_path / "noisy.txt", noisy))
  conll.write_predictions(str(tmp_path / "n.txt"), docs, ["B-ORG", "O", "B-MISC", "O"])
  assert [line.split()[-1] for line in (tmp_path / "n.txt").read_text().splitlines()
          if line] == ["B-ORG", "O", "B-MISC", "O"]
  # A words-only file (prediction input) is written, and scored as nothing.
  words = conll.read_conll(_write(tmp_path / "words.txt", WORDS[:4]))
  assert ner_metrics.file_scores(words, ["O"] * 4, "test_") == {}
  conll.write_predictions(str(tmp_path / "w.txt"), words, ["O", "O", "B-MISC", "O"])
  assert (tmp_path / "w.txt").read_text().splitlines() == [
      "EU O", "rejects O", "German B-MISC", "call O", ""]


def test_bad_rows_name_the_file_and_line(tmp_path):
  path = _write(tmp_path / "train.txt", ["EU B-ORG", "rejects O", "", "German X-MISC"])
  with pytest.raises(ValueError, match=r"train.txt:4: 'X-MISC' in column 2 is not a tag"):
    conll.read_conll(path)
  path = _write(tmp_path / "valid.txt", ["EU NNP B-ORG", "rejects O"])
  with pytest.raises(ValueError, match=r"valid.txt:2: 2 column\(s\) where line 1 has 3"):
    conll.read_conll(path)
  with pytest.raises(ValueError, match="holds no words"):
    conll.read_conll(_write(tmp_path / "empty.txt", ["", ""]))
  with pytest.raises(ValueError, match="No label list at"):
    conll.read_labels(str(tmp_path / "label_list.txt"))


# --- Pieces and windows ------------------------------------------------------

def test_label_sits_on_the_first_piece(tmp_path):
  vocab = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un",
                                               "##want", "##ed", "runn", "##ing", ",", "john",
                                               "paris"])
  tokenizer = tokenization.FullTokenizer(vocab)
  path = _write(tmp_path / "t.txt", ["John B-PER", "unwanted O", "running O", ", O",
                                     "Paris B-LOC", "\x07 O"])
  flat = tagging_inputs.flatten(conll.read_conll(path), path, True)
  labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  arrays, n = tagging_inputs.window_arrays(tokenizer, flat, labels, 16, 8, True, pad_to=4)
  assert n == 1 and arrays["input_ids"].shape == (4, 16)
  # [CLS] john un ##want ##ed runn ##ing , paris [UNK] [SEP]: a word of only a control
  # character has no piece and reads as [UNK] rather than vanishing.
  assert arrays["input_ids"][0, :11].tolist() == [2, 10, 4, 5, 6, 7, 8, 9, 11, 1, 3]
  assert arrays["input_mask"][0].tolist() == [1] * 11 + [0] * 5
  assert arrays["label_ids"][0, :11].tolist() == [0, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0]
  assert arrays["label_weights"][0, :11].tolist() == [0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0]
  assert arrays["word_positions"][0, :11].tolist() == [-1, 0, 1, -1, -1, 2, -1, 3, 4, 5, -1]
  assert not arrays["input_mask"][1:].any()


def _squad_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """The original run_squad.py window loop, transcribed literally."""
  spans, start_offset = [], 0
  while start_offset < num_tokens:
    length = num_tokens - start_offset
    if length > max_tokens_for_doc:
      length = max_tokens_for_doc
    spans.append((start_offset, length))
    if start_offset + length == num_tokens:
      break
    start_offset += min(length, doc_stride)
  return spans


def _check_is_max_context(doc_spans, cur_span_index, position):
  """The original run_squad.py rule, transcribed literally."""
  best_score, best_span_index = None, None
  for span_index, (start, length) in enumerate(doc_spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    num_left_context = position - start
    num_right_context = end - position
    score = min(num_left_context, num_right_context) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_span_index = score, span_index
  return cur_span_index == best_span_index


@pytest.mark.parametrize("num_pieces,max_pieces,stride",
                         [(1, 6, 3), (6, 6, 3), (7, 6, 3), (40, 10, 4), (41, 10, 10),
                          (33, 8, 20), (100, 22, 7)])
def test_windows_follow_the_max_context_rule(num_pieces, max_pieces, stride):
  spans = windows.doc_spans(num_pieces, max_pieces, stride)
  assert spans == _squad_spans(num_pieces, max_pieces, stride)
  owner = windows.max_context_windows(spans, num_pieces)
  for position in range(num_pieces):
    want = [i for i in range(len(spans)) if _check_is_max_context(spans, i, position)]
    assert want == [owner[position]]


def test_every_word_is_predicted_once_from_its_max_context_window(tmp_path):
  vocab = write_vocab(tmp_path / "vocab.txt", ["[UNK]", "[CLS]", "[SEP]", "a", "b", "##b"])
  tokenizer = tokenization.FullTokenizer(vocab)
  rng = random.Random(1)
  lines = []
  for s in range(12):
    if s % 5 == 0:
      lines += ["-DOCSTART- -X- O", ""]
    lines += [f"{rng.choice(['a', 'bb', 'b'])} O" for _ in range(rng.randint(1, 9))] + [""]
  path = _write(tmp_path / "t.txt", lines)
  for context in (True, False):
    flat = tagging_inputs.flatten(conll.read_conll(path), path, context)
    assert len(flat.streams) == (3 if context else 12)
    arrays, n = tagging_inputs.window_arrays(tokenizer, flat, ["O"], 8, 2, False)
    positions = arrays["word_positions"]
    assert sorted(positions[positions >= 0].tolist()) == list(range(len(flat.words)))
    # Each word's window is the max-context one among all windows of its stream
    # holding its first piece, by the literal rule on pieces.
    row_base = 0  # windows come stream by stream, in order
    for first_word, end_word in flat.streams:
      pieces = [len(tokenizer.tokenize(w)) for w in flat.words[first_word:end_word]]
      starts = np.cumsum([0] + pieces[:-1])
      spans = _squad_spans(sum(pieces), 6, 2)
      for w, start in zip(range(first_word, end_word), starts):
        best = [i for i in range(len(spans)) if _check_is_max_context(spans, i, start)][0]
        row, col = np.argwhere(positions == w)[0]
        assert (row, col - 1) == (row_base + best, start - spans[best][0])
        assert arrays["label_weights"][row, col] == 1
      row_base += len(spans)
    assert row_base == n


# --- The metric ----------------------------------------------------------------

def test_conlleval_figures_on_hand_computed_cases():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-PER", "I-PER"], ["B-PER", "I-PER"],
          ["I-MISC", "B-MISC"], ["B-LOC"]]
  pred = [["B-PER", "I-PER", "O", "B-ORG"],  # a wrong type: one right, one wrong
          ["O", "I-PER", "I-PER"],  # I- after O opens a chunk: right
          ["B-PER", "I-LOC"],  # a type change closes one chunk and opens another
          ["B-MISC", "I-MISC"],  # IOB1 gold: two chunks; one long guess: wrong
          ["I-LOC"]]  # I- at a sentence start opens a chunk: right
  got = ner_metrics.conll_scores(gold, pred)
  # By hand: 7 gold chunks, 7 guessed, 3 correct; 6 of 12 tokens equal.
  assert (got["num_gold"], got["num_predicted"], got["num_correct"]) == (7, 7, 3)
  for key, want in {"precision": 3 / 7, "recall": 3 / 7, "f1": 3 / 7, "accuracy": 0.5,
                    "PER_precision": 2 / 3, "PER_recall": 2 / 3, "PER_f1": 2 / 3,
                    "LOC_precision": 0.5, "LOC_recall": 0.5, "LOC_f1": 0.5,
                    "ORG_precision": 0.0, "ORG_recall": 0.0, "ORG_f1": 0.0,
                    "MISC_precision": 0.0, "MISC_recall": 0.0, "MISC_f1": 0.0}.items():
    assert_close(got[key], want, "float64", 8, what=key)  # ratios of counts, a few roundings
  # A sentence end closes a chunk: B-PER | I-PER are two chunks, not one.
  assert ner_metrics.conll_scores([["B-PER"], ["I-PER"]], [["B-PER"], ["B-PER"]])["f1"] == 1.0


def _end_of_chunk(prev_tag, tag, prev_type, type_):
  """conlleval.pl's endOfChunk for IOB tags, transcribed."""
  end = (prev_tag, tag) in (("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"))
  return end or (prev_tag != "O" and prev_type != type_)


def _start_of_chunk(prev_tag, tag, prev_type, type_):
  """conlleval.pl's startOfChunk for IOB tags, transcribed."""
  start = (prev_tag, tag) in (("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"))
  return start or (tag != "O" and prev_type != type_)


def _conlleval_counts(gold_sentences, pred_sentences):
  """conlleval.pl's streaming chunk counts: (correct, gold, guessed), sentence ends as O."""
  split = lambda t: (t, "") if t == "O" else (t[0], t[2:])
  correct = found_gold = found_guessed = 0
  last_gold, last_guess, in_correct = ("O", ""), ("O", ""), False
  for gold_tags, pred_tags in zip(gold_sentences, pred_sentences):
    for g, p in list(zip(gold_tags, pred_tags)) + [("O", "O")]:  # the boundary line
      g, p = split(g), split(p)
      if in_correct:
        gold_end = _end_of_chunk(last_gold[0], g[0], last_gold[1], g[1])
        guess_end = _end_of_chunk(last_guess[0], p[0], last_guess[1], p[1])
        if gold_end and guess_end and last_guess[1] == last_gold[1]:
          in_correct, correct = False, correct + 1
        elif gold_end != guess_end or g[1] != p[1]:
          in_correct = False
      gold_start = _start_of_chunk(last_gold[0], g[0], last_gold[1], g[1])
      guess_start = _start_of_chunk(last_guess[0], p[0], last_guess[1], p[1])
      if gold_start and guess_start and g[1] == p[1]:
        in_correct = True
      found_gold += gold_start
      found_guessed += guess_start
      last_gold, last_guess = g, p
  return correct + in_correct, found_gold, found_guessed


def test_metric_counts_equal_a_transcription_of_conlleval():
  rng = random.Random(2)
  tags = ["O", "O", "B-A", "I-A", "B-B", "I-B"]
  for _ in range(300):
    lengths = [rng.randint(1, 8) for _ in range(rng.randint(1, 4))]
    gold = [[rng.choice(tags) for _ in range(n)] for n in lengths]
    pred = [[rng.choice(tags) for _ in range(n)] for n in lengths]
    got = ner_metrics.conll_scores(gold, pred)
    assert (got["num_correct"], got["num_gold"], got["num_predicted"]) == \
        _conlleval_counts(gold, pred)


# --- End to end ----------------------------------------------------------------

PER_FIRST, PER_LAST = ["alice", "bob", "carol", "dave"], ["smith", "jones"]
LOC, ORG = ["paris", "rome", "berlin", "oslo"], ["acme", "globex"]
FILLER = ["the", "a", "met", "in", "at", "visited", "said", "went", "to", "and", "with",
          "from", "today", "."]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
  d = tmp_path_factory.mktemp("ner")
  vocab = write_vocab(d / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ber",
                                        "##lin", "corp"] + PER_FIRST + PER_LAST
                      + [w for w in LOC if w != "berlin"] + ORG + FILLER)
  config = BertConfig(vocab_size=len(open(vocab).read().split()), hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  encoder = BertEncoder(config)
  randomize(encoder, seed=3, scale=0.05)
  # Small position and type embeddings: frozen features that mostly tell words apart.
  for table in (encoder.embeddings.position_embeddings, encoder.embeddings.token_type_embeddings):
    table.assign(table * 0.1)
  init = checkpoints.save_tf2_checkpoint(encoder, str(d / "init" / "ckpt"))
  return d, vocab, config, init


def _sentence(rng):
  """Words and IOB2 tags: fillers with up to two entities, never adjacent."""
  words, tags = [], []
  for _ in range(rng.randint(1, 3)):
    words += [rng.choice(FILLER) for _ in range(rng.randint(1, 3))]
    tags += ["O"] * (len(words) - len(tags))
    kind = rng.choice(["PER", "LOC", "ORG", None])
    if kind == "PER":
      span = [rng.choice(PER_FIRST)] + ([rng.choice(PER_LAST)] if rng.random() < 0.5 else [])
    elif kind == "LOC":
      span = [rng.choice(LOC)]
    elif kind == "ORG":
      span = [rng.choice(ORG)] + (["corp"] if rng.random() < 0.5 else [])
    else:
      continue
    words += [w.capitalize() if rng.random() < 0.5 else w for w in span]
    tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(span) - 1)
  return words, tags


def _conll_file(path, rng, n, layout):
  lines = []
  for i in range(n):
    if layout == "four" and i % 10 == 0:
      lines += ["-DOCSTART- -X- -X- O", ""]
    words, tags = _sentence(rng)
    if layout == "four":  # IOB1, as the classic distribution
      tags = [("I" + t[1:]) if t.startswith("B-") else t for t in tags]
      lines += [f"{w} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
    else:
      lines += [f"{w} {t} 0" for w, t in zip(words, tags)] + [""]
  _write(path, lines)


def _args(d, data, out, *extra):
  return [f"--data_dir={data}", f"--bert_config_file={d / 'bert_config.json'}",
          f"--vocab_file={d / 'vocab.txt'}", f"--output_dir={out}", "--max_seq_length=24",
          "--doc_stride=8", "--seed=1", "--log_steps=20", *extra]


_results = read_eval_results


@pytest.mark.slow
def test_fine_tuning_learns_a_separable_task_and_exports(model_files, tmp_path):
  d, vocab, config, _ = model_files
  rng = random.Random(7)
  data, out, export = tmp_path / "data", tmp_path / "out", tmp_path / "export"
  data.mkdir()
  _conll_file(data / "train.txt", rng, 300, "word_tag_0")
  _conll_file(data / "valid.txt", rng, 60, "word_tag_0")
  _conll_file(data / "test.txt", rng, 30, "four")
  proc = run_script("run_ner.py", *_args(d, data, out, "--do_train", "--do_eval",
                                         "--train_batch_size=16", "--learning_rate=2e-3",
                                         "--num_train_epochs=4", "--eval_batch_size=7"))
  results = _results(out / "eval_results.txt")
  assert results["eval_f1"] > 0.9, proc.stderr[-3000:]
  assert {"eval_precision", "eval_recall", "eval_accuracy", "eval_PER_f1", "eval_LOC_f1",
          "eval_ORG_f1", "global_step"} <= set(results)
  assert (out / "label_list.txt").read_text().split() == [
      "O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
  # The dev predictions as conlleval reads them (gold and predicted tag the last two
  # columns, though the dev file's tag is not its last: `word TAG 0`) score eval_f1.
  gold, predicted, sentence_gold, sentence_predicted = [], [], [], []
  valid = [line.split() for line in (data / "valid.txt").read_text().splitlines()]
  written = (out / "eval_predictions.txt").read_text().splitlines()
  assert len(written) == len(valid)
  for source, line in zip(valid, written):
    if not source:
      if sentence_gold:
        gold.append(sentence_gold)
        predicted.append(sentence_predicted)
      sentence_gold, sentence_predicted = [], []
      continue
    columns = line.split()
    assert columns[:3] == source and len(columns) == 5  # the line, its gold tag, the prediction
    sentence_gold.append(columns[-2])
    sentence_predicted.append(columns[-1])
  if sentence_gold:
    gold.append(sentence_gold)
    predicted.append(sentence_predicted)
  assert [t for s in gold for t in s] == [t for d in conll.read_conll(str(data / "valid.txt"))
                                         for s in d.sentences for t in s.tags]
  assert abs(ner_metrics.conll_scores(gold, predicted)["f1"] - results["eval_f1"]) < 1e-6
  # Prediction alone reads the saved label list; the test file is four-column IOB1.
  run_script("run_ner.py", *_args(d, data, out, "--do_predict", "--predict_batch_size=5",
                                  f"--export_dir={export}"))
  lines = (out / "test_predictions.txt").read_text().splitlines()
  test_lines = (data / "test.txt").read_text().splitlines()
  assert len(lines) == len(test_lines)
  for line, source in zip(lines, test_lines):
    assert line == "" if source == "" else line.rsplit(" ", 1)[0] == source
  assert _results(out / "test_results.txt")["test_f1"] > 0.9
  # The SavedModel on raw sentences gives the Python path's tags, sentence by sentence
  # (a long one in windows every --doc_stride=8 pieces), and a tag for every word.
  sentences = ["Alice Smith visited Berlin today .", "", "acme corp said",
               " ".join(["the", "bob", "went", "to", "rome"] * 6)]
  served = fast_tokenization.load_serving(str(export))(
      text=tf.constant(sentences))
  labels = (out / "label_list.txt").read_text().split()
  model = BertTagger(BertEncoder(config), len(labels))
  checkpoints.load_checkpoint(model, str(out))
  path = _write(tmp_path / "raw.txt", [l for s in sentences if s for l in
                                       [f"{w} O" for w in s.split()] + [""]])
  flat = tagging_inputs.flatten(conll.read_conll(path), path, False)
  arrays, _ = tagging_inputs.window_arrays(tokenization.FullTokenizer(vocab), flat, labels, 24, 8, False)
  logits = model({k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})["logits"]
  want = [labels[i] for i in tagging_inputs.word_predictions(logits.numpy(), arrays["word_positions"],
                                                    len(flat.words))]
  counts = served["num_words"].numpy().tolist()
  assert counts == [len(s.split()) for s in sentences]
  got = [t.decode() for row, n in zip(served["tags"].numpy(), counts) for t in row[:n]]
  assert got == want
  assert got[:6] == ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
  assert [[w.decode() for w in row[:n]] for row, n in zip(served["words"].numpy(), counts)] == [
      s.split() for s in sentences]  # the words the tags belong to


@pytest.mark.slow
def test_feature_based_keeps_the_encoder_frozen(model_files, tmp_path, monkeypatch):
  d, _, _, init = model_files
  rng = random.Random(8)
  data, out, scratch = tmp_path / "data", tmp_path / "out", tmp_path / "scratch"
  data.mkdir()
  scratch.mkdir()
  monkeypatch.setenv("TMPDIR", str(scratch))  # where the features' file goes
  _conll_file(data / "train.txt", rng, 160, "four")
  _conll_file(data / "dev.txt", rng, 40, "four")
  proc = run_script("run_ner.py", *_args(
      d, data, out, "--do_train", "--do_eval", f"--init_checkpoint={init}", "--feature_based",
      "--feature_layers=0,-1,1", "--feature_combine=weighted", "--lstm_units=16",
      "--nodocument_context", "--train_batch_size=16", "--learning_rate=3e-2",
      "--num_train_epochs=10", "--eval_every_steps=25",
      "--save_checkpoints_steps=1", "--keep_checkpoint_max=1000"))
  assert _results(out / "eval_results.txt")["eval_f1"] > 0.9, proc.stderr[-3000:]
  # Evaluations during training compute the dev file's features beside the training
  # file's, which training goes on reading (a dev file of fewer words used to replace them).
  assert len((out / "eval_log.csv").read_text().splitlines()) == 1 + 4
  assert f"into {scratch}/run_ner_" in proc.stderr, proc.stderr[-3000:]
  assert not list(scratch.glob("run_ner_*"))  # the features' scratch folder is removed
  start = checkpoints.read_checkpoint(init).weights
  first = checkpoints.read_checkpoint(str(out / "ckpt-1")).weights
  final = checkpoints.read_checkpoint(str(out)).weights
  encoder = [n for n in start if n.startswith("bert/")]
  assert encoder and all(np.array_equal(final[n], start[n]) for n in encoder)  # exact: frozen
  head = [n for n in final if n.startswith("cls/ner/")]
  assert "cls/ner/layer_weights" in head and "cls/ner/lstm_1/bw/recurrent_kernel" in head
  assert all(not np.array_equal(final[n], first[n]) for n in head)  # trained: updates of ~3e-2
  # No optimizer slots for the frozen encoder.
  slots = [n for n, _ in tf.train.list_variables(str(out)) if n.startswith("optimizer/")]
  assert any("lstm_0" in n for n in slots)  # names are escaped: cls.Sner.Slstm_0...
  assert not any("bert" in n for n in slots)
  # Exported alone afterwards (run.json gives --feature_based): no features to compute, and
  # no data (--data_dir not required).
  run_script("run_ner.py", *[a for a in _args(d, data, out, f"--export_dir={tmp_path / 'export'}")
                             if not a.startswith("--data_dir=")])
  assert (tmp_path / "export" / "saved_model.pb").exists()


@pytest.mark.slow
def test_bad_input_gives_one_line_errors(model_files, tmp_path):
  d, *_ = model_files
  data = tmp_path / "data"
  data.mkdir()
  _write(data / "train.txt", ["Alice B-PER", "met O", "", "Bob B-PER 0"])
  proc = run_script("run_ner.py", *_args(d, data, tmp_path / "o", "--do_train"),
                    expect_ok=False)
  assert last_error_line(proc) == (f"error: {data / 'train.txt'}:4: 3 column(s) where line 1 "
                                   "has 2: 'Bob B-PER 0'.")
  proc = run_script("run_ner.py", *_args(d, data, tmp_path / "o", "--do_train",
                                         "--feature_based", "--feature_layers=-3"),
                    expect_ok=False)
  assert last_error_line(proc).startswith("error: --feature_layers: -3 is not a layer of a "
                                          "2-layer model")
  proc = run_script("run_ner.py", *_args(d, data, tmp_path / "o", "--do_train", "--use_tpu",
                                         "--tpu_name=grpc://10.0.0.2:8470", "--feature_based"),
                    expect_ok=False)
  assert last_error_line(proc) == ("error: --feature_based reads its features in this process, "
                                   "which a remote TPU's input pipeline cannot: run it on the "
                                   "TPU VM (no --tpu_name).")
  proc = run_script("run_ner.py", *_args(d, data, tmp_path / "o2", "--do_eval"), expect_ok=False)
  assert last_error_line(proc).startswith("error: No label list at")


# --- Feature-based: the word-level BiLSTM, cached features, serving, resume ---

def test_bilstm_equals_keras_lstm_on_the_same_weights():
  """modeling/lstm.py against keras.layers.Bidirectional(LSTM) with the same variables:
  outputs and gradients (inputs and every variable) on a right-padded batch, within 1e-5."""
  import keras
  from modeling import lstm
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(4, 7, 6)).astype("float32"))
  mask = tf.constant(np.arange(7)[None] < np.array([7, 3, 1, 5])[:, None])
  upstream = tf.constant(rng.normal(size=(4, 7, 10)).astype("float32"))
  ours = lstm.BidirectionalLSTM(5, name="ours")
  ours.build((None, None, 6))
  ref = keras.layers.Bidirectional(keras.layers.LSTM(5, return_sequences=True))
  ref.build((None, None, 6))
  for direction, layer in (("fw", ref.forward_layer), ("bw", ref.backward_layer)):
    for name in ("kernel", "recurrent_kernel", "bias"):
      value = getattr(layer.cell, name)
      value.assign(rng.normal(0, 0.5, value.shape).astype("float32"))
      lstm.named_variables("p", ours)[f"p/{direction}/{name}"].assign(value)

  def run(layer):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x, mask=mask)
      loss = tf.reduce_sum(y * upstream)
    return [y] + tape.gradient(loss, [x] + layer.trainable_variables)
  want = run(ref)
  for got in (run(ours), tf.function(run)(ours)):  # eager, and in a graph (the scripts')
    for a, b in zip(got, want):
      # float32, two LSTM implementations: 7 steps of gate sums over 6 inputs and 5 state
      # values, forward and back, and weight gradients summed over 4 * 7 steps.
      assert_close(a, b, "float32", 2 * 7 * (6 + 5) + 4 * 7)


def test_sentence_batches_cover_every_sentence_once_per_epoch(tmp_path):
  lengths = [3, 1, 4, 2, 5, 2]
  labels = list(range(sum(lengths)))  # a word's label is its row: checks the gather
  # The features as run_ner keeps them: a memory-mapped .npy file, row i = [i, -i].
  path = str(tmp_path / "features.npy")
  rows = np.lib.format.open_memmap(path, "w+", np.float32, (sum(lengths), 2))
  rows[:] = np.arange(sum(lengths))[:, None] * [1, -1]
  rows.flush()
  del rows
  batches = tagging_inputs.with_word_features(tagging_inputs.sentence_dataset(lengths, labels, 3, seed=1), path)
  batches = list(batches.take(4).as_numpy_iterator())
  starts = np.cumsum([0] + lengths)
  for epoch in (batches[:2], batches[2:]):
    seen = []
    for b in epoch:
      assert b["word_features"].shape == b["word_index"].shape + (2,)
      for index, label, weight, words in zip(b["word_index"], b["label_ids"],
                                             b["label_weights"], b["word_features"]):
        n = int(weight.sum())
        assert weight[:n].all() and n in lengths
        seen.append(int(index[0]))
        np.testing.assert_array_equal(index[:n], np.arange(index[0], index[0] + n))
        np.testing.assert_array_equal(label[:n], index[:n])
        np.testing.assert_array_equal(words[:n], np.stack([index[:n], -index[:n]], axis=1))
    assert sorted(seen) == starts[:-1].tolist()
  assert [b["word_index"][:, 0].tolist() for b in batches[:2]] != [
      b["word_index"][:, 0].tolist() for b in batches[2:]]  # reshuffled


def test_bucketed_sentence_batches_cover_every_sentence_with_less_padding(tmp_path):
  """--bucket_by_length: one epoch still holds every sentence once, and batches of similar
  lengths pad far less than shuffled ones."""
  rng = np.random.default_rng(3)
  lengths = rng.integers(1, 41, 640).tolist()
  labels = [0] * sum(lengths)
  starts = np.cumsum([0] + lengths)[:-1]

  def epoch(bucket):
    batches = tagging_inputs.sentence_dataset(lengths, labels, 8, 1, None, bucket, pool_batches=10)
    return list(batches.take(80).as_numpy_iterator())  # 640 sentences: one epoch
  padded = {}
  for bucket in (False, True):
    batches = epoch(bucket)
    assert sorted(int(i) for b in batches for i in b["word_index"][:, 0]) == sorted(starts)
    padded[bucket] = sum(b["label_weights"].size for b in batches) / sum(lengths)
  assert padded[False] > 1.5 and padded[True] < 1.15, padded
  iterator = iter(tagging_inputs.sentence_dataset(lengths, labels, 8, 1, None, True, pool_batches=10))
  next(iterator)
  path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))  # resumable
  after = next(iterator)["word_index"]
  tf.train.Checkpoint(iterator=iterator).restore(path)
  np.testing.assert_array_equal(next(iterator)["word_index"], after)


def test_cached_features_equal_the_window_call_and_the_served_tags(model_files, tmp_path):
  """word_features keeps the encoder's chosen layers at each word's first piece; the
  BiLSTM over cached features gives the logits BertFeatureTagger.call gives on the
  sentence's window, and TextTagger serves the same tags."""
  from modeling import export, tagging
  d, vocab, config, _ = model_files
  labels = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
  model = tagging.BertFeatureTagger(BertEncoder(config), len(labels), [-1, 0], "weighted", 6)
  randomize(model, seed=5, scale=0.3)
  rng = random.Random(3)
  path = tmp_path / "t.txt"
  _conll_file(path, rng, 9, "word_tag_0")
  documents = conll.read_conll(str(path))
  flat = tagging_inputs.flatten(documents, str(path), False)
  arrays, _ = tagging_inputs.window_arrays(tokenization.FullTokenizer(vocab), flat, labels, 24, 22, False)
  inputs = {k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")}
  features = word_features.word_features(model, arrays, len(flat.words), 4)
  mapped = word_features.word_features(model, arrays, len(flat.words), 4, str(tmp_path / "f.npy"))
  assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
  np.testing.assert_array_equal(mapped, features)  # exact: the file holds the same bits
  out = model.encoder(inputs)
  first = arrays["word_positions"] >= 0
  want = np.concatenate([out["encoder_outputs"][-1].numpy()[first],
                         out["embedding_output"].numpy()[first]], axis=-1)
  # float32, batches of 4 windows against all of them: the embeddings' LayerNorm and 2 blocks.
  assert_close(features[arrays["word_positions"][first]], want, "float32",
               2 * 32 + 2 * block_ops(config, 24))
  lengths = tagging_inputs.sentence_lengths(documents)
  assert len(arrays["input_ids"]) == len(lengths)  # one window per sentence
  logits = model({**inputs, "word_starts": first.astype("int32")})["logits"].numpy()
  starts = np.cumsum([0] + lengths)
  for i, n in enumerate(lengths):
    cached = model.tag_words(features[None, starts[i]:starts[i + 1]], np.ones((1, n), bool))
    # float32, from the same features up to the line above's orders: then the layers'
    # weighted sum, an LSTM over n words (gates summing 32 inputs and 6 state values)
    # and the classifier (12 inputs).
    assert_close(logits[i][first[i]], cached["logits"][0], "float32",
                 2 * 32 + 2 * block_ops(config, 24) + n * (32 + 6) + 12)
  tags = [labels[i] for i in word_features.tag_sentences(model, features, lengths, 4)]
  assert tags == [labels[i] for i in tagging_inputs.word_predictions(logits, arrays["word_positions"],
                                                            len(flat.words))]
  served = export.TextTagger(model, vocab, True, 24, labels).serve(
      tf.constant([" ".join(s.words) for s in documents[0].sentences]))
  counts = served["num_words"].numpy().tolist()
  assert counts == lengths
  assert [t.decode() for row, n in zip(served["tags"].numpy(), counts) for t in row[:n]] == tags
  assert len(set(tags)) > 1
  # Requests of no words (empty or blank texts) get no tags, alone or with others.
  serve = export.TextTagger(model, vocab, True, 24, labels).serve
  empty = serve(tf.constant(["", " "]))
  assert empty["num_words"].numpy().tolist() == [0, 0] and empty["tags"].shape[1] in (0, 1)
  mixed = serve(tf.constant(["", " ".join(documents[0].sentences[0].words)]))
  assert mixed["num_words"].numpy().tolist() == [0, lengths[0]]
  assert [t.decode() for t in mixed["tags"].numpy()[1][:lengths[0]]] == tags[:lengths[0]]


@pytest.mark.parametrize("feature_based", [False, True])
def test_the_export_tags_long_sentences_from_the_scripts_windows(model_files, tmp_path,
                                                                  feature_based):
  """A sentence longer than a window: TextTagger cuts it every doc_stride pieces and tags
  each word from its max-context window, as run_ner.py --nodocument_context predicts
  (window_arrays); it used to cut back-to-back windows whatever the stride."""
  from modeling import export, tagging
  _, vocab, config, _ = model_files
  labels = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
  model = (tagging.BertFeatureTagger(BertEncoder(config), len(labels), [-1, 0], "weighted", 6)
           if feature_based else BertTagger(BertEncoder(config), len(labels)))
  randomize(model, seed=6, scale=0.3)
  rng = random.Random(4)
  words = ["berlin"] + LOC + ORG + FILLER + PER_FIRST
  sentences = [[rng.choice(words) for _ in range(n)] for n in (3, 30, 47, 1, 60)]
  path = _write(tmp_path / "t.txt", [l for s in sentences for l in [f"{w} O" for w in s] + [""]])
  documents = conll.read_conll(path)
  flat = tagging_inputs.flatten(documents, path, False)
  tokenizer = tokenization.FullTokenizer(vocab)

  def script_tags(stride):  # run_ner.py's --do_predict path
    arrays, _ = tagging_inputs.window_arrays(tokenizer, flat, labels, 24, stride, False)
    if feature_based:
      features = word_features.word_features(model, arrays, len(flat.words), 4)
      return [labels[i] for i in word_features.tag_sentences(
          model, features, tagging_inputs.sentence_lengths(documents), 4)]
    logits = model({k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})["logits"]
    return [labels[i] for i in tagging_inputs.word_predictions(
        logits.numpy(), arrays["word_positions"], len(flat.words))]

  assert script_tags(5) != script_tags(22)  # the stride matters to these sentences' tags
  for stride in (5, 9, 22):
    served = export.TextTagger(model, vocab, True, 24, labels, stride).serve(
        tf.constant([" ".join(s) for s in sentences]))
    counts = served["num_words"].numpy().tolist()
    assert counts == [len(s) for s in sentences]
    got = [t.decode() for row, n in zip(served["tags"].numpy(), counts) for t in row[:n]]
    # Tags are the argmax of logits that the two paths compute from the same weights in
    # other batches: equal to float32 rounding, so tags agree unless two labels' logits were
    # that close, which this seed makes not so (a wrong window moves them by far more).
    assert got == script_tags(stride), stride


@pytest.mark.parametrize("distributed", [False, True])
def test_feature_based_training_resumes_where_it_stopped(model_files, tmp_path, distributed):
  """Eight steps over sentence batches in one run equal six, a restart, and two more. Under
  a distributed strategy, whose input skips the batches done, the skipped batches' features
  are never read."""
  from modeling import optimization, tagging, training
  _, _, config, _ = model_files
  rng = np.random.default_rng(2)
  lengths = [3, 1, 4, 2, 5, 2, 6, 1]
  path = str(tmp_path / "features.npy")
  np.save(path, rng.normal(size=(sum(lengths), 2 * config.hidden_size)).astype("float32"))
  labels = rng.integers(0, 5, sum(lengths))

  def numbered(ctx):  # each batch carries its place in the stream: 0, 1, ...
    batches = tagging_inputs.sentence_dataset(lengths, labels, 3, 7, ctx).enumerate()
    return batches.map(lambda i, batch: {
        **batch, "number": tf.fill(tf.shape(batch["label_weights"])[:1], i)})  # [B]

  def train(out, steps):
    reads = []  # the numbers of the batches whose features this run read

    def load(batches):
      counted = batches.map(lambda b: {**b, "read": tf.numpy_function(
          lambda i: reads.append(int(i[0])) or np.int32(0), [b["number"]], tf.int32,
          stateful=False)})
      return tagging_inputs.with_word_features(counted, path)

    tf.keras.utils.set_random_seed(4)  # the same initial head in each run
    strategy = (tf.distribute.OneDeviceStrategy("/cpu:0") if distributed
                else tf.distribute.get_strategy())
    task = tagging.TaggingTask(config, 5, True, [-1, -2], "concat", 4)
    trainer = training.Trainer(
        strategy, task,
        lambda names: optimization.create_optimizer("adamw", 1e-2, 8, 0, names),
        training.TrainConfig(output_dir=str(out), num_train_steps=steps, global_batch_size=3,
                             steps_per_loop=2, log_steps=2, save_checkpoints_steps=2))
    trainer.train(numbered, load_fn=load)
    return checkpoints.model_weights(trainer.model), reads
  straight, _ = train(tmp_path / "a", 8)
  _, reads = train(tmp_path / "b", 6)
  assert sorted(reads)[:6] == list(range(6))
  resumed, reads = train(tmp_path / "b", 8)
  # The six batches trained on before the restart are never read again: skipped before
  # loading (distributed), or restored past (the default strategy's checkpointed iterator,
  # whose checkpoint also holds the batches it had read ahead).
  assert min(reads) >= 6, reads
  head = [n for n in straight if n.startswith("cls/")]
  assert head
  for name in head:
    # Training re-run: the same program on the same batches from restored bits (equal
    # here); 1e-6 leaves room for a restarted loop compiled to other kernels, far below
    # the 1e-2 * 3.2 of one update.
    np.testing.assert_allclose(resumed[name], straight[name], atol=1e-6, err_msg=name)
