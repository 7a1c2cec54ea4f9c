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
   character by character without spaces (the whole words when that fails):
   the n-th such character of the basic tokens is the n-th of the words, whose
   context positions step 1 kept, and the answer is the context between the
   two ends with its whitespace runs made single spaces.
Differences from the script (docs/serving.md): positions past a window's end
never rank among the n best (the script ranks the padding of its batch too),
and a v1.1 question without any valid span gets "" where the script writes
the nonce "empty".
"""

import tensorflow as tf

from data import fast_tokenization, graph_ops
from modeling import export

WHITESPACE = (32, 9, 13, 10, 0x202F)  # the original's _is_whitespace
WHITESPACE_RUN = "[ \t\r\n\u202f]+"  # RE2: one or more of them
SPACE = 32


def _safe_gather(params, indices, default=None):
  """params[indices], `default` (None: 0 or "") where an index is outside params [P] (also
  when P is 0)."""
  size = tf.size(params, out_type=indices.dtype)
  fill = (tf.zeros([1], params.dtype) if default is None
          else tf.fill([1], tf.cast(default, params.dtype)))
  padded = tf.concat([params, fill], axis=0)
  return tf.gather(padded, tf.where((indices >= 0) & (indices < size), indices, size))


class Windows(tf.Module):
  """What a question-answering export records of run_squad.py's window settings, so that
  whatever serves or measures it beside another implementation can read the same windows:
  int64 variables max_seq_length, doc_stride, max_query_length and max_answer_length."""

  def __init__(self, **settings):
    super().__init__(name="windows")
    for name, value in settings.items():
      setattr(self, name, tf.Variable(value, dtype=tf.int64, trainable=False, name=name))


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
    self.windows = Windows(max_seq_length=max_seq_length, doc_stride=doc_stride,
                           max_query_length=max_query_length,
                           max_answer_length=max_answer_length)
    self.serve = tf.function(self._answer, input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="context")])

  def warm_up_request(self, words):
    return {"question": ["a"], "context": [" ".join(["a"] * words)]}

  def warm_up_requests(self):
    """export.RawTextModule's, then contexts of two and three windows: batches of windows,
    whose kernels no single window builds."""
    return super().warm_up_requests() + [
        self.warm_up_request(self.max_seq_length + i * self.doc_stride) for i in (0, 1)]

  def _words(self, context):
    """The original's whitespace words of each context [N].

    Returns {context: [N] the contexts with invalid UTF-8 bytes dropped (character
    positions below count in them), words: string [W] of all contexts in order,
    word_letters: int64 [W + 1] where each word's characters start among `letter_position`,
    letter_position: int64 [L] the position in its context of every character that is not
    whitespace, words_per_context: int64 [N]}.
    """
    context = tf.strings.unicode_transcode(context, "UTF-8", "UTF-8", errors="ignore")
    chars = tf.strings.unicode_decode(context, "UTF-8")  # [N, (C)]
    flat = chars.flat_values
    space = tf.reduce_any(flat[:, None] == tf.constant(WHITESPACE), axis=1)  # [C_all]
    position = tf.ragged.range(chars.row_lengths()).flat_values
    first = ~space & (tf.equal(position, 0) | tf.concat([[True], space[:-1]], axis=0))
    word = tf.cumsum(tf.cast(first, tf.int64)) - 1  # [C_all] the word of each character
    letters = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(flat, ~space), tf.boolean_mask(word, ~space),
        nrows=tf.reduce_sum(tf.cast(first, tf.int64)))  # [W, (letters)]
    per_context = tf.math.unsorted_segment_sum(tf.cast(first, tf.int64), chars.value_rowids(),
                                               tf.shape(context, out_type=tf.int64)[0])
    return dict(context=context, words=tf.strings.unicode_encode(letters, "UTF-8"),
                word_letters=letters.row_splits, letter_position=tf.boolean_mask(position, ~space),
                words_per_context=per_context)

  def _answer(self, question, context):
    windows = self._windows(question, context)
    out = export.served_outputs(self._model, windows["features"])
    return self._answers(windows, out["start_logits"], out["end_logits"])

  def _windows(self, question, context):
    """Steps 1 and 2: the contexts' words and pieces, the questions' pieces, the windows and
    the window where each piece has its max context; returns them by name (_words' too),
    with the model's `features`."""
    n = tf.shape(question, out_type=tf.int64)[0]
    s = self.max_seq_length
    words = self._words(context)
    # One tokenizer pass over the contexts' words and, after them, the questions: the pieces,
    # and the words' basic tokens, which get_final_text compares the answer with.
    (word_pieces, query), (basic, _) = self.tokenizer.tokenize_keeping_words(
        words["words"], question)  # [W, (P)] and [N, (Q)]; [W, (b)]
    pieces = word_pieces.flat_values  # [P_all] every context's document pieces, in order
    doc_length = tf.reduce_sum(tf.RaggedTensor.from_row_lengths(
        word_pieces.row_lengths(), words["words_per_context"]), axis=1)  # [N]
    doc_first = tf.cumsum(doc_length, exclusive=True)  # [N] each context's first piece
    query = query[:, :self.max_query_length]  # [N, (Q)]
    query_length = query.row_lengths()

    # Windows (windows.doc_spans), and the window where each piece has its max context.
    max_doc = s - query_length - 3
    example, begin, length = graph_ops.window_spans(doc_length, max_doc, self.doc_stride)
    owner, piece = graph_ops.max_context_owner(  # [P_all], [E]
        tf.gather(doc_first, example) + begin, length, tf.size(pieces, out_type=tf.int64))

    # Features: [CLS] query [SEP] window [SEP], as data/squad.py packs them.
    doc_ids = tf.RaggedTensor.from_row_lengths(tf.gather(pieces, piece), length)  # [F, (L)]
    window_query = tf.gather(query, example)  # [F, (Q)]
    doc_offset = window_query.row_lengths() + 2  # after [CLS] query [SEP]
    features = fast_tokenization.packed_features(
        [(window_query, window_query.row_lengths()), (doc_ids, length)], self.cls_id,
        self.sep_id, s)  # [F, S'], S' <= S
    return dict(words, n=n, basic=basic, pieces=pieces, piece_word=word_pieces.value_rowids(),
                owner=owner, example=example, length=length, features=features,
                doc_offset=doc_offset,  # [F] each window's first document position
                piece_at_zero=tf.gather(doc_first, example) + begin - doc_offset)  # [F]

  def _answers(self, w, start_logits, end_logits):
    """Steps 3 and 4 on the model's logits [F, S'] of the windows `w` (_windows)."""
    n, example, owner = w["n"], w["example"], w["owner"]
    doc_offset, piece_at_zero = w["doc_offset"], w["piece_at_zero"]
    doc_end = doc_offset + w["length"]  # [F] one past the window's last document position
    start_logits = tf.cast(start_logits, tf.float32)  # [F, S']
    end_logits = tf.cast(end_logits, tf.float32)
    num_windows, width = tf.unstack(tf.shape(start_logits, out_type=tf.int64))

    # Candidate spans: the n best starts x the n best ends of each window, ranked up to the
    # closing [SEP] (positions past it are padding: -inf, never valid).
    in_window = tf.range(width)[None, :] <= doc_end[:, None]
    k = tf.minimum(self.n_best_size, tf.cast(width, tf.int32))
    starts = tf.cast(tf.math.top_k(tf.where(in_window, start_logits, -float("inf")), k).indices,
                     tf.int64)  # [F, K]
    ends = tf.cast(tf.math.top_k(tf.where(in_window, end_logits, -float("inf")), k).indices,
                   tf.int64)
    in_doc = lambda p: (p >= doc_offset[:, None]) & (p < doc_end[:, None])
    start_ok = in_doc(starts) & tf.equal(  # and the start piece's max context is here
        _safe_gather(owner, piece_at_zero[:, None] + starts, -1), tf.range(num_windows)[:, None])
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
    chosen = tf.math.unsorted_segment_min(  # [N] the first window holding the best span
        tf.where(window_best >= tf.gather(best, example), tf.range(num_windows), num_windows),
        example, n)
    chosen = tf.where(has_span, chosen, num_windows)  # gathers the defaults below
    row, col = window_arg // k, window_arg % k
    start_at = tf.gather(starts, row, batch_dims=1)  # [F] each window's best span
    first_piece = _safe_gather(piece_at_zero + start_at, chosen)  # [N]
    last_piece = first_piece + _safe_gather(tf.gather(ends, col, batch_dims=1) - start_at,
                                            chosen, -1)
    best_start = _safe_gather(tf.gather(start_score, row, batch_dims=1), chosen)
    best_end = _safe_gather(tf.gather(end_score, col, batch_dims=1), chosen)
    text, start, end = self._final_text(w, first_piece, last_piece)
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

  def _final_text(self, w, first_piece, last_piece):
    """get_final_text of each question's span of pieces first_piece..last_piece (int64 [N];
    none when last_piece < first_piece): (text [N], start, end int32 [N], its character
    offsets in the context, end exclusive). Dense [N, longest] tables in place of ragged
    tensors: a single request's time here is the number of ops more than their work."""
    count = tf.maximum(last_piece - first_piece + 1, 0)  # [N] the span's pieces

    def rows(flat, first, size, to_string=tf.identity):
      """to_string(flat[first + i]) for i < size, else "": string [N, max size]."""
      i = tf.range(tf.reduce_max(tf.concat([size, [0]], axis=0)))[None, :]
      return tf.where(i < size[:, None], to_string(_safe_gather(flat, first[:, None] + i)), "")

    # The span's pieces joined, "##" removed, whitespace runs made one space (the empty
    # strings that pad shorter rows add spaces at the end, which strip removes).
    tokens = rows(w["pieces"], first_piece, count,
                  lambda ids: tf.gather(self.tokenizer.id_to_token, ids))
    pred = tf.strings.reduce_join(tokens, axis=1, separator=" ")
    pred = tf.strings.regex_replace(tf.strings.regex_replace(pred, " ##", ""), "##", "")
    pred = tf.strings.strip(tf.strings.regex_replace(pred, r"\s+", " "))
    # get_final_text's tok_text: the basic tokens of the span's words, joined by spaces (the
    # basic tokens of the words joined by spaces are those of each word in turn), kept from
    # the context's tokenization rather than computed again.
    has_span = count > 0
    first_word = tf.where(has_span, _safe_gather(w["piece_word"], first_piece), 0)
    end_word = tf.where(has_span, _safe_gather(w["piece_word"], last_piece) + 1, 0)
    splits = w["basic"].row_splits
    first_token = _safe_gather(splits, first_word)
    tok = tf.strings.reduce_join(
        rows(w["basic"].flat_values, first_token, _safe_gather(splits, end_word) - first_token),
        axis=1, separator=" ")
    tok = tf.strings.unicode_decode(tf.strings.strip(tok), "UTF-8")  # [N, (T)]
    pred = tf.strings.unicode_decode(pred, "UTF-8")  # [N, (p)]
    # tok_text.find(pred_text), on padded code points.
    tok_dense, pred_dense = tok.to_tensor(-1), pred.to_tensor(-2)
    tok_length, pred_length = tok.row_lengths(), pred.row_lengths()
    width = tf.shape(tok_dense, out_type=tf.int64)[1]
    pred_width = tf.shape(pred_dense, out_type=tf.int64)[1]
    at = tf.range(width)[:, None] + tf.range(pred_width)[None, :]  # [T, p]
    window = tf.gather(tf.pad(tok_dense, [[0, 0], [0, pred_width]], constant_values=-1), at,
                       axis=1)  # [N, T, p]
    same = tf.equal(window, pred_dense[:, None, :]) | (
        tf.range(pred_width)[None, None, :] >= pred_length[:, None, None])
    match = tf.reduce_all(same, axis=2) & (
        tf.range(width)[None, :] + pred_length[:, None] <= tok_length[:, None])  # [N, T]
    # [N], 0 when not found; a column past the end keeps argmax's axis from being empty
    find = tf.argmax(tf.pad(tf.cast(match, tf.int32), [[0, 0], [0, 1]]), axis=1)
    find_end = find + pred_length - 1
    # Alignment through the characters that are not spaces: the i-th one of tok_text is the
    # i-th of the span's words, whose positions _words kept.
    tok_solid = tf.not_equal(tok_dense, SPACE) & (tf.range(width)[None, :] < tok_length[:, None])
    tok_rank = tf.cumsum(tf.cast(tok_solid, tf.int64), axis=1, exclusive=True)  # [N, T]
    letters = w["word_letters"]
    first_letter, end_letter = _safe_gather(letters, first_word), _safe_gather(letters, end_word)
    solid_at = lambda i: tf.gather(tf.pad(tok_solid, [[0, 0], [0, 1]]),
                                   tf.where((i >= 0) & (i < width), i, width), batch_dims=1)
    ok = (tf.reduce_any(match, axis=1) & solid_at(find) & solid_at(find_end)
          & tf.equal(tf.reduce_sum(tf.cast(tok_solid, tf.int64), axis=1),
                     end_letter - first_letter))
    rank_at = lambda i: tf.gather(tf.pad(tok_rank, [[0, 0], [0, 1]]),  # a column: never empty
                                  tf.clip_by_value(i, 0, width), batch_dims=1)
    # On any mismatch the original words of the span, whole.
    a = tf.where(ok, first_letter + rank_at(find), first_letter)
    b = tf.where(ok, first_letter + rank_at(find_end), end_letter - 1)
    start = tf.where(has_span, _safe_gather(w["letter_position"], a), 0)
    end = tf.where(has_span, _safe_gather(w["letter_position"], b) + 1, 0)
    # The context's characters start..end, whitespace runs made one space: the original's
    # words joined by single spaces, cut where the alignment says.
    text = tf.strings.regex_replace(
        tf.strings.substr(w["context"], start, end - start, unit="UTF8_CHAR"), WHITESPACE_RUN, " ")
    return text, tf.cast(start, tf.int32), tf.cast(end, tf.int32)
