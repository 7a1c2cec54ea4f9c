"""Dynamic masking (run_pretraining.py --dynamic_masking): new masks on every pass.

The records are create_pretraining_data.py's, unchanged: every record already
holds its unmasked text, since its masked_lm_ids are the tokens its masked
positions had (`original_tokens` puts them back). The input pipeline then
draws a fresh mask for each batch, by the generator's token-level rule: of a
record's n real tokens, round(n * masked_lm_prob) (at least 1, at most
max_predictions_per_seq) positions other than [CLS]/[SEP], chosen uniformly,
each written as [MASK], kept or a random vocab entry by the masking mix
(80/10/10). With whole words (the generator's --do_whole_word_mask, given the
vocab's continuation pieces) the candidates are words: taken in a random order,
each whole, skipped when it would pass the budget, as the generator takes them;
with per_word_decision the mix is drawn once per word. The training pipeline
repeats forever, and each batch takes its own stateless seed from a seeded
stream, so every pass masks anew and a seeded run is reproducible.
`pretraining_input` is run_pretraining.py's input, with or without dynamic
masking.
"""

import tensorflow as tf

from data import graph_ops, pipeline


def original_tokens(batch):
  """The records' unmasked text: input_ids with masked_lm_ids put back at masked_lm_positions
  where masked_lm_weights > 0 (padding entries, position 0 with weight 0, change nothing).

  Args:
    batch: input_ids int [B, S]; masked_lm_positions, masked_lm_ids int [B, P];
      masked_lm_weights float [B, P].
  Returns:
    int32 [B, S].
  """
  ids = tf.cast(batch["input_ids"], tf.int32)
  # One-hot rather than a scatter: static shapes under XLA. A record masks a position once.
  hits = tf.one_hot(tf.cast(batch["masked_lm_positions"], tf.int32), tf.shape(ids)[1],
                    dtype=tf.int32)  # [B, P, S]
  hits = hits * tf.cast(batch["masked_lm_weights"] > 0, tf.int32)[:, :, None]
  restored = tf.reduce_sum(hits * tf.cast(batch["masked_lm_ids"], tf.int32)[:, :, None], 1)
  return tf.where(tf.reduce_sum(hits, 1) > 0, restored, ids)  # [B, S]


def word_numbers(tokens, candidate, continuation):
  """int32 [B, S]: each candidate's word, numbered from 0 in its row (-1 elsewhere). A
  continuation piece ("##...") joins the word before it, as the generator groups them:
  any earlier candidate's, even across a [SEP].

  Args:
    tokens: int32 [B, S]; candidate: bool [B, S]; continuation: bool [V], per vocab id.
  """
  earlier = tf.cumsum(tf.cast(candidate, tf.int32), axis=1, exclusive=True) > 0
  size = tf.shape(continuation)[0]  # a config's vocab_size may pad past the vocab's entries
  piece = tf.gather(continuation, tf.minimum(tokens, size - 1)) & (tokens < size)
  starts = candidate & ~(piece & earlier)
  return tf.where(candidate, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, -1)


def take_words(lengths, count):
  """bool [B, W]: words taken in the given order, each whole, a word that would pass the
  budget skipped (later, shorter ones may still fit): the generator's rule.

  Args:
    lengths: int32 [B, W] pieces per word, in the order to try them (0: no word).
    count: int32 [B] pieces to mask at most.
  """
  def step(total_and_taken, length):
    total, _ = total_and_taken
    fits = (length > 0) & (total + length <= count)
    return total + tf.where(fits, length, 0), fits
  _, taken = tf.scan(step, graph_ops.swap_axes(lengths),
                     (tf.zeros_like(count), tf.zeros_like(count, tf.bool)))
  return graph_ops.swap_axes(taken)


def remask(batch, seed, vocab_size, cls_id, sep_id, mask_id, masked_lm_prob,
           masking_mix=(0.8, 0.1, 0.1), continuation=None, per_word_decision=False):
  """The batch with a new mask drawn with stateless `seed` (int [2]).

  Args:
    batch: parsed pretraining records ([B, S] and [B, P] features, P >= 1).
    vocab_size: random replacements are ids 0 .. vocab_size - 1 (every vocab entry).
    continuation: bool [vocab_size], the "##" pieces: mask whole words (None: tokens).
    per_word_decision: with continuation, one draw of the masking mix per word.
  Returns:
    the batch with input_ids, masked_lm_positions, masked_lm_ids and
    masked_lm_weights replaced (positions sorted, padding as the generator's).
  """
  tokens = original_tokens(batch)  # [B, S]
  shape = tf.shape(tokens)
  predictions = tf.shape(batch["masked_lm_positions"])[1]
  real = tf.cast(batch["input_mask"], tf.int32) > 0
  candidate = real & (tokens != cls_id) & (tokens != sep_id)
  n = tf.reduce_sum(tf.cast(real, tf.float64), 1)
  # float64 and half to even: the generator's round(n * masked_lm_prob) in Python.
  count = tf.cast(tf.round(n * tf.constant(masked_lm_prob, tf.float64)), tf.int32)
  count = tf.minimum(tf.maximum(count, 1), predictions)
  count = tf.minimum(count, tf.reduce_sum(tf.cast(candidate, tf.int32), 1))  # [B]
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 4)
  draw = tf.random.stateless_uniform(shape, seeds[0])  # [B, S]: per position, or per word
  if continuation is None:
    score = tf.where(candidate, draw, -1.0)
  else:
    words = word_numbers(tokens, candidate, continuation)
    rows = tf.range(shape[0])[:, None] * shape[1]
    lengths = tf.reshape(tf.math.unsorted_segment_sum(  # [B, W = S]: pieces per word
        tf.cast(candidate, tf.int32), tf.where(candidate, rows + words, shape[0] * shape[1]),
        shape[0] * shape[1] + 1)[:-1], shape)
    order = tf.argsort(tf.where(lengths > 0, draw, -1.0), axis=1, direction="DESCENDING")
    taken = take_words(tf.gather(lengths, order, batch_dims=1), count)
    taken = tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)  # by word number
    masked = candidate & tf.gather(taken, tf.maximum(words, 0), batch_dims=1)
    score = tf.where(masked, 1.0, -1.0)  # top_k keeps equal scores in position order
    count = tf.reduce_sum(tf.cast(masked, tf.int32), 1)
  _, top = tf.math.top_k(score, k=predictions)  # [B, P] positions, best scores first
  chosen = tf.range(predictions)[None, :] < count[:, None]
  positions = tf.sort(tf.where(chosen, top, shape[1]), axis=1)  # unused slots last
  valid = positions < shape[1]
  positions = tf.where(valid, positions, 0)
  labels = tf.where(valid, tf.gather(tokens, positions, batch_dims=1), 0)
  mask_share, same_share, random_share = masking_mix
  keep_share = same_share / (same_share + random_share) if same_share + random_share else 1.0
  slots = tf.shape(positions)
  if continuation is not None and per_word_decision:  # each position takes its word's draws
    unit = tf.maximum(tf.gather(words, positions, batch_dims=1), 0)  # [B, P]
    first = tf.gather(tf.random.stateless_uniform(shape, seeds[1]), unit, batch_dims=1)
    second = tf.gather(tf.random.stateless_uniform(shape, seeds[2]), unit, batch_dims=1)
  else:
    first = tf.random.stateless_uniform(slots, seeds[1])
    second = tf.random.stateless_uniform(slots, seeds[2])
  random_ids = tf.random.stateless_uniform(slots, seeds[3], 0, vocab_size, tf.int32)
  written = tf.where(first < mask_share, mask_id,
                     tf.where(second < keep_share, labels, random_ids))
  hits = tf.one_hot(positions, shape[1], dtype=tf.int32) * tf.cast(valid, tf.int32)[:, :, None]
  input_ids = tf.where(tf.reduce_sum(hits, 1) > 0,
                       tf.reduce_sum(hits * written[:, :, None], 1), tokens)
  dtype = batch["input_ids"].dtype
  return {**batch, "input_ids": tf.cast(input_ids, dtype),
          "masked_lm_positions": tf.cast(positions, dtype),
          "masked_lm_ids": tf.cast(labels, dtype),
          "masked_lm_weights": tf.cast(valid, batch["masked_lm_weights"].dtype)}


def dynamic_masking(dataset, seed, vocab_size, cls_id, sep_id, mask_id, masked_lm_prob,
                    masking_mix=(0.8, 0.1, 0.1), continuation=None, per_word_decision=False):
  """`dataset` (batches of parsed records) with each batch masked anew (see `remask`).

  seed: int or None; the per-batch seeds come from tf.data.Dataset.random(seed),
  which runs on for as long as `dataset` does, so a repeated dataset gets new
  masks on every pass.
  """
  seeds = tf.data.Dataset.random(seed=seed).batch(2)
  if continuation is not None:
    continuation = tf.constant(continuation, tf.bool)
  return tf.data.Dataset.zip((dataset, seeds)).map(
      lambda batch, s: remask(batch, s, vocab_size, cls_id, sep_id, mask_id, masked_lm_prob,
                              masking_mix, continuation, per_word_decision),
      num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def masked_anew(dataset_fn, vocab, masked_lm_prob, seed=None, whole_words=False,
                per_word_decision=False):
  """Wraps a dataset_fn(input_context) of record batches with `dynamic_masking`, each input
  pipeline drawing its own seeds; vocab: token -> id (the random pool is every entry).
  whole_words or per_word_decision: whole words, as the generator's flags of those names."""
  words = None
  if whole_words or per_word_decision:
    from data.pretraining import instances  # the generator's "##" table (imports numba)
    words = instances.masking_vocab(vocab).is_continuation

  def dataset_fn_masked(ctx):
    pipeline_seed = None if seed is None else seed * 1009 + ctx.input_pipeline_id
    return dynamic_masking(dataset_fn(ctx), pipeline_seed, max(vocab.values()) + 1,
                           vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], masked_lm_prob,
                           continuation=words, per_word_decision=per_word_decision)
  return dataset_fn_masked


def pretraining_input(file_patterns, spec, batch_size, is_training, seed, compression,
                      drop_remainder, vocab=None, masked_lm_prob=0.15, whole_words=False,
                      per_word_decision=False):
  """dataset_fn(input_context) of global batches of `batch_size` records at
  `file_patterns` (pipeline.record_dataset); given a vocab, masked anew (masked_anew)."""
  def dataset_fn(ctx):
    return pipeline.record_dataset(
        file_patterns, spec, ctx.get_per_replica_batch_size(batch_size), is_training, seed, ctx,
        compression, drop_remainder=drop_remainder)
  if not vocab:
    return dataset_fn
  return masked_anew(dataset_fn, vocab, masked_lm_prob, seed, whole_words, per_word_decision)
