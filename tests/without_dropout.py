"""Runs an entry script with every dropout rate set to 0 (the heads' fixed 0.1 included).

  python tests/without_dropout.py SCRIPT [FLAGS...]

Dropout masks depend on how a batch is split over replicas, so runs with one
and with two replicas train alike only without it. Used by the multi-worker
tests to compare a two-worker run with a one-worker run. SLOW_BEST_SECONDS=s makes worker 0
publish each best/ s seconds late, as over a slow bucket.
"""

import os
import runpy
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(script, args):
  from modeling import layers
  delay = float(os.environ.get("SLOW_BEST_SECONDS", 0))
  if delay and '"index": 0' in os.environ.get("TF_CONFIG", ""):  # a slow bucket, the chief
    from data import files
    publish = files.publish_dir

    def slow_publish(source, target, last=()):
      time.sleep(delay if target.rstrip("/").endswith("/best") else 0)
      publish(source, target, last)
    files.publish_dir = slow_publish
  make_dropout = layers.float32_dropout
  layers.float32_dropout = lambda rate: make_dropout(0.0)
  sys.argv = [script, *args]
  runpy.run_path(os.path.join(ROOT, script), run_name="__main__")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
