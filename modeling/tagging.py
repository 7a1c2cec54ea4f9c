"""Token tagging (named entities): fine-tuned and feature-based models, and their task.

Fine-tuning (the paper's section 4.3): dropout and one dense layer over the
last hidden layer. Feature-based (section 5.3): the encoder frozen, chosen
hidden layers combined and fed to a two-layer bidirectional LSTM and a dense
layer. Head variables are named under `cls/ner/`.
"""

import tensorflow as tf
from keras import ops

from modeling import heads, layers, lstm
from modeling.encoder import BertEncoder
from modeling.heads import TaskModel

COMBINES = ("concat", "sum", "weighted")


def parse_feature_layers(values):
  """--feature_layers' strings as ints; ValueError naming the flag otherwise."""
  try:
    return [int(v) for v in values]
  except ValueError:
    raise ValueError(f"--feature_layers={','.join(values)}: expected integers such as "
                     "-1,-2,-3,-4.") from None


def layer_indices(feature_layers, num_hidden_layers):
  """Indices into [embeddings, layer 1, ..., layer L] of `feature_layers` (0 = embeddings,
  i > 0 = hidden layer i, -k = the k-th from the top)."""
  out = []
  for layer in feature_layers:
    if not -num_hidden_layers <= layer <= num_hidden_layers:
      raise ValueError(f"--feature_layers: {layer} is not a layer of a {num_hidden_layers}-layer "
                       f"model (0 = embeddings, 1..{num_hidden_layers}, or -1..-"
                       f"{num_hidden_layers} from the top).")
    out.append(layer if layer >= 0 else num_hidden_layers + 1 + layer)
  if not out:
    raise ValueError("--feature_layers is empty.")
  return out


def feature_width(hidden_size, num_feature_layers, feature_combine):
  """Width of the cached features: k*H (concat, and weighted, whose layers are combined
  later by learned weights) or H (sum)."""
  return hidden_size * (1 if feature_combine == "sum" else num_feature_layers)


class BertTagger(TaskModel):
  """The given encoder + dropout(0.1) + dense over sequence_output: logits float32
  [B, S, num_labels]."""

  uses_pooler = False

  def __init__(self, encoder, num_labels, **kwargs):
    kwargs.setdefault("name", "bert_tagger")
    super().__init__(encoder, **kwargs)
    self.num_labels = num_labels
    self.dropout = layers.float32_dropout(0.1)
    self.tagger = heads.OutputLogits(num_labels, self.config.initializer_range, name="ner",
                                     dtype=self.dtype_policy)

  def build(self, input_shape=None):
    super().build()
    self.tagger.build((None, None, self.config.hidden_size))
    self.built = True

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    sequence = self.encoder(features, training=training, pack_tokens=pack_tokens,
                            blocked_attention=blocked_attention)["sequence_output"]  # [B, S, H]
    return {"logits": self.tagger(self.dropout(sequence, training=training), training=training)}

  def head_variable_map(self):
    """Original-style names of the head's variables."""
    return {"cls/ner/output_weights": self.tagger.output_weights,
            "cls/ner/output_bias": self.tagger.output_bias}

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    if "cls/ner/output_weights" not in shapes or "cls/ner/lstm_0/fw/kernel" in shapes:
      return None
    return cls(encoder, shapes["cls/ner/output_weights"][0])

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels}


class BertFeatureTagger(TaskModel):
  """The given encoder, frozen; its layers combined; 2-layer BiLSTM over words; dense.

  The encoder is made not trainable (no gradients, no optimizer slots) and always
  runs without dropout: its outputs are fixed features, as in the paper, so
  training computes them once (`encode`, see word_features) and runs only
  `tag_words` over sentences. The BiLSTM reads each word's features at its
  first piece. `weighted` learns one scalar per layer, softmax-normalized.
  """

  uses_pooler = False

  def __init__(self, encoder, num_labels, feature_layers=(-1,), feature_combine="concat",
               lstm_units=768, **kwargs):
    kwargs.setdefault("name", "bert_feature_tagger")
    super().__init__(encoder, **kwargs)
    if feature_combine not in COMBINES:
      raise ValueError(f"--feature_combine={feature_combine}: expected one of "
                       f"{', '.join(COMBINES)}.")
    if lstm_units < 1:
      raise ValueError(f"--lstm_units={lstm_units} must be positive.")
    self.num_labels = num_labels
    self.feature_layers = list(feature_layers)
    self.feature_combine = feature_combine
    self.lstm_units = lstm_units
    self.indices = layer_indices(self.feature_layers, self.config.num_hidden_layers)
    self.encoder.trainable = False
    self.lstms = [lstm.BidirectionalLSTM(lstm_units, name=f"lstm_{i}") for i in range(2)]
    self.dropout = layers.float32_dropout(0.1)
    self.tagger = heads.OutputLogits(num_labels, self.config.initializer_range, name="ner",
                                     dtype=self.dtype_policy)

  def build(self, input_shape=None):
    super().build()
    hidden = self.config.hidden_size
    width = hidden * len(self.indices) if self.feature_combine == "concat" else hidden
    if self.feature_combine == "weighted":
      # Zeros: the softmax starts from equal weights.
      self.layer_weights = self.add_weight(name="layer_weights", shape=(len(self.indices),),
                                           initializer="zeros", dtype="float32")
    for bilstm in self.lstms:
      bilstm.build((None, None, width))
      width = 2 * self.lstm_units
    self.tagger.build((None, None, width))
    self.built = True

  @property
  def feature_width(self):
    """Width of `encode`'s features (see feature_width)."""
    return feature_width(self.config.hidden_size, len(self.indices), self.feature_combine)

  def encode(self, features, pack_tokens=None, blocked_attention=False):
    """The frozen encoder's chosen layers at every position: float32 [B, S, feature_width]."""
    out = self.encoder(features, training=False, pack_tokens=pack_tokens,
                       blocked_attention=blocked_attention)
    hidden = [out["embedding_output"]] + list(out["encoder_outputs"])
    chosen = [tf.stop_gradient(tf.cast(hidden[i], tf.float32)) for i in self.indices]
    if self.feature_combine == "sum":
      return tf.add_n(chosen)
    return tf.concat(chosen, axis=-1)  # [B, S, k*H]

  def tag_words(self, words, mask, training=False):
    """BiLSTM and dense over words: float32 [B, W, feature_width] (encode's features at each
    word's first piece) and a mask [B, W] (real words first) -> logits float32 [B, W, C]."""
    x = tf.cast(words, tf.float32)
    if self.feature_combine == "weighted":
      k, hidden = len(self.indices), self.config.hidden_size
      layers_apart = tf.reshape(x, tf.concat([tf.shape(x)[:2], [k, hidden]], 0))  # [B, W, k, H]
      x = tf.einsum("bwkh,k->bwh", layers_apart, tf.nn.softmax(self.layer_weights))
    mask = tf.cast(mask, tf.bool)
    for bilstm in self.lstms:
      x = bilstm(x, mask=mask, training=training)  # [B, W, 2*units], zeros at padding
    return {"logits": self.tagger(self.dropout(x, training=training), training=training)}

  def call(self, features, training=False, pack_tokens=None, blocked_attention=False):
    """Windows -> logits [B, S, C] at each word's first piece (zeros elsewhere).

    Each window row is read as one sentence: the BiLSTM runs over its words,
    whose first pieces `word_starts` (int [B, S], 1 = a word starts here)
    marks; without it every real piece counts as a word.
    """
    x = self.encode(features, pack_tokens, blocked_attention)  # [B, S, F]
    starts = features.get("word_starts", features.get("input_mask"))
    if starts is None:
      starts = tf.ones(tf.shape(features["input_ids"]), tf.int32)
    starts = tf.cast(tf.not_equal(starts, 0), tf.int32)  # [B, S]
    # Static shapes (XLA): each row's first pieces moved to its front, in order.
    position = tf.range(tf.shape(starts)[1])[None, :]
    order = tf.argsort(tf.where(starts > 0, position, position + tf.shape(starts)[1]), axis=1)
    words = tf.gather(x, order, batch_dims=1)  # [B, S, F]: the words first
    mask = position < tf.reduce_sum(starts, axis=1, keepdims=True)  # [B, S]
    logits = self.tag_words(words, mask, training)["logits"]  # [B, S, C] by word
    word = tf.maximum(tf.cumsum(starts, axis=1) - 1, 0)  # [B, S]: the word a piece is in
    placed = tf.gather(logits, word, batch_dims=1)  # [B, S, C]
    return {"logits": placed * tf.cast(starts, tf.float32)[..., None]}

  def head_variable_map(self):
    """Original-style names of the head's variables."""
    names = {"cls/ner/output_weights": self.tagger.output_weights,
             "cls/ner/output_bias": self.tagger.output_bias}
    if self.feature_combine == "weighted":
      names["cls/ner/layer_weights"] = self.layer_weights
    for i, bilstm in enumerate(self.lstms):
      names.update(lstm.named_variables(f"cls/ner/lstm_{i}", bilstm))
    return names

  @classmethod
  def for_head_variables(cls, encoder, shapes):
    """The feature tagger on `encoder` whose variables `shapes` hold, or None.

    Which layers fed the BiLSTM is not in a checkpoint (run.json beside
    run_ner's keeps it): the model gets as many as `layer_weights` or the
    BiLSTM's input width imply, the topmost ones, which gives every variable
    its shape (a single layer reads as `concat`, the same variables as `sum`).
    """
    kernel = shapes.get("cls/ner/lstm_0/fw/kernel")  # [width, 4 * units]
    if kernel is None or "cls/ner/output_weights" not in shapes:
      return None
    hidden, depth = encoder.config.hidden_size, encoder.config.num_hidden_layers
    if "cls/ner/layer_weights" in shapes:
      combine, count = "weighted", shapes["cls/ner/layer_weights"][0]
    elif kernel[0] % hidden == 0:
      combine, count = "concat", kernel[0] // hidden
    else:
      return None
    if not 1 <= count <= depth + 1:
      return None
    chosen = [-(i + 1) for i in range(min(count, depth))] + ([0] if count > depth else [])
    return cls(encoder, shapes["cls/ner/output_weights"][0], chosen, combine, kernel[1] // 4)

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels,
            "feature_layers": self.feature_layers, "feature_combine": self.feature_combine,
            "lstm_units": self.lstm_units}


class TaggingTask:
  """Per-token softmax cross entropy over the tags, weighted by label_weights.

  loss = sum(w * nll) / sum(w): first pieces weigh 1, other pieces and padding 0.
  """

  def __init__(self, config, num_labels, feature_based=False, feature_layers=(-1,),
               feature_combine="concat", lstm_units=768):
    self.config, self.num_labels = config, num_labels
    self.feature_based = feature_based
    if feature_based:  # ValueError naming --feature_layers when one is not a layer
      layer_indices(feature_layers, config.num_hidden_layers)
    self.options = dict(feature_layers=list(feature_layers), feature_combine=feature_combine,
                        lstm_units=lstm_units)

  def settings(self):
    """What defines the model beside its labels (for the run's identity)."""
    return {"feature_based": self.feature_based,
            "causal_attention": self.config.causal_attention,
            **(self.options if self.feature_based else {})}

  def feature_width(self):
    """Width of the feature-based model's cached word features."""
    return feature_width(self.config.hidden_size, len(self.options["feature_layers"]),
                         self.options["feature_combine"])

  def build_model(self, pack_tokens=False):
    """The built tagger (feature-based or fine-tuned) on a new BertEncoder(config,
    pack_tokens)."""
    encoder = BertEncoder(self.config, pack_tokens)
    if self.feature_based:
      model = BertFeatureTagger(encoder, self.num_labels, **self.options)
    else:
      model = BertTagger(encoder, self.num_labels)
    model.build()
    return model

  def denominators(self, batch):
    return {"loss": tf.reduce_sum(tf.cast(batch["label_weights"], tf.float32))}

  def numerators(self, model, batch, training):
    """Sums of the loss and correct tags; a batch of windows ([B, S] model inputs), or of
    sentences ([B, W, F] word_features, with a feature tagger; see conll.sentence_dataset)."""
    if "word_features" in batch:
      mask = batch["label_weights"] > 0
      logits = model.tag_words(batch["word_features"], mask, training)["logits"]
    else:
      logits = model(batch, training=training)["logits"]  # [B, S, C]
    weights = tf.cast(batch["label_weights"], tf.float32)
    labels = batch["label_ids"]
    return ({"loss": tf.reduce_sum(weights * heads.cross_entropy(logits, labels))},
            {"correct": tf.reduce_sum(weights * heads.correct(logits, labels))})

  def losses(self, sums, denominators):
    return tf.math.divide_no_nan(sums["loss"], denominators["loss"]), {}

  def metric_values(self, metrics, denominators):
    return {"accuracy": ops.divide_no_nan(metrics["correct"], denominators["loss"])}
