"""Bad input tried as a new user would, through the entry scripts.

Each case must end in one line `error: ...` on stderr (exit 1, no traceback)
and leave no output file behind. Cases stop before any model is trained, so
the table stays fast.
"""

import csv
import json
import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from data import features, pipeline, record_checks, tfrecords
from modeling import checkpoints
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from scripts import last_error_line, run_script

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "the", "a", "good", "bad",
         "film", "man", "walks", "john", "lives", "in", "paris", "who"]
L, P = 16, 3
SWAG_HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
               "ending0", "ending1", "ending2", "ending3", "label"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A tiny model (config, vocab, TF1 checkpoint), data for every script, and bad variants."""
  d = tmp_path_factory.mktemp("bad_input")
  config = BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=16, max_position_embeddings=32,
                      type_vocab_size=2)
  config.to_json_file(str(d / "bert_config.json"))
  write_vocab(d / "vocab.txt", WORDS)
  write_vocab(d / "no_cls.txt", [w for w in WORDS if w != "[CLS]"])
  write_vocab(d / "no_unk.txt", [w for w in WORDS if w != "[UNK]"])
  # [MASK] alone missing, the size kept (a vocab of another size fails its own check first).
  write_vocab(d / "no_mask.txt", ["[unused0]" if w == "[MASK]" else w for w in WORDS])
  write_vocab(d / "too_big.txt", WORDS + ["extra"])
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(BertEncoder(config)),
                                  str(d / "model"), config=config, vocab_file=str(d / "vocab.txt"))
  (d / "pairs.txt").write_text("the film ||| good\nthe man walks\n")
  (d / "empty.txt").write_text("")
  glue = d / "sst2"
  glue.mkdir()
  rows = "".join(f"the film {w}\t{i % 2}\n" for i, w in enumerate(["good", "bad"] * 4))
  (glue / "train.tsv").write_text("sentence\tlabel\n" + rows)
  (glue / "dev.tsv").write_text("")
  (glue / "test.tsv").write_text("index\tsentence\n")
  (d / "sst2_test").mkdir()
  (d / "sst2_test" / "test.tsv").write_text("index\tsentence\n0\tthe film\n")
  conll = d / "conll"
  conll.mkdir()
  (conll / "train.txt").write_text("john B-PER\nlives O\nin O\nparis B-LOC\n\n" * 4)
  (conll / "valid.txt").write_text("\n")
  (conll / "test.txt").write_text("")
  swag = d / "swag"
  swag.mkdir()
  for name, rows in (("train.csv", 4), ("val.csv", 0), ("test.csv", 0)):
    with open(swag / name, "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(SWAG_HEADER)
      for i in range(rows):
        writer.writerow([f"v{i}", str(i), "the man", "the man", "walks", "gold", "a", "the",
                         "film", "good", str(i % 4)])
  squad = {"data": [{"title": "t", "paragraphs": [{"context": "john lives in paris .", "qas": [
      {"id": "q", "question": "who lives in paris ?",
       "answers": [{"text": "john", "answer_start": 0}]}]}]}]}
  (d / "squad.json").write_text(json.dumps(squad))
  _pretraining_records(d / "good.tfrecord", L, P, 10)
  _pretraining_records(d / "short.tfrecord", L // 2, P, 10)
  _pretraining_records(d / "big_ids.tfrecord", L, P, 10, top_id=len(WORDS) + 5)
  return d


def _pretraining_records(path, length, predictions, n, top_id=None):
  rng = np.random.default_rng(0)
  ids = rng.integers(5, len(WORDS), (n, length))
  if top_id is not None:
    ids[n - 1, 1] = top_id  # the last record of the file, past the vocab
  tfrecords.write_arrays(str(path), {
      "input_ids": ids, "input_mask": np.ones((n, length), np.int64),
      "segment_ids": np.zeros((n, length), np.int64),
      "masked_lm_positions": np.tile(np.arange(1, predictions + 1), (n, 1)),
      "masked_lm_ids": rng.integers(5, len(WORDS), (n, predictions)),
      "masked_lm_weights": np.ones((n, predictions), np.float32),
      "next_sentence_labels": np.zeros(n, np.int64)})


def _model(d, vocab="vocab.txt"):
  return [f"--bert_config_file={d / 'bert_config.json'}", f"--vocab_file={d / vocab}"]


def _extract(d, *extra):
  return ("extract_features.py", f"--input_file={d / 'pairs.txt'}",
          f"--init_checkpoint={d / 'model' / 'bert_model.ckpt'}", "--layers=-1",
          f"--max_seq_length={L}", *extra)


def _classifier(d, *extra, vocab="vocab.txt"):
  return ("run_classifier.py", "--task_name=sst-2", f"--data_dir={d / 'sst2'}",
          *_model(d, vocab), f"--max_seq_length={L}", *extra)


def _pretraining(d, records, *extra):
  return ("run_pretraining.py", f"--bert_config_file={d / 'bert_config.json'}",
          f"--input_file={records}", f"--max_seq_length={L}", f"--max_predictions_per_seq={P}",
          "--train_batch_size=2", *extra)


# (case id, function of the files dir and an output path -> script and args, expected error
# line: a template filled with {d} and {out}).
CASES = [
    ("extract pair in max_seq_length=2",
     lambda d, out: _extract(d, f"--output_file={out}", "--max_seq_length=2"),
     "error: --max_seq_length=2 leaves no room for the pair on line 1 of {d}/pairs.txt "
     "([CLS] a [SEP] b [SEP] needs 3 or more)."),
    ("extract vocab without [CLS]",
     lambda d, out: _extract(d, f"--output_file={out}", f"--vocab_file={d}/no_cls.txt"),
     "error: Vocab file {d}/no_cls.txt lacks required token(s) [CLS]."),
    ("extract vocab larger than the model",
     lambda d, out: _extract(d, f"--output_file={out}", f"--vocab_file={d}/too_big.txt"),
     f"error: --vocab_file={{d}}/too_big.txt has {len(WORDS) + 1} entries but the model's "
     f"vocab_size is {len(WORDS)}; pass the vocab the model was made with, or raise "
     "vocab_size in bert_config.json to match (a vocab extended with learn_vocab.py "
     "--extension=append)."),
    ("extract missing checkpoint",
     lambda d, out: ("extract_features.py", f"--input_file={d}/pairs.txt",
                     f"--output_file={out}", f"--init_checkpoint={d}/nowhere/bert_model.ckpt"),
     "error: --init_checkpoint: Checkpoint {d}/nowhere/bert_model.ckpt does not exist (no "
     "{d}/nowhere/bert_model.ckpt.index, no directory or .safetensors file of that name)."),
    ("extract empty input",
     lambda d, out: _extract(d, f"--output_file={out}", f"--input_file={d}/empty.txt"),
     "error: --input_file={d}/empty.txt holds no lines."),
    ("extract output in a missing directory",
     lambda d, out: _extract(d, f"--output_file={d}/pairs.txt/out.jsonl"),
     "error: --output_file={d}/pairs.txt/out.jsonl: {d}/pairs.txt is a file, not a directory."),
    ("extract output is a directory",
     lambda d, out: _extract(d, f"--output_file={d}"),
     "error: --output_file={d} is a directory; name a file."),
    ("extract no layers",
     lambda d, out: _extract(d, f"--output_file={out}", "--layers=,"),
     "error: --layers is empty; name at least one layer, e.g. -1."),
    ("extract missing input",
     lambda d, out: _extract(d, f"--output_file={out}", f"--input_file={d}/missing.txt"),
     "error: --input_file={d}/missing.txt does not exist."),
    ("extract input is a directory",
     lambda d, out: _extract(d, f"--output_file={out}", f"--input_file={d}"),
     "error: --input_file={d} is a directory; name a file."),
    ("classifier empty dev.tsv",
     lambda d, out: _classifier(d, f"--output_dir={out}", "--do_eval"),
     "error: {d}/sst2/dev.tsv holds no examples."),
    ("classifier header-only test.tsv",
     lambda d, out: _classifier(d, f"--output_dir={out}", "--do_train", "--do_predict"),
     "error: {d}/sst2/test.tsv holds no examples."),
    ("classifier prediction with untrained weights",
     lambda d, out: ("run_classifier.py", "--task_name=sst-2", f"--data_dir={d}/sst2_test",
                     *_model(d), f"--max_seq_length={L}", f"--output_dir={out}", "--do_predict"),
     "error: Evaluating or predicting without --do_train needs trained weights: pass "
     "--init_checkpoint, or an --output_dir holding a checkpoint."),
    ("classifier vocab without [UNK]",
     lambda d, out: _classifier(d, f"--output_dir={out}", "--do_train", vocab="no_unk.txt"),
     "error: Vocab file {d}/no_unk.txt lacks required token(s) [UNK]."),
    ("classifier data_dir is a file",
     lambda d, out: ("run_classifier.py", "--task_name=sst-2", f"--data_dir={d}/pairs.txt",
                     *_model(d), f"--max_seq_length={L}", f"--output_dir={out}", "--do_train"),
     "error: --data_dir={d}/pairs.txt has no train.tsv."),
    ("classifier output_dir is a file",
     lambda d, out: _classifier(d, f"--output_dir={d}/pairs.txt", "--do_train"),
     "error: --output_dir={d}/pairs.txt is a file; name a directory."),
    ("classifier --use_tpu without a TPU",
     lambda d, out: _classifier(d, f"--output_dir={out}", "--do_train", "--use_tpu"),
     "error: Cannot initialize the TPU of TPU_NAME or of this TPU VM (no --tpu_name): "
     "NotFoundError: TPUs not found in the cluster. Failed in initialization: No OpKernel "
     "was registered to support Op 'ConfigureDistributedTPU' (run on a TPU VM, or name a "
     "TPU this machine can reach)."),
    ("ner empty valid.txt",
     lambda d, out: ("run_ner.py", f"--data_dir={d}/conll", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_train", "--train_batch_size=2", "--do_eval"),
     "error: {d}/conll/valid.txt holds no words."),
    ("ner empty test.txt",
     lambda d, out: ("run_ner.py", f"--data_dir={d}/conll", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_train", "--train_batch_size=2", "--do_predict"),
     "error: {d}/conll/test.txt holds no words."),
    ("ner vocab without [CLS]",
     lambda d, out: ("run_ner.py", f"--data_dir={d}/conll", *_model(d, "no_cls.txt"),
                     f"--max_seq_length={L}", f"--output_dir={out}", "--do_train"),
     "error: Vocab file {d}/no_cls.txt lacks required token(s) [CLS]."),
    ("ner feature flag without --feature_based",
     lambda d, out: ("run_ner.py", f"--data_dir={d}/conll", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_train", "--feature_layers=-1,-2"),
     "error: --feature_layers needs --feature_based (the BiLSTM on frozen layers); "
     "fine-tuning tags from the last layer alone. Add --feature_based or drop it."),
    ("ner feature flags without --feature_based",
     lambda d, out: ("run_ner.py", f"--data_dir={d}/conll", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_train", "--feature_combine=concat",
                     "--lstm_units=8"),
     "error: --feature_combine and --lstm_units need --feature_based (the BiLSTM on frozen "
     "layers); fine-tuning tags from the last layer alone. Add --feature_based or drop them."),
    ("swag header-only val.csv",
     lambda d, out: ("run_swag.py", f"--data_dir={d}/swag", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_train", "--do_eval"),
     "error: {d}/swag/val.csv holds no questions."),
    ("swag header-only test.csv",
     lambda d, out: ("run_swag.py", f"--data_dir={d}/swag", *_model(d), f"--max_seq_length={L}",
                     f"--output_dir={out}", "--do_predict"),
     "error: {d}/swag/test.csv holds no questions."),
    ("swag vocab without [UNK]",
     lambda d, out: ("run_swag.py", f"--data_dir={d}/swag", *_model(d, "no_unk.txt"),
                     f"--max_seq_length={L}", f"--output_dir={out}", "--do_train"),
     "error: Vocab file {d}/no_unk.txt lacks required token(s) [UNK]."),
    ("squad vocab without [CLS]",
     lambda d, out: ("run_squad.py", *_model(d, "no_cls.txt"), f"--max_seq_length={L}",
                     "--max_query_length=4", f"--output_dir={out}", "--do_predict",
                     f"--predict_file={d}/squad.json"),
     "error: Vocab file {d}/no_cls.txt lacks required token(s) [CLS]."),
    ("squad train_file is a directory",
     lambda d, out: ("run_squad.py", *_model(d), f"--max_seq_length={L}",
                     "--max_query_length=4", f"--output_dir={out}", "--do_train",
                     f"--train_file={d}"),
     "error: --train_file={d} is a directory; name a file."),
    ("squad config is a directory",
     lambda d, out: ("run_squad.py", f"--bert_config_file={d}", f"--vocab_file={d}/vocab.txt",
                     f"--max_seq_length={L}", "--max_query_length=4", f"--output_dir={out}",
                     "--do_predict", f"--predict_file={d}/squad.json"),
     "error: --bert_config_file={d} is a directory; name a file."),
    ("create_pretraining_data output is a directory",
     lambda d, out: ("create_pretraining_data.py", f"--input_file={d}/pairs.txt",
                     f"--vocab_file={d}/vocab.txt", f"--output_file={d}"),
     "error: --output_file={d} is a directory; name a file."),
    ("pretraining zero steps",
     lambda d, out: _pretraining(d, f"{d}/good.tfrecord", f"--output_dir={out}", "--do_train",
                                 "--num_train_steps=0"),
     "error: --num_train_steps=0: training needs at least 1."),
    ("pretraining negative steps",
     lambda d, out: _pretraining(d, f"{d}/good.tfrecord", f"--output_dir={out}", "--do_train",
                                 "--num_train_steps=-5"),
     "error: --num_train_steps=-5: training needs at least 1."),
    ("pretraining second file of another length",
     lambda d, out: _pretraining(d, f"{d}/good.tfrecord,{d}/short.tfrecord",
                                 f"--output_dir={out}", "--do_train", "--num_train_steps=1"),
     f"error: {{d}}/short.tfrecord: input_ids has {L // 2} values per record but "
     f"--max_seq_length expects {L}; regenerate the data or pass the matching flag."),
    ("pretraining ids above vocab_size",
     lambda d, out: _pretraining(d, f"{d}/big_ids.tfrecord", f"--output_dir={out}", "--do_eval"),
     f"error: {{d}}/big_ids.tfrecord: input_ids holds {len(WORDS) + 5}, outside "
     f"0..{len(WORDS) - 1} (the config's vocab_size); were the records made with another "
     "vocab or model?"),
    ("pretraining eval file matching nothing",
     lambda d, out: _pretraining(d, f"{d}/good.tfrecord", f"--output_dir={out}", "--do_eval",
                                 f"--eval_input_file={d}/none*.tfrecord"),
     "error: --eval_input_file: no file matches '{d}/none*.tfrecord'."),
    ("pretraining vocab without [MASK]",
     lambda d, out: _pretraining(d, f"{d}/good.tfrecord", f"--output_dir={out}", "--do_train",
                                 "--num_train_steps=1", f"--vocab_file={d}/no_mask.txt"),
     "error: Vocab file {d}/no_mask.txt lacks required token(s) [MASK]."),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(files, tmp_path, case):
  _, make_args, want = case
  out = tmp_path / "out"
  script, *args = make_args(files, out)
  proc = run_script(script, *args, expect_ok=False)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert last_error_line(proc) == want.format(d=files, out=out), proc.stderr[-3000:]
  # Nothing is left behind, not even the output directory the run made.
  assert not out.exists(), sorted(out.rglob("*"))


def test_pretraining_eval_file_cut_inside_a_record_header_is_named(files, tmp_path):
  """An interrupted copy that TensorFlow alone reads as a shorter file: evaluation would
  have used 5 of 10 records; it stops before any work, naming the file and the byte."""
  records = tmp_path / "eval.tfrecord"
  _pretraining_records(records, L, P, 10)
  data = records.read_bytes()
  assert len(data) % 10 == 0  # every record the same size (ids of one varint byte)
  size = len(data) // 10
  records.write_bytes(data[:5 * size + 3])
  out = tmp_path / "out"
  proc = run_script(*_pretraining(files, records, f"--output_dir={out}", "--do_eval",
                                  f"--init_checkpoint={files}/model/bert_model.ckpt"),
                    expect_ok=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert last_error_line(proc) == (
      f"error: {records} is cut short: it ends 3 byte(s) into the header of the record at "
      f"byte {5 * size} (an interrupted copy?).")
  assert not out.exists()


def test_empty_record_files_are_no_examples_and_a_float_read_as_int_is_named(tmp_path, caplog):
  """A shard the generator wrote no instance to reads as no examples, as in the original
  (only when every file is empty is it an error); a feature of the wrong list type is
  named before any work, not met mid-run."""
  spec = features.pretraining_feature_spec(L, P)
  _pretraining_records(tmp_path / "a.tfrecord", L, P, 8)
  (tmp_path / "b.tfrecord").write_bytes(b"")
  pattern = str(tmp_path / "*.tfrecord")
  with caplog.at_level("WARNING", logger="absl"):
    assert record_checks.check_records(pattern, spec) == [str(tmp_path / "a.tfrecord"),
                                                     str(tmp_path / "b.tfrecord")]
  assert "1 of the 2 files" in caplog.text and "b.tfrecord" in caplog.text
  with pytest.raises(ValueError, match=r"b\.tfrecord holds no records\.$"):
    record_checks.check_records(str(tmp_path / "b.tfrecord"), spec)
  # Two input pipelines (workers) sharding the files: the empty one is left out before the
  # sharding, so neither pipeline waits forever on a share of nothing.
  for index in (0, 1):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index)
    dataset = pipeline.record_dataset(pattern, spec, 4, True, seed=1, input_context=context)
    assert next(iter(dataset))["input_ids"].shape[0] == 4
  # GZIP: a whole stream of nothing is empty; a file cut inside its stream is named as such.
  with tf.io.TFRecordWriter(str(tmp_path / "z.gz"), "GZIP"):
    pass
  _pretraining_records(tmp_path / "y.tfrecord", L, P, 8)
  with tf.io.TFRecordWriter(str(tmp_path / "y.gz"), "GZIP") as writer:
    for record in tf.data.TFRecordDataset(str(tmp_path / "y.tfrecord")):
      writer.write(record.numpy())
  assert record_checks.check_records(f"{tmp_path}/*.gz", spec, compression="GZIP")
  (tmp_path / "x.gz").write_bytes((tmp_path / "y.gz").read_bytes()[:10])  # the header alone
  with pytest.raises(ValueError, match=r"x\.gz holds no whole record though its gzip trailer "
                                       r"says -?\d+ bytes: the file is cut short"):
    record_checks.check_records(str(tmp_path / "x.gz"), spec, compression="GZIP")
  example = tf.train.Example()
  for name, feature in spec.items():  # every feature an int64 list, the weights too
    example.features.feature[name].int64_list.value.extend([0] * feature.shape[0])
  with tf.io.TFRecordWriter(str(tmp_path / "c.tfrecord")) as writer:
    writer.write(example.SerializeToString())
  with pytest.raises(ValueError, match=r"c\.tfrecord: masked_lm_weights is stored as "
                                       r"int64_list but read as float32 \(float_list\); "
                                       r"regenerate the data\.$"):
    record_checks.check_records(str(tmp_path / "c.tfrecord"), spec)


def test_corrupt_record_met_while_reading_names_the_file(tmp_path):
  """A TFRecord damaged past its first records fails in one line naming it, not the others:
  cut short, before reading (tests/test_record_files.py has every kind of cut); corrupt
  inside, when the reading gets there."""
  _pretraining_records(tmp_path / "a.tfrecord", L, P, 40)
  _pretraining_records(tmp_path / "b.tfrecord", L, P, 40)
  data = (tmp_path / "b.tfrecord").read_bytes()
  pattern = str(tmp_path / "*.tfrecord")
  spec = features.pretraining_feature_spec(L, P)
  (tmp_path / "b.tfrecord").write_bytes(data[:-20])  # the last record cut short
  bad = re.escape(str(tmp_path / "b.tfrecord"))
  with pytest.raises(ValueError, match=rf"^{bad} is cut short inside the "
                                       r"record at byte \d+ \(an interrupted copy\?\)\.$"):
    record_checks.check_records(pattern, spec)
  corrupt = bytearray(data)
  corrupt[len(data) // 2] ^= 0xFF  # a byte in the middle: its record's CRC no longer holds
  (tmp_path / "b.tfrecord").write_bytes(bytes(corrupt))
  assert record_checks.check_records(pattern, spec) == [str(tmp_path / "a.tfrecord"),
                                                   str(tmp_path / "b.tfrecord")]
  with pytest.raises(ValueError) as error:
    with record_checks.naming_bad_files(pattern):
      for _ in pipeline.record_dataset(pattern, spec, 8, False):
        pass
  message = str(error.value)
  assert re.fullmatch(rf"{bad}: corrupt TFRecord data \(corrupted record "
                      r"at \d+\)\.", message), message
  # Met inside a graph function (the training loop): the same line, no graph trace in it.
  iterator = iter(pipeline.record_dataset(pattern, spec, 8, False))

  @tf.function
  def loop():
    for _ in tf.range(20):
      next(iterator)

  with pytest.raises(ValueError) as error:
    with record_checks.naming_bad_files(pattern):
      loop()
  assert str(error.value) == message


def test_a_bad_record_past_the_checked_ones_names_its_file_and_record(tmp_path):
  """check_records reads each file's first records; one further on of another layout (files
  of two --max_seq_length joined), or with an id past the vocab, failed deep in a step with
  TensorFlow's message and no file. Met while reading, it is named, file and record."""
  config = BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=8)
  checks = features.pretraining_record_checks(L, P, config)
  _pretraining_records(tmp_path / "a.tfrecord", L, P, 70)
  _pretraining_records(tmp_path / "long.tfrecord", 2 * L, P, 3)
  (tmp_path / "b.tfrecord").write_bytes((tmp_path / "a.tfrecord").read_bytes()
                                        + (tmp_path / "long.tfrecord").read_bytes())
  _pretraining_records(tmp_path / "c.tfrecord", L, P, 100, top_id=len(WORDS) + 5)
  for name, message in (
      ("b", f"{tmp_path / 'b.tfrecord'}: record 71: input_ids has {2 * L} values per record "
            f"but --max_seq_length expects {L}; regenerate the data or pass the matching flag."),
      ("c", f"{tmp_path / 'c.tfrecord'}: record 100: input_ids holds {len(WORDS) + 5}, outside "
            f"0..{len(WORDS) - 1} (the config's vocab_size); were the records made with another "
            "vocab or model?")):
    pattern = f"{tmp_path / 'a.tfrecord'},{tmp_path / name}.tfrecord"
    record_checks.check_records(pattern, checks[0], checks[1], id_limits=checks[2])  # passes
    table = tf.zeros([len(WORDS), 2])
    with pytest.raises(ValueError) as error:
      with record_checks.naming_bad_files(pattern, checks=checks):
        for batch in pipeline.record_dataset(pattern, checks[0], 8, False):
          tf.gather(table, batch["input_ids"])  # as the embedding lookup fails on CPUs
    assert str(error.value) == message


def test_library_errors_name_the_source_not_a_flag(tmp_path):
  spec = features.pretraining_feature_spec(L, P)
  with pytest.raises(ValueError, match=r"^records: no file matches '.*none\.tfrecord'\.$"):
    pipeline.record_dataset(str(tmp_path / "none.tfrecord"), spec, 2, False)
  with pytest.raises(ValueError, match=r"^records: no file matches"):
    pipeline.global_batches(str(tmp_path / "none.tfrecord"), spec, 2)
  (tmp_path / "text.tfrecord").write_text("not a record file at all\n")
  with pytest.raises(ValueError, match=r"^Cannot read .*text\.tfrecord as TFRecords \([^{]*\); "
                     r"is it another kind of file, or GZIP-compressed\?$"):
    record_checks.check_records(str(tmp_path / "text.tfrecord"), spec)
  tfrecords.write_arrays(str(tmp_path / "plain.tfrecord"),
                         {"input_ids": np.zeros([2, L], np.int64)})
  with pytest.raises(ValueError, match=r"^Cannot read .*plain\.tfrecord as GZIP-compressed "
                     r"TFRecords \([^{]*\); were they written without compression\?$"):
    record_checks.check_records(str(tmp_path / "plain.tfrecord"), spec, compression="GZIP")


def test_pack_pair_refuses_lengths_without_room(tiny_vocab):
  from data.tokenization import FullTokenizer
  tokenizer = FullTokenizer(tiny_vocab)
  assert features.pack_pair(tokenizer, "want", None, 2).tokens == ["[CLS]", "[SEP]"]
  # No room for either text: the truncation empties b too, and the original then packs
  # one text (`if tokens_b`).
  assert features.pack_pair(tokenizer, "want", "running", 3).tokens == ["[CLS]", "[SEP]"]
  with pytest.raises(ValueError, match="leaves no room for a pair"):
    features.pack_pair(tokenizer, "want", "running", 2)
  with pytest.raises(ValueError, match="leaves no room for a text"):
    features.pack_pair(tokenizer, "want", None, 1)
