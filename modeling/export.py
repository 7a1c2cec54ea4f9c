"""SavedModels that take raw text: tokenization runs inside the graph.

One serving module per kind of task (a classifier or regressor, a word
tagger, multiple choice), each wrapping a trained task model, and `save`,
which writes any of them with TensorFlow Serving's warm-up requests.
"""

import os

import keras
import tensorflow as tf

from data import fast_tokenization, files, graph_ops
from modeling import checkpoints, inference


class Precision(tf.Module):
  """What an export records of its precision: `dtype`, a string variable ("float32",
  "bfloat16", "float16"), the compute dtype of its matrix products."""

  def __init__(self, model):
    super().__init__(name="precision")
    self.dtype = tf.Variable(model.dtype_policy.compute_dtype, trainable=False, name="dtype")


def served_variables(model):
  """The variables an inference copy's served graph reads, as a module attribute, tracked
  by their original names: an export's only copy of its weights (RawTextModule does not
  track the model itself).

  The TensorFlow variables themselves are tracked, not Keras 3's wrappers:
  a wrapper is saved as a copy that TF1-style loaders (saved_model_cli,
  TensorFlow Serving) restore while the graph reads the original, which
  they then find uninitialized. Where attention keeps its query, key and value weights
  joined (store_joined_weights), the joined ones stand for the three.
  """
  named = dict(checkpoints.variable_map(model))
  for i, block in enumerate(model.encoder.blocks):  # an inference copy's joined weights
    prefix = f"bert/encoder/layer_{i}/attention/self/"
    for kind in ("kernel", "bias"):
      variable = getattr(block.attention, f"joined_{kind}")
      if variable is not None:
        named[f"{prefix}joined_{kind}"] = variable
        for part in ("query", "key", "value"):
          named.pop(f"{prefix}{part}/{kind}")
  return checkpoints.NamedVariables(
      {name: v.value if isinstance(v, keras.Variable) else v for name, v in named.items()})


# A batch runs packed, with attention in blocks, when it has several rows, at least
# PACKED_FROM_POSITIONS positions (rows x length) and at most this share of them real tokens
# (by the model's compute dtype); other batches run as is. Packing's gathers, scatters and
# per-head loops cost about a fifth of a batch's time, so they pay only where they skip more
# padding than that, and less often in bfloat16, whose products are faster and the overhead
# the same (benchmarks/investigations/when_to_pack.py; docs/serving.md#when-packing-pays).
PACKED_FROM_POSITIONS = 1024
PACKED_MAX_REAL_SHARE = {"float32": 0.7, "bfloat16": 0.55, "float16": 0.55}


def packs_tokens(mask, compute_dtype):
  """Whether served_outputs runs a batch with this input_mask ([B, S], or multiple choice's
  [N, C, S]: each choice a row) packed: bool scalar tensor."""
  positions = tf.size(mask)
  rows = positions // tf.maximum(tf.shape(mask)[-1], 1)
  share = PACKED_MAX_REAL_SHARE.get(compute_dtype, PACKED_MAX_REAL_SHARE["bfloat16"])
  real = tf.reduce_sum(tf.cast(mask, tf.int64))
  return ((rows > 1) & (positions >= PACKED_FROM_POSITIONS)
          & (tf.cast(real, tf.float32) <= share * tf.cast(positions, tf.float32)))


# oneDNN (the version TensorFlow 2.20 ships) multiplies a float32 matrix of 7 to 80 rows by
# kernels of its own, which read the weight blocked in 32 columns rather than 64. Under
# TF_ONEDNN_ASSUME_FROZEN_WEIGHTS each product op keeps its weight in its first call's layout
# and converts it again at every call of the other kind: MiniLM's 24 layer weights, 3.4-4.1 ms
# a request (benchmarks/investigations/first_call_layout.py). So a float32 model runs
# unpacked batches of up to this many positions and larger ones as two copies of its ops,
# each of which only ever sees one kind (and keeps its own converted weights: 4 bytes x 12 H^2
# a layer more in memory). bfloat16's layout did not depend on the rows where measured.
ONEDNN_SMALL_ROWS = 80


def served_outputs(model, features):
  """model(features) in inference mode. A batch of several rows, PACKED_FROM_POSITIONS
  positions or more and enough padding (PACKED_MAX_REAL_SHARE) runs with pack_tokens (the
  dense layers on the real tokens alone) and blocked_attention (attention in blocks cut to
  each block's longest row), call arguments the task model passes to BertEncoder, so that
  rows of different lengths cost their own length, not the longest's. Any other batch runs
  as is: a single request's padding is only its length rounded up
  (fast_tokenization.padded_length), and where the padding is less the added ops cost more
  than they save; in float32, as one of two copies by its size (ONEDNN_SMALL_ROWS). One
  branch per call, picked at run time; all give the same outputs up to float rounding."""
  def run(packed_and_blocked):
    return lambda: model(features, training=False, pack_tokens=packed_and_blocked,
                         blocked_attention=packed_and_blocked)
  packed = packs_tokens(features["input_mask"], model.compute_dtype)
  # tf.cond, lowered to Switch and Merge, costs a single request less than a switch_case
  # (0.01-0.17 ms at 16 tokens in five scratch comparisons). It still costs about 0.15-0.25 ms
  # over calling the model directly, as much with a trivial branch not taken: the choice itself,
  # not the other branch's ops (docs/serving.md#one-request-at-a-time).
  as_is = run(False)
  if model.compute_dtype == "float32":
    small = tf.size(features["input_mask"]) <= ONEDNN_SMALL_ROWS
    as_is = lambda: tf.cond(small, run(False), run(False))  # two copies of the same ops
  return tf.cond(packed, run(True), as_is)


class RawTextModule(tf.Module):
  """What every raw-text serving module holds: the graph tokenizer, the model's inference
  copy (inference.inference_copy) with its Precision and served_variables, max_seq_length
  and the [CLS] and [SEP] ids."""

  def __init__(self, name, model, vocab_file, do_lower_case, max_seq_length):
    super().__init__(name=name)
    self.tokenizer = fast_tokenization.FastTokenizer(vocab_file, do_lower_case)
    model = inference.inference_copy(model)
    self.precision = Precision(model)
    self.weights = served_variables(model)
    self._keep_untracked(model)
    self.max_seq_length = max_seq_length
    self.cls_id = self.tokenizer.special_ids["[CLS]"]
    self.sep_id = self.tokenizer.special_ids["[SEP]"]

  @tf.__internal__.tracking.no_automatic_dependency_tracking
  def _keep_untracked(self, model):
    """self._model = model, left out of the SavedModel's objects: tracked, the Keras model
    would save each weight again beside `weights` (an export twice its size)."""
    self._model = model

  # Rows of the model one warm-up request makes (multiple choice: one per ending).
  warm_up_model_rows = 1

  def warm_up_requests(self):
    """Made-up single requests ("a" repeated) that together meet every length a request's
    rows are padded to (fast_tokenization.padded_length) up to max_seq_length, shortest
    first: replayed by a server when it loads the export, they build oneDNN's kernels for
    each length before the first real request does (and, in float32 under
    TF_ONEDNN_ASSUME_FROZEN_WEIGHTS, each copy of served_outputs' ops its weights' layout).
    A list of {input name: value}, values as serve takes them."""
    step = int(fast_tokenization.padded_length(1, self.warm_up_model_rows, 1 << 30))
    return [self.warm_up_request(words) for words in range(1, self.max_seq_length, step)]

  def warm_up_request(self, words):
    """One warm-up request whose text has `words` words: {input name: value}."""
    raise NotImplementedError


class TextClassifier(RawTextModule):
  """Serving module: raw text (one or two string inputs) -> probabilities or a score.

  Tokenization is the graph tokenizer (the same ids as the Python one) and
  packing follows the original's truncation; with doc_stride (single texts),
  each text is split into windows as glue.window_arrays splits it and the
  windows' logits are averaged (glue.mean_over_windows says why).
  """

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length, labels, pair,
               doc_stride=0):
    super().__init__("text_classifier", model, vocab_file, do_lower_case, max_seq_length)
    self.doc_stride = 0 if pair else doc_stride
    self.labels = None if labels is None else tf.constant(labels)
    text = lambda name: tf.TensorSpec([None], tf.string, name=name)
    if pair:
      self.serve = tf.function(self._classify, input_signature=[text("text_a"), text("text_b")])
    else:
      self.serve = tf.function(lambda text_a: self._classify(text_a),
                               input_signature=[text("text_a")])

  def warm_up_request(self, words):
    names = ["text_a", "text_b"][:len(self.serve.input_signature)]
    return {name: [" ".join(["a"] * (words if i == 0 else 1))] for i, name in enumerate(names)}

  def _classify(self, text_a, text_b=None):
    windows = self._windows(text_a, text_b)
    return self._outputs(windows, served_outputs(self._model, windows["features"])["logits"])

  def _windows(self, text_a, text_b=None):
    """Tokenization and packing: the model's `features` and each window's text, by name."""
    if text_b is None:
      ids_a, ids_b = self.tokenizer.tokenize(text_a), None  # [B, (T)]
    else:
      ids_a, ids_b = self.tokenizer.tokenize_together(text_a, text_b)
    owner = None
    if self.doc_stride:
      budget = self.max_seq_length - 2
      length = ids_a.row_lengths()
      step = min(budget, self.doc_stride)
      count = tf.maximum((tf.maximum(length - budget, 0) + step - 1) // step + 1, 1)  # [B]
      begin = tf.ragged.range(count) * step  # [B, (K)]
      size = tf.maximum(tf.minimum(length[:, None] - begin, budget), 0).flat_values  # [M]
      first = begin.flat_values + tf.repeat(ids_a.row_starts(), count)
      ids_a = tf.RaggedTensor.from_row_lengths(
          tf.gather(ids_a.flat_values, tf.ragged.range(first, first + size).flat_values), size)
      owner = tf.repeat(tf.range(tf.size(count)), count)  # [M] each window's text
    features = fast_tokenization.pack_inputs(ids_a, ids_b, self.max_seq_length, self.cls_id,
                                             self.sep_id)
    return {"features": features} if owner is None else {"features": features, "owner": owner}

  def _outputs(self, windows, logits):
    """The texts' probabilities and labels (or scores) from the windows' logits [M, C]."""
    if "owner" in windows:  # [M, C] -> [B, C]: each text's windows averaged
      logits = tf.math.segment_mean(logits, windows["owner"])
    if self.labels is None:
      return {"score": logits[:, 0]}
    probabilities = tf.nn.softmax(logits, axis=-1)
    return {"probabilities": probabilities,
            "label": tf.gather(self.labels, tf.argmax(probabilities, axis=-1))}


class TextTagger(RawTextModule):
  """Serving module: raw sentences [B] -> a tag per whitespace-separated word.

  Words are the text cut at ASCII whitespace (tf.strings.split: a no-break space stays
  inside a word), tokenized in the graph (the same ids as data/tokenization.py); each
  sentence stands alone: one window when it fits `max_seq_length`, else windows every
  `doc_stride` pieces (default: back to back), each word tagged from the window where
  its first piece has the most context, as run_ner.py --nodocument_context predicts (a
  feature-based tagger's BiLSTM then reads the whole sentence's words). Returns `tags`
  and the `words` they belong to, string [B, W] (padded with ""), and `num_words` int32
  [B].
  """

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length, labels,
               doc_stride=None):
    super().__init__("text_tagger", model, vocab_file, do_lower_case, max_seq_length)
    self.doc_stride = doc_stride or max_seq_length - 2
    self.labels = tf.constant(labels)
    self.unk_id = self.tokenizer.special_ids["[UNK]"]
    self.serve = tf.function(self._tag, input_signature=[tf.TensorSpec([None], tf.string,
                                                                       name="text")])

  def warm_up_request(self, words):
    return {"text": [" ".join(["a"] * words)]}

  def _tag(self, text):
    windows = self._windows(text)
    if hasattr(self._model, "tag_words"):
      return self._outputs(windows, None)
    return self._outputs(windows, served_outputs(self._model, windows["features"])["logits"])

  def _windows(self, text):
    """Words, their pieces and windows: the model's `features` and where each word's first
    piece sits (`first_pieces` [N, 2]: window, position), by name."""
    words = tf.strings.split(text)  # [B, (W)]
    pieces = self.tokenizer.tokenize(words.flat_values)  # [N, (P)]
    # A word without pieces reads as [UNK], as in data/conll.py: the padding of a dense copy
    # (a ragged concat along the rows would transpose int64 splits, which makes TensorFlow's
    # oneDNN rewriter log an error line).
    unk = tf.cast(self.unk_id, pieces.dtype)
    pieces = tf.RaggedTensor.from_tensor(
        tf.pad(pieces.to_tensor(unk), [[0, 0], [0, 1]], constant_values=unk),
        lengths=tf.maximum(pieces.row_lengths(), 1))
    per_word = pieces.row_lengths()  # [N]
    per_sentence = tf.reduce_sum(tf.RaggedTensor.from_row_lengths(per_word, words.row_lengths()),
                                 axis=1)  # [B]
    # Windows as data/tagging_inputs.py cuts a sentence (an empty one: one empty window).
    sentence, begin, length = graph_ops.window_spans(per_sentence, self.max_seq_length - 2,
                                                     self.doc_stride, empty_window=True)
    window_first = tf.gather(tf.cumsum(per_sentence, exclusive=True), sentence) + begin  # [M]
    owner, piece = graph_ops.max_context_owner(window_first, length,
                                               tf.size(pieces.flat_values, out_type=tf.int64))
    chunks = tf.RaggedTensor.from_row_lengths(tf.gather(pieces.flat_values, piece), length)
    inputs = fast_tokenization.packed_features([(chunks, length)], self.cls_id, self.sep_id,
                                               self.max_seq_length)  # [M, (<= S)]
    first = tf.cumsum(per_word, exclusive=True)  # [N] each word's first piece overall
    window = tf.gather(owner, first)  # [N] the window it is tagged from
    offset = first - tf.gather(window_first, window) + 1  # +1 for [CLS]
    first_pieces = tf.stack([window, offset], axis=1)  # [N, 2]
    return {"features": inputs, "words": words, "first_pieces": first_pieces}

  def _outputs(self, windows, logits):
    """Each word's tag from the windows' logits [M, S, C] (the feature-based model, which
    reads the windows itself, takes None)."""
    words, first_pieces = windows["words"], windows["first_pieces"]
    if hasattr(self._model, "tag_words"):
      # Feature-based: the BiLSTM reads each sentence's words, across its windows.
      x = tf.gather_nd(self._model.encode(windows["features"]), first_pieces)  # [N, F]
      sentences = tf.RaggedTensor.from_row_lengths(x, words.row_lengths())  # [B, (W), F]
      padded = sentences.to_tensor()  # [B, W, F]; W at least 1: the BiLSTM runs no 0 steps
      padded = tf.pad(padded, [[0, 0], [0, tf.maximum(1 - tf.shape(padded)[1], 0)], [0, 0]])
      mask = tf.sequence_mask(sentences.row_lengths(), tf.shape(padded)[1])
      logits = self._model.tag_words(padded, mask)["logits"]  # [B, W, C]
      word_logits = tf.RaggedTensor.from_tensor(
          logits, lengths=sentences.row_lengths()).flat_values  # [N, C]
    else:
      word_logits = tf.gather_nd(logits, first_pieces)  # [N, C]
    tags = tf.gather(self.labels, tf.argmax(word_logits, axis=-1))
    tags = tf.RaggedTensor.from_row_lengths(tags, words.row_lengths())
    return {"tags": tags.to_tensor(default_value=""), "words": words.to_tensor(default_value=""),
            "num_words": tf.cast(words.row_lengths(), tf.int32)}


class TextMultipleChoice(RawTextModule):
  """Serving module: raw strings -> a probability per ending and the chosen ending's index.

  Inputs: sent1 [N] (the context, segment A), sent2 [N] (the start of every
  ending, may be empty) and endings [N, C]; segment B of choice c is
  `sent2 endings[:, c]`. Tokenization runs in the graph and pairs are
  truncated as the original truncates them.
  """

  def __init__(self, model, vocab_file, do_lower_case, max_seq_length):
    super().__init__("text_multiple_choice", model, vocab_file, do_lower_case, max_seq_length)
    self.serve = tf.function(self._choose, input_signature=[
        tf.TensorSpec([None], tf.string, name="sent1"),
        tf.TensorSpec([None], tf.string, name="sent2"),
        tf.TensorSpec([None, None], tf.string, name="endings")])

  warm_up_model_rows = 4  # SWAG's endings per question

  def warm_up_request(self, words):
    return {"sent1": [" ".join(["a"] * words)], "sent2": [""],
            "endings": [["a"] * self.warm_up_model_rows]}

  def _choose(self, sent1, sent2, endings):
    num_choices = tf.shape(endings)[1]
    repeat = lambda t: tf.reshape(tf.repeat(t[:, None], num_choices, axis=1), [-1])  # [N*C]
    segment_b = tf.strings.strip(tf.strings.join([repeat(sent2), tf.reshape(endings, [-1])],
                                                 separator=" "))
    # Each context once, then repeated [N*C, (T)]; every ending's segment B [N*C, (T)].
    contexts, ids_b = self.tokenizer.tokenize_together(sent1, segment_b)
    contexts = tf.gather(contexts, repeat(tf.range(tf.shape(sent1)[0])))
    packed = fast_tokenization.pack_inputs(contexts, ids_b, self.max_seq_length, self.cls_id,
                                           self.sep_id)  # [N*C, S] each
    features = {k: tf.reshape(v, [-1, num_choices, tf.shape(v)[1]])
                for k, v in packed.items()}
    probabilities = tf.nn.softmax(served_outputs(self._model, features)["logits"], axis=-1)
    return {"probabilities": probabilities,
            "label": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}


# Where TensorFlow Serving looks for the requests it replays when it loads a SavedModel.
WARM_UP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def save(module, export_dir):
  """Writes the SavedModel (serving signature: serving_default), replacing an old export whole,
  with the module's warm_up_requests in WARM_UP_FILE.

  It is built under a temporary name and published by files.atomic_dir:
  renamed at once on a local disk; on a bucket moved file by file with
  saved_model.pb last, so a directory holding saved_model.pb is complete.
  """
  with files.atomic_dir(export_dir, last=("saved_model.pb",)) as tmp:
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
    write_warm_up_requests(module.warm_up_requests(), os.path.join(tmp, WARM_UP_FILE))
  return export_dir


def write_warm_up_requests(requests, path):
  """`requests` ([{input name: value}]) as TensorFlow Serving's warm-up file at `path`: a
  TFRecord file of PredictionLog records, each a Predict request of serving_default."""
  from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
  files.makedirs(os.path.dirname(path))
  with tf.io.TFRecordWriter(path) as writer:
    for inputs in requests:
      request = predict_pb2.PredictRequest(
          model_spec=model_pb2.ModelSpec(signature_name="serving_default"))
      for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
      writer.write(prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())
