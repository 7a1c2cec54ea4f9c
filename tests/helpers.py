"""Small shared test utilities."""

import numpy as np

from modeling import checkpoints


def randomize(model, seed=0, scale=0.2):
  """Gives every variable (LayerNorm and biases included) random values; returns them."""
  rng = np.random.default_rng(seed)
  weights = {}
  for name, var in checkpoints.variable_map(model).items():
    value = rng.normal(0.0, scale, var.shape).astype("float32")
    if name.endswith("/gamma"):
      value += 1.0
    var.assign(value)
    weights[name] = value
  return weights


def random_features(rng, batch, seq, vocab_size, type_vocab_size=2, min_len=2):
  """Random ids with trailing padding of random length and random segments."""
  lengths = rng.integers(min_len, seq + 1, size=batch)
  mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
  ids = rng.integers(0, vocab_size, size=(batch, seq)).astype("int32") * mask
  segments = rng.integers(0, type_vocab_size, size=(batch, seq)).astype("int32") * mask
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
