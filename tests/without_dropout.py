"""Runs an entry script with every dropout rate set to 0 (the heads' fixed 0.1 included).

  python tests/without_dropout.py SCRIPT [FLAGS...]

Dropout masks depend on how a batch is split over replicas, so runs with one
and with two replicas train alike only without it. Used by the multi-worker
tests to compare a two-worker run with a one-worker run.
"""

import os
import runpy
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(script, args):
  from modeling import layers
  make_dropout = layers.float32_dropout
  layers.float32_dropout = lambda rate: make_dropout(0.0)
  sys.argv = [script, *args]
  runpy.run_path(os.path.join(ROOT, script), run_name="__main__")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
