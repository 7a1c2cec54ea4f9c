"""benchmarks/experiments/scale_plan.py and the counts it uses (benchmarks/common/flops.py):
FLOPs against the model's traced matrix products, weights against the model's, the paper's
schedule and rates."""

import numpy as np
import pytest

from benchmarks.common import flops
from benchmarks.experiments import scale_plan
from helpers import assert_close
from test_flops import TINY


def test_paper_schedule_and_rates():
  base = scale_plan.CONFIGS["BERT-Base"]
  per_step = {s: 256 * scale_plan.train_flops(base, s) for s in (128, 512)}
  assert per_step[128] == 256 * flops.training(base, 128, 20)  # the paper's 20 and 80
  assert per_step[512] == 256 * flops.training(base, 512, 80)
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


def _traced_flops(function, specs):
  """FLOPs of every matmul and einsum in the traced graph of function(specs)."""
  import tensorflow as tf
  graph = tf.function(function).get_concrete_function(specs).graph
  total, kinds = 0, set()
  for op in graph.get_operations():
    assert "PartitionedCall" not in op.type, "a nested function would hide its matmuls"
    if op.type == "Einsum":  # 2 x the product of every index size
      inputs, _ = op.get_attr("equation").decode().split("->")
      sizes = {}
      for letters, tensor in zip(inputs.split(","), op.inputs):
        sizes.update(zip(letters, tensor.shape.as_list()))
      total += 2 * int(np.prod(list(sizes.values())))
    elif op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):  # 2 x outputs x contracted
      a, out = op.inputs[0].shape.as_list(), op.outputs[0].shape.as_list()
      transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
      total += 2 * int(np.prod(out)) * a[-2 if transposed else -1]
    else:
      continue
    kinds.add(op.type)
  return total, kinds


@pytest.mark.parametrize("seq_length,predictions", [(16, 3), (32, 5)])
def test_forward_flops_equal_the_models_matmuls(seq_length, predictions):
  import tensorflow as tf
  from modeling.config import BertConfig
  from modeling.pretraining import BertPretrainer
  from modeling.encoder import BertEncoder
  model = BertPretrainer(BertEncoder(BertConfig(**TINY)))
  batch = 3
  specs = {name: tf.TensorSpec([batch, seq_length], tf.int32)
           for name in ("input_ids", "input_mask", "segment_ids")}
  specs["masked_lm_positions"] = tf.TensorSpec([batch, predictions], tf.int32)
  counted, kinds = _traced_flops(lambda f: model(f, training=False), specs)
  assert kinds & {"MatMul", "BatchMatMulV2", "BatchMatMulV3"}  # (Keras writes einsums as these)
  assert counted == batch * flops.forward(TINY, seq_length, predictions)


def test_bert_base_weights_from_the_config_equal_our_models():
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder
  config = scale_plan.CONFIGS["BERT-Base"]
  encoder = BertEncoder(BertConfig(**config))
  encoder.build()
  # The well-known counts of the released BERT-Base: 109,482,240 with the pooler.
  assert flops.encoder_parameters(config) == encoder.count_params() == 109_482_240
  assert flops.encoder_parameters(config, pooler=False) == 108_891_648
  assert flops.matmul_parameters(config) == 12 * (4 * 768**2 + 2 * 768 * 3072)
