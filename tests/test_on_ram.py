"""Every file through tf.io.gfile: data/files.py's helpers, and every script end to end with each
input and output on ram://, compared with the same run on local disk.

ram:// is TensorFlow's in-memory file system. It is reached through the same tf.io.gfile calls as
gs://, so a Python open(), os or shutil call on a user path fails there, and a directory rename
moves no files there (as on a bucket, where directories are only name prefixes).
"""

import csv
import io
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import on_ram
from conftest import write_vocab
from data import demo_data, fast_tokenization, files, path_checks
from modeling import checkpoints, reports
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from scripts import ROOT as PROJECT
from test_pretraining_data import make_corpus, make_vocab


@pytest.fixture(autouse=True)
def whole_names(monkeypatch):
  """ram:// matching whole names, as gs:// does (see on_ram.exact_ram_names)."""
  on_ram.exact_ram_names(monkeypatch.setattr)


def _ram(tmp_path, name):
  """A fresh ram:// directory for one test (ram:// is shared by the whole process)."""
  return f"ram://{tmp_path}/{name}"


def _tree(path):
  """{relative path: bytes} of every file under `path`, local or ram://."""
  return {name: files.read_bytes(os.path.join(path, name)) for name in files.walk_files(path)}


# --- data/files.py on local disk and ram:// -------------------------------------------------

@pytest.mark.parametrize("where", ["local", "ram"])
def test_atomic_output_replaces_whole_or_leaves_the_old_file(tmp_path, where):
  d = str(tmp_path) if where == "local" else _ram(tmp_path, "atomic")
  files.makedirs(d)
  path = os.path.join(d, "out.txt")
  with files.atomic_output(path) as f:
    f.write("old\n")
  with pytest.raises(RuntimeError):
    with files.atomic_output(path) as f:
      f.write("half of the new")
      raise RuntimeError("interrupted")
  assert files.listdir(d) == ["out.txt"] and files.read_bytes(path) == b"old\n"
  files.write_bytes(path, b"new\r\n")
  assert files.listdir(d) == ["out.txt"] and files.read_bytes(path) == b"new\r\n"


def test_open_file_reads_and_writes_as_python_open_does(tmp_path):
  text = "caf\u00e9\nwindows\r\nold mac\rend"
  local = tmp_path / "python.txt"
  with open(local, "w", encoding="utf-8") as f:
    f.write(text)
  for path in (str(tmp_path / "gfile.txt"), _ram(tmp_path, "t.txt")):
    with files.open_file(path, "w") as f:
      f.write(text)
    assert files.read_bytes(path) == local.read_bytes()
    with files.open_file(path, "r") as f, open(local, encoding="utf-8") as g:
      assert f.read() == g.read() == "caf\u00e9\nwindows\nold mac\nend"  # universal newlines
    with files.open_file(path, "rb") as f:
      assert list(f) == [b"caf\xc3\xa9\n", b"windows\r\n", b"old mac\rend"]
  # A missing file is Python's error, naming the path.
  for path in (str(tmp_path / "missing.txt"), _ram(tmp_path, "missing.txt")):
    with pytest.raises(FileNotFoundError, match="No such file or directory") as e:
      files.read_bytes(path)
    assert e.value.filename == path
  with pytest.raises(FileNotFoundError) as e:
    open(tmp_path / "missing.txt", "rb")
  with pytest.raises(FileNotFoundError) as f:
    files.read_bytes(str(tmp_path / "missing.txt"))
  assert str(f.value) == str(e.value)
  files.write_bytes(_ram(tmp_path, "empty"), b"")  # an empty file exists once written
  assert files.exists(_ram(tmp_path, "empty")) and files.size(_ram(tmp_path, "empty")) == 0


@pytest.mark.parametrize("where", ["local", "ram"])
def test_glob_skips_hidden_names_as_python_glob_does(tmp_path, where):
  d = str(tmp_path / "g") if where == "local" else _ram(tmp_path, "g")
  for name in ("b.txt", "a.txt", ".a.txt.tmp-1234", "sub/c.txt", ".hidden/d.txt"):
    files.makedirs(os.path.dirname(os.path.join(d, name)))
    files.write_bytes(os.path.join(d, name), b"x")
  assert files.glob(f"{d}/*.txt") == [f"{d}/a.txt", f"{d}/b.txt"]
  assert files.glob(f"{d}/*/*.txt") == [f"{d}/sub/c.txt"]
  assert files.glob(f"{d}/.*") == [f"{d}/.a.txt.tmp-1234", f"{d}/.hidden"]
  assert path_checks.expand_file_patterns(f"{d}/*,{d}/sub/c.txt", "--input_file") == [
      f"{d}/a.txt", f"{d}/b.txt", f"{d}/sub/c.txt"]  # directories left out
  with pytest.raises(ValueError, match=r"^--input_file: no file matches"):
    path_checks.expand_file_patterns(f"{d}/*.json", "--input_file")


@pytest.mark.parametrize("where", ["local", "ram"])
def test_an_output_directory_a_failed_run_made_is_removed_while_empty(tmp_path, where,
                                                                       monkeypatch):
  d = str(tmp_path) if where == "local" else _ram(tmp_path, "made")
  files.makedirs(d)
  monkeypatch.setattr(path_checks, "MADE_DIRS", [])
  new, used = os.path.join(d, "new"), os.path.join(d, "used")
  for path in (new, used):
    path_checks.ensure_writable_dir(path, "--output_dir")
  files.write_bytes(os.path.join(used, "a.txt"), b"kept")
  assert new in path_checks.MADE_DIRS and used in path_checks.MADE_DIRS
  for path in path_checks.MADE_DIRS:
    files.remove_empty_dir(path)
  assert files.listdir(d) == ["used"] and files.listdir(used) == ["a.txt"]


def test_a_search_publishes_best_with_the_export_and_checkpoint_markers_last(tmp_path,
                                                                              monkeypatch):
  """finetune_search's best/ on a bucket moves file by file: the SavedModel's
  saved_model.pb and the checkpoint's `checkpoint` arrive after every file they need, and
  an old best/ loses them first."""
  from cli import search
  d = _ram(tmp_path, "search")
  run, best = os.path.join(d, "run"), os.path.join(d, "best")
  for name, data in (("checkpoint", b'model_checkpoint_path: "ckpt-2"\n'),
                     ("ckpt-2.index", b"i"), ("ckpt-2.data-00000-of-00001", b"d"),
                     ("bert_config.json", b"{}"), ("export/saved_model.pb", b"pb"),
                     ("export/variables/variables.index", b"vi"),
                     ("export/variables/variables.data-00000-of-00001", b"vd")):
    files.makedirs(os.path.dirname(os.path.join(run, name)))
    files.write_bytes(os.path.join(run, name), data)
  search.copy_model(run, best, use_best=False)
  removed, renamed = [], []
  remove, rename = files.remove, files.rename
  monkeypatch.setattr(files, "remove", lambda p: (removed.append(p), remove(p)))
  monkeypatch.setattr(files, "rename", lambda a, b: (renamed.append(b), rename(a, b)))
  search.copy_model(run, best, use_best=False)  # replaces the first copy
  names = [os.path.relpath(p, best) for p in renamed if p.startswith(best + "/")]
  assert set(names[-2:]) == {"checkpoint", "export/saved_model.pb"}, names
  assert len(names) == 7 and files.read_bytes(os.path.join(best, "checkpoint")) == (
      b'model_checkpoint_path: "ckpt-2"\n')
  assert {os.path.relpath(p, best) for p in removed[:2]} == {
      "checkpoint", "export/saved_model.pb"}, removed


@pytest.mark.parametrize("where", ["local", "ram"])
def test_atomic_dir_replaces_a_directory_whole(tmp_path, where, monkeypatch):
  d = str(tmp_path) if where == "local" else _ram(tmp_path, "dirs")
  target = os.path.join(d, "export")
  for name in ("saved_model.pb", "variables/old.index", "stale.txt"):
    files.makedirs(os.path.dirname(os.path.join(target, name)))
    files.write_bytes(os.path.join(target, name), b"old " + name.encode())
  before = _tree(target)
  with pytest.raises(RuntimeError):  # a failed export leaves the old one and no temporary
    with files.atomic_dir(target, last=("saved_model.pb",)) as tmp:
      files.makedirs(os.path.join(tmp, "variables"))
      files.write_bytes(os.path.join(tmp, "variables", "v.index"), b"half")
      raise RuntimeError("interrupted")
  assert _tree(target) == before and files.listdir(d) == ["export"]
  renamed, rename = [], files.rename
  with files.atomic_dir(target, last=("saved_model.pb",)) as tmp:
    for name in ("variables/v.index", "variables/v.data-00000-of-00001", "saved_model.pb"):
      files.makedirs(os.path.dirname(os.path.join(tmp, name)))
      files.write_bytes(os.path.join(tmp, name), b"new " + name.encode())
    files.makedirs(os.path.join(tmp, "assets"))  # empty directories are kept
    # From here on, the renames that publish the directory.
    monkeypatch.setattr(files, "rename", lambda a, b: (renamed.append(b), rename(a, b)))
  assert _tree(target) == {"saved_model.pb": b"new saved_model.pb",
                           "variables/v.data-00000-of-00001":
                               b"new variables/v.data-00000-of-00001",
                           "variables/v.index": b"new variables/v.index"}
  assert files.isdir(os.path.join(target, "assets")) and files.listdir(d) == ["export"]
  if where == "local":  # the whole directory at once, the old one renamed aside first
    assert [os.path.basename(p) for p in renamed][-1] == "export" and len(renamed) == 2
  else:  # file by file, the file that makes the directory usable last
    assert renamed[-1] == os.path.join(target, "saved_model.pb") and len(renamed) == 3


def test_csv_log_appends_on_ram_as_on_disk(tmp_path):
  outputs = []
  for path in (str(tmp_path / "train_log.csv"), _ram(tmp_path, "train_log.csv")):
    log = reports.CsvLog(path)
    log.append(10, {"loss": 2.5, "masked_lm_accuracy": 0.125})
    log.append(20, {"loss": 1.25, "masked_lm_accuracy": 0.25})
    reports.CsvLog(path).append(20, {"loss": 1.0, "masked_lm_accuracy": 0.5})  # a resumed run
    outputs.append(files.read_bytes(path))
    reports.plot_curves(path, path + ".png", [("loss", "loss")])
    assert files.read_bytes(path + ".png").startswith(b"\x89PNG")
  assert outputs[0] == outputs[1] == (b"step,loss,masked_lm_accuracy\r\n10,2.5,0.125\r\n"
                                      b"20,1,0.5\r\n")  # the resumed run's row replaces 20


def test_search_run_logs_and_records_on_ram_as_on_disk(tmp_path):
  """finetune_search's runs write log.txt and their record through the bucket path: a child
  process cannot write to a bucket with Python's open, so its output reaches log.txt when it
  ends, appended to what an earlier attempt wrote."""
  from cli import search
  child = tmp_path / "child.py"
  child.write_text("import sys\nprint('reading flags', flush=True)\n"
                   "rate = [a for a in sys.argv if a.startswith('--learning_rate=')][0]\n"
                   "sys.exit('error: ' + rate + ' no')\n")
  run = search.Run(5e-5, 16, 2.0, 1)
  logs = []
  for output_dir in (str(tmp_path / "local"), _ram(tmp_path, "search")):
    job = search.Search(str(child), [], output_dir, [run])
    first, second = job._one(run, 1), job._one(run, 1)  # a failed run, run again
    assert first["status"] == second["status"] == "failed" and second["returncode"] == 1
    assert second["error"] == "error: --learning_rate=5e-05 no"
    assert search.read_record(job.directory(run))["error"] == second["error"]
    logs.append(files.read_bytes(os.path.join(job.directory(run), "log.txt")))
    assert files.listdir(job.directory(run)) == ["log.txt", search.RECORD]
  assert logs[0] == logs[1] == b"reading flags\nerror: --learning_rate=5e-05 no\n" * 2


def test_checkpoint_formats_and_config_round_trip_on_ram(tmp_path):
  config = BertConfig(vocab_size=12, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=16)
  weights = checkpoints.model_weights(BertEncoder(config))
  vocab = write_vocab(tmp_path / "vocab.txt", [f"w{i}" for i in range(12)])
  d = _ram(tmp_path, "ckpt")
  checkpoints.save_tf1_checkpoint(weights, f"{d}/tf1", config=config, vocab_file=vocab)
  assert files.listdir(f"{d}/tf1") == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                       "bert_model.ckpt.index", "checkpoint", "vocab.txt"]
  assert checkpoints.find_config(f"{d}/tf1") == config
  from modeling import hf_checkpoints
  hf_checkpoints.save_hf_checkpoint(weights, f"{d}/hf", config, vocab)
  for path in (f"{d}/tf1", f"{d}/hf"):
    read = checkpoints.read_checkpoint(path).weights
    assert read.keys() == weights.keys()
    for name, value in weights.items():
      np.testing.assert_array_equal(read[name], value, err_msg=f"{path} {name}")  # copied bits


def test_demo_data_on_ram_equals_local(tmp_path):
  local, ram = str(tmp_path / "local"), _ram(tmp_path, "demo")
  for d in (local, ram):
    demo_data.write_sentiment_task(os.path.join(d, "sentiment"), train=20, dev=8, test=4)
    demo_data.write_python_documentation(os.path.join(d, "raw"), max_documents=3, max_modules=2)
  assert _tree(ram) == _tree(local) and len(_tree(local)) == 6


# --- The scripts, on local disk and on ram:// ------------------------------------------------

def _on_ram(root, *commands):
  """tests/on_ram.py: each command on local disk, then on ram://; the ram tree ends in ROOT.ram."""
  argv = []
  for command in commands:
    argv += [*command, ","]
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": PROJECT}
  cwd = f"{root}.cwd"  # a path mistaken for a local one (ram:/...) would land here
  os.makedirs(cwd)
  proc = subprocess.run([sys.executable, os.path.join(PROJECT, "tests", "on_ram.py"), str(root),
                         *argv[:-1]], capture_output=True, text=True, env=env, cwd=cwd,
                        timeout=900)
  if proc.returncode:
    raise AssertionError(f"on_ram.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
  assert not os.listdir(cwd)
  return proc


_TIMING_COLUMNS = ("steps_per_second", "sequences_per_second")


def _normalized(name, data):
  """The parts of an output that must not differ between two runs; paths without ram://."""
  data = data.replace(b"ram://", b"")
  base = os.path.basename(name)
  if base == "checkpoint":  # a checkpoint state file records when each checkpoint was written
    return b"\n".join(line for line in data.splitlines() if b"timestamp" not in line)
  if base == "train_log.csv":  # the rates are timings
    rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    return [{k: v for k, v in row.items() if k not in _TIMING_COLUMNS} for row in rows]
  if base.startswith("events.out.tfevents."):  # named and stamped by time, host and process
    return [(e.step, v.tag, tf.make_ndarray(v.tensor).tolist()) for e in _events(data)
            for v in e.summary.value if v.tag not in _TIMING_COLUMNS]
  if base == "saved_model.pb":  # its function names count up in a process: see fingerprint.pb
    return None
  if base == "fingerprint.pb":  # hashes of the signatures, objects and variables (not a uuid)
    from tensorflow.core.protobuf import fingerprint_pb2
    f = fingerprint_pb2.FingerprintDef.FromString(data)
    return f.signature_def_hash, f.saved_object_graph_hash, f.checkpoint_hash
  if base.endswith(".tfrecord.gz"):  # compare the records (the gzip header is also pinned)
    import gzip
    return gzip.decompress(data)
  return data


def _events(data):
  """The Event protos of an events file's bytes (TFRecord framing: length, CRC, data, CRC)."""
  from tensorflow.core.util import event_pb2
  events, at = [], 0
  while at < len(data):
    length = int.from_bytes(data[at:at + 8], "little")
    events.append(event_pb2.Event.FromString(data[at + 12:at + 12 + length]))
    at += 16 + length
  return events


def _bundle(prefix):
  """{name: value} of a TensorFlow checkpoint bundle, but its input-pipeline state (a variant
  tensor holding the input file names, ram:// included)."""
  reader = tf.train.load_checkpoint(prefix)
  return {name: np.asarray(reader.get_tensor(name)).tolist()
          for name, dtype in sorted(reader.get_variable_to_dtype_map().items())
          if dtype != tf.variant}


def _outputs(directory):
  """{relative path: what must be equal} for every file under `directory`; a checkpoint
  bundle (.index with its .data files) is compared by its tensors."""
  found = {}
  for name, data in _tree(directory).items():
    if ".data-" in name:
      continue  # with its .index
    if name.endswith(".index"):
      found[name] = _bundle(os.path.join(directory, name[:-len(".index")]))
    else:
      found[name] = _normalized(name, data)
  return found


def _assert_same_outputs(root, *outputs):
  """Every file under root/<output> equals its ram:// twin (copied back to root.ram)."""
  local, ram = str(root), str(root) + ".ram"
  compared = 0
  for output in outputs:
    mine = _outputs(os.path.join(local, output))
    theirs = _outputs(os.path.join(ram, output))
    rename = lambda n: (os.path.join(os.path.dirname(n), "events.out.tfevents.*")
                        if os.path.basename(n).startswith("events.out.tfevents.") else n)
    assert sorted(map(rename, mine)) == sorted(map(rename, theirs)), output
    assert mine, f"{output} is empty"
    for name in mine:
      if rename(name) == name:
        assert mine[name] == theirs[name], f"{output}/{name} differs between disk and ram://"
      else:
        assert sorted(mine[n] for n in mine if rename(n) == rename(name)) == sorted(
            theirs[n] for n in theirs if rename(n) == rename(name)), f"{output}/{name}"
      compared += 1
  return compared


@pytest.mark.slow
def test_demo_steps_on_ram_equal_local(tmp_path):
  """The demo's chain, small: corpus, vocabulary, records (plain and gzip), pretraining,
  fine-tuning with evaluations during training, the best checkpoint and an export, predict.py
  on that export, features, and every checkpoint conversion.

  Not here: the generator's streaming mode, whose worker processes cannot see this process's
  ram:// (its parent writes the records as the exact mode does).
  """
  r = tmp_path / "root"
  (r / "raw").mkdir(parents=True)
  make_corpus(r / "raw" / "a.txt", documents=10, seed=1)
  make_corpus(r / "raw" / "b.txt", documents=6, seed=2)
  vocab = make_vocab(r / "vocab.txt")
  size = len(open(vocab).read().split())
  BertConfig(vocab_size=size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=64,
             type_vocab_size=2).to_json_file(str(r / "bert_config.json"))
  demo_data.write_sentiment_task(str(r / "sentiment"), train=48, dev=16, test=8)
  (r / "pairs.txt").write_text("Cats sat. ||| Dogs ran!\nOne line only.\n")
  gen = ["--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=2",
         f"--vocab_file={vocab}"]
  ckpt = f"{r}/pretrained/export"
  proc = _on_ram(
      r,
      ["prepare_corpus.py", f"--input_file={r}/raw/*.txt", f"--output_file={r}/out/corpus.txt"],
      ["learn_vocab.py", f"--input_file={r}/out/corpus.txt", f"--vocab_file={r}/out/vocab.txt",
       "--vocab_size=120", "--min_count=1"],
      ["create_pretraining_data.py", f"--input_file={r}/out/corpus.txt", *gen,
       f"--output_file={r}/records/a.tfrecord,{r}/records/b.tfrecord"],
      ["create_pretraining_data.py", f"--input_file={r}/raw/a.txt", *gen,
       f"--output_file={r}/out/c.tfrecord.gz", "--output_compression=gzip"],
      ["run_pretraining.py", f"--bert_config_file={r}/bert_config.json",
       f"--input_file={r}/records/*.tfrecord", f"--output_dir={r}/pretrained",
       f"--vocab_file={vocab}", "--do_train", "--do_eval", "--train_batch_size=8",
       "--num_train_steps=6", "--num_warmup_steps=1", "--save_checkpoints_steps=3",
       "--log_steps=2", "--max_eval_steps=2", "--max_seq_length=32",
       "--max_predictions_per_seq=5", "--seed=1"],
      ["run_classifier.py", "--task_name=SST-2", f"--data_dir={r}/sentiment",
       f"--init_checkpoint={ckpt}", f"--output_dir={r}/classifier", "--do_train", "--do_eval",
       "--do_predict", "--max_seq_length=24", "--train_batch_size=16", "--num_train_epochs=1",
       "--seed=1", f"--export_dir={r}/saved_model", "--eval_every_steps=2",
       "--use_best_checkpoint"],
      ["predict.py", f"--export_dir={r}/saved_model", f"--input_file={r}/sentiment/test.tsv",
       "--header", "--fields=id,text_a", "--id_field=id",
       f"--output_file={r}/out/predictions.jsonl", "--batch_size=4"],
      ["extract_features.py", f"--input_file={r}/pairs.txt", f"--output_file={r}/out/f.jsonl",
       f"--init_checkpoint={ckpt}", "--layers=-1,-2", "--max_seq_length=16"],
      ["convert_checkpoint.py", f"--input_checkpoint={r}/classifier",
       f"--bert_config_file={r}/bert_config.json", f"--vocab_file={vocab}",
       f"--output_dir={r}/converted/hf", "--output_format=hf"],
      ["convert_checkpoint.py", f"--input_checkpoint={r}/converted/hf",
       f"--output_dir={r}/converted/tf1", "--output_format=tf1"],
      ["convert_checkpoint.py", f"--input_checkpoint={r}/converted/tf1",
       f"--output_dir={r}/converted/tf2", "--output_format=tf2"])
  assert proc.stderr.count("on ram://") == 11
  for d in (r, tmp_path / "root.ram"):  # written on ram:// too (copied back to root.ram)
    assert (d / "classifier" / "eval_log.csv").exists() and (d / "classifier" / "best").is_dir()
  assert _assert_same_outputs(r, "out", "records", "pretrained", "classifier", "saved_model",
                              "converted") > 40
  # The export on ram:// serves as the one on disk.
  texts = tf.constant(["A truly wonderful film.", "The plot was dull."])
  local, ram = (fast_tokenization.load_serving(str(d / "saved_model"))
                for d in (r, tmp_path / "root.ram"))
  # Exact: the same SavedModel (copied bytes), the same program on the same inputs.
  np.testing.assert_array_equal(local(text_a=texts)["probabilities"].numpy(),
                                ram(text_a=texts)["probabilities"].numpy())


_TASK_WORDS = ["alice", "bob", "paris", "rome", "acme", "met", "in", "at", "the", "a", "cat",
               "sat", "on", "mat", "where", "is", "zebra", "?", ".", "red", "blue", "man", "then",
               "walks", "to", "house"]


def _write_task_data(r, rng):
  """Small SQuAD v2.0 and CoNLL files under r."""
  squad = []
  for i in range(24):
    words = [rng.choice(_TASK_WORDS[5:14]) for _ in range(rng.randint(4, 9))]
    if i % 3:
      words.insert(rng.randint(0, len(words)), "zebra")
    context = " ".join(words) + " ."
    answers = [{"text": "zebra", "answer_start": context.index("zebra")}] if i % 3 else []
    squad.append({"context": context, "qas": [{"id": f"q{i}", "question": "where is the zebra ?",
                                              "answers": answers, "is_impossible": not i % 3}]})
  for name, part in (("train.json", squad[:16]), ("dev.json", squad[16:])):
    (r / "squad").mkdir(exist_ok=True)
    (r / "squad" / name).write_text(json.dumps(
        {"version": "v2.0", "data": [{"title": "t", "paragraphs": part}]}))
  (r / "ner").mkdir()
  for name, n in (("train.txt", 20), ("valid.txt", 8), ("test.txt", 6)):
    lines = []
    for _ in range(n):
      for _ in range(rng.randint(2, 6)):
        word = rng.choice(_TASK_WORDS[:9])
        tag = {"alice": "B-PER", "bob": "B-PER", "paris": "B-LOC", "rome": "B-LOC",
               "acme": "B-ORG"}.get(word, "O")
        lines.append(f"{word} {tag}")
      lines.append("")
    (r / "ner" / name).write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_fine_tuning_scripts_on_ram_equal_local(tmp_path):
  """run_squad (v2.0, with threshold tuning) and run_ner: train, evaluate, predict and
  export, from a TF1 checkpoint, with every input and output on ram://. run_swag reads and
  writes through the same data/files.py functions as run_classifier (the demo chain)."""
  r = tmp_path / "root"
  r.mkdir()
  vocab = write_vocab(r / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + _TASK_WORDS)
  config = BertConfig(vocab_size=len(_TASK_WORDS) + 5, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                      type_vocab_size=2)
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(config)), str(r / "bert"),
                                  config=config, vocab_file=vocab)
  _write_task_data(r, random.Random(5))
  common = [f"--init_checkpoint={r}/bert", "--seed=1", "--learning_rate=1e-3",
            "--num_train_epochs=1", "--save_checkpoints_steps=1", "--log_steps=1"]
  proc = _on_ram(
      r,
      ["run_squad.py", *common, f"--train_file={r}/squad/train.json",
       f"--predict_file={r}/squad/dev.json", f"--output_dir={r}/squad_out", "--do_train",
       "--do_predict", "--version_2_with_negative", "--tune_null_threshold",
       "--max_seq_length=24", "--doc_stride=8", "--max_query_length=6", "--train_batch_size=8",
       "--n_best_size=3"],
      ["run_ner.py", *common, f"--data_dir={r}/ner", f"--output_dir={r}/ner_out",
       "--do_train", "--do_eval", "--do_predict", "--max_seq_length=16", "--doc_stride=8",
       "--train_batch_size=8", f"--export_dir={r}/ner_export"])
  assert proc.stderr.count("on ram://") == 2
  assert _assert_same_outputs(r, "squad_out", "ner_out", "ner_export") > 20
