"""The precision census: under --dtype=bfloat16 every matrix product of a training step
(forward and backward) and of a prediction batch runs in bfloat16, and each encoder layer
casts a bounded number of tensors (benchmarks/common/census.py reads the traced graphs)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.common import census, timing
from modeling import attention, classification, pretraining
from modeling.config import BertConfig

CONFIG = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64, type_vocab_size=2, max_position_embeddings=32)
B, S, P = 4, 16, 3

# Per encoder layer, the casts between the float32 residual stream and the 16-bit
# products. Weights: each of the layer's 8 weight tensors (the query, key and value
# kernels as one, their biases as one; the attention output's, the intermediate's and
# the output's kernel and bias) is cast once forward and its gradient once backward,
# however many micro-batches share it. Activations, forward: the layer's input and the
# attention's residual sum to 16 bits for the products (2), attention's and the MLP's
# outputs back to float32 for dropout, residual and LayerNorm (2); GELU's input to float32
# and its output and slope back are in GELU's XLA program, which every layer calls and the
# census lists apart (3 casts a traced program, checked below); backward: the gradients of
# the four casts that GELU's own gradient does not cover. The last layer of a classifier computes
# the [CLS] query apart (pooled_only): its kernel, bias and input, each way.
WEIGHTS = 8
FORWARD, BACKWARD, GELU_PROGRAM = WEIGHTS + 4, WEIGHTS + 4, 3
QUERY_APART = 3


def _trace_step(task, features):
  trainer = timing.benchmark_trainer(task, "bfloat16", B, pack_tokens=False)
  trainer.build_optimizer()
  spec = {k: tf.TensorSpec(v.shape, tf.int32) for k, v in features.items()}
  return trainer, tf.function(trainer._update).get_concrete_function(spec)


def _features(rng, masked_lm=False):
  f = {"input_ids": rng.integers(1, 100, (B, S)), "input_mask": np.ones((B, S)),
       "segment_ids": np.zeros((B, S))}
  if masked_lm:
    f.update(masked_lm_positions=rng.integers(1, S, (B, P)), masked_lm_ids=rng.integers(1, 100, (B, P)),
             masked_lm_weights=np.ones((B, P)), next_sentence_labels=rng.integers(0, 2, (B, 1)))
  else:
    f.update(label_ids=rng.integers(0, 2, B), is_real_example=np.ones(B))
  return {k: np.asarray(v, np.int32) for k, v in f.items()}


@pytest.mark.bfloat16
@pytest.mark.parametrize("kind", ["classifier", "pretraining"])
def test_every_product_is_bfloat16_and_casts_are_bounded(kind, monkeypatch):
  rng = np.random.default_rng(0)
  if kind == "classifier":
    task, features = classification.ClassificationTask(CONFIG, 2), _features(rng)
  else:
    task, features = pretraining.PretrainingTask(CONFIG), _features(rng, masked_lm=True)
  trainer, step = _trace_step(task, features)
  # Bias gradients: float32 sums (tf.reduce_sum, layers.bias_add), never TensorFlow's
  # BiasAddGrad on bfloat16, which sums in bfloat16.
  assert not [n for n, dtype in census.dtypes_of(step, "BiasAddGrad") if dtype == "bfloat16"]
  ops = census.census(step)
  products = [op for op in ops if op.kind == "product"]
  assert all(op.dtypes == "bfloat16" for op in products), [
      (op.name, op.dtypes) for op in products if op.dtypes != "bfloat16"]
  table = census.per_part(ops)
  last = f"layer_{CONFIG.num_hidden_layers - 1}"
  for i in range(CONFIG.num_hidden_layers):
    part = f"layer_{i}"
    apart = QUERY_APART if part == last and kind == "classifier" else 0
    forward, backward = table[(part, "forward")], table[(part, "backward")]
    # Each layer's own products: query/key/value (1, or 2 with the query apart), the
    # two attention products, attention's output, the intermediate, the output;
    # each has two in the backward pass (the input's and the weight's gradient; the
    # attention products both inputs').
    assert sum(forward["products"].values()) == 6 + (1 if apart else 0), (part, forward)
    assert sum(backward["products"].values()) == 12 + (2 if apart else 0), (part, backward)
    assert forward["casts"] <= FORWARD + apart, (part, forward)
    assert backward["casts"] <= BACKWARD + apart, (part, backward)
  # GELU's program: traced once per shape the layers give it (static here: the last layer
  # of a classifier has its own), 3 casts each, no product.
  programs = table[(census.XLA_PART, "forward")]
  assert programs["casts"] and programs["casts"] % GELU_PROGRAM == 0, programs
  assert not programs["products"], programs
  # Prediction: the same products forward, in bfloat16; at these sizes (B x N x S x S
  # scores at most attention.FEW_SCORES) attention's two per layer are float32 products in
  # TensorFlow's own kernel (attention.attend), and bfloat16 too above that size.
  products = {}
  for few in (True, False):
    monkeypatch.setattr(attention, "FEW_SCORES", attention.FEW_SCORES if few else 0)
    assert (B * CONFIG.num_attention_heads * S * S <= attention.FEW_SCORES) == few
    predict = tf.function(lambda f: trainer.model(f, training=False)).get_concrete_function(
        {k: tf.TensorSpec(v.shape, tf.int32) for k, v in features.items()})
    products[few] = collections.Counter(op.dtypes for op in census.census(predict)
                                        if op.kind == "product")
  # Above FEW_SCORES every product is bfloat16; at or below it the same products, the two
  # of each layer's attention in float32.
  assert set(products[False]) == {"bfloat16"}, products
  attention_products = 2 * CONFIG.num_hidden_layers
  assert products[True] == {"bfloat16": products[False]["bfloat16"] - attention_products,
                            "float32": attention_products}, products
