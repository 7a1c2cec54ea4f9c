"""The task model as inference runs it: a copy whose variables are in the model's compute
dtype (bfloat16 weights: half the memory, no cast at each call), attention's query, key and
value kept joined. Exports save it (modeling/export.py); the Predictor evaluates and
predicts with it (modeling/prediction.py)."""

import tensorflow as tf

from modeling import checkpoints


def inference_copy(model):
  """A copy of a built task model for inference, with `model`'s weights (load_weights).

  Its policy is `model`'s compute dtype alone (no float32 variables behind 16-bit
  products); the layers that compute in float32 whatever the policy (LayerNorm, the
  embeddings, the BiLSTM) keep float32 variables. Build it under the strategy's scope
  that `model` was built under.
  """
  config = model.get_config()
  encoder = {**config["encoder"], "dtype": model.dtype_policy.compute_dtype}
  copy = type(model).from_config({**config, "encoder": encoder})  # pack_tokens kept
  copy.build()
  load_weights(copy, model)
  return copy


def load_weights(copy, model):
  """Sets an inference copy's weights to `model`'s, each rounded once to the copy's dtype;
  attention's joined weights are made from `model`'s float32 ones."""
  source = checkpoints.variable_map(model)
  for name, variable in checkpoints.variable_map(copy).items():
    variable.assign(tf.cast(source[name], variable.dtype))
  for served, trained in zip(copy.encoder.blocks, model.encoder.blocks):
    served.attention.store_joined_weights(trained.attention)
