"""GLUE readers on fixture files in the standard layouts, and in-graph packing."""

import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import fast_tokenization, features, glue, tokenization

BOM = "\ufeff"


def _write(directory, name, lines):
  path = directory / name
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return path


def test_cola_layout_and_quotes(tmp_path):
  _write(tmp_path, "train.tsv", ['gj04\t1\t\tThe "quoted" word stays.', "gj04\t0\t*\tBad one ."])
  _write(tmp_path, "test.tsv", [BOM + "index\tsentence", '0\tA "test" line.', "1\tAnother."])
  task = glue.get_task("CoLA")
  train = glue.examples(task, str(tmp_path), "train")
  assert [(e.text_a, e.text_b, e.label) for e in train] == [
      ('The "quoted" word stays.', None, "1"), ("Bad one .", None, "0")]
  test = glue.examples(task, str(tmp_path), "test")
  assert [(e.index, e.text_a, e.label) for e in test] == [("0", 'A "test" line.', None),
                                                         ("1", "Another.", None)]


@pytest.mark.parametrize("name,header,row,test_header,test_row,want", [
    ("sst-2", "sentence\tlabel", "a fine film\t1", "index\tsentence", "7\tok film",
     ("a fine film", None, "1")),
    ("mrpc", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t11\t12\tHe said .\tHe spoke .",
     "index\t#1 ID\t#2 ID\t#1 String\t#2 String", "7\t1\t2\tA .\tB .", ("He said .", "He spoke .", "1")),
    ("sts-b", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
     "0\tmain\tf\t2012\t1\tnone\tnone\tA man plays .\tA man is playing .\t4.250",
     "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2",
     "7\tmain\tf\t2012\t1\tnone\tnone\tA .\tB .", ("A man plays .", "A man is playing .", 4.25)),
    ("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t1\t2\tWhy?\tHow?\t0",
     "id\tquestion1\tquestion2", "7\tWhat?\tWho?", ("Why?", "How?", "0")),
    ("qnli", "index\tquestion\tsentence\tlabel", "0\tWho?\tHe did.\tentailment",
     "index\tquestion\tsentence", "7\tWhat?\tThat.", ("Who?", "He did.", "entailment")),
    ("rte", "index\tsentence1\tsentence2\tlabel", "0\tA dog ran.\tAn animal ran.\tentailment",
     "index\tsentence1\tsentence2", "7\tX.\tY.", ("A dog ran.", "An animal ran.", "entailment")),
    ("wnli", "index\tsentence1\tsentence2\tlabel", "0\tIt rained.\tThe sky rained.\t1",
     "index\tsentence1\tsentence2", "7\tX.\tY.", ("It rained.", "The sky rained.", "1")),
])
def test_task_layouts(tmp_path, name, header, row, test_header, test_row, want):
  _write(tmp_path, "train.tsv", [BOM + header, row])
  _write(tmp_path, "dev.tsv", [header, row])
  _write(tmp_path, "test.tsv", [test_header, test_row])
  task = glue.get_task(name.upper())
  for split in ("train", "dev"):
    (e,) = glue.examples(task, str(tmp_path), split)
    assert (e.text_a, e.text_b, e.label) == want
  (t,) = glue.examples(task, str(tmp_path), "test")
  assert t.index == "7" and t.label is None


def test_mnli_matched_and_mismatched(tmp_path):
  cols = ["index", "promptID", "pairID", "genre", "s1bp", "s2bp", "s1p", "s2p", "sentence1",
          "sentence2"]
  row = lambda i, label: "\t".join([str(i), "1", "2", "g", "", "", "", "", f"P{i}.", f"H{i}."]
                                    + ([label] if label else []))
  _write(tmp_path, "train.tsv", ["\t".join(cols + ["label1", "gold_label"]),
                                 row(0, "neutral\tneutral")])
  for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
    _write(tmp_path, name, ["\t".join(cols + ["l1", "l2", "l3", "l4", "l5", "gold_label"]),
                            row(3, "a\tb\tc\td\te\tcontradiction")])
  for name in ("test_matched.tsv", "test_mismatched.tsv"):
    _write(tmp_path, name, ["\t".join(cols), row(9, None)])
  task = glue.get_task("mnli")
  assert glue.examples(task, str(tmp_path), "train")[0].label == "neutral"
  assert glue.examples(task, str(tmp_path), "dev_mismatched")[0].label == "contradiction"
  assert glue.examples(task, str(tmp_path), "test_mismatched")[0].index == "9"
  assert task.submissions == {"test": "MNLI-m", "test_mismatched": "MNLI-mm"}
  assert set(glue.held_out(task, "mnli", str(tmp_path), True, True)) == {
      "dev", "dev_mismatched", "test", "test_mismatched"}
  # The original reads the matched files alone: without the mismatched ones, MNLI-m runs.
  (tmp_path / "dev_mismatched.tsv").unlink()
  (tmp_path / "test_mismatched.tsv").unlink()
  assert set(glue.held_out(task, "mnli", str(tmp_path), True, True)) == {"dev", "test"}
  (tmp_path / "dev_matched.tsv").unlink()
  with pytest.raises(ValueError, match="has no dev_matched.tsv"):
    glue.held_out(task, "mnli", str(tmp_path), True, False)
  # A row that stops after the texts has no last-column label: said so, not its hypothesis
  # taken for one.
  _write(tmp_path, "train.tsv", ["\t".join(cols + ["label1", "gold_label"]), row(0, None)])
  with pytest.raises(ValueError, match=r"train.tsv:2: expected at least 11 tab-separated "
                     r"columns, found 10: no label \(the last column"):
    glue.examples(task, str(tmp_path), "train")
  _write(tmp_path, "train.tsv", ["\t".join(cols + ["label1", "gold_label"]),
                                 row(0, "neutral\t")])
  with pytest.raises(ValueError, match=r"train.tsv:2: label '' \(a tab at the end"):
    glue.examples(task, str(tmp_path), "train")


def test_xnli_language_and_label_fix(tmp_path):
  _write(tmp_path, "multinli/multinli.train.de.tsv",
         ["premise\thypo\tlabel", "Ein Hund.\tEin Tier.\tcontradictory"])
  dev_cols = ["language", "gold_label", "a", "b", "c", "d", "sentence1", "sentence2"]
  _write(tmp_path, "xnli.dev.tsv", ["\t".join(dev_cols),
                                    "de\tentailment\t\t\t\t\tX.\tY.",
                                    "ar\tneutral",  # another language's row, read unchecked
                                    "zh\tneutral\t\t\t\t\tZ.\tW."])
  task = glue.get_task("XNLI", xnli_language="de")
  assert glue.examples(task, str(tmp_path), "train")[0].label == "contradiction"
  assert [e.text_a for e in glue.examples(task, str(tmp_path), "dev")] == ["X."]


def test_malformed_rows_name_file_and_line(tmp_path):
  _write(tmp_path, "train.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tA.\tB.\tentailment",
                                 "1\tonly two"])
  with pytest.raises(ValueError, match=r"train.tsv:3: expected at least 4 tab-separated columns, found 2"):
    glue.examples(glue.get_task("rte"), str(tmp_path), "train")
  _write(tmp_path, "train.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tA.\tB.\tmaybe"])
  with pytest.raises(ValueError, match=r"train.tsv:2: label 'maybe' is not one of entailment, not_entailment"):
    glue.examples(glue.get_task("rte"), str(tmp_path), "train")
  with pytest.raises(ValueError, match="--task_name=foo: unknown task"):
    glue.get_task("foo")
  with pytest.raises(ValueError, match="has no dev.tsv"):
    glue.examples(glue.get_task("rte"), str(tmp_path), "dev")


# Characters str.splitlines() breaks at but a file read line by line does not.
NOT_LINE_BREAKS = ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]


@pytest.mark.parametrize("char", NOT_LINE_BREAKS)
def test_characters_inside_a_field_keep_the_row_whole(tmp_path, char):
  path = tmp_path / "train.tsv"
  path.write_bytes(("index\tsentence1\tsentence2\tlabel\n"
                    f"0\tA{char}B.\tC.\tentailment\n"
                    f"1\tD.\tE{char}\tnot_entailment\n").encode("utf-8"))
  got = glue.examples(glue.get_task("rte"), str(tmp_path), "train")
  assert [(e.index, e.text_a, e.text_b, e.label) for e in got] == [
      ("0", f"A{char}B.", "C.", "entailment"), ("1", "D.", f"E{char}", "not_entailment")]
  assert [n for n, _ in glue.read_tsv(str(path))] == [1, 2, 3]


def test_rows_end_at_newline_crlf_and_cr(tmp_path):
  path = tmp_path / "t.tsv"
  path.write_bytes(b"a\tb\r\nc\td\re\tf\ng\th")
  assert glue.read_tsv(str(path)) == [(1, ["a", "b"]), (2, ["c", "d"]), (3, ["e", "f"]),
                                      (4, ["g", "h"])]


def test_a_bad_row_is_reported_at_its_own_line(tmp_path):
  # Before, the U+2028 in line 2 split it and line 3 was blamed.
  path = tmp_path / "train.tsv"
  path.write_bytes("index\tsentence1\tsentence2\tlabel\n0\tA\u2028B.\tC.\tentailment\n"
                   "1\tD.\tE.\tmaybe\n".encode("utf-8"))
  with pytest.raises(ValueError, match=r"train.tsv:3: label 'maybe'"):
    glue.examples(glue.get_task("rte"), str(tmp_path), "train")


@pytest.mark.parametrize("data,message", [
    (b"index\tsentence\n0\tgood\n1\tcaf\xe9\n", r"test.tsv:3: byte 0xe9 is not UTF-8"),
    ("index\tsentence\n0\tgood\n".encode("utf-16"), r"test.tsv: starts with a UTF-16 byte order"),
    ("index\tsentence\n0\tgood\n".encode("utf-16-le"), r"test.tsv: NUL bytes all through"),
], ids=["latin-1", "utf-16-bom", "utf-16-no-bom"])
def test_text_that_is_not_utf8_fails_in_one_line(tmp_path, data, message):
  (tmp_path / "test.tsv").write_bytes(data)
  with pytest.raises(ValueError, match=message) as e:
    glue.examples(glue.get_task("sst-2"), str(tmp_path), "test")
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("name,split,lines,warned", [
    ("rte", "train", ["0\tA.\tB.\tentailment", "1\tC.\tD.\tnot_entailment"], True),
    ("rte", "train", ["index\tsentence1\tsentence2\tlabel", "1\tC.\tD.\tentailment"], False),
    ("sts-b", "dev", ["0\tm\tf\t2012\t1\tn\tn\tA.\tB.\t3.5",
                      "1\tm\tf\t2012\t1\tn\tn\tC.\tD.\t1.0"], True),
    ("sst-2", "test", ["0\tA fine film.", "1\tA bad film."], True),
    ("sst-2", "test", ["index\tsentence", "1\tA bad film."], False),
    ("cola", "train", ["gj04\t1\t\tA.", "gj04\t0\t*\tB."], False),  # no header expected
])
def test_a_first_row_that_reads_as_data_is_warned_about(tmp_path, monkeypatch, name, split,
                                                        lines, warned):
  warnings = []
  monkeypatch.setattr(glue.logging, "warning", lambda *args: warnings.append(args[0] % args[1:]))
  _write(tmp_path, f"{split}.tsv", lines)
  got = glue.examples(glue.get_task(name), str(tmp_path), split)
  assert len(got) == (2 if name == "cola" else 1)  # the first line is still skipped, as the original
  if warned:
    assert warnings == [f"{tmp_path}/{split}.tsv: the first line, skipped as the header, reads "
                        "as data; a file without a header line loses its first example."]
  else:
    assert warnings == []


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-Infinity", "high"])
def test_a_score_that_is_not_a_finite_number_names_file_and_line(tmp_path, score):
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
  _write(tmp_path, "train.tsv", [header, "0\tm\tf\t2012\t1\tn\tn\tA.\tB.\t3.5",
                                 f"1\tm\tf\t2012\t1\tn\tn\tC.\tD.\t{score}"])
  with pytest.raises(ValueError, match=rf"train.tsv:3: the score '{score}' is not a"):
    glue.examples(glue.get_task("sts-b"), str(tmp_path), "train")


def test_graph_truncation_equals_the_original():
  rng = random.Random(0)
  for _ in range(2000):
    la, lb, L = rng.randint(0, 40), rng.randint(0, 40), rng.randint(4, 50)
    a, b = list(range(la)), list(range(lb))
    if b:
      features.truncate_seq_pair(a, b, L - 3)
    else:  # an empty b: the original packs a alone
      a = a[:L - 2]
    got = fast_tokenization.truncated_lengths(tf.constant([la]), tf.constant([lb]), L)
    assert (int(got[0][0]), int(got[1][0])) == (len(a), len(b)), (la, lb, L)


def test_an_empty_second_text_packs_as_one_text(tmp_path):
  """The original keeps text_b only when it has pieces (`if tokens_b`), before and after the
  truncation: an empty or all-dropped b, or one the truncation empties, leaves [CLS] a [SEP]
  with a cut at max_seq_length - 2 and every segment id 0, in Python and in the exports'
  graph."""
  vocab = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])
  python = tokenization.FullTokenizer(vocab)
  fast = fast_tokenization.FastTokenizer(vocab)
  cases = [("a b a b a b", "", 6, [2, 4, 5, 4, 5, 3]),
           ("a b a b a b", " \u200b ", 6, [2, 4, 5, 4, 5, 3]),
           ("a", "b", 4, [2, 4, 3]),  # a budget of 1 token: the tie pops b away
           ("a b", "a", 8, [2, 4, 5, 3, 4, 3])]
  for a, b, L, want in cases:
    packed = features.pack_pair(python, a, b, L)
    assert packed.input_ids == want, (a, b, L)
    segments = [0] * (want.index(3) + 1)
    assert packed.segment_ids == segments + [1] * (len(want) - len(segments)), (a, b, L)
    graph = fast_tokenization.pack_inputs(fast.tokenize(tf.constant([a])),
                                          fast.tokenize(tf.constant([b])), L, 2, 3)
    width = len(want)
    assert graph["input_ids"].numpy()[0, :width].tolist() == want, (a, b, L)
    assert graph["input_mask"].numpy()[0].tolist() == [1] * width + [0] * (
        graph["input_mask"].shape[1] - width)
    assert graph["segment_ids"].numpy()[0, :width].tolist() == packed.segment_ids


def test_graph_packing_equals_python_packing(tmp_path):
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c", "dog", "cat", "##s", "."]
  vocab = write_vocab(tmp_path / "v.txt", words)
  python = tokenization.FullTokenizer(vocab)
  fast = fast_tokenization.FastTokenizer(vocab)
  rng = random.Random(1)
  texts = [" ".join(rng.choice(["a", "b", "c", "dogs", "cat", ".", "x"]) for _ in range(rng.randint(0, 20)))
           for _ in range(200)]
  pairs = list(zip(texts[:100], texts[100:]))
  for L in (8, 16):
    got = fast_tokenization.pack_inputs(fast.tokenize(tf.constant([p[0] for p in pairs])),
                                        fast.tokenize(tf.constant([p[1] for p in pairs])), L, 2, 3)
    want = features.pad_batch([features.pack_pair(python, a, b, L) for a, b in pairs], L)
    for k in want:
      np.testing.assert_array_equal(got[k].numpy(), want[k])
    single = fast_tokenization.pack_inputs(fast.tokenize(tf.constant(texts)), None, L, 2, 3)
    want = features.pad_batch([features.pack_pair(python, t, None, L) for t in texts], L)
    np.testing.assert_array_equal(single["input_ids"].numpy(), want["input_ids"])
