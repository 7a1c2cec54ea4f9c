"""The generator's exact mode, and what both modes share: record features and the summary.

Exact mode (`generate_exact`) reads the whole corpus, makes every instance and
writes them in the original's shuffled order, round-robin across the output
files. Memory holds the corpus as int32 ids and each instance in about 56
bytes plus 6 per masked position. `instance_arrays` turns stored instances
into the records' features and `Summary` is what a run reports; streaming.py
uses both.
"""

import collections
import dataclasses
import random
import time

import numpy as np

from data import files, tfrecords, tokenization
from data.pretraining import documents, instances, masking
from data.progress import Progress

PRETRAINING_INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                            "masked_lm_ids", "next_sentence_labels")
PRETRAINING_FLOAT_FEATURES = ("masked_lm_weights",)


@dataclasses.dataclass
class Summary:
  """What a run read and wrote, for the closing report."""
  read: documents.ReadStats
  instances: int = 0
  instance_tokens: int = 0  # real tokens in instances, [CLS]/[SEP] excluded
  masked: int = 0
  masked_as_mask: int = 0
  masked_kept: int = 0
  masked_random: int = 0
  random_next: int = 0
  short_targets: int = 0
  document_passes: int = 0
  seconds: float = 0.0
  examples: list = dataclasses.field(default_factory=list)  # readable first instances
  config: object = None  # the GenerationConfig, to report the ablation settings

  def lines(self):
    """The closing summary, a line per fact."""
    r, n = self.read, max(self.instances, 1)
    m = max(self.masked, 1)
    out = [f"read {r.lines:,} lines ({r.bytes_read / 1e6:,.1f} MB): {r.documents:,} documents, "
           f"{r.segments:,} sentences, {r.tokens:,} tokens"]
    if r.undecodable.count:
      out.append(r.undecodable.report())
    out += [f"wrote {self.instances:,} instances, {self.instance_tokens:,} tokens",
            f"masked {self.masked / max(self.instance_tokens, 1):.2%} of tokens: "
            f"{self.masked_as_mask / m:.1%} [MASK], {self.masked_kept / m:.1%} kept, "
            f"{self.masked_random / m:.1%} random"]
    if self.config is not None:
      mix = "/".join(f"{share * 100:g}%" for share in self.config.masking_mix)
      pairs = "on" if self.config.next_sentence else "off (contiguous text, labels all 0)"
      words = ""
      if self.config.per_word_decision:
        words += ", one [MASK]/kept/random decision per word"
      if self.config.max_ngram_size > 1:
        words += f", spans of 1-{self.config.max_ngram_size} whole words"
      out.append(f"settings: masking mix {mix} [MASK]/kept/random{words}, next-sentence "
                 f"pairs {pairs}")
    out += [f"random next sentence {self.random_next / n:.1%}, short target length "
            f"{self.short_targets / max(self.document_passes, 1):.1%} of document passes",
            f"wall time {self.seconds:.1f}s ({self.instances / max(self.seconds, 1e-9):,.0f} "
            f"instances/s)"]
    return out


def instance_arrays(store, indices, tokens, vocab, config):
  """Model features of the instances `indices` of a frozen store: dict of [N, ...] arrays."""
  L, P = config.max_seq_length, config.max_predictions_per_seq
  a0, a1, b0, b1, nsp = (store.ranges[indices, k] for k in range(5))
  la, lb = (a1 - a0)[:, None], (b1 - b0)[:, None]
  j = np.arange(L)[None, :]
  in_a = (j >= 1) & (j < 1 + la)
  in_b = (j >= 2 + la) & (j < 2 + la + lb)
  source = np.where(in_a, a0[:, None] + j - 1, b0[:, None] + j - 2 - la)
  ids = np.where(in_a | in_b, tokens[np.clip(source, 0, len(tokens) - 1)], 0)
  ids[:, 0] = vocab.cls_id
  rows = np.arange(len(indices))
  ids[rows, 1 + la[:, 0]] = vocab.sep_id
  ids[rows, 2 + la[:, 0] + lb[:, 0]] = vocab.sep_id
  input_mask = (j < 3 + la + lb).astype(np.int64)
  segment_ids = ((j >= 2 + la) & (input_mask == 1)).astype(np.int64)
  # Masked positions, flattened with the row each belongs to.
  lo, hi = store.mask_offsets[indices], store.mask_offsets[indices + 1]
  counts = hi - lo
  owner = np.repeat(rows, counts)
  flat = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
  positions = store.positions[flat].astype(np.int64)
  replacements = store.replacements[flat].astype(np.int64)
  slot = flat - np.repeat(lo, counts)
  labels = ids[owner, positions]
  ids[owner, positions] = np.where(replacements == masking.KEEP, labels, replacements)
  out = {"input_ids": ids, "input_mask": input_mask, "segment_ids": segment_ids,
         "masked_lm_positions": np.zeros((len(indices), P), np.int64),
         "masked_lm_ids": np.zeros((len(indices), P), np.int64),
         "masked_lm_weights": np.zeros((len(indices), P), np.float32),
         "next_sentence_labels": nsp[:, None].astype(np.int64)}
  out["masked_lm_positions"][owner, slot] = positions
  out["masked_lm_ids"][owner, slot] = labels
  out["masked_lm_weights"][owner, slot] = 1.0
  return out, replacements


def count_instances(summary, arrays, replacements, vocab):
  """Adds a batch's facts to the summary."""
  summary.instances += len(arrays["input_ids"])
  summary.instance_tokens += int(arrays["input_mask"].sum()) - 3 * len(arrays["input_ids"])
  kinds = masked_counts(replacements, vocab)
  summary.masked += len(replacements)
  summary.masked_as_mask += kinds["mask"]
  summary.masked_kept += kinds["kept"]
  summary.masked_random += kinds["random"]
  summary.random_next += int(arrays["next_sentence_labels"].sum())


def generate_exact(input_files, output_files, vocab_file, do_lower_case, config, random_seed,
                   compression="", batch_size=4096, show_progress=True, empty_ok=False):
  """The original generator's output, made with integer ids; returns a Summary.

  show_progress: progress lines on stderr (off in sharded.py's worker processes).
  empty_ok: inputs without text write empty outputs, as the original does (sharded.py,
    where they are one output's share of a corpus); else ValueError.
  """
  start = time.time()
  interval = 1.0 if show_progress else float("inf")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  vocab = instances.masking_vocab(tokenizer.vocab)
  read = documents.ReadStats()
  total_bytes = sum(files.size(f) for f in input_files)
  reading = Progress("reading", total_bytes, interval)
  corpus = documents.read_corpus(
      input_files, tokenizer, read,
      progress=lambda done, docs: reading.update(done, documents=docs, lines=read.lines))
  if not len(corpus.documents):
    if not empty_ok:
      raise ValueError(f"--input_file: no text in {', '.join(input_files)}.")
    with tfrecords.RecordWriters(output_files, compression):
      pass  # empty files: no records
    return Summary(read, config=config, seconds=time.time() - start)
  rng = random.Random(random_seed)
  passes = len(corpus.documents) * config.dupe_factor
  making = Progress("instances", passes, interval)
  store, order, short = instances.create_training_instances(
      corpus, config, vocab, rng,
      progress=lambda done, count: making.update(done, documents=done, instances=count))
  summary = Summary(read, short_targets=short, document_passes=passes, config=config)
  encoder = tfrecords.ExampleEncoder(PRETRAINING_INT_FEATURES, PRETRAINING_FLOAT_FEATURES)
  writing = Progress("writing", len(order), interval)
  with tfrecords.RecordWriters(output_files, compression) as writers:
    for first in range(0, len(order), batch_size):
      arrays, replacements = instance_arrays(
          store, order[first:first + batch_size], corpus.tokens, vocab, config)
      writers.write_batch(*encoder.encode_batch(arrays))
      if not first:
        summary.examples = example_lines(arrays, tokenizer)
      count_instances(summary, arrays, replacements, vocab)
      writing.update(summary.instances, instances=summary.instances)
  summary.seconds = time.time() - start
  return summary


def masked_counts(replacements, vocab):
  """Counter of replacement kinds: mask, kept, random."""
  kinds = collections.Counter()
  kinds["mask"] = int((replacements == vocab.mask_id).sum())
  kinds["kept"] = int((replacements == masking.KEEP).sum())
  kinds["random"] = len(replacements) - kinds["mask"] - kinds["kept"]
  return kinds


def example_lines(arrays, tokenizer, count=3):
  """Readable lines for the first `count` instances of a batch, to log."""
  lines = []
  for i in range(min(count, len(arrays["input_ids"]))):
    n = int(arrays["input_mask"][i].sum())
    tokens = tokenizer.convert_ids_to_tokens(arrays["input_ids"][i, :n].tolist())
    real = arrays["masked_lm_weights"][i] > 0
    labels = tokenizer.convert_ids_to_tokens(arrays["masked_lm_ids"][i][real].tolist())
    lines.append(f"instance {i}: next_sentence_labels={arrays['next_sentence_labels'][i, 0]} "
                 f"tokens: {' '.join(tokens)}")
    lines.append(f"instance {i}: masked_lm_positions="
                 f"{arrays['masked_lm_positions'][i][real].tolist()} labels: {' '.join(labels)}")
  return lines
