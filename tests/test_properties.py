"""Property-based tests (Hypothesis) of the file readers and the Python tokenizers.

Readers: rows written as a file comes back exactly, whatever the fields hold;
arbitrary bytes give either a result or a one-line ValueError naming the file.
Tokenizers: never raise on any text, equal the literal rendering of the
original in tests/original_tokenizer.py, and keep what they cut apart.
"""

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import original_tokenizer
from conftest import write_vocab
from data import conll, glue, swag, text_decoding, tokenization

SETTINGS = settings(max_examples=150, deadline=None, database=None)

# Characters that look like line or field ends to some APIs but are field text in a TSV.
TRICKY = ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x1f", "\v", "\f", '"', "'",
          "\\", "\ufeff", "\xa0", " ", "\u00e9", "\u4e2d"]
FIELD_CHARS = st.one_of(st.sampled_from(TRICKY), st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\t\n\r\x00"))
ROWS = st.lists(st.lists(st.text(FIELD_CHARS, max_size=8), min_size=1, max_size=5)
                .filter(lambda row: "\t".join(row) != ""), max_size=8)


def _temporary_file(data):
  handle, path = tempfile.mkstemp(suffix=".txt")
  with os.fdopen(handle, "wb") as f:
    f.write(data)
  return path


@SETTINGS
@given(rows=ROWS, endings=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=8,
                                   max_size=8), last_ending=st.booleans(), bom=st.booleans())
def test_tsv_rows_come_back_exactly(rows, endings, last_ending, bom):
  lines = ["\t".join(row) for row in rows]
  text = "".join(line + endings[i] for i, line in enumerate(lines))
  if lines and not last_ending:
    text = text[:-len(endings[len(lines) - 1])]
  # A leading U+FEFF in the data would be taken for a byte order mark without one before it.
  bom = bom or text.startswith("\ufeff")
  path = _temporary_file((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
  try:
    assert glue.read_tsv(path) == [(i + 1, row) for i, row in enumerate(rows)]
  finally:
    os.remove(path)


ANY_BYTES = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=60).map(lambda t: t.encode("utf-16")),
    st.text(max_size=60).map(lambda t: t.encode("utf-8")),
    st.lists(st.sampled_from([b"a", b"\t", b"\n", b"\r", b"\x00", b"\xff", b"\xe2\x80\xa8",
                              b"B-PER", b" O", b",", b'"', b"sent1,sent2,ending0,ending1"]),
             max_size=40).map(b"".join))


@SETTINGS
@given(data=ANY_BYTES)
def test_readers_on_any_bytes_give_a_result_or_one_line_naming_the_file(data):
  path = _temporary_file(data)
  try:
    checks = ((glue.read_tsv, _check_tsv_rows), (tokenization.load_vocab, _check_vocab),
              (conll.read_conll, _check_conll),
              (lambda p: swag.read_examples(p, num_choices=2, require_labels=False),
               _check_swag))
    for read, check in checks:
      try:
        result = read(path)
      except ValueError as e:
        assert path in str(e) and "\n" not in str(e), str(e)
      else:  # a result must be what the bytes say, line for line
        check(result, text_decoding.text_lines(text_decoding.decode_utf8(data, path)))
  finally:
    os.remove(path)


def _check_tsv_rows(rows, lines):
  for number, fields in rows:
    assert "\t".join(fields) == lines[number - 1], (number, fields)


def _check_vocab(vocab, lines):
  # The original's rule: each line stripped is a token, its id the line's index (a
  # repeated token keeps its last line's).
  assert vocab == {line.strip(): index for index, line in enumerate(lines)}


def _check_conll(documents, lines):
  for document in documents:
    for sentence in document.sentences:
      tags = sentence.tags or [""] * len(sentence.words)  # None: a file without tags
      assert len(sentence.words) == len(tags) == len(sentence.line_numbers)
      for word, tag, number in zip(sentence.words, tags, sentence.line_numbers):
        # IOB1 tags are read as IOB2, so an I- may come back as B-: the type is kept.
        assert word in lines[number - 1] and tag.split("-")[-1] in lines[number - 1]


def _check_swag(examples, lines):
  assert all(len(example.endings) == 2 for example in examples)
  assert all(example.label in (None, 0, 1) for example in examples)


WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "un", "want", "##want", "##ed",
         "run", "##ning", "caf", "##e", "中", "国", ",", ".", "!", "a", "##a", "b", "##b", "1",
         "##1", "é", "##é", "σ", "##ς"]
TEXT = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.lists(st.one_of(st.sampled_from([w.lstrip("#") for w in WORDS[5:]] + TRICKY
                                       + ["\t", "\n", "\u0301", "A", "ΣΑ", "\u200b", "\x00"]),
                       st.characters(blacklist_categories=("Cs",))),
             max_size=20).map("".join))


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  return write_vocab(tmp_path_factory.mktemp("properties") / "vocab.txt", WORDS)


@SETTINGS
@given(text=TEXT, lower=st.booleans())
def test_full_tokenizer_equals_the_original_on_any_text(vocab_file, text, lower):
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
  ids = tokenizer.tokenize_to_ids(text)
  assert ids == original_tokenizer.token_ids(text, tokenizer.vocab, lower)
  assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) == ids
  assert tokenizer.tokenize(text.encode("utf-8")) == tokenizer.tokenize(text)


@SETTINGS
@given(text=TEXT)
def test_cased_basic_tokens_keep_every_visible_character(text):
  tokens = tokenization.BasicTokenizer(do_lower_case=False).tokenize(text)
  dropped = lambda c: ord(c) in (0, 0xFFFD) or tokenization.is_control(c) or c.isspace()
  assert "".join(tokens) == "".join(c for c in text if not dropped(c))
  for token in tokens:
    assert token and not any(c.isspace() for c in token)
    if len(token) > 1:  # punctuation and CJK characters stand alone
      assert not any(tokenization.is_punctuation(c) or tokenization.is_cjk(ord(c))
                     for c in token)


@SETTINGS
@given(word=st.text(st.sampled_from("abeé中σς1#x"), min_size=1, max_size=12),
       max_chars=st.integers(1, 15))
def test_wordpieces_rebuild_the_word_or_are_unk(vocab_file, word, max_chars):
  vocab = tokenization.load_vocab(vocab_file)
  pieces = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=max_chars).tokenize(word)
  assert pieces == original_tokenizer.wordpiece(word, vocab, max_chars)
  if pieces != ["[UNK]"]:
    assert all(p in vocab for p in pieces)
    assert all(p.startswith("##") for p in pieces[1:])
    assert pieces[0] + "".join(p[2:] for p in pieces[1:]) == word
