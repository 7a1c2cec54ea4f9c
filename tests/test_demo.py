"""The README's main job runs and finds the paraphrases."""

from scripts import run_script


def test_demo_pairs_the_paraphrases():
  out = run_script("demo.py").stdout
  assert "[CLS] the quick brown fox jumps over the lazy dog . [SEP]" in out
  assert "Most similar: [2] and [3]" in out or "Most similar: [0] and [1]" in out
