"""FLOP and weight counts from a model's shape: the one formula every benchmark uses.

A multiply-add counts 2. Per sequence of S tokens, L layers, hidden size H,
feed-forward size I, vocabulary V and P masked positions:

  forward = 2 S L (4 H^2 + 2 H I)   the dense layers (Q, K, V, attention output, MLP)
          + 4 L S^2 H               attention scores and context
          + 2 P (H^2 + H V)         masked-LM transform and output layer
          + 2 H^2 + 4 H             pooler and next-sentence output
  training = 3 x forward            (the backward pass costs twice the forward)

Embedding lookups, LayerNorm, softmax, GELU and biases are left out (under 1%).
Pure arithmetic, no TensorFlow. `config` is a bert_config.json dict or a BertConfig.
"""


def _shape(config, *keys):
  get = config.get if isinstance(config, dict) else lambda k: getattr(config, k)
  return tuple(get(k) for k in keys)


def matmul(m, k, n):
  """FLOPs of an [m, k] x [k, n] matrix product."""
  return 2 * m * k * n


def matmul_parameters(config):
  """Weights of the encoder layers' per-token matrix products: L (4 H^2 + 2 H I)."""
  L, H, I = _shape(config, "num_hidden_layers", "hidden_size", "intermediate_size")
  return L * (4 * H * H + 2 * H * I)


def encoder_parameters(config, pooler=True):
  """Every weight of the encoder (embeddings, layers, LayerNorms, biases; pooler optional)."""
  L, H, I, V, P, T = _shape(config, "num_hidden_layers", "hidden_size", "intermediate_size",
                            "vocab_size", "max_position_embeddings", "type_vocab_size")
  embeddings = (V + P + T) * H + 2 * H
  layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
  return embeddings + L * layer + (H * H + H if pooler else 0)


def forward(config, seq_length, predictions):
  """FLOPs of one sequence's forward pass through the encoder and the pretraining heads."""
  L, H, V = _shape(config, "num_hidden_layers", "hidden_size", "vocab_size")
  S = seq_length
  dense = 2 * S * matmul_parameters(config)
  attention = 4 * L * S * S * H
  masked_lm = 2 * predictions * (H * H + H * V)
  pooler_and_next_sentence = 2 * H * H + 2 * 2 * H
  return dense + attention + masked_lm + pooler_and_next_sentence


def training(config, seq_length, predictions):
  """FLOPs of one sequence's pretraining step: forward and backward (3x forward)."""
  return 3 * forward(config, seq_length, predictions)


def bilstm_training_per_word(units, width):
  """FLOPs per word of a training step of a 2-layer BiLSTM (`units` each way) over
  `width`-wide inputs, with no gradient to the first layer's input."""
  gates = 8 * units  # 4 gates, 2 directions
  return (2 * matmul(1, width, gates)  # layer 1 input projection: forward, kernel gradient
          + 3 * matmul(1, 2 * units, gates)  # layer 2's: forward, both gradients
          + 2 * 3 * matmul(1, units, gates))  # both layers' recurrence: forward, two gradients
