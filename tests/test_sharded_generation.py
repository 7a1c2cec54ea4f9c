"""create_pretraining_data --shard_by_input_file: each output is one run over its own input
files, the same for any number of worker processes; all or nothing."""

import gzip
import os

import pytest

from data.pretraining import generation, instances, sharded, streaming
from scripts import last_error_line, run_script
from test_pretraining_data import make_corpus, make_vocab, read_records

CONFIG = instances.GenerationConfig(32, 5, 0.15, 0.1, False, 2)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  d = tmp_path_factory.mktemp("sharded")
  vocab = make_vocab(d / "vocab.txt")
  texts = [make_corpus(d / f"text-{i}.txt", documents=4 + i, seed=i) for i in range(5)]
  return d, vocab, texts


def _bytes(paths):
  return [open(p, "rb").read() for p in paths]


def _leftovers(directory):
  return [n for n in os.listdir(directory) if ".tmp-" in n]


@pytest.mark.slow  # worker processes, each importing TensorFlow
def test_each_output_is_one_run_over_its_inputs_for_any_number_of_workers(inputs, tmp_path):
  d, vocab, texts = inputs
  assert sharded.input_groups(texts, 3) == [[texts[0], texts[3]], [texts[1], texts[4]],
                                            [texts[2]]]
  made = {}
  for workers in (1, 2):
    outs = [str(tmp_path / f"w{workers}-{j}") for j in range(3)]
    summary = sharded.generate_sharded(texts, outs, vocab, True, CONFIG, 7, workers)
    made[workers] = _bytes(outs)
    assert summary.instances == len(read_records(outs, 32, 5)["input_ids"]) > 0
    assert summary.read.documents == sum(4 + i for i in range(5))
  # The promise: output j is what a run over its inputs with seed 7 + j writes.
  alone = []
  for j, group in enumerate(sharded.input_groups(texts, 3)):
    alone.append(str(tmp_path / f"alone-{j}"))
    generation.generate_exact(group, [alone[-1]], vocab, True, CONFIG, 7 + j)
  assert made[1] == made[2] == _bytes(alone)
  assert len(set(made[1])) == 3 and not _leftovers(tmp_path)


def test_streaming_outputs_equal_one_streaming_worker_per_output(inputs, tmp_path):
  d, vocab, texts = inputs
  outs = [str(tmp_path / f"s-{j}") for j in range(2)]
  sharded.generate_sharded(texts, outs, vocab, True, CONFIG, 3, 1, "GZIP", stream=(500, 50))
  group = sharded.input_groups(texts, 2)[1]
  alone = str(tmp_path / "alone")
  streaming.generate_streaming(group, [alone], vocab, True, CONFIG, 3 + 1, 1, "GZIP", 500, 50)
  # The records' bytes (a GZIP header holds the file's name and time).
  assert gzip.decompress(_bytes([outs[1]])[0]) == gzip.decompress(_bytes([alone])[0])
  assert gzip.decompress(_bytes([outs[0]])[0]) != gzip.decompress(_bytes([alone])[0])


def test_an_output_whose_inputs_hold_no_text_is_empty(inputs, tmp_path, caplog):
  """As the original writes an empty file for inputs without text (and run_pretraining.py
  reads it as no examples); before, the whole run failed at its end and removed every
  output. Inputs all without text are refused, as a run without --shard_by_input_file
  refuses them."""
  d, vocab, texts = inputs
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n\n")
  for stream in (None, (500, 50)):
    outs = [str(tmp_path / f"{bool(stream)}-{j}") for j in range(3)]
    summary = sharded.generate_sharded(texts[:2] + [str(empty)], outs, vocab, True, CONFIG, 1,
                                       1, stream=stream)
    assert os.path.getsize(outs[2]) == 0
    assert summary.instances == len(read_records(outs, 32, 5)["input_ids"]) > 0
    assert f"{outs[2]} is empty: its input file(s) {empty} hold no text." in caplog.text
  outs = [str(tmp_path / f"none-{j}") for j in range(2)]
  with pytest.raises(ValueError, match=f"^--input_file: no text in {empty}, {empty}.$"):
    sharded.generate_sharded([str(empty)] * 2, outs, vocab, True, CONFIG, 1, 1)
  assert not any(os.path.exists(p) for p in outs) and not _leftovers(tmp_path)


@pytest.mark.slow  # worker processes, each importing TensorFlow
def test_a_failing_output_leaves_no_file(inputs, tmp_path):
  d, vocab, texts = inputs
  wide = tmp_path / "wide.txt"
  wide.write_bytes(open(texts[0], encoding="utf-8").read().encode("utf-16"))
  outs = [str(tmp_path / f"out-{j}") for j in range(3)]
  with pytest.raises(ValueError, match=f"{wide}:1: starts with a UTF-16 byte order mark"):
    # Output 2 reads only the UTF-16 file; outputs 0 and 1 complete first or meanwhile.
    sharded.generate_sharded(texts[:2] + [str(wide)], outs, vocab, True, CONFIG, 1, 2)
  assert not any(os.path.exists(p) for p in outs) and not _leftovers(tmp_path)
  with pytest.raises(ValueError, match="2 input file.s. for 3 output files"):
    sharded.input_groups(texts[:2], 3)


@pytest.mark.slow  # two script runs
def test_script_numbers_output_files_and_checks_its_flags(inputs, tmp_path):
  d, vocab, texts = inputs
  assert sharded.sharded_names("a/b.tfrecord", 3) == [
      f"a/b.tfrecord-0000{j}-of-00003" for j in range(3)]
  common = [f"--input_file={d}/text-*.txt", f"--vocab_file={vocab}", "--max_seq_length=32",
            "--max_predictions_per_seq=5", "--dupe_factor=2", "--random_seed=7"]
  out = tmp_path / "train.tfrecord"
  proc = run_script("create_pretraining_data.py", *common, f"--output_file={out}",
                    "--num_output_files=3", "--shard_by_input_file")  # (processes: above)
  names = sharded.sharded_names(str(out), 3)
  assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(n) for n in names)
  count = int(proc.stderr.split("Wrote ")[1].split()[0])
  assert len(read_records(names, 32, 5)["input_ids"]) == count > 0
  proc = run_script("create_pretraining_data.py", *common, f"--output_file={out},{out}2",
                    "--num_output_files=2", expect_ok=False)
  assert last_error_line(proc) == (
      "error: --num_output_files=2 needs one --output_file name to number, not 2.")
  assert len(os.listdir(tmp_path)) == 3
