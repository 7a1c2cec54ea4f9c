"""Question answering from raw text: run_squad.py's pipeline as one SavedModel graph.

`TextQuestionAnswerer.serve(question: string [N], context: string [N])` returns

  text: string [N], the answer predictions.json would hold ("" for no answer);
  start, end: int32 [N], its character offsets in the context (end exclusive;
    -1 when text is "");
  score: float32 [N], start + end logit of the best span (-inf when none);
  v2.0 models also no_answer: bool [N] (null score - best span score exceeds the
    run's threshold) and null_score_diff: float32 [N] (null_odds.json's value).

Each step is the one of data/squad.py and data/squad_predictions.py, in graph ops:
1. the context is split into words on the original's whitespace, each word
   is WordPiece-tokenized alone (in one tokenizer pass with the question);
   the question's pieces are cut to max_query_length;
2. windows of max_seq_length - query - 3 pieces start every doc_stride pieces,
   and each piece belongs to the window where it has the most context (the
   same float64 score and first-wins rule as data/windows.py);
3. in each window, the n_best_size best start and end positions give the
   candidate spans; those outside the document, not starting at a
   max-context piece, reversed or longer than max_answer_length are dropped;
   the best start + end logit (summed in float64, as Python sums them) over
   all windows wins;
4. its pieces become text as get_final_text does: the pieces joined and
   "##" removed, found in the span's basic tokens (kept from step 1: each
   context is tokenized once), and aligned back to the original words
   character by character without spaces (the whole words when that fails).
Differences from the script (docs/serving.md): positions past a window's end
never rank among the n best (the script ranks the padding of its batch too),
and a v1.1 question without any valid span gets "" where the script writes
the nonce "empty".
"""

import tensorflow as tf

from data import fast_tokenization
from modeling import export

WHITESPACE = (32, 9, 13, 10, 0x202F)  # the original's _is_whitespace
SPACE = 32


def _gather_or(params, indices, valid, default):
  """params[indices] where valid, else default (also when params is empty)."""
  padded = tf.concat([params, tf.fill([1], tf.cast(default, params.dtype))], axis=0)
  return tf.gather(padded, tf.where(valid, indices, tf.cast(tf.size(params), indices.dtype)))


class TextQuestionAnswerer(export.RawTextModule):
  """Serving module: raw questions and contexts -> answers (see the module docstring)."""

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length, doc_stride,
               max_query_length, n_best_size, max_answer_length, version_2_with_negative,
               null_score_diff_threshold):
    super().__init__("text_question_answerer", model, vocab_file, do_lower_case,
                     max_seq_length)
    self.doc_stride = doc_stride
    self.max_query_length, self.max_answer_length = max_query_length, max_answer_length
    self.n_best_size = min(n_best_size, max_seq_length)
    self.version_2_with_negative = version_2_with_negative
    self.threshold = float(null_score_diff_threshold)
    self.serve = tf.function(self._answer, input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="context")])

  def _words(self, context):
    """The original's whitespace words of each context.

    Returns (code points [N, (C)], words string [W] of all contexts in order,
    their first character's offset int64 [W], words per context int64 [N]).
    """
    chars = tf.strings.unicode_decode(context, "UTF-8", errors="ignore")  # [N, (C)]
    flat = chars.flat_values
    space = tf.reduce_any(flat[:, None] == tf.constant(WHITESPACE), axis=1)  # [C_all]
    position = tf.ragged.range(chars.row_lengths()).flat_values
    first = ~space & (tf.equal(position, 0) | tf.concat([[True], space[:-1]], axis=0))
    word = tf.cumsum(tf.cast(first, tf.int64)) - 1  # [C_all] the word of each character
    num_words = tf.reduce_sum(tf.cast(first, tf.int64))
    letters = tf.RaggedTensor.from_value_rowids(tf.boolean_mask(flat, ~space),
                                                tf.boolean_mask(word, ~space), nrows=num_words)
    per_context = tf.math.unsorted_segment_sum(tf.cast(first, tf.int64), chars.value_rowids(),
                                               tf.shape(context, out_type=tf.int64)[0])
    return (chars, tf.strings.unicode_encode(letters, "UTF-8"), tf.boolean_mask(position, first),
            per_context)

  def _answer(self, question, context):
    windows = self._windows(question, context)
    out = export.served_outputs(self._model, windows["features"])
    return self._answers(windows, out["start_logits"], out["end_logits"])

  def _windows(self, question, context):
    """Steps 1 and 2: the contexts' words and pieces, the questions' pieces, the windows and
    their max-context pieces; returns them by name, with the model's `features`."""
    n = tf.shape(question, out_type=tf.int64)[0]
    s = self.max_seq_length
    chars, words, word_begin, words_per_context = self._words(context)
    # One tokenizer pass over the contexts' words and, after them, the questions: the pieces,
    # and the words' basic tokens, which get_final_text compares the answer with.
    (word_pieces, query), (basic, _) = self.tokenizer.tokenize_keeping_words(
        words, question)  # [W, (P)] and [N, (Q)]; [W, (b)]
    pieces = word_pieces.flat_values  # [P_all] every context's document pieces, in order
    piece_word = word_pieces.value_rowids()  # [P_all] the original's tok_to_orig_index
    doc_length = tf.reduce_sum(tf.RaggedTensor.from_row_lengths(
        word_pieces.row_lengths(), words_per_context), axis=1)  # [N]
    doc_first = tf.cumsum(doc_length, exclusive=True)  # [N] each context's first piece
    query = query[:, :self.max_query_length]  # [N, (Q)]
    query_length = query.row_lengths()

    # Windows (windows.doc_spans): every `step` pieces, `max_doc` long, the last one to the end.
    max_doc = s - query_length - 3
    step = tf.minimum(max_doc, self.doc_stride)
    count = tf.where(doc_length <= max_doc, tf.ones_like(doc_length),
                     (doc_length - max_doc + step - 1) // step + 1)
    count = tf.where(tf.equal(doc_length, 0), tf.zeros_like(count), count)  # [N]
    example = tf.repeat(tf.range(n), count)  # [F] each window's question
    begin = tf.ragged.range(count).flat_values * tf.gather(step, example)  # [F]
    length = tf.minimum(tf.gather(doc_length, example) - begin, tf.gather(max_doc, example))
    num_windows = tf.size(example, out_type=tf.int64)

    # Max context (windows.max_context_windows): float64 score, the first best window wins.
    window = tf.repeat(tf.range(num_windows), length)  # [E] one entry per piece per window
    offset = tf.ragged.range(length).flat_values  # [E] position in the window
    win_length = tf.gather(length, window)
    score = (tf.cast(tf.minimum(offset, win_length - 1 - offset), tf.float64)
             + 0.01 * tf.cast(win_length, tf.float64))
    piece = tf.gather(doc_first, tf.gather(example, window)) + tf.gather(begin, window) + offset
    num_pieces = tf.size(pieces, out_type=tf.int64)
    best = tf.math.unsorted_segment_max(score, piece, num_pieces)
    owner = tf.math.unsorted_segment_min(
        tf.where(score >= tf.gather(best, piece), window, num_windows), piece, num_pieces)
    max_context = tf.equal(tf.gather(owner, piece), window)  # [E]

    # Features: [CLS] query [SEP] window [SEP], as data/squad.py packs them.
    doc_ids = tf.RaggedTensor.from_row_lengths(tf.gather(pieces, piece), length)  # [F, (L)]
    window_query = tf.gather(query, example)  # [F, (Q)]
    features = fast_tokenization.packed_features(
        [(window_query, window_query.row_lengths()), (doc_ids, length)], self.cls_id,
        self.sep_id, s)  # [F, S'], S' <= S
    return dict(n=n, chars=chars, words=words, basic=basic, word_begin=word_begin, pieces=pieces,
                piece_word=piece_word, doc_first=doc_first, query_length=query_length,
                example=example, begin=begin, length=length, num_windows=num_windows,
                window=window, offset=offset, max_context=max_context, features=features)

  def _answers(self, w, start_logits, end_logits):
    """Steps 3 and 4 on the model's logits [F, S'] of the windows `w` (_windows)."""
    n, example, length, begin = w["n"], w["example"], w["length"], w["begin"]
    num_windows, window, offset = w["num_windows"], w["window"], w["offset"]
    query_length, doc_first = w["query_length"], w["doc_first"]
    start_logits = tf.cast(start_logits, tf.float32)  # [F, S']
    end_logits = tf.cast(end_logits, tf.float32)
    width = tf.shape(start_logits, out_type=tf.int64)[1]

    # Candidate spans: the n best starts x the n best ends of each window.
    doc_offset = tf.gather(query_length, example) + 2  # [F] the window's first position
    in_window = tf.range(width)[None, :] < (doc_offset + length + 1)[:, None]
    k = tf.minimum(self.n_best_size, tf.cast(width, tf.int32))  # past S': -inf, never valid
    starts = tf.math.top_k(tf.where(in_window, start_logits, -float("inf")), k).indices
    ends = tf.math.top_k(tf.where(in_window, end_logits, -float("inf")), k).indices  # [F, K]
    starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
    context_at = tf.scatter_nd(  # [F, S] 1 where the position is a max-context document piece
        tf.stack([window, tf.gather(doc_offset, window) + offset], axis=1),
        tf.cast(w["max_context"], tf.int32), tf.stack([num_windows, width]))
    in_doc = lambda p: (p >= doc_offset[:, None]) & (p < (doc_offset + length)[:, None])
    start_ok = in_doc(starts) & (tf.gather(context_at, starts, batch_dims=1) > 0)
    span_ok = (start_ok[:, :, None] & in_doc(ends)[:, None, :]
               & (ends[:, None, :] >= starts[:, :, None])
               & (ends[:, None, :] - starts[:, :, None] + 1 <= self.max_answer_length))
    start_score = tf.cast(tf.gather(start_logits, starts, batch_dims=1), tf.float64)
    end_score = tf.cast(tf.gather(end_logits, ends, batch_dims=1), tf.float64)
    pair = tf.reshape(tf.where(span_ok, start_score[:, :, None] + end_score[:, None, :],
                               -float("inf")), [-1, k * k])  # [F, K*K]
    window_best = tf.reduce_max(pair, axis=1)  # [F]
    window_arg = tf.argmax(pair, axis=1, output_type=tf.int32)  # the first best, in order
    best = tf.math.unsorted_segment_max(window_best, example, n)  # [N]
    has_span = best > tf.float64.min  # not -inf (no valid span) nor the empty segment's min
    chosen = tf.math.unsorted_segment_min(
        tf.where(window_best >= tf.gather(best, example), tf.range(num_windows), num_windows),
        example, n)  # [N] the first window holding the best span
    chosen = tf.where(has_span, chosen, 0)
    start_at = _gather_or(tf.gather(starts, window_arg // k, batch_dims=1), chosen, has_span, 0)
    end_at = _gather_or(tf.gather(ends, window_arg % k, batch_dims=1), chosen, has_span, 0)
    best_start = _gather_or(tf.gather(start_score, window_arg // k, batch_dims=1), chosen,
                            has_span, 0.0)
    best_end = _gather_or(tf.gather(end_score, window_arg % k, batch_dims=1), chosen,
                          has_span, 0.0)
    first_piece = (tf.gather(doc_first, tf.range(n)) + _gather_or(begin, chosen, has_span, 0)
                   + start_at - _gather_or(doc_offset, chosen, has_span, 0))
    last_piece = first_piece + end_at - start_at
    text, start, end = self._final_text(w["chars"], w["words"], w["basic"], w["word_begin"],
                                        w["piece_word"], w["pieces"], first_piece, last_piece,
                                        has_span)
    outputs = {"score": tf.cast(tf.where(has_span, best, -float("inf")), tf.float32)}
    if self.version_2_with_negative:
      null = tf.cast(start_logits[:, 0], tf.float64) + tf.cast(end_logits[:, 0], tf.float64)
      score_null = tf.math.unsorted_segment_min(null, example, n)
      diff = tf.where(has_span, score_null - best_start - best_end, 0.0)  # as Python sums
      no_answer = ~has_span | (diff > self.threshold)
      outputs.update(no_answer=no_answer, null_score_diff=tf.cast(diff, tf.float32))
      has_span = ~no_answer
    outputs.update(text=tf.where(has_span, text, ""), start=tf.where(has_span, start, -1),
                   end=tf.where(has_span, end, -1))
    return outputs

  def _final_text(self, chars, words, basic, word_begin, piece_word, pieces, first_piece,
                  last_piece, has_span):
    """get_final_text of each question's best span: (text [N], start, end int32 [N])."""
    n = tf.shape(first_piece, out_type=tf.int64)[0]
    safe = lambda t, i: _gather_or(t, i, has_span, 0)
    # The span's pieces joined, "##" removed, whitespace runs made one space.
    span = tf.ragged.range(tf.where(has_span, first_piece, 0),
                           tf.where(has_span, last_piece + 1, 0))  # [N, (k)]
    tokens = tf.gather(self.tokenizer.id_to_token, tf.gather(pieces, span))
    pred = tf.strings.reduce_join(tokens, axis=1, separator=" ")
    pred = tf.strings.regex_replace(tf.strings.regex_replace(pred, " ##", ""), "##", "")
    pred = tf.strings.strip(tf.strings.regex_replace(pred, r"\s+", " "))
    # The original words of the span joined by single spaces, and each character's offset in
    # the context (-1 for the spaces between words).
    first_word, last_word = safe(piece_word, first_piece), safe(piece_word, last_piece)
    span_words = tf.ragged.range(first_word, tf.where(has_span, last_word + 1, first_word))
    lengths = tf.strings.length(tf.gather(words, span_words.flat_values), "UTF8_CHAR")
    begins = tf.gather(word_begin, span_words.flat_values)
    ends = begins + tf.cast(lengths, tf.int64)
    # Each word's offsets, then -1 for the space after it (a ragged concat along the rows
    # would transpose int64 splits, which makes TensorFlow's oneDNN rewriter log an error).
    with_gap = tf.ragged.range(begins, ends + 1)  # [K, (len + 1)]
    offsets = tf.where(with_gap.flat_values < tf.gather(ends, with_gap.value_rowids()),
                       with_gap.flat_values, -1)
    offsets = tf.RaggedTensor.from_row_lengths(
        offsets, tf.math.unsorted_segment_sum(tf.cast(lengths, tf.int64) + 1,
                                              span_words.value_rowids(), n))[:, :-1]
    row = tf.gather(chars.row_starts(), offsets.value_rowids())
    orig = offsets.with_flat_values(tf.where(
        offsets.flat_values >= 0,
        tf.gather(chars.flat_values, row + tf.maximum(offsets.flat_values, 0)), SPACE))
    # get_final_text's tok_text: the basic tokens of the span's words, joined by spaces (the
    # basic tokens of the words joined by spaces are those of each word in turn), kept from
    # the context's tokenization rather than computed again.
    span_basic = tf.gather(basic, span_words.flat_values)  # [K, (b)]
    span_basic = tf.RaggedTensor.from_value_rowids(
        span_basic, span_words.value_rowids(), nrows=n).merge_dims(1, 2)  # [N, (tokens)]
    tok = tf.strings.unicode_decode(tf.strings.reduce_join(span_basic, axis=1, separator=" "),
                                    "UTF-8")  # [N, (T)]
    pred = tf.strings.unicode_decode(pred, "UTF-8")  # [N, (p)]
    # tok_text.find(pred_text), on padded code points.
    tok_dense, pred_dense = tok.to_tensor(-1), pred.to_tensor(-2)
    tok_length, pred_length = tok.row_lengths(), pred.row_lengths()
    at = (tf.range(tf.shape(tok_dense, out_type=tf.int64)[1])[:, None]
          + tf.range(tf.shape(pred_dense, out_type=tf.int64)[1])[None, :])  # [T, p]
    width = tf.shape(tok_dense, out_type=tf.int64)[1]
    window = tf.gather(tf.concat([tok_dense, -tf.ones_like(tok_dense)], axis=1),
                       tf.minimum(at, 2 * width - 1), axis=1)  # [N, T, p]
    same = tf.equal(window, pred_dense[:, None, :]) | (
        tf.range(tf.shape(pred_dense, out_type=tf.int64)[1])[None, None, :]
        >= pred_length[:, None, None])
    match = tf.reduce_all(same, axis=2) & (
        tf.range(width)[None, :] + pred_length[:, None] <= tok_length[:, None])  # [N, T]
    match = tf.concat([match, tf.equal(pred_length, 0)[:, None]
                       & tf.equal(tok_length, 0)[:, None]], axis=1)  # "".find("") is 0
    found = tf.reduce_any(match, axis=1)
    find = tf.argmax(tf.cast(match, tf.int32), axis=1)  # [N]
    find_end = find + pred_length - 1
    # Alignment through the characters that are not spaces.
    orig_dense = tf.pad(orig.to_tensor(-1), [[0, 0], [0, 1]], constant_values=-1)
    tok_solid, orig_solid = tok_dense != SPACE, orig_dense != SPACE
    tok_valid = tf.range(width)[None, :] < tok_length[:, None]
    tok_rank = tf.cumsum(tf.cast(tok_solid, tf.int64), axis=1, exclusive=True)
    orig_rank = tf.cumsum(tf.cast(orig_solid, tf.int64), axis=1, exclusive=True)
    same_length = tf.equal(tf.reduce_sum(tf.cast(tok_solid & tok_valid, tf.int64), axis=1),
                           tf.reduce_sum(tf.cast(orig_solid & (orig_dense >= 0), tf.int64),
                                         axis=1))
    clip = lambda i: tf.clip_by_value(i, 0, tf.maximum(width - 1, 0))
    solid_at = lambda i: (i >= 0) & (i < tok_length) & tf.gather(
        tf.pad(tok_solid, [[0, 0], [0, 1]]), clip(i), batch_dims=1)
    ok = found & same_length & solid_at(find) & solid_at(find_end)

    def orig_position(i):  # the orig character with as many solid ones before it as tok's i
      rank = tf.gather(tf.pad(tok_rank, [[0, 0], [0, 1]]), clip(i), batch_dims=1)
      return tf.argmax(tf.cast(orig_solid & tf.equal(orig_rank, rank[:, None]), tf.int32),
                       axis=1)
    orig_length = orig.row_lengths()
    a = tf.where(ok, orig_position(find), 0)
    b = tf.where(ok, orig_position(find_end), orig_length - 1)
    position = tf.ragged.range(orig_length)
    keep = (position >= a[:, None]) & (position <= b[:, None])
    text = tf.strings.unicode_encode(tf.ragged.boolean_mask(orig, keep), "UTF-8")
    offsets_dense = tf.pad(offsets.to_tensor(-1), [[0, 0], [0, 1]], constant_values=-1)
    start = tf.gather(offsets_dense, tf.maximum(a, 0), batch_dims=1)
    end = tf.gather(offsets_dense, tf.maximum(b, 0), batch_dims=1) + 1
    return text, tf.cast(start, tf.int32), tf.cast(end, tf.int32)
