"""A literal rendering of the original create_pretraining_data algorithm (reference
section b) over token strings and Python's `random`, used only as a test oracle
for the fast integer/numba implementation."""

import random


def truncate_pair(a, b, max_num_tokens, rng):
  while len(a) + len(b) > max_num_tokens:
    longer = a if len(a) > len(b) else b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def mask(tokens, masked_lm_prob, max_predictions, vocab_words, rng, whole_word):
  groups = []
  for i, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    if whole_word and groups and token.startswith("##"):
      groups[-1].append(i)
    else:
      groups.append([i])
  rng.shuffle(groups)
  output = list(tokens)
  n = min(max_predictions, max(1, int(round(len(tokens) * masked_lm_prob))))
  masked, covered = [], set()
  for group in groups:
    if len(masked) >= n:
      break
    if len(masked) + len(group) > n:
      continue
    if any(i in covered for i in group):
      continue
    for i in group:
      covered.add(i)
      if rng.random() < 0.8:
        replacement = "[MASK]"
      elif rng.random() < 0.5:
        replacement = tokens[i]
      else:
        replacement = vocab_words[rng.randint(0, len(vocab_words) - 1)]
      output[i] = replacement
      masked.append((i, tokens[i]))
  masked.sort()
  return output, [i for i, _ in masked], [t for _, t in masked]


def document_instances(documents, d, max_seq_length, short_seq_prob, masked_lm_prob,
                       max_predictions, vocab_words, rng, whole_word):
  document = documents[d]
  max_num_tokens = max_seq_length - 3
  target = max_num_tokens
  if rng.random() < short_seq_prob:
    target = rng.randint(2, max_num_tokens)
  instances, chunk, length, i = [], [], 0, 0
  while i < len(document):
    chunk.append(document[i])
    length += len(document[i])
    if i == len(document) - 1 or length >= target:
      a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
      a = [t for s in chunk[:a_end] for t in s]
      b = []
      if len(chunk) == 1 or rng.random() < 0.5:
        random_next = True
        target_b = target - len(a)
        for _ in range(10):
          r = rng.randint(0, len(documents) - 1)
          if r != d:
            break
        other = documents[r]
        for j in range(rng.randint(0, len(other) - 1), len(other)):
          b.extend(other[j])
          if len(b) >= target_b:
            break
        i -= len(chunk) - a_end
      else:
        random_next = False
        b = [t for s in chunk[a_end:] for t in s]
      truncate_pair(a, b, max_num_tokens, rng)
      tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
      segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
      tokens, positions, labels = mask(tokens, masked_lm_prob, max_predictions, vocab_words,
                                       rng, whole_word)
      instances.append((tokens, segments, random_next, positions, labels))
      chunk, length = [], 0
    i += 1
  return instances


def generate(documents, vocab, max_seq_length, max_predictions, masked_lm_prob,
             short_seq_prob, dupe_factor, seed, whole_word):
  """Instances (as feature dicts of lists, unpadded) in the original's output order.

  documents: list of documents, each a list of sentences, each a list of tokens.
  """
  rng = random.Random(seed)
  documents = [d for d in documents if d]
  rng.shuffle(documents)
  vocab_words = list(vocab.keys())
  instances = []
  for _ in range(dupe_factor):
    for d in range(len(documents)):
      instances.extend(document_instances(documents, d, max_seq_length, short_seq_prob,
                                          masked_lm_prob, max_predictions, vocab_words, rng,
                                          whole_word))
  rng.shuffle(instances)
  out = []
  for tokens, segments, random_next, positions, labels in instances:
    out.append({"input_ids": [vocab[t] for t in tokens], "segment_ids": segments,
                "masked_lm_positions": positions, "masked_lm_ids": [vocab[t] for t in labels],
                "next_sentence_labels": [1 if random_next else 0]})
  return out
