"""create_pretraining_data: exactly the original algorithm, its statistics, streaming mode."""

import random

import numpy as np
import pytest
import tensorflow as tf

import original_generator
from conftest import write_vocab
from data import features, tokenization
from data.pretraining import generation, instances, mersenne, streaming

STEMS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "far", "big", "small", "red",
         "blue", "house", "tree", "bird", "sang", "song", "day", "night", "sun", "moon"]
SUFFIXES = ["##s", "##ing", "##ed", "##ly"]


def make_vocab(path):
  tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(3)]
            + STEMS + SUFFIXES + [".", ",", "!"])
  return write_vocab(path, tokens)


def make_corpus(path, documents, seed, min_sentences=2, max_sentences=30, max_words=12):
  """Random documents of random sentences; some words take WordPiece suffixes."""
  rng = random.Random(seed)
  lines = []
  for _ in range(documents):
    for _ in range(rng.randint(min_sentences, max_sentences)):
      words = []
      for _ in range(rng.randint(2, max_words)):
        word = rng.choice(STEMS)
        if rng.random() < 0.3:
          word += rng.choice(SUFFIXES)[2:]
        words.append(word.capitalize() if not words else word)
      lines.append(" ".join(words) + rng.choice([".", "!", ""]))
    lines.append("")
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def read_records(paths, max_seq_length, max_predictions, compression=""):
  spec = features.pretraining_feature_spec(max_seq_length, max_predictions)
  ds = tf.data.TFRecordDataset(paths, compression).batch(100_000).map(
      lambda r: tf.io.parse_example(r, spec))
  return {k: v.numpy() for k, v in next(iter(ds)).items()}


def corpus_documents(path, tokenizer):
  """The corpus as the original reads it: documents of token lists."""
  documents = [[]]
  for line in open(path, encoding="utf-8"):
    line = line.strip()
    if not line:
      documents.append([])
    tokens = tokenizer.tokenize(line)
    if tokens:
      documents[-1].append(tokens)
  return [d for d in documents if d]


SETTINGS = [  # max_seq_length, max_predictions, masked_lm_prob, short_seq_prob, dupe, seed, wwm, lower
    (128, 20, 0.15, 0.1, 3, 12345, False, True),
    (64, 10, 0.15, 0.3, 2, 7, True, True),
    (32, 5, 0.2, 0.1, 2, 1, False, False),
    (16, 3, 0.5, 0.9, 2, 99, True, False),
]


@pytest.mark.parametrize("setting", SETTINGS)
def test_same_instances_as_the_original_algorithm(tmp_path, setting):
  L, P, prob, short, dupe, seed, wwm, lower = setting
  vocab_file = make_vocab(tmp_path / "vocab.txt")
  corpus = make_corpus(tmp_path / "corpus.txt", documents=25, seed=seed)
  config = instances.GenerationConfig(L, P, prob, short, wwm, dupe)
  out = str(tmp_path / "out.tfrecord")
  summary = generation.generate_exact([corpus], [out], vocab_file, lower, config, seed)
  got = read_records([out], L, P)
  tokenizer = tokenization.FullTokenizer(vocab_file, lower)
  want = original_generator.generate(corpus_documents(corpus, tokenizer), tokenizer.vocab, L, P,
                                     prob, short, dupe, seed, wwm)
  assert summary.instances == len(want) == len(got["input_ids"])
  for i, w in enumerate(want):
    n, m = len(w["input_ids"]), len(w["masked_lm_positions"])
    assert got["input_ids"][i, :n].tolist() == w["input_ids"] and not got["input_ids"][i, n:].any()
    assert got["input_mask"][i].tolist() == [1] * n + [0] * (L - n)
    assert got["segment_ids"][i, :n].tolist() == w["segment_ids"]
    assert got["masked_lm_positions"][i, :m].tolist() == w["masked_lm_positions"]
    assert got["masked_lm_ids"][i, :m].tolist() == w["masked_lm_ids"]
    assert got["masked_lm_weights"][i].tolist() == [1.0] * m + [0.0] * (P - m)
    assert got["next_sentence_labels"][i].tolist() == w["next_sentence_labels"]


def test_round_trip_of_output_files_and_determinism(tmp_path):
  vocab_file = make_vocab(tmp_path / "vocab.txt")
  corpus = make_corpus(tmp_path / "corpus.txt", documents=10, seed=3)
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 2)
  outs = [str(tmp_path / f"part{i}") for i in range(3)]
  generation.generate_exact([corpus], outs, vocab_file, True, config, 5, "GZIP")
  one = str(tmp_path / "single")
  generation.generate_exact([corpus], [one], vocab_file, True, config, 5)
  parts = [read_records([p], 64, 10, "GZIP")["input_ids"] for p in outs]
  single = read_records([one], 64, 10)["input_ids"]
  # Round-robin: record i went to file i % 3.
  for k in range(3):
    np.testing.assert_array_equal(parts[k], single[k::3])
  other = str(tmp_path / "other")
  generation.generate_exact([corpus], [other], vocab_file, True, config, 6)
  assert not np.array_equal(read_records([other], 64, 10)["input_ids"][:5], single[:5])


def _restore(record, mask_id):
  """The instance's original tokens (labels put back) for each record row."""
  ids = record["input_ids"].copy()
  for i in range(len(ids)):
    real = record["masked_lm_weights"][i] > 0
    ids[i, record["masked_lm_positions"][i][real]] = record["masked_lm_ids"][i][real]
  return ids


def check_statistics(records, vocab, cls_id, sep_id, mask_id, whole_word=False):
  """Asserts the structural invariants; returns (masked fraction error, mask/kept/random, random next)."""
  original = _restore(records, mask_id)
  kinds = np.zeros(3)
  expected_masked = masked = 0
  for i in range(len(original)):
    n = int(records["input_mask"][i].sum())
    tokens = original[i, :n]
    seps = np.flatnonzero(tokens == sep_id)
    assert tokens[0] == cls_id and len(seps) == 2 and seps[1] == n - 1
    assert records["segment_ids"][i, :seps[0] + 1].sum() == 0
    assert (records["segment_ids"][i, seps[0] + 1:n] == 1).all()
    assert not records["segment_ids"][i, n:].any()
    real = records["masked_lm_weights"][i] > 0
    positions = records["masked_lm_positions"][i][real]
    assert (np.diff(positions) > 0).all(), "positions sorted"
    assert positions.min() > 0 and positions.max() < n - 1 and seps[0] not in positions
    want = min(len(real), max(1, int(round(n * 0.15))))
    if not whole_word:
      assert len(positions) == want
    expected_masked += want
    masked += len(positions)
    written = records["input_ids"][i, positions]
    kinds += [(written == mask_id).sum(), (written == tokens[positions]).sum(), 0]
    if whole_word:  # a word's pieces are masked together or not at all
      group = 0
      groups = []
      for j in range(1, n - 1):
        if j == seps[0]:
          continue
        if not vocab[int(tokens[j])].startswith("##"):
          group += 1
        groups.append((j, group))
      masked_set = set(positions.tolist())
      by_group = {}
      for j, g in groups:
        by_group.setdefault(g, set()).add(j in masked_set)
      assert all(len(v) == 1 for v in by_group.values())
  kinds[2] = masked - kinds[0] - kinds[1]
  return masked / expected_masked, kinds / masked, records["next_sentence_labels"].mean()


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
  d = tmp_path_factory.mktemp("big")
  vocab_file = make_vocab(d / "vocab.txt")
  # Short sentences in long documents. A chunk of one sentence always gets a
  # random next sentence; such chunks come mostly at the end of a document pass,
  # so long documents keep the random-next rate close to 50%.
  corpus = make_corpus(d / "corpus.txt", documents=12, seed=11, min_sentences=1200,
                       max_sentences=1600, max_words=4)
  return d, vocab_file, corpus


def test_statistics_over_20000_instances(big_corpus):
  d, vocab_file, corpus = big_corpus
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 20)
  out = str(d / "exact.tfrecord")
  summary = generation.generate_exact([corpus], [out], vocab_file, True, config, 1)
  records = read_records([out], 64, 10)
  assert len(records["input_ids"]) >= 20_000
  tok = tokenization.FullTokenizer(vocab_file)
  ratio, kinds, random_next = check_statistics(records, tok.inv_vocab, 2, 3, 4)
  assert ratio == 1.0
  # Sampling, not rounding, and seeded (Python's generator: the same on every CPU): shares
  # of about 180,000 masked positions (standard deviation <= 1e-3), of 20,000 pairs (3.5e-3)
  # and of the document passes; a wrong rate (0.15 for 0.1) is 5e-2 off.
  np.testing.assert_allclose(kinds, [0.8, 0.1, 0.1], atol=0.015)
  assert abs(random_next - 0.5) < 0.02
  assert abs(summary.short_targets / summary.document_passes - 0.1) < 0.03
  assert summary.instances == len(records["input_ids"])


def test_whole_word_masking_never_splits_words(big_corpus):
  d, vocab_file, corpus = big_corpus
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, True, 1)
  out = str(d / "wwm.tfrecord")
  generation.generate_exact([corpus], [out], vocab_file, True, config, 2)
  tok = tokenization.FullTokenizer(vocab_file)
  ratio, _, _ = check_statistics(read_records([out], 64, 10), tok.inv_vocab, 2, 3, 4,
                                 whole_word=True)
  assert 0.9 < ratio <= 1.0  # whole words can leave a slot or two unfilled


def test_streaming_mode_statistics_and_determinism(big_corpus):
  d, vocab_file, corpus = big_corpus
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 20)
  paths = [str(d / "s1"), str(d / "s2")]
  summary = streaming.generate_streaming(
      [corpus], paths, vocab_file, True, config, 1, num_workers=2, block_tokens=20_000,
      shuffle_buffer_size=1000)
  records = read_records(paths, 64, 10)
  assert summary.instances == len(records["input_ids"]) > 20_000
  assert summary.read.documents == 12
  tok = tokenization.FullTokenizer(vocab_file)
  ratio, kinds, random_next = check_statistics(records, tok.inv_vocab, 2, 3, 4)
  assert ratio == 1.0
  # Sampling, seeded: as in test_statistics_over_20000_instances.
  np.testing.assert_allclose(kinds, [0.8, 0.1, 0.1], atol=0.015)
  assert abs(random_next - 0.5) < 0.02
  again = [str(d / "t1"), str(d / "t2")]
  streaming.generate_streaming(
      [corpus], again, vocab_file, True, config, 1, num_workers=2, block_tokens=20_000,
      shuffle_buffer_size=1000)
  for a, b in zip(paths, again):
    assert open(a, "rb").read() == open(b, "rb").read()


def test_mersenne_twister_matches_python_random():
  for seed in (0, 12345, 2**40 + 7):
    py = random.Random(seed)
    state = mersenne.state_from(random.Random(seed))
    for step in range(3000):
      assert py.random() == mersenne.random(state)
      n = 1 + (step * 7919) % 70000
      assert py.randint(0, n) == mersenne.randint(state, 0, n)
      a, b = list(range(step % 130)), np.arange(step % 130)
      py.shuffle(a)
      mersenne.shuffle(state, b)
      assert a == b.tolist()
    restored = random.Random()
    mersenne.restore(restored, state)
    assert restored.random() == py.random()


def test_both_modes_report_dropped_bytes_once(tmp_path):
  """Bytes that are not UTF-8 are counted once in the summary, however many streaming
  workers read the text, and the first one's file:line is named."""
  vocab_file = make_vocab(tmp_path / "vocab.txt")
  corpus = tmp_path / "corpus.txt"
  make_corpus(corpus, documents=6, seed=1)
  lines = corpus.read_bytes().split(b"\n")
  lines[3] += b" \xff\xfe"
  corpus.write_bytes(b"\n".join(lines))
  config = instances.GenerationConfig(64, 10, 0.15, 0.1, False, 2)
  want = f"dropped 2 undecodable bytes (first at {corpus}:4)"
  exact = generation.generate_exact([str(corpus)], [str(tmp_path / "a")], vocab_file, True,
                                    config, 1)
  streamed = streaming.generate_streaming([str(corpus)], [str(tmp_path / "b")], vocab_file,
                                          True, config, 1, num_workers=2, block_tokens=200)
  for summary in (exact, streamed):
    assert want in summary.lines()
