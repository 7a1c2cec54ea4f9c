"""BertEncoder, the BERT transformer from a feature dict to an output dict, its
TransformerBlock, and TokenRows, the rows its dense layers run on.

Shape letters: B batch, S sequence length, H hidden size, I intermediate size,
R rows of the dense layers (TokenRows: B * S, or the real tokens of a packed batch).
"""

import keras
import tensorflow as tf
from keras import ops

from modeling import attention, layers
from modeling.config import BertConfig


class TransformerBlock(keras.layers.Layer):
  """A post-LayerNorm transformer layer: attention, add & norm, MLP, add & norm."""

  def __init__(self, hidden_size, num_attention_heads, intermediate_size,
               hidden_act="gelu", initializer_range=0.02, dropout_rate=0.1,
               attention_dropout_rate=0.1, **kwargs):
    kwargs["autocast"] = False  # keep the float32 residual stream float32
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.dropout_rate = dropout_rate
    self.attention_dropout_rate = attention_dropout_rate
    self.attention = attention.SelfAttention(
        hidden_size, num_attention_heads, initializer_range,
        attention_dropout_rate, name="attention", dtype=self.dtype_policy)
    self.attention_layer_norm = layers.layer_norm("attention_LayerNorm")
    self.activation = layers.get_activation(hidden_act)
    self.intermediate = layers.dense(intermediate_size, initializer_range, "intermediate",
                                     dtype=self.dtype_policy)
    self.output_dense = layers.dense(hidden_size, initializer_range, "output",
                                     dtype=self.dtype_policy)
    self.output_layer_norm = layers.layer_norm("output_LayerNorm")
    self.dropout = layers.float32_dropout(dropout_rate)

  def build(self, input_shape):
    rows = (None, self.hidden_size)
    self.attention.build(rows)
    self.attention_layer_norm.build(rows)
    self.intermediate.build(rows)
    self.output_dense.build((None, self.intermediate_size))
    self.output_layer_norm.build(rows)

  def call(self, x, attention_bias, rows, training=False, query_positions=None,
           blocked=False):
    """float32 rows [R, H] (TokenRows `rows`) and bias [B, 1, 1 or S, S] in the
    compute dtype -> float32 rows [R, H].

    query_positions: int [B, Q]: compute only the outputs at these positions
    ([B, Q, H]), with the bias rows of those queries ([B, 1, 1 or Q, S]);
    every position still serves as key and value, so those rows are what the
    full layer gives them.
    blocked: at inference, attention in cache-sized blocks (blocked_attention).
    """
    if query_positions is None:
      queries = None
    else:
      queries = rows.gather(x, query_positions)  # [B, Q, H]
    attended = self.attention(x, attention_bias, rows=rows, training=training, queries=queries,
                              blocked=blocked)  # [R or B * Q, H]
    residual = x if queries is None else tf.reshape(queries, [-1, self.hidden_size])
    attended = self.dropout(ops.cast(attended, "float32"), training=training)
    x = self.attention_layer_norm(attended + residual, training=training)
    y = self.activation(self.intermediate(x, training=training), training=training)  # [R, I]
    y = ops.cast(self.output_dense(y, training=training), "float32")
    y = self.dropout(y, training=training)  # [R, H]
    y = self.output_layer_norm(y + x, training=training)
    # Rows stay 2-D up to here: the remapper fuses 2-D products with their bias and GELU.
    return y if queries is None else tf.reshape(y, tf.shape(queries))

  def get_config(self):
    return {**super().get_config(), "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "initializer_range": self.initializer_range,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate}


class BertEncoder(keras.Model):
  """The BERT encoder (embeddings, transformer blocks, pooler), built from a BertConfig.

  It knows nothing about tasks; task models (modeling/heads.py TaskModel) are
  given one and add their heads to its outputs.

  Args:
    config: a BertConfig, or its dict.
    pack_tokens: the default of `call`'s pack_tokens (how training built the model; see
      modeling/training.py packs_tokens). Kept by get_config, so an inference copy
      (modeling/inference.py) runs as the model it copies.
    **kwargs: Keras arguments (name, dtype: the policy every block computes under).

  Call with a dict:
    input_ids: int [B, S] token ids.
    input_mask: optional int [B, S], 1 for real tokens, 0 for padding.
    segment_ids: optional int [B, S] token type (segment) ids.

  Returns a dict:
    sequence_output: float32 [B, S, H], the last block's output.
    pooled_output: float32 [B, H], tanh(dense(sequence_output[:, r])) at the
      representation position r (`representation_positions`): [CLS], or for
      a causal encoder the last real token, the first that has seen the
      whole input (as GPT reads its sentence representation).
    encoder_outputs: list of num_hidden_layers float32 [B, S, H], every block's output.
    embedding_output: float32 [B, S, H], the embedding layer's output.

  With config.causal_attention every position attends to itself and earlier
  positions only (a left-to-right model), besides the padding mask.

  The ways it runs, each a call argument; every one gives the same outputs up to
  float rounding:
    training: dropout on; with training=False the outputs are deterministic.
    pooled_only=True: the last block computes only the representation row, all
      the pooler reads, which saves nearly a whole layer's work (the
      classifier's and multiple choice's heads use it): sequence_output and
      the last encoder_outputs entry are then [B, 1, H] (that row).
    pack_tokens=True (None: the constructor's): the layers run on rows [R, H]
      (TokenRows) of the real tokens alone, with zeros at padded
      positions in the outputs; dropout draws different masks. Shapes then
      depend on the input_mask's values, which XLA and TPUs cannot compile, so
      the Trainer packs only outside XLA.
    blocked_attention=True: at inference, attention in cache-sized blocks
      (attention.blocked_attention; modeling/export.py served_outputs uses it, with
      pack_tokens, for batches of several rows, 1,024 positions or more and enough padding);
      not for XLA.
  """

  def __init__(self, config, pack_tokens=False, **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(**kwargs)
    self.config = config = BertConfig.from_dict(config) if isinstance(config, dict) else config
    self.pack_tokens = pack_tokens
    # Embeddings stay float32: the sum of three tables feeds LayerNorm.
    self.embeddings = layers.BertEmbeddings(
        config.vocab_size, config.hidden_size, config.max_position_embeddings,
        config.type_vocab_size, config.initializer_range,
        config.hidden_dropout_prob, name="embeddings", dtype="float32")
    self.blocks = [
        TransformerBlock(
            config.hidden_size, config.num_attention_heads, config.intermediate_size,
            config.hidden_act, config.initializer_range, config.hidden_dropout_prob,
            config.attention_probs_dropout_prob, name=f"layer_{i}",
            dtype=self.dtype_policy)
        for i in range(config.num_hidden_layers)]
    self.pooler = layers.dense(config.hidden_size, config.initializer_range, "pooler",
                               dtype=self.dtype_policy, activation="tanh")

  def build(self, input_shape=None):
    ids_shape = (None, None)
    hidden_shape = (None, None, self.config.hidden_size)
    self.embeddings.build(ids_shape)
    for block in self.blocks:
      block.build(hidden_shape)
    self.pooler.build((None, self.config.hidden_size))
    self.built = True

  @property
  def embedding_table(self):
    """The word embedding variable [V, H], shared with the masked-LM decoder."""
    return self.embeddings.word_embeddings

  def representation_positions(self, input_mask):
    """int [B, S] mask -> int32 [B]: the position the pooler reads, 0 ([CLS]), or the last
    real token for a causal encoder."""
    if self.config.causal_attention:
      return last_real_positions(input_mask)
    return ops.zeros((ops.shape(input_mask)[0],), "int32")

  def call(self, inputs, training=False, pooled_only=False, pack_tokens=None,
           blocked_attention=False):
    """The feature dict -> the output dict (see the class docstring for each argument)."""
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    segment_ids = inputs.get("segment_ids")
    if input_mask is None:
      input_mask = ops.ones_like(input_ids)
    if segment_ids is None:
      segment_ids = ops.zeros_like(input_ids)
    causal = self.config.causal_attention
    bias = ops.cast(attention.attention_bias_from_mask(input_mask, causal),
                    self.compute_dtype)  # [B, 1, 1 or S, S]
    # Rows are picked with tf.gather: Keras' take_along_axis transposes int64 indices, which
    # makes TensorFlow's oneDNN rewriter log an error line.
    first = self.representation_positions(input_mask)[:, None]  # [B, 1]
    pack_tokens = self.pack_tokens if pack_tokens is None else pack_tokens
    rows = TokenRows(input_mask, pack_tokens)
    x = self.embeddings(rows.pack(input_ids), rows.pack(segment_ids), rows.position_ids(),
                        training=training)  # [R, H]
    outputs = [rows.pad(x)]
    for i, block in enumerate(self.blocks):
      if pooled_only and i == len(self.blocks) - 1:  # the representation row only
        row_bias = tf.gather(bias, first, axis=2, batch_dims=1) if causal else bias  # [B, 1, 1, S]
        x = block(x, row_bias, rows=rows, training=training, query_positions=first,
                  blocked=blocked_attention)
        outputs.append(x)  # [B, 1, H]
      else:
        x = block(x, bias, rows=rows, training=training, blocked=blocked_attention)
        outputs.append(rows.pad(x))
    x = outputs[-1]
    if pooled_only or not causal:
      row = x[:, 0]
    else:
      row = tf.gather(x, first[:, 0], batch_dims=1)  # [B, H]
    pooled = ops.cast(self.pooler(row, training=training), "float32")  # [B, H]
    return {"sequence_output": x, "pooled_output": pooled,
            "encoder_outputs": outputs[1:], "embedding_output": outputs[0]}

  def get_config(self):
    return {"config": self.config.to_dict(), "pack_tokens": self.pack_tokens,
            "name": self.name, "dtype": keras.dtype_policies.serialize(self.dtype_policy)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return cls(**config)


class TokenRows:
  """A batch's token positions as the rows [R, ...] the dense layers run on.

  Every dense layer, LayerNorm, dropout and residual sum of the encoder works row by
  row, so the encoder carries its activations as 2-D rows between layers ([R, H]: 2-D
  products are what TensorFlow's oneDNN rewriter fuses with their bias and GELU), and
  puts them in [B, S, ...] place only where attention needs the batch layout.

  packed=False: every position is a row, R = B * S (pack and pad are reshapes).
  packed=True: only the real tokens are rows, R = T, batch after batch in position
  order (pack gathers them, pad scatters them back with zeros at padding). Padded
  rows never reach a real one (attention masks them as keys), so real positions get
  what computing the padding gives them, up to float rounding; on short sentences in
  long batches that skips most of the work. Shapes then depend on the mask's values,
  which XLA and TPUs cannot compile. A packed batch without padding is padded
  back by a reshape (a branch at run time): scattering every row would only copy
  them. `lengths` gives each row's last real position + 1, where
  attention in blocks stops (None unpacked: the whole row).
  """

  def __init__(self, input_mask, packed):
    self.packed = packed
    self.shape = tf.shape(input_mask, out_type=tf.int64)  # [B, S]
    if packed:
      real = tf.not_equal(input_mask, 0)
      self.positions = tf.where(real)  # int64 [T, 2]: (row, position)
      self._full = tf.reduce_all(real)  # no padding: rows are all positions
      self.lengths = tf.reduce_max(  # int32 [B]: past a row's last real position, only padding
          tf.where(real, tf.range(1, tf.shape(input_mask)[1] + 1)[None, :], 0), axis=1)
      # Each position's row in the packed layout, in the [B * S] layout.
      self._real = tf.reshape(real, [-1])
      self._index = tf.cumsum(tf.cast(self._real, tf.int32), exclusive=True)
    else:
      self.lengths = None
    self._padded_shapes = {}  # trailing sizes -> [B, S, ...], made once per call
    self.pairs = tf.reduce_prod(self.shape) * self.shape[1]  # B * S * S: a head's scores

  def pack(self, padded):
    """[B, S, ...] -> the rows [R, ...]."""
    if self.packed:
      # Always a gather: with a reshape branch for full batches, Grappler's constant folding
      # gave every row count B * S in the training loop (ltr pretraining, TF 2.20).
      return tf.gather_nd(padded, self.positions)
    return self._reshaped(padded)

  def _reshaped(self, padded):
    trailing = padded.shape[2:]
    if trailing.is_fully_defined():  # no shape arithmetic in the graph
      return tf.reshape(padded, [-1] + trailing.as_list())
    return tf.reshape(padded, tf.concat([[-1], tf.shape(padded)[2:]], 0))

  def padded_shape(self, trailing):
    """int64 [B, S, *trailing], made once per call for each static `trailing`."""
    trailing = tuple(trailing)
    if trailing not in self._padded_shapes:
      self._padded_shapes[trailing] = tf.concat(
          [self.shape, tf.constant(trailing, tf.int64)], 0)
    return self._padded_shapes[trailing]

  def pad(self, rows):
    """The rows [R, ...] -> [B, S, ...] (zeros at padding when packed)."""
    trailing = tuple(rows.shape[1:])
    if None in trailing:
      shape = tf.concat([self.shape, tf.shape(rows, out_type=tf.int64)[1:]], 0)
    else:
      shape = self.padded_shape(trailing)
    if self.packed:
      padded = tf.cond(self._full, lambda: tf.reshape(rows, shape),
                       lambda: tf.scatter_nd(self.positions, rows, shape))
      padded.set_shape(tf.TensorShape([None, None]).concatenate(rows.shape[1:]))
      return padded
    return tf.reshape(rows, shape)

  def position_ids(self):
    """int [R]: each row's position in its sequence."""
    if self.packed:
      return self.positions[:, 1]
    return tf.tile(tf.range(self.shape[1]), [self.shape[0]])

  def gather(self, rows, positions):
    """rows [R, H] at int [B, Q] positions -> [B, Q, H] (zeros at padding when packed)."""
    flat = tf.cast(tf.range(self.shape[0])[:, None] * self.shape[1], tf.int32) \
        + tf.cast(positions, tf.int32)  # [B, Q]: in the [B * S] layout
    if not self.packed:
      return tf.gather(rows, flat)
    # A padded position reads the zero row appended at index T (rows may be empty).
    index = tf.where(tf.gather(self._real, flat), tf.gather(self._index, flat),
                     tf.shape(rows)[0])
    zero = tf.zeros(tf.concat([[1], tf.shape(rows)[1:]], 0), rows.dtype)
    return tf.gather(tf.concat([rows, zero], 0), index)


def last_real_positions(input_mask):
  """int [B, S] mask -> int32 [B]: each row's last real position (0 for an all-padding row)."""
  mask = ops.cast(input_mask, "int32")
  positions = ops.arange(ops.shape(mask)[1], dtype="int32")
  return ops.max(mask * positions[None, :], axis=1)
