"""Batched WordPiece tokenization as TensorFlow ops, id for id equal to `FullTokenizer`.

`FastTokenizer` runs inside tf.data pipelines, tf.functions and SavedModels.
It mirrors `data/tokenization.py` step by step:

1. UTF-8 decoding that drops invalid bytes (`unicode_transcode`, errors=ignore).
2. Cleaning and CJK isolation with RE2 character classes generated from the
   very predicates the Python path uses (`tokenization.character_classes`), so
   both follow Python's Unicode database rather than RE2's or ICU's.
3. With do_lower_case: Python's `str.lower()` (including its final-sigma rule)
   and canonical decomposition (NFD), applied through a code point table built
   from Python, then NFD's canonical reordering of the marks that survive, and
   removal of non-spacing marks (Mn).
4. Punctuation and whitespace splitting (regex replacement, then a split on spaces).
5. Words longer than max_input_chars_per_word become [UNK]; the rest are cut
   greedily, longest match first, by `_wordpiece` (core TensorFlow ops: a hash
   table of the vocab and a loop over pieces; see its docstring).

Only core TensorFlow ops end up in a graph, so a SavedModel that tokenizes runs under
`saved_model_cli` and TensorFlow Serving, which do not load tensorflow-text.

All Unicode data comes from Python's `unicodedata`, none from RE2 or ICU, so
the two paths agree on every input, including characters that newer Unicode
versions assign. The tests check this on thousands of generated strings.
"""

import functools
import unicodedata

import numpy as np

import tensorflow as tf

from data import graph_ops, tokenization


def _re2_escape(cp):
  return "\\x{%x}" % cp


def _re2_class(ranges):
  return tokenization.class_pattern(ranges, _re2_escape)


@functools.lru_cache(maxsize=None)
def _lower_case_tables():
  """Python-derived data for lower-casing: code point map, sigma rule, mark order."""
  keys, values = [], []
  assigned = tokenization.assigned_code_points().tolist()
  for cp in assigned:  # unassigned code points have no mappings
    char = chr(cp)
    mapped = unicodedata.normalize("NFD", char.lower())
    if mapped != char:
      keys.append(cp)
      values.append([ord(c) for c in mapped])
  # Python's final-sigma rule (Unicode "Final_Sigma") looks past case-ignorable
  # characters for a cased one. Python does not expose Case_Ignorable, so it is
  # read off `str.lower()` itself.
  cased = np.zeros(0x110000, bool)
  ignorable = np.zeros(0x110000, bool)
  for cp in assigned:
    c = chr(cp)
    cased[cp] = c.islower() or c.isupper() or c.istitle()
    if cased[cp]:
      ignorable[cp] = (c + "\u03a3").lower()[-1] == "\u03c3"
    else:
      ignorable[cp] = ("A\u03a3" + c + "B").lower()[1] == "\u03c3"
  ranges = tokenization.ranges
  ignorable_class = _re2_class(ranges(ignorable))
  sigma = (f"({_re2_class(ranges(cased & ~ignorable))}{ignorable_class}*)\u03a3"
           f"({ignorable_class}*(?:{_re2_class(ranges(~cased & ~ignorable))}|$))")
  mn = _re2_class(tokenization.character_classes()["mn"])
  return keys, values, sigma, _reorder_patterns(assigned), mn


def _reorder_patterns(assigned):
  """Regex swaps that give marks kept after Mn removal their canonical order.

  NFD sorts each run of non-starters (combining class > 0) by class. Only the
  relative order of the few non-Mn non-starters (spacing marks such as U+1D16D)
  survives Mn removal, so a swap of two of them that are out of order, with
  only Mn non-starters between them, repeated until none applies, is NFD's
  reordering as far as the output can tell.
  """
  category = tokenization.unicode_categories()
  ccc = {cp: unicodedata.combining(chr(cp)) for cp in assigned}
  kept = [cp for cp in assigned if ccc[cp] and category[cp] != "Mn"]
  between_mask = np.zeros(0x110000, bool)
  between_mask[[cp for cp in assigned if ccc[cp] and category[cp] == "Mn"]] = True
  between = _re2_class(tokenization.ranges(between_mask))
  swaps = []
  for c in sorted({ccc[cp] for cp in kept})[1:]:
    higher = _re2_class([(cp, cp) for cp in kept if ccc[cp] == c])
    lower = _re2_class([(cp, cp) for cp in kept if ccc[cp] < c])
    swaps.append(f"({higher})({between}*)({lower})")
  return swaps


def _vocab_for_tf(vocab):
  """The vocab as a list indexed by id, with unusable entries made unreachable.

  tf-text needs unique, non-empty tokens. The Python tokenizer maps a repeated
  token to its last id and can never produce "", so earlier duplicates and
  empty lines are replaced by placeholders no input can produce.
  """
  size = max(vocab.values()) + 1
  # Brackets are always split off words, so no input can reach these.
  tokens = [f"[unreachable-{i}]" for i in range(size)]
  for token, index in vocab.items():
    if token:
      tokens[index] = token
  return tokens


class FastTokenizer(tf.Module):
  """String tensor -> WordPiece ids, equal to `FullTokenizer` (see module doc).

  Args:
    vocab_file: path of a vocab.txt.
    do_lower_case: bool, as for `FullTokenizer`.
    max_input_chars_per_word: words with more characters become [UNK].
  """

  def __init__(self, vocab_file, do_lower_case=True, max_input_chars_per_word=200, name=None):
    super().__init__(name=name)
    vocab = tokenization.load_vocab(vocab_file)
    tokenization.require_tokens(vocab, [tokenization.UNK_TOKEN], vocab_file)
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.max_input_chars_per_word = max_input_chars_per_word
    self.vocab_size = max(vocab.values()) + 1
    self.special_ids = {t: vocab[t] for t in tokenization.SPECIAL_TOKENS if t in vocab}
    classes = tokenization.character_classes()
    self._drop = _re2_class(classes["drop"])
    self._space = _re2_class(classes["space"])
    self._cjk = _re2_class(classes["cjk"])
    self._punct = _re2_class(classes["punct"])
    self._split = _re2_class(classes["split"])
    if do_lower_case:
      keys, values, self._sigma, self._swaps, self._mn = _lower_case_tables()
      self._map_table = tf.lookup.StaticHashTable(
          tf.lookup.KeyValueTensorInitializer(
              tf.constant(keys, tf.int32), tf.range(len(keys), dtype=tf.int32)),
          default_value=-1)
      self._map_values = tf.constant([c for v in values for c in v], tf.int32)
      self._map_lengths = tf.constant([len(v) for v in values], tf.int32)
      self._map_starts = tf.cumsum(self._map_lengths, exclusive=True)
    by_id = _vocab_for_tf(vocab)
    self.id_to_token = tf.constant(by_id)  # string [V]: each id's token
    tokens = [t for t in by_id if not t.startswith("[unreachable-")]
    self._piece_ids = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(tokens), tf.constant([vocab[t] for t in tokens], tf.int32)),
        default_value=-1)
    # The longest piece in characters ("##" not counted): no longer match exists.
    self._longest_piece = max(len(t[2:] if t.startswith("##") else t) for t in tokens)
    self._unk_id = vocab[tokenization.UNK_TOKEN]
    # A tf.function attribute (not a decorated method): it keeps the module
    # alive and is exported with it in a SavedModel.
    self.tokenize = tf.function(
        self._tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    self.basic_tokenize = tf.function(
        self._basic_tokenize, input_signature=[tf.TensorSpec([None], tf.string)])

  def _lower_and_strip_accents(self, text):
    """Python's lower() + NFD + removal of Mn characters, on a [B] string tensor.

    ASCII-only strings just need ASCII lower-casing; only the others take the
    code point path.
    """
    text = tf.strings.lower(text)  # ASCII letters only; other bytes are left alone
    is_ascii = tf.strings.regex_full_match(text, "[\\x00-\\x7f]*")
    ascii_ = tf.cast(tf.where(is_ascii)[:, 0], tf.int32)
    other = tf.cast(tf.where(~is_ascii)[:, 0], tf.int32)
    return tf.dynamic_stitch(
        [ascii_, other],
        [tf.gather(text, ascii_), self._unicode_lower_and_strip(tf.gather(text, other))])

  def _unicode_lower_and_strip(self, text):
    """The code point path of _lower_and_strip_accents."""
    text = tf.strings.regex_replace(text, self._sigma, "\\1\u03c2\\2")
    chars = tf.strings.unicode_decode(text, "UTF-8")  # [B, (C)] code points
    flat = chars.flat_values
    index = self._map_table.lookup(flat)
    mapped = index >= 0
    safe = tf.maximum(index, 0)
    out_lengths = tf.where(mapped, tf.gather(self._map_lengths, safe), 1)  # [N]
    out_owner = tf.repeat(tf.range(tf.size(flat)), out_lengths)  # [M]
    offset = tf.range(tf.size(out_owner)) - tf.gather(
        tf.cumsum(out_lengths, exclusive=True), out_owner)
    from_table = tf.gather(
        self._map_values,
        tf.gather(tf.gather(self._map_starts, safe), out_owner) + offset)
    values = tf.where(tf.gather(mapped, out_owner), from_table, tf.gather(flat, out_owner))
    row_lengths = tf.reduce_sum(chars.with_flat_values(out_lengths), axis=1)
    text = tf.strings.unicode_encode(
        tf.RaggedTensor.from_row_lengths(values, row_lengths), "UTF-8")
    any_swap = "(?s).*(?:" + "|".join(self._swaps) + ").*"

    def reorder(text):
      for swap in self._swaps:
        text = tf.strings.regex_replace(text, swap, "\\3\\2\\1")
      return text
    text = tf.while_loop(
        lambda t: tf.reduce_any(tf.strings.regex_full_match(t, any_swap)), reorder, [text])[0]
    return tf.strings.regex_replace(text, self._mn, "")

  def _basic_tokenize(self, text):
    """Basic tokens of a [B] string tensor, as a [B, (W)] RaggedTensor of strings."""
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")
    text = tf.strings.regex_replace(text, self._drop, "")
    text = tf.strings.regex_replace(text, self._space, " ")
    text = tf.strings.regex_replace(text, self._cjk, " \\0 ")
    if self.do_lower_case:
      text = self._lower_and_strip_accents(text)
    text = tf.strings.regex_replace(text, self._punct, " \\0 ")
    # What str.split() splits on, as ASCII spaces; tf.strings.split then cuts there.
    return tf.strings.split(tf.strings.regex_replace(text, self._split, " "))

  def _tokenize(self, text):
    """WordPiece ids of a [B] string tensor, as a [B, (T)] int32 RaggedTensor."""
    return self._pieces_of(self._basic_tokenize(text))

  def tokenize_together(self, *texts):
    """tokenize() of several string tensors [B_i] in one pass over all their rows, the
    tokenizer's fixed cost of graph ops paid once (0.18-0.31 ms less a sentence pair:
    benchmarks/investigations/packing.py): a list of int32 [B_i, (T)] RaggedTensors. Ops in
    the caller's graph."""
    return self.tokenize_keeping_words(*texts)[0]

  def tokenize_keeping_words(self, *texts):
    """tokenize_together(*texts) and the basic tokens the pieces come from, from the same
    pass: ([ids int32 [B_i, (T)]], [basic tokens string [B_i, (W)]]), one of each per text.
    Ops in the caller's graph."""
    words = self._basic_tokenize(tf.concat(texts, 0))
    ids = self._pieces_of(words)
    ends = tf.cumsum([tf.shape(t)[0] for t in texts])
    split = lambda rows: [rows[(ends[i - 1] if i else 0):ends[i]] for i in range(len(texts))]
    return split(ids), split(words)

  def _pieces_of(self, words):
    """WordPiece ids of basic tokens [B, (W)], as a [B, (T)] int32 RaggedTensor."""
    too_long = tf.strings.length(words.flat_values, "UTF8_CHAR") > self.max_input_chars_per_word
    # A word can never be "[UNK]" itself (brackets are split off), so the
    # literal token stands in for an over-long word and maps to the [UNK] id.
    words = words.with_flat_values(
        tf.where(too_long, tokenization.UNK_TOKEN, words.flat_values))
    pieces = self._wordpiece(words.flat_values)  # [N, (P)]
    return tf.RaggedTensor.from_row_splits(pieces.flat_values,
                                           tf.gather(pieces.row_splits, words.row_splits))

  def _wordpiece(self, words):
    """Greedy longest-match-first WordPiece ids of words [N]: int32 [N, (P)].

    A word that is itself a vocab piece is that piece. For the others, the
    longest piece starting at each character position (with "##" after the
    first) is looked up among the substrings of up to `_longest_piece`
    characters; a loop then walks each word from its start, piece by piece.
    A word that reaches a position with no piece becomes [UNK] whole, as in
    the original. Only core TensorFlow ops.
    """
    whole_ids = self._piece_ids.lookup(words)  # [N]
    whole = whole_ids >= 0
    rest = tf.where(~whole)[:, 0]
    pieces = tf.concat([tf.RaggedTensor.from_row_lengths(  # the whole words first, then the rest
        tf.boolean_mask(whole_ids, whole), tf.ones_like(tf.where(whole)[:, 0])),
        self._walk(tf.gather(words, rest))], axis=0)
    order = tf.concat([tf.where(whole)[:, 0], rest], axis=0)
    return tf.gather(pieces, tf.math.invert_permutation(order))

  def _walk(self, words):
    """The greedy walk of _wordpiece over words [N] that are no vocab piece: [N, (P)]."""
    chars = tf.strings.unicode_split(words, "UTF-8")  # [N, (C)]
    num_chars = chars.row_lengths()  # [N]
    owner = chars.value_rowids()  # [T] the word of each position
    position = tf.ragged.range(num_chars).flat_values  # [T]
    k = self._longest_piece
    lengths = tf.range(1, k + 1, dtype=tf.int64)  # [K]
    fits = lengths[None, :] <= (tf.gather(num_chars, owner) - position)[:, None]  # [T, K]
    pairs = tf.where(fits)  # [M, 2] (position, length - 1) of the substrings that exist
    at = tf.gather(position, pairs[:, 0])
    substrings = tf.strings.substr(tf.gather(words, tf.gather(owner, pairs[:, 0])), at,
                                   pairs[:, 1] + 1, unit="UTF8_CHAR")  # [M]
    candidates = tf.where(at > 0, tf.strings.join(["##", substrings]), substrings)
    ids = tf.tensor_scatter_nd_update(tf.fill(tf.shape(fits, out_type=tf.int64), -1), pairs,
                                      self._piece_ids.lookup(candidates))  # [T, K]
    found = ids >= 0
    best = tf.reduce_max(tf.where(found, lengths[None, :], 0), axis=1)  # [T] 0: none
    best_id = tf.gather(ids, tf.maximum(best - 1, 0), batch_dims=1)  # [T]
    starts = chars.row_starts()  # [N] each word's first position in T

    def step(at, bad, out_ids, out_kept, i):
      active = at < num_chars
      t = tf.minimum(starts + at, tf.maximum(tf.size(best, tf.int64) - 1, 0))
      length = tf.where(active, tf.gather(best, t), 0)
      bad = bad | (active & tf.equal(length, 0))
      out_ids = out_ids.write(i, tf.gather(best_id, t))
      out_kept = out_kept.write(i, active & (length > 0))
      return tf.where(length > 0, at + length, num_chars), bad, out_ids, out_kept, i + 1

    n = tf.size(words)
    _, bad, out_ids, out_kept, _ = tf.while_loop(
        # At least one step, so the arrays are never empty (a batch without words).
        lambda at, bad, ids, kept, i: (i == 0) | tf.reduce_any(at < num_chars), step,
        [tf.zeros([n], tf.int64), tf.zeros([n], tf.bool),
         tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None]),
         tf.TensorArray(tf.bool, size=0, dynamic_size=True, element_shape=[None]),
         tf.constant(0)])
    by_word = lambda a: graph_ops.swap_axes(tf.reshape(a.stack(), [-1, n]))  # [N, S]
    out_ids, out_kept = by_word(out_ids), by_word(out_kept)
    first = tf.equal(tf.range(tf.shape(out_ids)[1]), 0)[None, :]
    out_ids = tf.where(bad[:, None] & first, self._unk_id, out_ids)
    out_kept = tf.where(bad[:, None], first & tf.ones_like(out_kept), out_kept)
    return tf.ragged.boolean_mask(out_ids, out_kept)


def load_serving(path):
  """The serving_default signature of a SavedModel exported with this tokenizer inside (core
  TensorFlow ops only)."""
  return tf.saved_model.load(path).signatures["serving_default"]


def truncated_lengths(length_a, length_b, max_seq_length):
  """Lengths [B] that the original's pair truncation keeps, computed in one step.

  The original pops from the end of the longer side (b on a tie) until
  [CLS] a [SEP] b [SEP] fits: the shorter side is untouched when the longer
  can absorb the whole cut, otherwise both end at half the budget (a gets the
  odd token). With no b (length_b None), or in rows whose b is empty, a is cut to
  max_seq_length - 2.
  """
  length_a = tf.cast(length_a, tf.int64)
  single = tf.minimum(length_a, tf.constant(max_seq_length - 2, tf.int64))
  if length_b is None:
    return single, None
  length_b = tf.cast(length_b, tf.int64)
  budget = tf.constant(max_seq_length - 3, tf.int64)
  half = budget // 2
  shorter = tf.minimum(length_a, length_b)
  fits = length_a + length_b <= budget
  a_shorter = length_a < length_b
  both_halved = shorter > half
  new_a = tf.where(length_b == 0, single, tf.where(fits, length_a, tf.where(
      both_halved, budget - half, tf.where(a_shorter, length_a, budget - length_b))))
  new_b = tf.where(fits, length_b, tf.where(
      both_halved, half, tf.where(a_shorter, budget - length_a, length_b)))
  return new_a, new_b


def pack_inputs(ids_a, ids_b, max_seq_length, cls_id, sep_id):
  """[CLS] a [SEP] (b [SEP]) model inputs from ragged ids [B, (T)], truncated as the original.

  Returns int32 [B, L] input_ids, input_mask and segment_ids (packed_features). A row
  whose b is empty, or emptied by the truncation, packs as [CLS] a [SEP], as in
  features.pack_pair.
  """
  length_a, length_b = truncated_lengths(
      ids_a.row_lengths(), None if ids_b is None else ids_b.row_lengths(), max_seq_length)
  segments = [(ids_a, length_a)] + ([] if ids_b is None else [(ids_b, length_b)])
  return packed_features(segments, cls_id, sep_id, max_seq_length, optional_last=True)


# The exports pad a batch so that its positions (rows x length) are a multiple of this, the
# length at most max_seq_length: the dense layers' row counts then repeat, so oneDNN mostly
# reuses kernels it built for an earlier batch, where single requests of real text, each of
# its own length, otherwise pay for new kernels at every length (docs/serving.md).
LENGTH_MULTIPLE = 8


def padded_length(longest, rows, max_seq_length):
  """int64 scalar: the length a batch of `rows` rows whose longest has `longest` positions
  is padded to, the least at or above `longest` that makes rows x length a multiple of
  LENGTH_MULTIPLE (a power of two; a single request's length rounds to a multiple of it,
  four rows' to a multiple of 2, eight rows' not at all), at most max_seq_length."""
  rows = tf.maximum(tf.cast(rows, tf.int64), 1)
  step = LENGTH_MULTIPLE // tf.minimum(tf.bitwise.bitwise_and(rows, -rows), LENGTH_MULTIPLE)
  return tf.minimum(-(-longest // step) * step, max_seq_length)


def packed_features(segments, cls_id, sep_id, max_seq_length, optional_last=False):
  """Model inputs [CLS] s1 [SEP] (s2 [SEP]) of one or two segments.

  segments: [(ids, count)]: ragged int ids [B, (T)] and int [B], how many of each row's first
    ids to take.
  optional_last: rows whose last segment (after the first) takes no ids leave out its [SEP].
  Returns int32 input_ids, input_mask and segment_ids [B, L]: L is padded_length of the
  longest row, at most max_seq_length (a longer row is cut there);
  padding is masked, so the model's outputs at real positions are those of a max_seq_length
  batch. Position arithmetic and a gather per segment: pack_inputs of a pair traces to 177
  ops, against 1,615 for tensorflow-text's combine_segments and pad_model_inputs
  (docs/serving.md).
  """
  counts = [tf.cast(count, tf.int64) for _, count in segments]
  spans = [count + 1 for count in counts]  # [B] each segment's positions, its [SEP] included
  if optional_last and len(counts) > 1:
    spans[-1] = counts[-1] + tf.sign(counts[-1])
  starts = [tf.ones_like(counts[0])]  # [B] where each segment begins: after [CLS], then [SEP]
  for span in spans[:-1]:
    starts.append(starts[-1] + span)
  total = starts[-1] + spans[-1]  # [B] real positions of each row
  longest = tf.reduce_max(tf.concat([total, [1]], 0))
  width = padded_length(longest, tf.size(total), max_seq_length)
  position = tf.range(width)[None, :]  # [1, L]
  input_ids = tf.where(tf.equal(position, 0), tf.constant(cls_id, tf.int64), 0)  # [B or 1, L]
  segment_ids = tf.zeros_like(position)
  for i, ((ids, _), start, count, span) in enumerate(zip(segments, starts, counts, spans)):
    k = position - start[:, None]  # [B, L]: the position within this segment
    inside = (k >= 0) & (k < count[:, None])
    # Positions outside the segment read the 0 appended after its ids.
    values = tf.concat([tf.cast(ids.flat_values, tf.int64), [0]], 0)
    index = tf.where(inside, tf.cast(ids.row_starts(), tf.int64)[:, None] + k,
                     tf.size(ids.flat_values, tf.int64))
    input_ids += tf.gather(values, index) + tf.where(
        tf.equal(k, count[:, None]) & (k < span[:, None]), tf.constant(sep_id, tf.int64), 0)
    if i:
      segment_ids += tf.cast((k >= 0) & (k < span[:, None]), tf.int64)
  input_mask = position < total[:, None]
  return {"input_ids": tf.cast(input_ids, tf.int32),
          "input_mask": tf.cast(input_mask, tf.int32),
          "segment_ids": tf.cast(segment_ids + tf.zeros_like(input_ids), tf.int32)}
