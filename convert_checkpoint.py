r"""Converts a BERT checkpoint between formats.

Reads Google's original TF1 checkpoints, Hugging Face BERT safetensors and our
own TF2 checkpoints. Writes one of:
  tf1 (default): the original layout (`bert_model.ckpt` with `bert_config.json`
       and `vocab.txt`), readable by every tool that reads Google's releases;
  tf2: our tf.train.Checkpoint layout (`model.ckpt`);
  hf:  a Hugging Face directory (`model.safetensors`, `config.json`,
       `vocab.txt`) that transformers' BertModel, BertForPreTraining,
       BertForSequenceClassification, BertForQuestionAnswering,
       BertForTokenClassification, BertForMultipleChoice or (the left-to-right
       model) BertLMHeadModel loads.
Every model the scripts train converts with its head (pretraining, left-to-right,
classifier or regression, SQuAD, multiple choice, tagger fine-tuned or
feature-based, --bilstm_head models), every variable kept; what a format cannot
hold (a BiLSTM in hf) is refused in one line naming the variables, before
anything is written. An hf file holds exactly its transformers class's
tensors: the SQuAD, tagger and masked/causal LM classes have no pooler, so it
is left out (those models never read it; read back, it starts fresh). A
tagger's label_list.txt, the labels in a fine-tuning run's run.json, or a
Hugging Face config.json's id2label beside the input name the classes in the
hf config.json, and every output carries them as label_list.txt.

  python convert_checkpoint.py --input_checkpoint=path/to/hf_model_dir \
    --output_dir=converted --output_format=tf1
  python convert_checkpoint.py --input_checkpoint=converted \
    --output_dir=back_to_hf --output_format=hf
"""

import os

from absl import flags, logging

from cli import app
from cli.run_identity import TRAINED_WITH

flags.DEFINE_string("input_checkpoint", None,
                    "TF1 checkpoint prefix, our TF2 checkpoint, a directory holding either, "
                    "or a Hugging Face directory / .safetensors file.")
flags.DEFINE_string("output_dir", None, "Directory to write the converted checkpoint into.")
flags.DEFINE_enum("output_format", "tf1", ["tf1", "tf2", "hf"],
                  "tf1: Google's original layout; tf2: our tf.train.Checkpoint layout; "
                  "hf: Hugging Face model.safetensors with config.json.")
flags.DEFINE_string("bert_config_file", None,
                    "Model config. Default: bert_config.json or config.json beside the input.")
flags.DEFINE_string("vocab_file", None,
                    "vocab.txt of the output. Default: the one beside the input, if any. One "
                    "that extends the input's (learn_vocab.py) grows the rows it adds, as "
                    "training does.")
FLAGS = flags.FLAGS


def _labels_beside(path, num_labels):
  """The class names beside checkpoint `path`, if they fit its head: run_ner's (or a
  conversion's) label_list.txt, else the labels in a fine-tuning run's run.json, else a
  Hugging Face config.json's id2label when it names them (not LABEL_0, LABEL_1, ...)."""
  from data import files, text_decoding
  if num_labels is None:
    return None
  directory = os.path.dirname(path)
  labels_path = os.path.join(directory, "label_list.txt")
  if files.exists(labels_path):
    text = text_decoding.read_text(labels_path)
    labels = [line.strip() for line in text_decoding.text_lines(text) if line.strip()]
  else:
    for labels_path, read in ((os.path.join(directory, TRAINED_WITH), _run_labels),
                              (os.path.join(directory, "config.json"), _hf_labels)):
      labels = _read_json(labels_path, read)
      if labels:
        break
    else:
      return None  # nothing names them (a regression head has no names)
  if len(labels) != num_labels:
    logging.warning("%s has %d labels but the head %d; the config names them LABEL_i.",
                    labels_path, len(labels), num_labels)
    return None
  return [str(label) for label in labels]


def _read_json(path, read):
  """read(the json object at `path`), or None when there is none or it cannot be read (the
  conversion itself does not need it)."""
  import json
  from data import files, text_decoding
  if not files.exists(path):
    return None
  try:
    return read(json.loads(text_decoding.read_text(path)))
  except (ValueError, AttributeError, TypeError) as e:
    logging.warning("%s not read (%s); the config names the classes LABEL_i.", path, e)
    return None


def _run_labels(run):
  return run.get("labels")


def _hf_labels(config):
  """config.json's id2label as a list, None where it names no classes (LABEL_i)."""
  id2label = config.get("id2label") or {}
  labels = [id2label[key] for key in sorted(id2label, key=int)]
  if sorted(int(key) for key in id2label) != list(range(len(labels))):
    raise ValueError(f"id2label's ids are not 0 to {len(labels) - 1}")
  return None if labels == [f"LABEL_{i}" for i in range(len(labels))] else labels


def main(_):
  app.check_given(input_checkpoint=FLAGS.input_checkpoint, output_dir=FLAGS.output_dir)
  app.log_flags()
  from data import path_checks, tokenization
  from modeling import checkpoints, conversion, vocab_growth
  from modeling.config import BertConfig

  path_checks.check_output_dir(FLAGS.output_dir, "--output_dir", "the checkpoint")
  _check_output_holds_no_other_model(FLAGS.output_dir, FLAGS.output_format)
  if FLAGS.bert_config_file:
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
  else:
    config = checkpoints.find_config(FLAGS.input_checkpoint)
  vocab_file = FLAGS.vocab_file
  if not vocab_file:
    try:
      vocab_file = checkpoints.find_vocab(FLAGS.input_checkpoint)
    except ValueError:
      logging.warning("No vocab.txt beside the input; the output will have none.")
  if vocab_file:  # checked before anything is written
    size = max(tokenization.load_vocab(vocab_file).values()) + 1
    if size > config.vocab_size:
      raise ValueError(f"{vocab_file} has {size} entries but the model's vocab_size is "
                       f"{config.vocab_size}; pass the checkpoint's own --vocab_file, or "
                       "(an appended vocab) a --bert_config_file with its vocab_size.")
  # A --vocab_file that extends the input's (learn_vocab.py) grows its word rows, as a
  # training run would: the output then pairs that vocab with rows made for it.
  growth = vocab_growth.growth_for(FLAGS.input_checkpoint, vocab_file, config) \
      if FLAGS.vocab_file else None
  ckpt, model = conversion.load_for_conversion(FLAGS.input_checkpoint, config, growth)
  labels = _labels_beside(ckpt.path, getattr(model, "num_labels", None))
  # The class names go along in every format (an earlier output's removed where there are
  # none), so that a tf1 or tf2 output converts on to hf with them.
  extra_files = {"tokenizer_config.json": _tokenizer_config(FLAGS.input_checkpoint),
                 "label_list.txt": "".join(f"{label}\n" for label in labels).encode("utf-8")
                                   if labels else None}
  path = conversion.write_checkpoint(model, FLAGS.output_dir, FLAGS.output_format, config,
                                     vocab_file, labels, extra_files=extra_files)
  logging.info("Converted %s (%s, %s) to %s (%s).", ckpt.path, ckpt.format,
               type(model).__name__, path, FLAGS.output_format)


def _check_output_holds_no_other_model(output_dir, output_format):
  """ValueError, before any work, when --output_dir holds a training run's checkpoints
  (ckpt-N: tf1 or tf2 would replace the `checkpoint` state file its resume reads, hf hide
  them) or a model of another format than --output_format (it would name two models)."""
  from data import files
  from modeling import checkpoint_paths
  name = checkpoint_paths.training_run_checkpoint(output_dir)
  if name:
    raise ValueError(f"--output_dir={output_dir} holds a training run's checkpoints ({name}); "
                     "a converted model there would replace or hide them: name another "
                     "directory.")
  if files.isdir(output_dir):
    try:
      checkpoint_paths.check_no_other_model(output_dir, output_format)
    except ValueError as e:
      raise ValueError(f"--output_dir={e}") from None


def _tokenizer_config(input_checkpoint):
  """The output's tokenizer_config.json: the input's own, or one holding the casing that
  its run.json or release name records; None (no file, an earlier one removed) where
  nothing records it. transformers lower-cases a model without one, and the scripts
  check --do_lower_case against it."""
  import json
  from data import files, tokenization
  lower, source = tokenization.recorded_casing(input_checkpoint)
  if lower is None:
    logging.warning("Nothing beside %s says whether its text is lower-cased: no "
                    "tokenizer_config.json written (transformers then lower-cases).",
                    input_checkpoint)
    return None
  logging.info("Casing do_lower_case=%s (from %s) kept in tokenizer_config.json.", lower, source)
  if os.path.basename(source) == "tokenizer_config.json":
    return files.read_bytes(source)
  return (json.dumps({"do_lower_case": lower}) + "\n").encode("utf-8")


if __name__ == "__main__":
  app.run(main)
