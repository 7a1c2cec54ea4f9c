"""The generator's --shard_by_input_file mode: output files made independently, in parallel.

For a corpus too large for one run, the original's README suggests sharding
the input and running the script once per shard. This mode does that in one
command: output file j of K is made from input files j, j + K, j + 2K, ...
(`input_groups`) with seed --random_seed + j (`output_seed`), and it is exactly
the file a run with those inputs, that seed and the same flags writes: the
exact (default) algorithm, or the streaming one with one worker under
--streaming. An output depends only on its inputs, the flags and j, so
`num_workers` processes make the outputs in any order and the files are byte
for byte the same for any number of workers. Workers write under temporary
names; the parent renames every output into place once all are complete, or
removes them all. An output whose inputs hold no text is empty (with a
warning), as the original writes it; inputs all without text are refused.
"""

import multiprocessing
import queue
import signal
import time
import traceback

from absl import logging

from data import files, tfrecords
from data.pretraining import documents, generation, streaming
from data.progress import Progress


def sharded_names(path, count):
  """`count` output names path-00000-of-0000K (TensorFlow's sharded-file convention)."""
  width = max(5, len(str(count)))
  return [f"{path}-{j:0{width}d}-of-{count:0{width}d}" for j in range(count)]


def input_groups(input_files, num_outputs):
  """The input files of each output: output j reads files j, j + K, ... (K outputs).

  Raises ValueError when some output would have no input file.
  """
  if len(input_files) < num_outputs:
    raise ValueError(f"--shard_by_input_file: {len(input_files)} input file(s) for "
                     f"{num_outputs} output files; each output needs at least one input "
                     "file (write fewer output files, or split the input).")
  return [list(input_files[j::num_outputs]) for j in range(num_outputs)]


def output_seed(random_seed, j):
  """The --random_seed of output j: a run of its own would take this seed."""
  return random_seed + j


def _exit(signum, frame):
  """SIGTERM handler: unwind like an exception, closing and removing open outputs."""
  raise SystemExit(1)


class _WriterSink:
  """Takes the messages of streaming._run_worker and writes its records directly."""

  def __init__(self, writers):
    self.writers, self.summary = writers, None

  def put(self, message):
    kind, payload, _ = message
    if kind == "records":
      self.writers.write_framed(*payload)
    elif kind == "done":
      self.summary = payload
    else:
      raise ValueError(payload.strip().splitlines()[-1] if "Traceback" in payload else payload)


def _make_output(task):
  """Makes one output file (under its staging name); returns (j, Summary)."""
  (j, inputs, staging, vocab_file, do_lower_case, config, random_seed, compression,
   stream) = task
  seed = output_seed(random_seed, j)
  if stream is None:
    summary = generation.generate_exact(inputs, [staging], vocab_file, do_lower_case, config,
                                        seed, compression, show_progress=False, empty_ok=True)
  else:  # the streaming mode's one worker, writing here instead of through a parent
    block_tokens, shuffle_buffer_size = stream
    start = time.time()
    with tfrecords.RecordWriters([staging], compression) as writers:
      sink = _WriterSink(writers)
      streaming._run_worker(0, (inputs, vocab_file, do_lower_case, config, seed, 1,
                                block_tokens, shuffle_buffer_size), sink)
    summary = sink.summary
    summary.config, summary.seconds = config, time.time() - start
  return j, summary


def _worker(tasks, results):
  """Worker process body: makes outputs until the task queue's end; reports each."""
  signal.signal(signal.SIGTERM, _exit)  # terminate() unwinds, so writers remove their files
  while True:
    task = tasks.get()
    if task is None:
      return
    try:
      results.put(("done",) + _make_output(task))
    except BaseException as e:  # report, so the parent can fail cleanly
      message = str(e) if isinstance(e, ValueError) else traceback.format_exc()
      results.put(("error", task[0], message))
      return


def _in_processes(tasks, num_workers):
  """Yields (j, Summary) of every task as worker processes finish them."""
  context = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads
  task_queue, results = context.Queue(), context.Queue()
  for task in tasks:
    task_queue.put(task)
  workers = [context.Process(target=_worker, args=(task_queue, results), daemon=True)
             for _ in range(min(num_workers, len(tasks)))]
  for _ in workers:
    task_queue.put(None)
  for w in workers:
    w.start()
  try:
    for _ in tasks:
      while True:
        try:
          kind, j, payload = results.get(timeout=5)
          break
        except queue.Empty:  # a worker killed (e.g. out of memory) sends nothing
          dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
          if dead:
            raise ValueError(f"generator worker exited with code {dead[0]}") from None
      if kind == "error":
        raise ValueError(payload.strip().splitlines()[-1] if "Traceback" in payload
                         else payload)
      yield j, payload
  finally:
    for w in workers:
      if w.is_alive():
        w.terminate()
    for w in workers:
      w.join(30)
      if w.is_alive():
        w.kill()
        w.join()


def generate_sharded(input_files, output_files, vocab_file, do_lower_case, config, random_seed,
                     num_workers, compression="", stream=None):
  """Makes each output file from its own input files in `num_workers` processes.

  Args:
    stream: None for the exact algorithm, or (block_tokens, shuffle_buffer_size)
      for the streaming one.
  Returns:
    a Summary of all outputs.
  """
  start = time.time()
  groups = input_groups(input_files, len(output_files))
  staging = [files.temporary_name(path) for path in output_files]
  sizes = [sum(files.size(f) for f in group) for group in groups]
  # Largest first, so the last outputs to start are short ones.
  order = sorted(range(len(groups)), key=lambda j: -sizes[j])
  tasks = [(j, groups[j], staging[j], vocab_file, do_lower_case, config, random_seed,
            compression, stream) for j in order]
  progress = Progress("outputs", sum(sizes))
  results, done_bytes = {}, 0
  made = _in_processes(tasks, num_workers) if num_workers > 1 else map(_make_output, tasks)
  try:
    for j, summary in made:
      results[j] = summary
      done_bytes += sizes[j]
      progress.update(done_bytes, force=True, files=len(results),
                      instances=sum(s.instances for s in results.values()))
    if not any(summary.read.documents for summary in results.values()):
      raise ValueError(f"--input_file: no text in {', '.join(input_files)}.")
    for source, target in zip(staging, output_files):
      files.rename(source, target)
  except BaseException:
    if hasattr(made, "close"):
      made.close()  # stops the workers before their files are removed
    for path in staging:
      if files.exists(path):
        files.remove(path)
      files.remove_leftovers(path)  # a worker stopped inside its own temporary write
    raise
  total = generation.Summary(documents.ReadStats(), config=config)
  for j in range(len(groups)):
    streaming._merge(total, results[j])
    if not results[j].read.documents:  # as the original, run on those files alone, writes it
      logging.warning("%s is empty: its input file(s) %s hold no text.", output_files[j],
                      ", ".join(groups[j]))
  total.seconds = time.time() - start
  return total


def generate(input_files, output_files, vocab_file, do_lower_case, config, random_seed,
             num_workers, compression, shard_by_input_file, streaming_mode, block_tokens,
             shuffle_buffer_size):
  """Runs the mode the options select and returns its Summary: generate_sharded with
  shard_by_input_file (each output streamed under streaming_mode), else
  streaming.generate_streaming with num_workers > 1 or streaming_mode, else
  generation.generate_exact (the original's output)."""
  if shard_by_input_file:
    stream = (block_tokens, shuffle_buffer_size) if streaming_mode else None
    return generate_sharded(input_files, output_files, vocab_file, do_lower_case, config,
                            random_seed, num_workers, compression, stream)
  if num_workers > 1 or streaming_mode:
    return streaming.generate_streaming(
        input_files, output_files, vocab_file, do_lower_case, config, random_seed, num_workers,
        compression, block_tokens, shuffle_buffer_size)
  return generation.generate_exact(input_files, output_files, vocab_file, do_lower_case, config,
                                   random_seed, compression)
