"""BertEncoder: the BERT transformer, from a feature dict to an output dict."""

import keras
from keras import ops

from modeling import layers
from modeling.config import BertConfig


class ConfiguredModel(keras.Model):
  """A model built from a BertConfig (or its dict), which its get_config round-trips."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = BertConfig.from_dict(config) if isinstance(config, dict) else config

  def get_config(self):
    return {"config": self.config.to_dict(), "name": self.name,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return cls(**config)


class BertEncoder(ConfiguredModel):
  """The BERT encoder (embeddings, transformer blocks, pooler).

  It knows nothing about tasks; heads take its outputs.

  Call with a dict:
    input_ids: int [B, S] token ids.
    input_mask: optional int [B, S], 1 for real tokens, 0 for padding.
    segment_ids: optional int [B, S] token type (segment) ids.

  Returns a dict:
    sequence_output: float32 [B, S, H], the last block's output.
    pooled_output: float32 [B, H], tanh(dense(sequence_output[:, 0])).
    encoder_outputs: list of num_hidden_layers float32 [B, S, H], every block's output.
    embedding_output: float32 [B, S, H], the embedding layer's output.

  Dropout follows `training`; with training=False the outputs are deterministic.
  With pooled_only=True the last block computes only the [CLS] row, all the
  pooler reads, which saves nearly a whole layer's work (the classifier's and
  multiple choice's heads use it): pooled_output is unchanged up to float
  rounding, while sequence_output and the last encoder_outputs entry are
  [B, 1, H].

  With pack_tokens set, the layers run on the real tokens alone
  (layers.PackedTokens): the outputs are the same up to float rounding, with
  zeros at padded positions, and dropout draws different masks. Shapes then
  depend on the input_mask's values, which XLA and TPUs cannot compile
  without padding them back, so the Trainer sets it only outside XLA.
  """

  def __init__(self, config, **kwargs):
    kwargs.setdefault("name", "bert")
    super().__init__(config, **kwargs)
    config = self.config
    self.pack_tokens = False
    # Embeddings stay float32: the sum of three tables feeds LayerNorm.
    self.embeddings = layers.BertEmbeddings(
        config.vocab_size, config.hidden_size, config.max_position_embeddings,
        config.type_vocab_size, config.initializer_range,
        config.hidden_dropout_prob, name="embeddings", dtype="float32")
    self.blocks = [
        layers.TransformerBlock(
            config.hidden_size, config.num_attention_heads, config.intermediate_size,
            config.hidden_act, config.initializer_range, config.hidden_dropout_prob,
            config.attention_probs_dropout_prob, name=f"layer_{i}",
            dtype=self.dtype_policy)
        for i in range(config.num_hidden_layers)]
    self.pooler = keras.layers.Dense(
        config.hidden_size, activation="tanh", name="pooler",
        kernel_initializer=layers.initializer(config.initializer_range),
        dtype=self.dtype_policy)

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

  def call(self, inputs, training=False, pooled_only=False):
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    segment_ids = inputs.get("segment_ids")
    if input_mask is None:
      input_mask = ops.ones_like(input_ids)
    if segment_ids is None:
      segment_ids = ops.zeros_like(input_ids)
    bias = layers.attention_bias_from_mask(input_mask)  # [B, 1, 1, S]
    if self.pack_tokens:
      packed = layers.PackedTokens(input_mask)
      x = self.embeddings(packed.pack(input_ids), packed.pack(segment_ids), training=training,
                          position_ids=packed.positions[:, 1])  # [T, H]
    else:
      packed = None
      x = self.embeddings(input_ids, segment_ids, training=training)  # [B, S, H]
    outputs = [x]
    for i, block in enumerate(self.blocks):
      first_rows = 1 if pooled_only and i == len(self.blocks) - 1 else None
      x = block(x, bias, training=training, first_rows=first_rows, packed=packed)
      outputs.append(x if packed is None or first_rows else packed.pad(x))
    if packed is not None:
      outputs[0] = packed.pad(outputs[0])
    x = outputs[-1]
    pooled = ops.cast(self.pooler(x[:, 0]), "float32")  # [B, H]
    return {"sequence_output": x, "pooled_output": pooled,
            "encoder_outputs": outputs[1:], "embedding_output": outputs[0]}
