"""The tensorflow-text graph tokenizer gives exactly the Python tokenizer's ids."""

import math
import random

import pytest
import tensorflow as tf

from data import fast_tokenization as F
from data import tokenization as T

_POOLS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "àáâãäåçèéêëìíîïñòóôõöùúûüýÿÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝßøØæÆœŒİıſ",
    "ΑΒΓΔΕΣσςαβγδΌΏΐΰάέήίϊϋ",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»–—…‘’“”„†‡•‰′″‹›※‽、。〈〉《》「」【】",
    "\u0000\u0001\u0007\u001b\u007f\u0085\u00ad\u200b\u200c\u200d\u200e\u2060\ufeff\ufffd\u061c",
    " \t\n\r\u00a0\u1680\u2000\u2003\u2009\u202f\u205f\u3000\u2028\u2029\u000b\u000c\u001c",
    "中文字符博推漢字日本語한국어ひらがなカタカナ\u3400\u4dbf\U00020000\U0002a6df\U0002b740\uf900\ufa6a\U0002f800",
    "😀😃🤖👍🏽👨‍👩‍👧❤️🇺🇸✨🔥💩",
    "\u0301\u0300\u0308\u0323\u0327\u20dd\u0345\u05b0\u0e31\u0f71\U0001D165\U0001D16D\u302e\u1b44",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗ",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي۰۱۲ـאבגדהוזחטיכלמנסעפצקרשת",
    "कखगघङचछजझञटठडढणतथदधन्ािीुूृेैोौंः",
    "ﬁﬂ㎏Ⅻ①ｆｕｌｌ　ＷＩＤＴＨ½²\U00010400\U00010428\U0001e900\u1e9e\u0130\u03a3\u1f88",
    "\U0001d165\U0001d16d\U0001d16e\u302e\u1b44\U00016ff0\u0301\u0323\u0345\u05b0\u034faΣ'.",
    "\U000113c5\U000113c7\U00016d68\U000105c9ΣΣσ'ʼ",  # Unicode 16, unassigned in Python 3.11
)


def generated_strings(count, seed):
  """Strings mixing scripts, accents, CJK, punctuation runs, controls, emoji, long words."""
  rng = random.Random(seed)
  strings = []
  for _ in range(count):
    parts = []
    for _ in range(rng.randint(0, 30)):
      r = rng.random()
      if r < 0.04:
        parts.append(rng.choice("abcdefgh") * rng.randint(195, 205))
      elif r < 0.08:
        cp = rng.randint(0, 0x10FFFF)
        parts.append("" if 0xD800 <= cp <= 0xDFFF else chr(cp))
      else:
        pool = rng.choice(_POOLS)
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
      if rng.random() < 0.4:
        parts.append(" ")
    strings.append("".join(parts))
  return strings


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_parity_on_generated_strings(minilm_vocab, do_lower_case):
  """Graph path == Python path == a literal rendering of the original algorithm."""
  import original_tokenizer
  strings = generated_strings(3000, seed=17 + do_lower_case)
  python = T.FullTokenizer(minilm_vocab, do_lower_case)
  fast = F.FastTokenizer(minilm_vocab, do_lower_case)
  got = fast.tokenize(tf.constant(strings)).to_list()
  for text, ids in zip(strings, got):
    want = original_tokenizer.token_ids(text, python.vocab, do_lower_case)
    assert python.convert_tokens_to_ids(python.tokenize(text)) == want, repr(text)
    assert python.tokenize_to_ids(text) == want, repr(text)
    assert ids == want, repr(text)


def test_canonical_reordering_and_final_sigma(tmp_path):
  from conftest import write_vocab
  texts = ["x\U0001D16D\u0301\U0001D165y", "\u039f\u0394\u039f\u03a3'\u0391 \u039f\u03a3.",
           "\U000113c5 \u0130"]
  basic = T.BasicTokenizer(do_lower_case=True)
  words = [w for t in texts for w in basic.tokenize(t)]
  # NFD moves U+1D165 (class 216) before U+1D16D (class 226); the sigma before
  # "'" and a cased letter stays medial, the one before "." becomes final.
  assert words[0] == "x\U0001D165\U0001D16Dy" and "\u03bf\u03c2" in words
  vocab = write_vocab(tmp_path / "v.txt", ["[UNK]"] + sorted(set(words)))
  python = T.FullTokenizer(vocab)
  got = F.FastTokenizer(vocab).tokenize(tf.constant(texts)).to_list()
  assert got == [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
  assert 0 not in sum(got, [])  # every word was found, none became [UNK]


def test_minilm_examples(minilm_vocab):
  fast = F.FastTokenizer(minilm_vocab, do_lower_case=True)
  ids = fast.tokenize(tf.constant([
      "The quick brown fox jumps over the lazy dog.",
      "H\u00e9ll\u00f2 w\u00f6rld! \u00c7a va? na\u00efve caf\u00e9 r\u00e9sum\u00e9"])).to_list()
  assert ids == [[1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012],
                 [7592, 2088, 999, 6187, 12436, 1029, 15743, 7668, 13746]]
  assert fast.special_ids["[CLS]"] == 101 and fast.vocab_size == 30522


def test_tokenize_together_gives_each_tensors_own_ids(minilm_vocab):
  """One pass over several tensors' rows (the pair and multiple-choice exports) gives each
  tensor the ids the Python tokenizer gives its rows, empty tensors and rows included,
  traced for unknown sizes as the exports trace it."""
  fast = F.FastTokenizer(minilm_vocab, do_lower_case=True)
  python = T.FullTokenizer(minilm_vocab, do_lower_case=True)
  texts = [generated_strings(3, 1), [], generated_strings(4, 2) + [""]]
  spec = tf.TensorSpec([None], tf.string)
  together = tf.function(lambda a, b, c: [t.to_tensor(-1) for t in fast.tokenize_together(
      a, b, c)], input_signature=[spec] * 3)
  got = together(*(tf.constant(t, tf.string) for t in texts))
  for rows, ids in zip(texts, got):
    want = [python.convert_tokens_to_ids(python.tokenize(r)) for r in rows]
    assert [[i for i in row if i >= 0] for row in ids.numpy().tolist()] == want


def test_original_cases_and_word_limit(tiny_vocab):
  fast = F.FastTokenizer(tiny_vocab, max_input_chars_per_word=8)
  ids = fast.tokenize(tf.constant(["UNwant\u00E9d,running", "unwantedX running",
                                   "", "unwanteds unwanted"])).to_list()
  assert ids == [[7, 4, 5, 10, 8, 9], [0, 8, 9], [], [0, 7, 4, 5]]


def test_invalid_utf8_bytes_are_dropped_like_python(tiny_vocab):
  raw = [b"un\xffwant\xc3\xa9d", b"\xe2\x82runn\xc3", b"\x80"]
  fast = F.FastTokenizer(tiny_vocab).tokenize(tf.constant(raw)).to_list()
  python = T.FullTokenizer(tiny_vocab)
  assert fast == [python.convert_tokens_to_ids(python.tokenize(r)) for r in raw]


def test_inside_tf_data_and_saved_model(tiny_vocab, tmp_path):
  fast = F.FastTokenizer(tiny_vocab)
  texts = ["unwanted running", "UNwant\u00E9d,running"]
  ds = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(fast.tokenize)
  expected = [[7, 4, 5, 8, 9], [7, 4, 5, 10, 8, 9]]
  assert next(iter(ds)).to_list() == expected
  tf.saved_model.save(fast, str(tmp_path / "tokenizer"))
  reloaded = tf.saved_model.load(str(tmp_path / "tokenizer"))
  assert reloaded.tokenize(tf.constant(texts)).to_list() == expected


def test_duplicate_and_empty_vocab_lines(tmp_path):
  from conftest import write_vocab
  vocab = write_vocab(tmp_path / "v.txt", ["[UNK]", "a", "", "##b", "a", "c"])
  python = T.FullTokenizer(vocab)
  fast = F.FastTokenizer(vocab)
  texts = ["ab c", "a", "cab"]
  assert fast.tokenize(tf.constant(texts)).to_list() == [
      python.convert_tokens_to_ids(python.tokenize(t)) for t in texts] == [[4, 3, 5], [4], [0]]


def test_vocab_without_unk_is_rejected(tmp_path):
  from conftest import write_vocab
  vocab = write_vocab(tmp_path / "v.txt", ["a", "b"])
  with pytest.raises(ValueError, match=r"v.txt lacks required token\(s\) \[UNK\]"):
    F.FastTokenizer(vocab)


@pytest.mark.parametrize("seed", range(6))
def test_packed_features_match_tensorflow_text(seed):
  """packed_features against tensorflow-text's combine_segments and pad_model_inputs on the
  same kept pieces: one or two segments, empty rows, counts below the row lengths, rows cut
  at max_seq_length, int32 and int64 ids."""
  import numpy as np
  import tensorflow_text as tf_text
  rng = random.Random(seed)
  rows = rng.choice([0, 1, 2, 3, 4, 7, 8])
  max_seq_length = rng.choice([3, 9, 16, 40])
  dtype = rng.choice([tf.int32, tf.int64])
  segments = []
  for _ in range(rng.choice([1, 2])):
    ids = tf.ragged.constant([[rng.randrange(5, 99) for _ in range(rng.randrange(0, 20))]
                              for _ in range(rows)], dtype, ragged_rank=1, inner_shape=())
    counts = [rng.randrange(0, n + 1) for n in ids.row_lengths().numpy()]
    segments.append((ids, tf.constant(counts, tf.int64)))
  got = F.packed_features(segments, 101, 102, max_seq_length)
  kept = [tf.ragged.boolean_mask(ids, tf.ragged.range(ids.row_lengths()) < count[:, None])
          for ids, count in segments]
  ids, segment_ids = tf_text.combine_segments(kept, 101, 102)
  want_ids, want_mask = tf_text.pad_model_inputs(ids, max_seq_length)
  want_segments, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length)
  longest = max([1] + [int(n) for n in want_mask.numpy().sum(axis=1)])
  step = F.LENGTH_MULTIPLE // math.gcd(max(rows, 1), F.LENGTH_MULTIPLE)  # rows x width: a multiple
  width = min(-(-longest // step) * step, max_seq_length)
  for key, want in (("input_ids", want_ids), ("input_mask", want_mask),
                    ("segment_ids", want_segments)):
    assert got[key].dtype == tf.int32
    np.testing.assert_array_equal(got[key].numpy(), want.numpy()[:, :width], err_msg=key)


def test_exports_pad_a_batch_to_a_multiple_of_the_length_step():
  """pack_inputs pads the longest row so that rows x length is a multiple of LENGTH_MULTIPLE
  (8): one row to a multiple of 8, two rows of 4, four of 2, eight not at all, three (odd)
  of 8, at most max_seq_length; the original's [CLS] a [SEP] b [SEP], padding masked."""
  assert F.LENGTH_MULTIPLE == 8
  a = tf.ragged.constant([[5] * 6, [6, 7]], tf.int64)
  b = tf.ragged.constant([[8], [9, 9]], tf.int64)
  out = F.pack_inputs(a, b, 32, 101, 102)  # the longest row: 6 + 1 + 3 = 10 positions
  assert out["input_ids"].shape == (2, 12)
  assert out["input_ids"].numpy()[1, :7].tolist() == [101, 6, 7, 102, 9, 9, 102]
  assert out["input_mask"].numpy().sum(axis=1).tolist() == [10, 7]
  assert out["segment_ids"].numpy()[1, :8].tolist() == [0, 0, 0, 0, 1, 1, 1, 0]
  for rows, width in ((1, 16), (2, 12), (3, 16), (4, 10), (5, 16), (6, 12), (8, 10), (16, 10)):
    many = tf.ragged.constant([[5] * 8] * rows, tf.int64)  # 8 + 2 = 10 positions each
    assert F.pack_inputs(many, None, 32, 101, 102)["input_ids"].shape == (rows, width), rows
  # max_seq_length caps the rounding; no rows pad to the step of one.
  assert F.pack_inputs(a, b, 11, 101, 102)["input_ids"].shape == (2, 11)
  assert F.pack_inputs(a[:0], None, 32, 101, 102)["input_ids"].shape == (0, 8)