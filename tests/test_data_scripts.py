"""The data scripts as a user runs them: prepare_corpus, learn_vocab, create_pretraining_data."""

import os

import pytest

from scripts import last_error_line, run_script
from test_pretraining_data import make_corpus, make_vocab, read_records


def test_prepare_corpus_unwraps_paragraphs_and_splits_sentences(tmp_path):
  (tmp_path / "a.txt").write_text(
      "The first paragraph is wrapped\nover two lines. It has two sentences.\n\n"
      "A second paragraph! Short.\n")
  (tmp_path / "b.txt").write_text(
      "Doc one says hello. And goodbye.\n=== next ===\nDoc two speaks.\n\n\n")
  out = tmp_path / "corpus.txt"
  run_script("prepare_corpus.py", f"--input_file={tmp_path}/a.txt", f"--output_file={out}")
  assert out.read_text() == ("The first paragraph is wrapped over two lines.\n"
                             "It has two sentences.\nA second paragraph!\nShort.\n")
  run_script("prepare_corpus.py", f"--input_file={tmp_path}/a.txt,{tmp_path}/b.txt",
             f"--output_file={out}", "--document_separator=^=== .* ===$")
  docs = out.read_text().split("\n\n")
  assert len(docs) == 3
  assert docs[1] == "Doc one says hello.\nAnd goodbye."
  assert docs[2] == "Doc two speaks.\n"
  proc = run_script("prepare_corpus.py", f"--input_file={tmp_path}/none*.txt",
                    f"--output_file={out}", expect_ok=False)
  assert last_error_line(proc) == f"error: --input_file: no file matches '{tmp_path}/none*.txt'."


def test_readme_separator_leaves_no_tags_of_wikiextractor_output(tmp_path):
  """The README's --document_separator example drops WikiExtractor's opening and closing
  tag lines: no tag text joins a sentence, and no empty document is written."""
  import io
  import re
  from data import corpus
  readme = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "README.md")).read()
  separator = re.search(r"`--document_separator` gives a regular\s+expression for the lines "
                        r"between documents \(e\.g\. `'([^']+)'`", readme).group(1)
  text = ('<doc id="1" url="u" title="First">\nFirst\n\nFirst doc. It has two sentences.\n'
          '</doc>\n<doc id="2" url="u" title="Second">\nSecond\n\nSecond doc here.\n</doc>\n\n')
  (tmp_path / "wiki.txt").write_text(text)
  out, stats = io.StringIO(), corpus.PrepareStats()
  corpus.prepare([str(tmp_path / "wiki.txt")], out, stats, separator)
  assert out.getvalue() == ("First\nFirst doc.\nIt has two sentences.\n\n"
                            "Second\nSecond doc here.\n")
  assert stats.documents == 2


def test_learn_vocab(tmp_path):
  corpus = make_corpus(tmp_path / "corpus.txt", documents=20, seed=4)
  vocab = tmp_path / "vocab.txt"
  proc = run_script("learn_vocab.py", f"--input_file={corpus}", f"--vocab_file={vocab}",
                    "--vocab_size=120", "--num_unused_tokens=3", "--min_count=1")
  tokens = vocab.read_text().splitlines()
  assert tokens[:8] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]",
                        "[unused1]", "[unused2]"]
  assert len(tokens) <= 120 and len(set(tokens)) == len(tokens)
  assert {"cat", "house", "##s"} <= set(tokens)
  assert "100.00% of words known" in proc.stderr


@pytest.mark.parametrize("flag, message", [
    ("--max_unique_chars=0", "0 is not a positive integer"),
    ("--min_count=0", "0 is not a positive integer"),
    ("--num_unused_tokens=-3", "-3 is not a non-negative integer"),
])
def test_learn_vocab_refuses_counts_out_of_range(tmp_path, flag, message):
  """An alphabet of no characters (every word [UNK]), a count threshold below 1 or a
  negative number of placeholders is refused before any counting."""
  (tmp_path / "corpus.txt").write_text("the cat sat on the mat\n")
  proc = run_script("learn_vocab.py", f"--input_file={tmp_path / 'corpus.txt'}",
                    f"--vocab_file={tmp_path / 'vocab.txt'}", flag, expect_ok=False)
  assert last_error_line(proc) == (f"error: flag {flag}: {message} (--helpfull lists the "
                                   "flags)")
  assert not (tmp_path / "vocab.txt").exists()


@pytest.fixture
def small(tmp_path):
  return make_vocab(tmp_path / "vocab.txt"), make_corpus(tmp_path / "corpus.txt", 8, seed=1)


def _leftovers(directory):
  return [n for n in os.listdir(directory) if ".tmp-" in n]


def test_generator_reports_and_writes(small, tmp_path):
  vocab, corpus = small
  with open(corpus, "ab") as f:
    f.write(b"caf\xc3 cat sat\xff\xfe on mat.\n")
  out = tmp_path / "out.tfrecord"
  (tmp_path / ".out.tfrecord.tmp-0123abcd").write_bytes(b"x" * 2_000_000)  # a killed run's
  (tmp_path / ".other.tfrecord.tmp-0123abcd").write_bytes(b"y")  # another output's: kept
  proc = run_script("create_pretraining_data.py", f"--input_file={corpus}",
                    f"--output_file={out}", f"--vocab_file={vocab}", "--max_seq_length=32",
                    "--max_predictions_per_seq=5", "--dupe_factor=2")
  assert f"Removed 2.0 MB of {out} left by an earlier run that did not finish." in proc.stderr
  assert _leftovers(tmp_path) == [".other.tfrecord.tmp-0123abcd"]
  (tmp_path / ".other.tfrecord.tmp-0123abcd").unlink()
  assert "dropped 3 undecodable bytes (first at" in proc.stderr
  lines = open(corpus, encoding="utf-8", errors="ignore").read().splitlines()
  assert f"corpus.txt:{len(lines)})" in proc.stderr
  count = int(proc.stderr.split("Wrote ")[1].split()[0])
  assert len(read_records([str(out)], 32, 5)["input_ids"]) == count > 0
  assert "masked" in proc.stderr and "random next sentence" in proc.stderr
  assert not _leftovers(tmp_path)


@pytest.mark.parametrize("case", ["empty", "vocab", "length", "output", "input", "probability",
                                  "utf-16", "utf-16-no-bom", "output twice"])
def test_bad_input_fails_in_one_line_without_output(small, tmp_path, case):
  vocab, corpus = small
  out = tmp_path / "new" / "dir" / "out.tfrecord"  # folders the failed run leaves unmade
  args = {"input_file": corpus, "output_file": str(out), "vocab_file": vocab}
  extra = []
  if case == "empty":
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    args["input_file"] = str(tmp_path / "empty.txt")
    expected = f"error: --input_file: no text in {tmp_path}/empty.txt."
  elif case == "vocab":
    (tmp_path / "v2.txt").write_text("[UNK]\n[CLS]\n[SEP]\ncat\n")
    args["vocab_file"] = str(tmp_path / "v2.txt")
    expected = f"error: Vocab file {tmp_path}/v2.txt lacks required token(s) [MASK]."
  elif case == "length":
    extra = ["--max_seq_length=4"]
    expected = ("error: --max_seq_length=4 is too small: [CLS], two [SEP]s and at least two "
                "tokens of text need 5.")
  elif case == "output":
    (tmp_path / "file").write_text("x")
    args["output_file"] = str(tmp_path / "file" / "out.tfrecord")
    out = tmp_path / "file" / "out.tfrecord"
    expected = f"error: --output_file={out}: {tmp_path}/file is a file, not a directory."
  elif case == "output twice":  # before, the second file replaced the first: half was lost
    again = f"{tmp_path}/new/dir/../dir/out.tfrecord"
    args["output_file"] = f"{out},{again}"
    expected = (f"error: --output_file names one file twice: '{out}' and '{again}'; name each "
                "output once.")
  elif case == "input":
    args["input_file"] = str(tmp_path / "missing*.txt")
    expected = f"error: --input_file: no file matches '{tmp_path}/missing*.txt'."
  elif case.startswith("utf-16"):  # before, every document merged into one
    text = open(corpus, encoding="utf-8").read()
    (tmp_path / "wide.txt").write_bytes(text.encode("utf-16" if case == "utf-16" else "utf-16-le"))
    args["input_file"] = str(tmp_path / "wide.txt")
    expected = (f"error: {tmp_path}/wide.txt:1: starts with a UTF-16 byte order mark; expected "
                "UTF-8 text (convert it, e.g. iconv -f UTF-16 -t UTF-8)." if case == "utf-16" else
                f"error: {tmp_path}/wide.txt:1: NUL bytes all through the text, as in UTF-16 or "
                "UTF-32; expected UTF-8 text (convert it, e.g. with iconv).")
  else:
    extra = ["--masked_lm_prob=1.5"]
    expected = "error: --masked_lm_prob=1.5 must be between 0 and 1."
  for streaming in ([], ["--num_workers=2"]):
    proc = run_script("create_pretraining_data.py",
                      *[f"--{k}={v}" for k, v in args.items()], *extra, *streaming,
                      expect_ok=False)
    assert proc.returncode != 0
    assert last_error_line(proc).startswith(expected), last_error_line(proc)
    assert not out.exists() and not (tmp_path / "new").exists() and not _leftovers(tmp_path)


def test_small_corpus_vocab_equals_the_full_threshold_search():
  """A corpus too small to fill the vocab takes one learning pass, with the result of
  tensorflow-text's whole threshold search; one that can fill it runs the search."""
  import collections
  import random

  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib

  from data import wordpiece_vocab
  rng = random.Random(1)
  words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(1, 9)))
           for _ in range(400)]
  counts = collections.Counter(rng.choice(words) for _ in range(20_000))
  calls = []
  search = lib.learn_with_thresh

  def counted(*args):
    calls.append(args[1])
    return search(*args)

  lib.learn_with_thresh = counted
  try:
    got = wordpiece_vocab.learn(counts, 2000)
    assert len(calls) == 1
    calls.clear()
    want = lib.learn(list(counts.items()), 2000, wordpiece_vocab.reserved_tokens(2000),
                     lower_thresh=2, max_token_length=50)
    assert len(calls) > 5 and got == want and len(got) < 2000 * 0.95
    calls.clear()
    assert len(wordpiece_vocab.learn(counts, 300)) <= 300 and len(calls) > 5  # the search
  finally:
    lib.learn_with_thresh = search


def test_learned_vocab_never_exceeds_its_size():
  """tensorflow-text's threshold search can stop far above the target (406 tokens here);
  the rarest multi-character pieces go, every character stays, so nothing becomes [UNK]."""
  import collections
  import random

  from data import tokenization, wordpiece_vocab
  rng = random.Random(0)
  counts = collections.Counter({"".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 8))):
                                rng.randint(1, 50) for _ in range(3000)})
  for size in (60, 150):
    vocab = wordpiece_vocab.learn(counts, size)
    assert len(vocab) == size and vocab[:5] == list(tokenization.SPECIAL_TOKENS)
    assert {"a", "##a", "j", "##j"} <= set(vocab)
    assert wordpiece_vocab.coverage(counts, vocab)[0] == 1.0
