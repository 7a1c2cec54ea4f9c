"""learn_vocab.py --base_vocab_file: a released vocab extended with a domain's words."""

import collections
import json

import pytest

from conftest import write_vocab
from data import tokenization, vocab_extension

BASE = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(3)]
        + ["the", "cat", "sat", "on", "mat", "card", "##i", "##o", "##my", "##path", "##y",
           "my", "##o", "path", "##c", "##ard", "##s", "a", "s"])
# cardiomyopathy -> card ##i ##o ##my ##o ##path ##y (7 pieces); cats -> cat ##s (2).
DOMAIN = ("the cat sat on the mat . cardiomyopathy cardiomyopathy cardiomyopathy "
          "cats cats cats cats cats cardiomyopathy mycard mycard sat")


def test_domain_words_are_ranked_by_pieces_saved():
  counts = {"cardiomyopathy": 4, "cats": 5, "mycard": 2, "sat": 9, "zzz": 50, "mats": 1}
  words = vocab_extension.domain_words(counts, BASE, 10)
  # saved pieces: cardiomyopathy 4 * 6 = 24, cats 5 * 1 = 5, mycard (my ##c ##ard) 2 * 2 = 4;
  # sat is whole, zzz would be [UNK], mats is rarer than min_count 2.
  assert words == [("cardiomyopathy", 4, 7), ("cats", 5, 2), ("mycard", 2, 3)]
  assert vocab_extension.domain_words(counts, BASE, 1) == words[:1]


def test_an_uncased_vocab_is_told_from_cased_and_caseless_ones():
  assert vocab_extension.is_uncased(BASE + ["\u211d"])  # a letter without a lower case
  assert not vocab_extension.is_uncased(BASE + ["Cat"])
  assert not vocab_extension.is_uncased(["[PAD]", "[UNK]", "\u0915\u093e", "##\u0916"])
  assert not vocab_extension.is_uncased(["\u0915\u0947", "cat"])  # a sign lower-casing strips


def test_unused_slots_keep_every_other_id_and_append_grows():
  new = ["cardiomyopathy", "cats"]
  filled = vocab_extension.extend(BASE, new, "unused")
  assert len(filled) == len(BASE)
  assert filled[5:8] == ["cardiomyopathy", "cats", "[unused2]"]
  assert [t for i, t in enumerate(filled) if i not in (5, 6)] == \
      [t for i, t in enumerate(BASE) if i not in (5, 6)]
  assert vocab_extension.extend(BASE, new, "append") == BASE + new
  with pytest.raises(ValueError, match="4 new tokens: the base vocab has only 3"):
    vocab_extension.extend(BASE, new * 2, "unused")


def test_extended_vocab_file_and_its_report(tmp_path):
  base = write_vocab(tmp_path / "base.txt", BASE)
  out = str(tmp_path / "vocab.txt")
  counts = collections.Counter(DOMAIN.split())
  held_out = collections.Counter("cardiomyopathy cats the cat".split())
  report = vocab_extension.extend_vocab_file(counts, base, out, 2, "unused", held_out)
  vocab = tokenization.load_vocab(out)
  assert vocab["cardiomyopathy"] == 5 and vocab["cats"] == 6 and len(vocab) == len(set(BASE))
  assert json.loads((tmp_path / "vocab_extension.json").read_text()) == report
  # Held out: 4 words; before 7 + 2 + 1 + 1 = 11 pieces, after 4.
  assert report["pieces_per_word_before"] == 11 / 4 and report["pieces_per_word_after"] == 1.0
  assert [t["token"] for t in report["new_tokens"]] == ["cardiomyopathy", "cats"]
  assert vocab_extension.extend_vocab_file(counts, base, out, 2, "append")["vocab_size"] == \
      len(BASE) + 2


def test_an_entry_holding_a_unicode_line_separator_keeps_every_id(tmp_path):
  """A vocab line may hold U+2028 or U+0085 (str.splitlines would break there): the
  extension reads the lines as load_vocab does, so every base id stays what it was."""
  odd = ["[PAD]", "[UNK]", "x\u2028y", "[unused0]", "a\x85b", "[unused1]"] + BASE[8:]
  base = write_vocab(tmp_path / "base.txt", odd)
  out = str(tmp_path / "vocab.txt")
  vocab_extension.extend_vocab_file(collections.Counter(DOMAIN.split()), base, out, 2, "unused")
  before, after = tokenization.load_vocab(base), tokenization.load_vocab(out)
  assert len(after) == len(before) == len(set(odd)) and after["cardiomyopathy"] == 3
  assert all(after[t] == i for t, i in before.items() if not t.startswith("[unused"))


def test_the_script_stops_on_bad_input_and_says_when_words_run_short(
    tmp_path):
  from scripts import last_error_line, run_script
  base = write_vocab(tmp_path / "base.txt", BASE)
  (tmp_path / "domain.txt").write_text(DOMAIN + "\n")
  (tmp_path / "empty.txt").write_text("\n \n")
  out = tmp_path / "vocab.txt"
  args = [f"--input_file={tmp_path}/domain.txt", f"--base_vocab_file={base}",
          f"--vocab_file={out}", "--num_new_tokens=3"]  # later flags win
  proc = run_script("learn_vocab.py", *args, f"--held_out_file={tmp_path}/empty.txt",
                    expect_ok=False)
  assert last_error_line(proc) == (f"error: --held_out_file={tmp_path}/empty.txt: no words to "
                                   "measure pieces per word on.")
  assert not out.exists()
  proc = run_script("learn_vocab.py", *args, f"--vocab_file={base}", expect_ok=False)
  assert last_error_line(proc) == (f"error: --vocab_file={base} is also an input file; name "
                                   "another file.")  # a release's vocab kept whole
  assert tokenization.vocab_tokens(base) == BASE
  proc = run_script("learn_vocab.py", *args, "--num_new_tokens=4", expect_ok=False)
  assert last_error_line(proc) == (f"error: --num_new_tokens=4: --base_vocab_file={base} has "
                                   "only 3 [unusedN] slots; ask for fewer or use "
                                   "--extension=append.")
  proc = run_script("learn_vocab.py", *args, "--do_lower_case=false", expect_ok=False)
  assert last_error_line(proc) == (f"error: --do_lower_case=false, but --base_vocab_file={base} "
                                   "has no upper-case letter (an uncased vocab): no word with "
                                   "one would match it. Leave --do_lower_case at true.")
  proc = run_script("learn_vocab.py", *args, "--num_new_tokens=5", "--extension=append")
  assert "only 3 of --num_new_tokens=5: the input has no more words seen --min_count=2" in \
      proc.stderr
  assert tokenization.load_vocab(str(out))["cats"] == len(BASE) + 1  # appended second
