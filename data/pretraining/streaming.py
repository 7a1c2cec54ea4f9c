"""The generator's streaming mode: worker processes, bounded memory, deterministic output.

Worker w of N reads every input file but keeps only the documents whose
index (count of blank lines before them) is w modulo N, and tokenizes only
those. It gathers them into blocks of about `block_tokens` tokens and runs
the original algorithm on each block as on a shard of its own (document
shuffle, dupe_factor passes, random next sentences drawn from the block),
with a seed derived from random_seed, N and w (`worker_seed`). Instances pass through a
shuffle buffer of `shuffle_buffer_size` records and leave it serialized and
framed, in chunks, for the parent to write round-robin. The parent takes chunks from
the workers in turn, so a given seed and N always give the same files.
Memory is bounded by the block, the buffer and the chunks in flight,
whatever the size of the corpus.
"""

import multiprocessing
import queue
import random
import time
import traceback

from data import files, tfrecords
from data.pretraining import documents, generation, instances
from data.progress import Progress

_CHUNK_RECORDS = 512


def worker_seed(random_seed, num_workers, worker):
  """The deterministic seed of one worker."""
  return f"{random_seed}/{num_workers}/{worker}"


def _run_worker(worker, args, out):
  """Worker process body: generate, shuffle-buffer, serialize, send chunks to `out`."""
  try:
    from data import tokenization
    (input_files, vocab_file, do_lower_case, config, random_seed, num_workers,
     block_tokens, shuffle_buffer_size) = args
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    vocab = instances.masking_vocab(tokenizer.vocab)
    encoder = tfrecords.ExampleEncoder(generation.PRETRAINING_INT_FEATURES,
                                       generation.PRETRAINING_FLOAT_FEATURES)
    rng = random.Random(worker_seed(random_seed, num_workers, worker))
    read = documents.ReadStats()
    summary = generation.Summary(read)
    buffer, outgoing = [], []

    def send(records, final=False):
      outgoing.extend(records)
      while len(outgoing) >= _CHUNK_RECORDS or (final and outgoing):
        chunk = outgoing[:_CHUNK_RECORDS]
        del outgoing[:_CHUNK_RECORDS]
        out.put(("records", tfrecords.frame_records(chunk), read.bytes_read))

    def add(records):
      emitted = []
      for record in records:  # a random buffered record leaves when the buffer is full
        if len(buffer) < shuffle_buffer_size:
          buffer.append(record)
        else:
          slot = rng.randrange(shuffle_buffer_size)
          emitted.append(buffer[slot])
          buffer[slot] = record
      send(emitted)

    def process(block):
      corpus = documents.to_corpus(block)
      store, order, short = instances.create_training_instances(corpus, config, vocab, rng)
      summary.short_targets += short
      summary.document_passes += len(corpus.documents) * config.dupe_factor
      for first in range(0, len(order), 4096):
        arrays, replacements = generation.instance_arrays(
            store, order[first:first + 4096], corpus.tokens, vocab, config)
        generation.count_instances(summary, arrays, replacements, vocab)
        if not summary.examples:
          summary.examples = generation.example_lines(arrays, tokenizer)
        add(encoder.encode(arrays))

    block, block_size = [], 0
    keep = lambda index: index % num_workers == worker
    for document in documents.tokenized_documents(input_files, tokenizer, read, keep):
      block.append(document)
      block_size += sum(len(s) for s in document[1])
      if block_size >= block_tokens:
        process(block)
        block, block_size = [], 0
    if block:
      process(block)
    rng.shuffle(buffer)
    send(buffer, final=True)
    out.put(("done", summary, read.bytes_read))
  except BaseException as e:  # report, so the parent can fail cleanly
    message = str(e) if isinstance(e, ValueError) else traceback.format_exc()
    out.put(("error", message, 0))


def _merge(total, part):
  """Adds a worker's Summary into the total."""
  for name in ("lines", "bytes_read", "documents", "segments", "tokens"):
    setattr(total.read, name, getattr(total.read, name) + getattr(part.read, name))
  total.read.undecodable.merge(part.read.undecodable)
  total.examples = total.examples or part.examples
  for name in ("instances", "instance_tokens", "masked", "masked_as_mask", "masked_kept",
               "masked_random", "random_next", "short_targets", "document_passes"):
    setattr(total, name, getattr(total, name) + getattr(part, name))


def generate_streaming(input_files, output_files, vocab_file, do_lower_case, config,
                       random_seed, num_workers, compression="", block_tokens=1_000_000,
                       shuffle_buffer_size=100_000):
  """Runs `num_workers` worker processes and writes their records; returns a Summary."""
  start = time.time()
  total_bytes = sum(files.size(f) for f in input_files)
  context = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads
  queues = [context.Queue(maxsize=8) for _ in range(num_workers)]
  args = (list(input_files), vocab_file, do_lower_case, config, random_seed, num_workers,
          block_tokens, shuffle_buffer_size)
  workers = [context.Process(target=_run_worker, args=(w, args, queues[w]), daemon=True)
             for w in range(num_workers)]
  for w in workers:
    w.start()
  summary = generation.Summary(documents.ReadStats(), config=config)
  # Every worker reads every file, so the slowest one's position is the progress.
  progress = Progress("generating", total_bytes * num_workers)
  positions = [0] * num_workers
  try:
    with tfrecords.RecordWriters(output_files, compression) as writers:
      active = list(range(num_workers))
      while active:
        for w in list(active):
          kind, payload, position = _receive(queues[w], workers[w])
          positions[w] = max(positions[w], position)
          if kind == "records":
            writers.write_framed(*payload)
          elif kind == "done":
            _merge(summary, payload)
            active.remove(w)
          else:
            raise ValueError(payload.strip().splitlines()[-1] if "Traceback" in payload
                             else payload)
        progress.update(sum(positions), instances=writers.count)
      if not summary.read.documents:
        raise ValueError(f"--input_file: no text in {', '.join(input_files)}.")
  finally:
    for w in workers:
      if w.is_alive():
        w.terminate()
      w.join()
  for name in ("bytes_read", "lines"):  # every worker read every line
    setattr(summary.read, name, getattr(summary.read, name) // num_workers)
  summary.read.undecodable.count //= num_workers
  summary.seconds = time.time() - start
  return summary


def _receive(q, process):
  """The next message from a worker; fails if the worker died without one."""
  while True:
    try:
      return q.get(timeout=5)
    except queue.Empty:
      if not process.is_alive():
        raise ValueError(f"generator worker exited with code {process.exitcode}")
