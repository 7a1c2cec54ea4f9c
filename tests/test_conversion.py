"""convert_checkpoint.py's conversions: every model a script trains, each format both ways.

Every tensor must come back equal, or the conversion is refused in one line
naming the variables it cannot place, with nothing written; the one tensor a
format leaves out is the pooler of the Hugging Face classes that have none.
Each Hugging Face export is checked against the keys and shapes transformers'
own save_pretrained writes for its class (measured once and written down here;
transformers itself is not needed), the token tagger's and the multiple-choice
model's also against our logits through a float64 numpy BERT.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers import assert_close, block_ops, randomize, random_features
from modeling import checkpoints, conversion, language_model, optimization, training
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.pretraining import BertPretrainer
from modeling.span_labeling import BertSpanLabeler
from modeling.multiple_choice import BertMultipleChoice, MultipleChoiceTask
from modeling.tagging import BertFeatureTagger, BertTagger, TaggingTask
from scripts import last_error_line, run_script
from test_checkpoints import _numpy_bert

SMALL = BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=16, max_position_embeddings=24, type_vocab_size=2)
KINDS = {
    "encoder": lambda: BertEncoder(SMALL),
    "pretraining": lambda: BertPretrainer(BertEncoder(SMALL)),
    "classifier": lambda: BertClassifier(BertEncoder(SMALL), num_labels=3),
    "regression": lambda: BertClassifier(BertEncoder(SMALL), num_labels=1),
    "span": lambda: BertSpanLabeler(BertEncoder(SMALL)),
    "multiple_choice": lambda: BertMultipleChoice(BertEncoder(SMALL)),
    "tagger": lambda: BertTagger(BertEncoder(SMALL), 5),
    "feature_tagger_concat": lambda: BertFeatureTagger(BertEncoder(SMALL), 5, [-1, -2],
                                                       "concat", 4),
    "feature_tagger_sum": lambda: BertFeatureTagger(BertEncoder(SMALL), 5, [-1, 0], "sum", 3),
    "feature_tagger_weighted": lambda: BertFeatureTagger(BertEncoder(SMALL), 5, [0, 1, 2],
                                                         "weighted", 3),
    "ltr": lambda: BertPretrainer(BertEncoder(language_model.causal_config(SMALL)),
                                  next_sentence=False),
    # read from BertForMaskedLM
    "masked_lm": lambda: BertPretrainer(BertEncoder(SMALL), next_sentence=False),
    "classifier_bilstm": lambda: BertClassifier(BertEncoder(SMALL), num_labels=2,
                                                bilstm_head=True),
    "span_bilstm": lambda: BertSpanLabeler(BertEncoder(SMALL), bilstm_head=True),
}
NO_HF = {"feature_tagger_concat", "feature_tagger_sum", "feature_tagger_weighted",
         "classifier_bilstm", "span_bilstm"}  # a BiLSTM: no transformers class has one
# Their transformers classes have no pooler: an hf file leaves it out, and read back it is fresh.
NO_POOLER_IN_HF = {"span", "tagger", "ltr", "masked_lm"}
POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
# A chain through every ordered pair of formats once: tf2->tf1->hf->tf2->hf->tf1->tf2.
CHAIN = ["tf2", "tf1", "hf", "tf2", "hf", "tf1", "tf2"]


def _convert(source, fmt, target, labels=None, config=SMALL):
  """What convert_checkpoint.py does: read and place every variable, write `fmt`."""
  _, model = conversion.load_for_conversion(str(source), config)
  conversion.write_checkpoint(model, str(target), fmt, config, labels=labels)
  return model


@pytest.mark.parametrize("fmt,marker", [("tf1", "checkpoint"), ("tf2", "checkpoint"),
                                        ("hf", "model.safetensors")])
def test_the_marker_file_is_written_last(tmp_path, monkeypatch, fmt, marker):
  """A directory that has its marker (README: Paths) is complete: nothing lands after it,
  and writing over an older checkpoint takes the old marker away before any new file."""
  model = BertClassifier(BertEncoder(SMALL), num_labels=3)
  model.build()
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"w{i}\n" for i in range(SMALL.vocab_size)))
  out = tmp_path / "out"
  seen = []
  real_replace, real_remove, real_write = os.replace, os.remove, tf.train.Checkpoint.write
  here = lambda path, name: (seen.append(name) if os.path.dirname(path) == str(out) else None)
  monkeypatch.setattr(os, "replace", lambda a, b: (real_replace(a, b), here(b, os.path.basename(b))))
  monkeypatch.setattr(os, "remove", lambda a: (real_remove(a), here(a, "-" + os.path.basename(a))))
  monkeypatch.setattr(tf.train.Checkpoint, "write", lambda self, prefix, **kw: (
      seen.append("tf2 variables"), real_write(self, prefix, **kw))[1])
  casing = {"tokenizer_config.json": b'{"do_lower_case": false}\n'}
  conversion.write_checkpoint(model, str(out), fmt, SMALL, vocab_file=str(vocab),
                              extra_files=casing)
  assert marker in seen and seen[-1] == marker and "vocab.txt" in seen, seen
  assert "tokenizer_config.json" in seen
  seen.clear()
  # Another model's conversion into the same directory, whose casing nothing records: the
  # old tokenizer_config.json goes after the old marker and before the new one.
  conversion.write_checkpoint(model, str(out), fmt, SMALL, vocab_file=str(vocab),
                              extra_files={"tokenizer_config.json": None})
  published = [name for name in seen if not name.startswith("-.")]  # not a write probe
  assert published[0] == "-" + marker and published[-1] == marker, seen
  assert "-tokenizer_config.json" in published and not (out / "tokenizer_config.json").exists()


def _assert_all_equal(path, want, where, fresh=()):
  """The checkpoint at `path` holds exactly `want`'s names, all equal but `fresh`: those of
  the same shapes, freshly initialised (a bias is zero either way when nothing trained it)."""
  got = checkpoints.read_checkpoint(str(path)).weights
  assert sorted(got) == sorted(want), where
  for name, value in want.items():
    if name in fresh:
      assert got[name].shape == value.shape, f"{name} {where}"
    else:
      np.testing.assert_array_equal(got[name], value, err_msg=f"{name} {where}")  # exact: copied
  assert not fresh or not all(np.array_equal(got[n], want[n]) for n in fresh), where


def _without_pooler(weights):
  return {n: v for n, v in weights.items() if n not in POOLER}


@pytest.mark.parametrize("kind", KINDS)
def test_every_format_both_ways_keeps_every_tensor(kind, tmp_path):
  """Every tensor equal at each step, but the pooler of a class that has none: absent from
  its hf file, and fresh in every checkpoint written after that."""
  original = KINDS[kind]()
  want = randomize(original, seed=len(kind))
  config = original.config  # causal for ltr
  source = tmp_path / "0_tf2"
  conversion.write_checkpoint(original, str(source), "tf2", config)
  chain = CHAIN if kind not in NO_HF else ["tf2", "tf1", "tf2"]
  fresh = ()
  for step, fmt in enumerate(chain[1:], 1):
    target = tmp_path / f"{step}_{fmt}"
    model = _convert(source, fmt, target, config=config)
    assert type(model) is type(original), (source, fmt)
    assert getattr(model, "num_labels", None) == getattr(original, "num_labels", None)
    where = f"after {source.name} -> {fmt}"
    if fmt == "hf" and kind in NO_POOLER_IN_HF:
      _assert_all_equal(target, _without_pooler(want), where)
      fresh = POOLER
    else:
      _assert_all_equal(target, want, where, fresh)
    source = target


@pytest.mark.parametrize("kind", sorted(NO_HF))
def test_hugging_face_refuses_the_bilstm_naming_every_variable(kind, tmp_path):
  want = randomize(KINDS[kind](), 1)
  checkpoints.save_tf1_checkpoint(want, str(tmp_path / "tf1"), SMALL)
  with pytest.raises(ValueError) as error:
    _convert(tmp_path / "tf1", "hf", tmp_path / "hf")
  message = str(error.value)
  unplaced = [n for n in want if "lstm" in n or n.endswith("layer_weights")]
  assert len(unplaced) >= 6 and "\n" not in message
  assert all(name in message for name in unplaced), message
  assert "output_weights" not in message  # the classes' own heads hold those
  assert not (tmp_path / "hf").exists()


def test_variables_no_model_takes_are_named_and_nothing_is_written(tmp_path):
  weights = randomize(BertTagger(BertEncoder(SMALL), 5), 2)
  extra = {**weights, "cls/other/output_weights": np.zeros((2, 8), np.float32)}
  checkpoints.save_tf1_checkpoint(extra, str(tmp_path / "extra"), SMALL)
  with pytest.raises(ValueError, match=r"BertTagger has no place for "
                                       r"cls/other/output_weights; nothing was converted\.$"):
    _convert(tmp_path / "extra", "tf1", tmp_path / "out")
  alone = {n: v for n, v in extra.items() if not n.startswith("cls/ner/")}
  checkpoints.save_tf1_checkpoint(alone, str(tmp_path / "alone"), SMALL)
  with pytest.raises(ValueError, match=r"no model of ours has the head variable\(s\) "
                                       r"cls/other/output_weights; nothing was converted\.$"):
    _convert(tmp_path / "alone", "tf2", tmp_path / "out")
  both = {**weights, **randomize(BertSpanLabeler(BertEncoder(SMALL)), 3)}
  checkpoints.save_tf1_checkpoint(both, str(tmp_path / "both"), SMALL)
  with pytest.raises(ValueError, match=r"heads of several models \(BertSpanLabeler, "
                                       r"BertTagger\)"):
    _convert(tmp_path / "both", "hf", tmp_path / "out")
  assert not (tmp_path / "out").exists()


# --- Trained models, through the script -------------------------------------

def _trained(task, features, out):
  """A Trainer checkpoint in `out` after two steps on `features`, and the trained weights."""
  trainer = training.Trainer(
      tf.distribute.get_strategy(), task,
      lambda names: optimization.create_optimizer("adamw", 1e-2, 2, 0, names),
      training.TrainConfig(output_dir=str(out), num_train_steps=2, global_batch_size=4,
                           steps_per_loop=2, log_steps=2, save_checkpoints_steps=2))
  trainer.train(lambda ctx: tf.data.Dataset.from_tensor_slices(features).repeat().batch(4))
  return checkpoints.model_weights(trainer.model)


def _tagging_features(rng, n=8, seq=10):
  features = random_features(rng, n, seq, SMALL.vocab_size)
  features["label_ids"] = rng.integers(0, 5, (n, seq)).astype("int32")
  features["label_weights"] = features["input_mask"].astype("float32")
  return features


def _choice_features(rng, n=8, choices=3, seq=7):
  flat = random_features(rng, n * choices, seq, SMALL.vocab_size)
  features = {k: v.reshape(n, choices, seq) for k, v in flat.items()}
  features["label_ids"] = rng.integers(0, choices, n).astype("int32")
  features["is_real_example"] = np.ones(n, "int32")
  return features


TRAINED = {
    "tagger": (lambda: TaggingTask(SMALL, 5), _tagging_features),
    "feature_tagger": (lambda: TaggingTask(SMALL, 5, True, [-1, -2], "concat", 4),
                       _tagging_features),
    "multiple_choice": (lambda: MultipleChoiceTask(SMALL), _choice_features),
}


@pytest.mark.parametrize("kind", TRAINED)
def test_trained_checkpoints_convert_with_every_tensor(tmp_path, kind):
  """run_ner's and run_swag's checkpoints (tf2 with optimizer state, as the Trainer
  writes them) -> tf1 and hf -> ours, every tensor equal; the BiLSTM refused in hf."""
  make_task, make_features = TRAINED[kind]
  out = tmp_path / "run"
  want = _trained(make_task(), make_features(np.random.default_rng(0)), out)
  fresh = checkpoints.model_weights(make_task().build_model())
  assert any(not np.array_equal(want[n], fresh[n]) for n in want if n.startswith("cls/"))
  formats = ["tf1", "tf2"] if kind == "feature_tagger" else ["tf1", "hf", "tf2"]
  source, fresh = out, ()
  for fmt in formats:
    _convert(source, fmt, tmp_path / fmt)
    if fmt == "hf" and kind == "tagger":  # BertForTokenClassification has no pooler
      _assert_all_equal(tmp_path / fmt, _without_pooler(want), f"{source.name} -> {fmt}")
      fresh = POOLER
    else:
      _assert_all_equal(tmp_path / fmt, want, f"{source.name} -> {fmt}", fresh)
    source = tmp_path / fmt
  if kind == "feature_tagger":
    with pytest.raises(ValueError, match=r"^No Hugging Face BERT class holds cls/ner/lstm_0/"):
      _convert(out, "hf", tmp_path / "hf")


@pytest.mark.slow
def test_the_script_exports_a_trained_tagger_with_its_label_names(tmp_path):
  """convert_checkpoint.py on run_ner's output_dir: hf with label_list.txt's names in
  config.json; the feature-based tagger refused in one line, nothing written."""
  labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  for feature_based in (False, True):
    out = tmp_path / f"ner_{feature_based}"
    task = TaggingTask(SMALL, 5, feature_based, [-1, -2], "concat", 4)
    want = _trained(task, _tagging_features(np.random.default_rng(0)), out)
    SMALL.to_json_file(str(out / "bert_config.json"))
    (out / "label_list.txt").write_text("\n".join(labels) + "\n")
    target = tmp_path / f"hf_{feature_based}"
    proc = run_script("convert_checkpoint.py", f"--input_checkpoint={out}",
                      f"--output_dir={target}", "--output_format=hf",
                      expect_ok=not feature_based)
    if feature_based:
      assert last_error_line(proc).startswith(
          "error: No Hugging Face BERT class holds cls/ner/lstm_0/bw/bias, ")
      assert "Traceback" not in proc.stderr and not target.exists()
      continue
    _assert_all_equal(target, _without_pooler(want), "ner -> hf")
    assert ("BertForTokenClassification has no pooler: bert/pooler/dense/kernel and "
            "bert/pooler/dense/bias left out of the export") in proc.stderr
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"]
    assert config["id2label"] == {str(i): label for i, label in enumerate(labels)}


# --- The Hugging Face layouts ------------------------------------------------

# What transformers' own save_pretrained writes for each class at SMALL's sizes, measured
# with transformers 5.24.0 (torch 2.13.0): each class built from BertConfig(vocab_size=40,
# hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
# max_position_embeddings=24, type_vocab_size=2; num_labels 3 for sequence and 5 for token
# classification, 2 for question answering; is_decoder for BertLMHeadModel), saved, and its
# model.safetensors keys and shapes read back. None holds embeddings.position_ids or the
# masked-LM decoder (cls.predictions.decoder.*, tied to the word embeddings and to
# cls.predictions.bias). Linear weights are [out, in].
_HF_BLOCK = {  # under encoder.layer.{i}.
    "attention.self.query.weight": (8, 8), "attention.self.query.bias": (8,),
    "attention.self.key.weight": (8, 8), "attention.self.key.bias": (8,),
    "attention.self.value.weight": (8, 8), "attention.self.value.bias": (8,),
    "attention.output.dense.weight": (8, 8), "attention.output.dense.bias": (8,),
    "attention.output.LayerNorm.weight": (8,), "attention.output.LayerNorm.bias": (8,),
    "intermediate.dense.weight": (16, 8), "intermediate.dense.bias": (16,),
    "output.dense.weight": (8, 16), "output.dense.bias": (8,),
    "output.LayerNorm.weight": (8,), "output.LayerNorm.bias": (8,),
}
_HF_BERT_MODEL = {  # BertModel's keys (a task class puts `bert.` before them)
    "embeddings.word_embeddings.weight": (40, 8),
    "embeddings.position_embeddings.weight": (24, 8),
    "embeddings.token_type_embeddings.weight": (2, 8),
    "embeddings.LayerNorm.weight": (8,), "embeddings.LayerNorm.bias": (8,),
    **{f"encoder.layer.{i}.{key}": shape for i in (0, 1) for key, shape in _HF_BLOCK.items()},
}
_HF_POOLER = {"pooler.dense.weight": (8, 8), "pooler.dense.bias": (8,)}
_HF_MASKED_LM = {"cls.predictions.transform.dense.weight": (8, 8),
                 "cls.predictions.transform.dense.bias": (8,),
                 "cls.predictions.transform.LayerNorm.weight": (8,),
                 "cls.predictions.transform.LayerNorm.bias": (8,),
                 "cls.predictions.bias": (40,)}
HF_LAYOUTS = {  # class: (its BertModel has a pooler, its head's keys)
    "BertModel": (True, {}),
    "BertForPreTraining": (True, {**_HF_MASKED_LM, "cls.seq_relationship.weight": (2, 8),
                                  "cls.seq_relationship.bias": (2,)}),
    "BertForMaskedLM": (False, _HF_MASKED_LM),
    "BertLMHeadModel": (False, _HF_MASKED_LM),
    "BertForSequenceClassification": (True, {"classifier.weight": (3, 8),
                                             "classifier.bias": (3,)}),
    "BertForTokenClassification": (False, {"classifier.weight": (5, 8), "classifier.bias": (5,)}),
    "BertForQuestionAnswering": (False, {"qa_outputs.weight": (2, 8), "qa_outputs.bias": (2,)}),
    "BertForMultipleChoice": (True, {"classifier.weight": (1, 8), "classifier.bias": (1,)}),
}
# Each model kind with an hf export: the class its config.json names.
HF_EXPORTS = {"encoder": "BertModel", "pretraining": "BertForPreTraining",
              "masked_lm": "BertForMaskedLM", "ltr": "BertLMHeadModel",
              "classifier": "BertForSequenceClassification", "span": "BertForQuestionAnswering",
              "tagger": "BertForTokenClassification", "multiple_choice": "BertForMultipleChoice"}


def _hf_layout(architecture):
  """{key: shape} of `architecture`'s file at SMALL's sizes."""
  pooler, head = HF_LAYOUTS[architecture]
  prefix = "" if architecture == "BertModel" else "bert."
  encoder = {**_HF_BERT_MODEL, **(_HF_POOLER if pooler else {})}
  return {**{prefix + key: shape for key, shape in encoder.items()}, **head}


def _file_tensors(directory):
  from safetensors.numpy import load_file
  return load_file(str(directory / "model.safetensors"))


def test_the_measured_layouts_are_whole():
  """Guards the table above: 5 + 2 x 16 encoder keys, 2 for the pooler, as measured."""
  counts = {name: len(_hf_layout(name)) for name in HF_LAYOUTS}
  assert counts == {"BertModel": 39, "BertForPreTraining": 46, "BertForMaskedLM": 42,
                    "BertLMHeadModel": 42, "BertForSequenceClassification": 41,
                    "BertForTokenClassification": 39, "BertForQuestionAnswering": 39,
                    "BertForMultipleChoice": 41}
  assert set(HF_EXPORTS) <= set(KINDS) and set(HF_EXPORTS.values()) == set(HF_LAYOUTS)
  assert NO_POOLER_IN_HF == {k for k, a in HF_EXPORTS.items() if not HF_LAYOUTS[a][0]}


@pytest.mark.parametrize("kind", sorted(HF_EXPORTS))
def test_each_hf_export_holds_exactly_its_transformers_class(kind, tmp_path, caplog):
  """The file's keys and shapes are those save_pretrained writes for the class config.json
  names: no more (no pooler where the class has none, no position_ids, no tied decoder),
  no fewer. Read back, every tensor is the model's, and a left-out pooler starts fresh."""
  model = KINDS[kind]()
  want = randomize(model, seed=11)
  architecture = HF_EXPORTS[kind]
  with caplog.at_level("INFO", logger="absl"):
    conversion.write_checkpoint(model, str(tmp_path), "hf", model.config)
  hf = json.loads((tmp_path / "config.json").read_text())
  assert hf["architectures"] == [architecture]
  tensors = _file_tensors(tmp_path)
  assert {key: value.shape for key, value in tensors.items()} == _hf_layout(architecture)
  assert all(v.dtype == np.float32 for v in tensors.values())
  said = [r.getMessage() for r in caplog.records if "has no pooler" in r.getMessage()]
  if kind in NO_POOLER_IN_HF:
    assert said == [f"{architecture} has no pooler: bert/pooler/dense/kernel and "
                    "bert/pooler/dense/bias left out of the export (the task never reads them)."]
  else:
    assert said == []
  _, back = conversion.load_for_conversion(str(tmp_path), model.config)
  assert type(back) is type(model) and back.get_config() == model.get_config()
  got = checkpoints.model_weights(back)
  assert sorted(got) == sorted(want)
  for name, value in want.items():
    if kind in NO_POOLER_IN_HF and name in POOLER:  # not in the file: the fresh initial values
      assert not np.array_equal(got[name], value), name
    else:
      np.testing.assert_array_equal(got[name], value, err_msg=name)


def _logits_from_file(tensors, ids, segments, mask, pooled):
  """What transformers computes from the file: sequence or pooled output, then classifier."""
  encoder = {k[len("bert."):]: v for k, v in tensors.items() if k.startswith("bert.")}
  states, pooled_output = _numpy_bert(encoder, ids, segments, mask, SMALL.num_attention_heads)
  x = pooled_output if pooled else states[-1]
  return x @ tensors["classifier.weight"].T.astype(np.float64) + tensors["classifier.bias"]


def test_tagger_exports_as_bert_for_token_classification(tmp_path):
  model = BertTagger(BertEncoder(SMALL), 5)
  randomize(model, 4)
  conversion.write_checkpoint(model, str(tmp_path), "hf", SMALL)
  tensors = _file_tensors(tmp_path)
  assert "bert.pooler.dense.weight" not in tensors  # the class has none
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["architectures"] == ["BertForTokenClassification"]
  assert len(config["id2label"]) == 5
  features = random_features(np.random.default_rng(5), 3, 9, SMALL.vocab_size)
  ours = model(features, training=False)["logits"].numpy()  # [B, S, C]
  theirs = _logits_from_file(tensors, features["input_ids"], features["segment_ids"],
                             features["input_mask"], pooled=False)
  real = features["input_mask"].astype(bool)
  # float32 against float64 through 2 blocks and the classifier (a sum of 8).
  assert_close(ours[real], theirs[real], "float32", 2 * block_ops(SMALL, 9) + 8)


def test_multiple_choice_exports_as_bert_for_multiple_choice(tmp_path):
  model = BertMultipleChoice(BertEncoder(SMALL))
  randomize(model, 6)
  conversion.write_checkpoint(model, str(tmp_path), "hf", SMALL)
  tensors = _file_tensors(tmp_path)
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["architectures"] == ["BertForMultipleChoice"]
  flat = random_features(np.random.default_rng(7), 2 * 4, 9, SMALL.vocab_size)
  features = {k: v.reshape(2, 4, 9) for k, v in flat.items()}  # [B, C, S]
  ours = model(features, training=False)["logits"].numpy()  # [B, C]
  theirs = _logits_from_file(tensors, flat["input_ids"], flat["segment_ids"],
                             flat["input_mask"], pooled=True).reshape(2, 4)
  # float32 against float64 through 2 blocks, the pooler and the classifier (sums of 8).
  assert_close(ours, theirs, "float32", 2 * block_ops(SMALL, 9) + 2 * 8)
  # Read back as multiple choice (config.json's class), not as a one-label classifier.
  _, back = conversion.load_for_conversion(str(tmp_path), SMALL)
  assert type(back) is BertMultipleChoice


def test_left_to_right_model_exports_as_bert_lm_head_model(tmp_path):
  """run_pretraining --objective=ltr's model: transformers' causal BertLMHeadModel (is_decoder
  in config.json). Its logits equal ours: benchmarks/checks/hf_interchange.py."""
  config = language_model.causal_config(SMALL)
  model = BertPretrainer(BertEncoder(config), next_sentence=False)
  randomize(model, 10)
  conversion.write_checkpoint(model, str(tmp_path), "hf", config)
  hf = json.loads((tmp_path / "config.json").read_text())
  assert hf["architectures"] == ["BertLMHeadModel"] and hf["is_decoder"] is True
  # The same head on a bidirectional encoder is transformers' BertForMaskedLM.
  conversion.write_checkpoint(BertPretrainer(BertEncoder(SMALL), next_sentence=False),
                              str(tmp_path / "b"), "hf", SMALL)
  hf = json.loads((tmp_path / "b" / "config.json").read_text())
  assert hf["architectures"] == ["BertForMaskedLM"] and "is_decoder" not in hf
