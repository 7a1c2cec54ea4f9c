"""Settings read once from the flags (cli/settings.py), and a script's adapter run step by
step from settings alone, without absl's flags (cli/task_adapter.py, run_classifier.py)."""

import dataclasses
import types

import pytest
from absl import flags

from cli.model_files import ModelFiles
from cli.settings import FineTuningSettings, RunSettings, with_flags
from cli.task_adapter import TrainSteps
from conftest import script_module, write_vocab
from data import glue, tokenization
from modeling.config import BertConfig

CONFIG = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=16, max_position_embeddings=32)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "good", "bad", "film", "plot"]
# What the shared flags would hold, given by hand: no absl here.
SHARED = dict(bert_config_file=None, vocab_file=None, init_checkpoint=None, max_seq_length=8,
              do_train=True, train_batch_size=4, learning_rate=1e-3, save_checkpoints_steps=10,
              iterations_per_loop=10, use_tpu=False, tpu_name=None, tpu_zone=None,
              gcp_project=None, master=None, strategy="default", dtype="float32",
              jit_compile=False, optimizer="adamw", gradient_accumulation_steps=1, log_steps=10,
              keep_checkpoint_max=1, seed=1, new_token_embeddings="mean_of_pieces",
              worker_timeout_seconds=900, predict_batch_size=8, num_train_epochs=2.0,
              warmup_proportion=0.1, do_eval=True, do_lower_case=True)


@pytest.fixture(scope="module")
def run_classifier():
  """run_classifier.py as a module (its flags defined while the module's tests run)."""
  with script_module("run_classifier") as module:
    yield module


def _flag_values(**values):
  """A stand-in for absl's parsed FlagValues: `name in it`, it[name].value."""
  return {name: types.SimpleNamespace(value=value) for name, value in values.items()}


def test_settings_come_from_the_flags_once_and_never_change():
  Settings = with_flags(RunSettings, "task_name", "layers")
  runner_reads = {f.name for f in dataclasses.fields(RunSettings)}
  given = {**{k: v for k, v in SHARED.items() if k in runner_reads}, "output_dir": "out",
           "task_name": "mrpc", "layers": ["-1", "-2"]}
  del given["do_eval"]  # a flag this script would not define: it is off
  settings = Settings.from_flags(_flag_values(**given), learning_rate=5e-5)
  assert settings.task_name == "mrpc" and settings.learning_rate == 5e-5  # resolved in main
  assert settings.do_eval is False and settings.eval_every_steps == 0
  assert settings.layers == ("-1", "-2")  # a list flag: frozen too
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.learning_rate = 1.0
  with pytest.raises(AttributeError):
    settings.task_nmae  # noqa: B018  (a misspelled flag fails where it is read)
  del given["layers"]
  with pytest.raises(TypeError, match=r"^Settings\.layers: the script defines no flag "
                                      r"--layers and main does not resolve it\.$"):
    Settings.from_flags(_flag_values(**given))
  with pytest.raises(TypeError, match=r"^Settings has no field learning_rat\.$"):
    Settings.from_flags(_flag_values(**given, layers=[]), learning_rat=1.0)


def test_every_settings_field_is_a_flag_the_script_defines(run_classifier):
  """The fields RunSettings gives a default (flags some scripts lack) included: a field
  misspelled there would otherwise take its default silently."""
  names = [f.name for f in dataclasses.fields(run_classifier.Settings)]
  assert [n for n in names if n not in flags.FLAGS] == []
  assert issubclass(run_classifier.Settings, FineTuningSettings)


def test_an_adapter_runs_its_steps_from_settings_alone(run_classifier, tmp_path):
  """run_classifier's steps in the runner's order, each given what the one before returned;
  the values checked are counted by hand."""
  (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(
      f"{'a good film' if i % 2 else 'bad plot'}\t{i % 2}\n" for i in range(10)))
  (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngood plot\t1\n")
  vocab = write_vocab(tmp_path / "vocab.txt", VOCAB)
  settings = run_classifier.Settings(
      **SHARED, output_dir=str(tmp_path / "out"), data_dir=str(tmp_path), eval_batch_size=8,
      task_name="SST-2", xnli_language="zh", bilstm_head=False, doc_stride=0)
  adapter_class = run_classifier.Classification
  assert adapter_class.required_flags(settings) == {
      "data_dir": str(tmp_path), "task_name": "SST-2", "output_dir": str(tmp_path / "out")}
  adapter = adapter_class(settings)
  assert adapter.headline_metric() == "eval_accuracy"
  identity, defined = adapter.define(CONFIG)
  assert identity == {"task_name": "sst-2", "labels": ["0", "1"], "bilstm_head": False,
                      "causal_attention": False}
  files = ModelFiles(CONFIG, vocab, tokenization.FullTokenizer(vocab, True))
  data = adapter.read(defined, files, None)  # the classifier reads nothing of the worker
  # [CLS] bad plot [SEP], then padding to --max_seq_length=8.
  assert data.train_arrays["input_ids"][0].tolist() == [2, 6, 8, 3, 0, 0, 0, 0]
  assert data.train_arrays["label_ids"][:2].tolist() == [0, 1]
  assert [e.text_a for e in data.held_out["dev"]] == ["good plot"]
  # 10 sentences at batch 4 over 2 epochs, as the original counts: int(10 / 4 * 2) = 5
  # steps, int(5 * 0.1) = 0 warming up, 2.5 steps an epoch.
  assert adapter.train_steps(data) == TrainSteps(5, 0, 2.5)
  task = adapter.build_task(CONFIG, data)
  assert (task.num_labels, task.regression, task.bilstm_head) == (2, False, False)
  with pytest.raises(ValueError, match=r"^--doc_stride windows single texts; MRPC takes "
                                       r"pairs\.$"):
    adapter_class(dataclasses.replace(settings, task_name="MRPC", doc_stride=4))
  # XNLI's language is an entry of its own: an evaluation takes both flags back from run.json
  # (flags_to_take), and a mismatch names the flag to pass.
  identity, _ = adapter_class(dataclasses.replace(settings, task_name="XNLI",
                                                  xnli_language="de")).define(CONFIG)
  assert (identity["task_name"], identity["xnli_language"]) == ("xnli", "de")
  assert glue.get_task(identity["task_name"], identity["xnli_language"]).labels == [
      "contradiction", "entailment", "neutral"]


def test_a_run_that_does_not_train_takes_the_recorded_flags_it_is_not_given(tmp_path):
  """run.json's entries that are flags, read back by each flag's parser, except the ones on
  the command line, --init_checkpoint and values the flag would not read back as recorded."""
  import json
  import tensorflow as tf
  from cli import run_identity
  out = tmp_path / "out"
  fv = flags.FlagValues()
  flags.DEFINE_integer("max_seq_length", 128, "", flag_values=fv)
  flags.DEFINE_bool("version_2_with_negative", False, "", flag_values=fv)
  flags.DEFINE_bool("bilstm_head", False, "", flag_values=fv)
  flags.DEFINE_string("init_checkpoint", None, "", flag_values=fv)
  flags.DEFINE_list("feature_layers", ["-1"], "", flag_values=fv)
  flags.DEFINE_enum("feature_combine", "concat", ["concat", "sum"], "", flag_values=fv)
  fv(["prog", "--bilstm_head"])
  parsers = {name: fv[name].parser.parse for name in fv if not fv[name].present}
  assert run_identity.flags_to_take(str(out), parsers) == {}  # no directory yet
  out.mkdir()
  record = {"task": "squad", "max_seq_length": 64, "version_2_with_negative": True,
            "bilstm_head": False, "init_checkpoint": "/pretrained", "feature_layers": [-1, -2],
            "feature_combine": "weighted"}
  (out / "run.json").write_text(json.dumps(record))
  assert run_identity.flags_to_take(str(out), parsers) == {}  # no checkpoint: nothing trained
  tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(out / "ckpt"))
  assert run_identity.flags_to_take(str(out), parsers) == {
      "max_seq_length": 64, "version_2_with_negative": True, "feature_layers": ["-1", "-2"]}
  (out / "run.json").write_text("{")  # unreadable: check() says so, nothing is taken
  assert run_identity.flags_to_take(str(out), parsers) == {}


def test_a_start_inside_output_dir_is_the_same_run_however_the_paths_are_written(tmp_path):
  """--init_checkpoint inside --output_dir is not an outside start, given as a plain path,
  a relative one or a file:// URL; a checkpoint elsewhere is recorded."""
  from cli import run_identity
  out = tmp_path / "out"
  for init, out_flag in ((f"file://{out}/model.ckpt-10", str(out)),
                         (f"{out}/model.ckpt-10", f"file://{out}"),
                         (f"file://{out}", f"file://{out}/")):
    assert "init_checkpoint" not in run_identity.identity({}, 128, init, out_flag)
  elsewhere = run_identity.identity({}, 128, f"file://{tmp_path}/base/bert_model.ckpt", str(out))
  assert elsewhere["init_checkpoint"] == f"{tmp_path}/base/bert_model.ckpt"


def test_run_json_written_by_earlier_versions_still_reads(tmp_path):
  """Keys a run.json lacks are not compared (an older run resumes); an XNLI run's
  'xnli (lang)' task name reads as the task and --xnli_language; a vocab is the same
  whatever its path or line endings."""
  import json
  import tensorflow as tf
  from cli import run_identity
  out = tmp_path / "out"
  out.mkdir()
  (out / "run.json").write_text(json.dumps({"task_name": "xnli (de)", "max_seq_length": 64}))
  tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(out / "ckpt"))
  vocab = write_vocab(tmp_path / "vocab.txt", VOCAB)
  (tmp_path / "crlf.txt").write_bytes("\r\n".join(VOCAB).encode() + b"\r\n")
  entry = run_identity.vocab_entry(vocab)
  assert entry == run_identity.vocab_entry(str(tmp_path / "crlf.txt"))
  assert entry["vocab"].startswith(f"{len(VOCAB)} entries, sha256 ")
  now = {"task_name": "xnli", "xnli_language": "de", "optimizer": "adamw", **entry,
         "max_seq_length": 64}
  run_identity.check(str(out), now)  # no error: the keys it lacks are not compared
  with pytest.raises(ValueError, match="trained with xnli_language 'de', not 'zh'"):
    run_identity.check(str(out), {**now, "xnli_language": "zh"})
  fv = flags.FlagValues()
  flags.DEFINE_string("task_name", None, "", flag_values=fv)
  flags.DEFINE_string("xnli_language", "zh", "", flag_values=fv)
  fv(["prog"])
  parsers = {name: fv[name].parser.parse for name in fv}
  assert run_identity.flags_to_take(str(out), parsers) == {"task_name": "xnli",
                                                           "xnli_language": "de"}
