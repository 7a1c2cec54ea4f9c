"""benchmarks/scale_plan.py: its FLOP and parameter counts against the model's own graph
and weights."""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import scale_plan
from helpers import assert_close


def _einsum_flops(op):
  """2 x the product of every index size of a two-operand einsum."""
  inputs, _ = op.get_attr("equation").decode().split("->")
  sizes = {}
  for letters, tensor in zip(inputs.split(","), op.inputs):
    sizes.update(zip(letters, tensor.shape.as_list()))
  return 2 * int(np.prod(list(sizes.values())))


def _matmul_flops(op):
  """2 x output elements x the contracted size, read off the op's own shapes."""
  a, out = op.inputs[0].shape.as_list(), op.outputs[0].shape.as_list()
  transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
  return 2 * int(np.prod(out)) * a[-2 if transposed else -1]


def graph_flops(function, specs):
  """FLOPs of every matmul and einsum in the traced graph of function(specs)."""
  graph = tf.function(function).get_concrete_function(specs).graph
  total, kinds = 0, set()
  for op in graph.get_operations():
    assert "PartitionedCall" not in op.type, "a nested function would hide its matmuls"
    if op.type == "Einsum":
      total += _einsum_flops(op)
    elif op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
      total += _matmul_flops(op)
    else:
      continue
    kinds.add(op.type)
  return total, kinds


@pytest.mark.parametrize("seq_length,predictions", [(16, 3), (32, 5)])
def test_forward_flops_equal_the_models_matmuls(seq_length, predictions):
  from modeling.config import BertConfig
  from modeling.pretraining import BertPretrainer
  config = dict(num_hidden_layers=2, hidden_size=24, num_attention_heads=3,
                intermediate_size=40, vocab_size=53, max_position_embeddings=32,
                type_vocab_size=2)
  model = BertPretrainer(BertConfig(**config))
  batch = 3
  specs = {name: tf.TensorSpec([batch, seq_length], tf.int32)
           for name in ("input_ids", "input_mask", "segment_ids")}
  specs["masked_lm_positions"] = tf.TensorSpec([batch, predictions], tf.int32)
  counted, kinds = graph_flops(lambda f: model(f, training=False), specs)
  assert kinds & {"MatMul", "BatchMatMulV2", "BatchMatMulV3"}  # (Keras writes einsums as these)
  assert counted == batch * scale_plan.forward_flops(config, seq_length, predictions)
  # By hand for this config at 16 tokens, 3 predictions: dense 2*16*2*(4*24^2 + 2*24*40)
  # = 270,336; attention 4*2*16^2*24 = 49,152; masked LM 2*3*(24^2 + 24*53) = 11,088;
  # pooler and next sentence 2*24^2 + 4*24 = 1,248.
  if seq_length == 16:
    assert counted == batch * (270_336 + 49_152 + 11_088 + 1_248)
  assert scale_plan.train_flops(config, seq_length, predictions) == \
      3 * scale_plan.forward_flops(config, seq_length, predictions)


def test_bert_base_parameters_from_the_config_equal_our_models():
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder
  config = scale_plan.CONFIGS["BERT-Base"]
  encoder = BertEncoder(BertConfig(**config))
  encoder.build()
  # The well-known counts of the released BERT-Base: 109,482,240 with the pooler.
  assert scale_plan.encoder_parameters(config) == encoder.count_params() == 109_482_240
  assert scale_plan.encoder_parameters(config, pooler=False) == 108_891_648
  assert scale_plan.matmul_parameters(config) == 12 * (4 * 768**2 + 2 * 768 * 3072)


def test_paper_schedule_and_rates():
  base = scale_plan.CONFIGS["BERT-Base"]
  per_step = {s: 256 * scale_plan.train_flops(base, s) for s in (128, 512)}
  assert scale_plan.schedule_flops(base) == 1_000_000 * (0.9 * per_step[128] + 0.1 * per_step[512])
  mfu, at_128, at_512 = scale_plan.paper_rates("BERT-Base")
  # Four hosts share 256M sequences in 4 days, the 512-token ones costing more each.
  hosts, seconds = 4, 4 * 86400
  time_128 = 0.9 * 1e6 * 256 / (at_128 * hosts)
  time_512 = 0.1 * 1e6 * 256 / (at_512 * hosts)
  assert_close(time_128 + time_512, seconds, "float64", 16)  # float64, a dozen operations
  assert 0.05 < mfu < 0.15
  machine = scale_plan.MACHINES[0]
  assert_close(scale_plan.sequences_per_second(base, 128, machine, 0.5),  # float64, likewise
               0.5 * machine.peak_flops / per_step[128] * 256, "float64", 16)
  lines = scale_plan.tables(0.4)
  assert sum(line.startswith("| BERT-") for line in lines) == 4 + 6 + 2
