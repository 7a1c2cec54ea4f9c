"""Fine-tuning from a run_pretraining.py --output_dir (or its export/) as --init_checkpoint."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import write_vocab
from helpers import randomize
from data.pretraining import generation, instances
from modeling import checkpoints
from scripts import run_script
from test_training import L, P, training_files
from modeling.classification import BertClassifier
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.pretraining import BertPretrainer

STEP = "optimizer/by_name/global_step/.ATTRIBUTES/VARIABLE_VALUE"  # in our checkpoints
CONFIG = BertConfig(vocab_size=12, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=16, max_position_embeddings=16)


def test_output_dir_with_config_in_export_fine_tunes_with_one_line_on_heads(tmp_path, caplog):
  """The layout run_pretraining leaves: our checkpoints at the top, config, vocab and the
  original checkpoint in export/ (older runs wrote no config beside the checkpoints)."""
  pretrainer = BertPretrainer(BertEncoder(CONFIG))
  weights = randomize(pretrainer, seed=2)
  out = tmp_path / "pretraining"
  checkpoints.save_tf2_checkpoint(pretrainer, str(out / "ckpt-3"))
  vocab = write_vocab(tmp_path / "vocab.txt", [f"t{i}" for i in range(12)])
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(pretrainer), str(out / "export"),
                                  CONFIG, vocab)
  for start in (out, out / "export"):
    assert checkpoints.find_config(str(start)) == CONFIG
    assert checkpoints.find_vocab(str(start)).endswith("vocab.txt")
    classifier = BertClassifier(BertEncoder(CONFIG), num_labels=2)
    caplog.clear()
    with caplog.at_level("INFO", logger="absl"):
      checkpoints.load_checkpoint(classifier, str(start), allow_new_heads=True)
    np.testing.assert_array_equal(  # exact: copied bits
        classifier.encoder.embedding_table.numpy(), weights["bert/embeddings/word_embeddings"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Head var")]
    assert lines == [
        "Head variables of the checkpoint left unused: cls/predictions/output_bias, "
        "cls/predictions/transform/LayerNorm/beta, cls/predictions/transform/LayerNorm/gamma, "
        "cls/predictions/transform/dense/bias, cls/predictions/transform/dense/kernel, "
        "cls/seq_relationship/output_bias, cls/seq_relationship/output_weights; started "
        "fresh (not in the checkpoint): output_bias, output_weights"]


@pytest.mark.slow
def test_pretraining_copies_the_vocab_it_found_beside_its_start(tmp_path):
  """No --vocab_file: the vocab.txt beside --init_checkpoint goes into --output_dir and
  export/, so that the output directory reads as a checkpoint's (extract_features.py takes
  it); resumed without --init_checkpoint, the run keeps the copy in --output_dir."""
  d, vocab, records, config, init = training_files(tmp_path)
  start = tmp_path / "release"
  checkpoints.save_tf1_checkpoint(checkpoints.read_checkpoint(init).weights, str(start),
                                  config, vocab)
  out = tmp_path / "pretrained"
  args = [f"--bert_config_file={d / 'bert_config.json'}", f"--input_file={records}",
          f"--output_dir={out}", "--do_train", f"--max_seq_length={L}",
          f"--max_predictions_per_seq={P}", "--train_batch_size=4", "--num_warmup_steps=0",
          "--save_checkpoints_steps=1"]
  proc = run_script("run_pretraining.py", *args, "--num_train_steps=1",
                    f"--init_checkpoint={start}")
  # The masked positions are gathered without int64 transposes, which TensorFlow's oneDNN
  # rewriter (on, as the scripts run) would report in an error line.
  assert "oneDNN supports" not in proc.stderr, proc.stderr[-2000:]
  for copy in (out / "vocab.txt", out / "export" / "vocab.txt"):
    assert copy.read_bytes() == open(vocab, "rb").read(), copy
  (out / "export" / "vocab.txt").unlink()
  run_script("run_pretraining.py", *args, "--num_train_steps=2")  # resumes at step 1
  assert (out / "export" / "vocab.txt").read_bytes() == open(vocab, "rb").read()
  (tmp_path / "in.txt").write_text("the text\n")
  run_script("extract_features.py", f"--input_file={tmp_path / 'in.txt'}",
             f"--output_file={tmp_path / 'features.jsonl'}", f"--init_checkpoint={out}",
             f"--max_seq_length={L}", "--layers=-1")
  assert (tmp_path / "features.jsonl").read_text().startswith('{"linex_index": 0,')


@pytest.mark.slow
def test_a_run_resumes_on_longer_records_as_the_papers_second_phase(tmp_path):
  """The same --output_dir on records of another length (the paper's 90% of steps at 128
  tokens, then 10% at 512): the run goes on from its step with the new input from its
  start (the checkpoint's input position belongs to the old records: restoring it failed,
  or, with as many files, crashed at the first step). Resumed again on the same records,
  it restores its position in them."""
  d, vocab, records, config, _ = training_files(tmp_path)
  longer = str(tmp_path / "longer.tfrecord")
  generation.generate_exact([str(d / "corpus.txt")], [longer], vocab, True,
                            instances.GenerationConfig(2 * L, 2 * P, 0.15, 0.1, False, 2), 1)
  out = tmp_path / "out"
  args = [f"--bert_config_file={d / 'bert_config.json'}", f"--output_dir={out}", "--do_train",
          "--train_batch_size=4", "--num_warmup_steps=0", "--save_checkpoints_steps=2"]
  run_script("run_pretraining.py", *args, f"--input_file={records}", f"--max_seq_length={L}",
             f"--max_predictions_per_seq={P}", "--num_train_steps=2")
  phase2 = [*args, f"--input_file={longer}", f"--max_seq_length={2 * L}",
            f"--max_predictions_per_seq={2 * P}"]
  proc = run_script("run_pretraining.py", *phase2, "--num_train_steps=4")
  assert f"The training input is not the one {out / 'ckpt-2'} was trained on" in proc.stderr
  assert f"resumed from {out / 'ckpt-2'} at step 2" in proc.stderr
  assert tf.train.load_variable(str(out / "ckpt-4"), STEP) == 4
  proc = run_script("run_pretraining.py", *phase2, "--num_train_steps=6")
  assert "The training input is not" not in proc.stderr
  assert tf.train.load_variable(str(out / "ckpt-6"), STEP) == 6
  assert any(n.startswith("iterator/") for n, _ in tf.train.list_variables(str(out / "ckpt-6")))
