"""benchmarks/common/flops.py: FLOP and weight counts against figures computed by hand for
a tiny config (test_scale_plan.py sets them against the model's traced matrix products and
its weights)."""

from benchmarks.common import flops

# L=2, H=24, I=40, V=53: small enough to count by hand below.
TINY = dict(num_hidden_layers=2, hidden_size=24, num_attention_heads=3, intermediate_size=40,
            vocab_size=53, max_position_embeddings=32, type_vocab_size=2)


def test_counts_by_hand():
  assert flops.matmul(3, 4, 5) == 120
  assert flops.matmul_parameters(TINY) == 2 * (4 * 576 + 2 * 24 * 40) == 8_448
  # 16 tokens, 3 masked positions: dense 2*16*8,448 = 270,336; attention 4*2*16^2*24 =
  # 49,152; masked LM 2*3*(24^2 + 24*53) = 11,088; pooler and next sentence 2*24^2 + 4*24
  # = 1,248.
  assert flops.forward(TINY, 16, 3) == 270_336 + 49_152 + 11_088 + 1_248
  assert flops.training(TINY, 16, 3) == 3 * 331_824
  # Embeddings (53 + 32 + 2) * 24 + LayerNorm 48 = 2,136; per layer: Q, K, V, output
  # 4 * 600, LayerNorms 2 * 48, feed-forward 24*40 + 40 + 40*24 + 24 = 1,984; pooler 600.
  assert flops.encoder_parameters(TINY, pooler=False) == 2_136 + 2 * (2_400 + 96 + 1_984)
  assert flops.encoder_parameters(TINY) == 11_096 + 600
  # BiLSTM of 2 units each way over 3 inputs (16 gate rows): layer 1 input projection
  # forward and kernel gradient 2 * 2*3*16 = 192; layer 2's (4 inputs), forward and two
  # gradients 3 * 2*4*16 = 384; recurrence of both layers 2 * 3 * 2*2*16 = 384.
  assert flops.bilstm_training_per_word(2, 3) == 192 + 384 + 384


def test_config_object_and_dict_count_the_same():
  from modeling.config import BertConfig
  assert flops.forward(BertConfig(**TINY), 16, 3) == flops.forward(TINY, 16, 3)
