"""The model a checkpoint's variables make, for convert_checkpoint.py: every variable kept.

A checkpoint names its variables, not its model. Its head variables (those
outside `bert/`) say which task model wrote it, and each task model class
recognizes its own (`for_head_variables`), so no table of head names lives
here, only the list of classes. A checkpoint with variables that no model
takes, in part or whole, is refused in one line naming them all: a
conversion never drops a variable, save the pooler of a Hugging Face class
that has none (see modeling/hf_checkpoints.py).
"""

import os

from data import files, path_checks
from modeling import checkpoint_paths, checkpoints, hf_checkpoints
from modeling.encoder import BertEncoder
from modeling.classification import BertClassifier
from modeling.pretraining import BertPretrainer
from modeling.span_labeling import BertSpanLabeler
from modeling.multiple_choice import BertMultipleChoice
from modeling.tagging import BertFeatureTagger, BertTagger

# Every model a script trains (run_pretraining, run_classifier with classes or a
# regression score, run_squad, run_swag, run_ner fine-tuned and feature-based).
TASK_MODELS = (BertPretrainer, BertClassifier, BertSpanLabeler, BertMultipleChoice,
               BertTagger, BertFeatureTagger)


def _shown(names):
  """Checkpoint names for a message; unknown Hugging Face keys said as such."""
  return ", ".join(f"{n[4:]} (a Hugging Face key)" if n.startswith("<hf>") else n
                   for n in sorted(names))


def model_for(ckpt, config):
  """The built model (encoder or task model) that holds every variable of `ckpt`.

  Args:
    ckpt: a checkpoints.Checkpoint (original names -> arrays).
    config: the BertConfig of its encoder.
  Raises:
    ValueError: one line naming the checkpoint and every variable that no
      model, or no single model, takes.
  """
  shapes = {name: tuple(value.shape) for name, value in ckpt.weights.items()}
  heads = [n for n in shapes if checkpoints.is_head_variable(n)]
  model = encoder = BertEncoder(config)
  if heads:
    models = [m for m in (c.for_head_variables(encoder, shapes) for c in TASK_MODELS)
              if m is not None]
    if len(models) > 1:
      raise ValueError(f"Checkpoint {ckpt.path} holds the heads of several models "
                       f"({', '.join(type(m).__name__ for m in models)}); a conversion "
                       "writes one.")
    if not models:
      raise ValueError(f"Checkpoint {ckpt.path}: no model of ours has the head variable(s) "
                       f"{_shown(heads)}; nothing was converted.")
    model = models[0]
  unplaced = set(shapes) - set(checkpoints.variable_map(model))
  if unplaced:
    raise ValueError(f"Checkpoint {ckpt.path}: {type(model).__name__} has no place for "
                     f"{_shown(unplaced)}; nothing was converted.")
  return model


def load_for_conversion(path, config, growth=None):
  """(Checkpoint read, model holding its values) for the checkpoint at `path` (any format).

  Every checkpoint variable lands in the model and every model variable comes
  from the checkpoint, shapes equal; the one exception is a pooler that a
  transformers question answering, token classification or masked/causal LM
  file lacks (its class has none; those models never read it), which keeps
  fresh values. growth: a vocab_growth.VocabGrowth, for a vocab that extends the
  checkpoint's (its new rows initialised as a training run's would be).
  """
  ckpt = checkpoints.read_checkpoint(path)
  model = model_for(ckpt, config)
  checkpoints.load_checkpoint(model, path, ckpt=ckpt, growth=growth)
  return ckpt, model


def write_checkpoint(model, output_dir, output_format, config, vocab_file=None, labels=None,
                     extra_files=None):
  """Writes every variable of `model` to output_dir as tf1, tf2 or hf; returns the path.

  extra_files ({name: bytes, or None to remove}) are written before the file that marks
  the directory complete (files.write_extra_files).
  `labels` name a classifier's or tagger's classes in the hf config.json; hf
  leaves out the pooler when the transformers class has none (logged).
  Raises ValueError, before writing anything, when the format cannot hold
  the model (hf and the feature-based tagger's BiLSTM).
  """
  if output_format == "tf1":
    return checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), output_dir,
                                           config, vocab_file, extra_files=extra_files)
  if output_format == "hf":
    return hf_checkpoints.save_hf_checkpoint(checkpoints.model_weights(model), output_dir,
                                             config, vocab_file, labels, extra_files)
  if output_format != "tf2":
    raise ValueError(f"Unknown checkpoint format {output_format!r}; expected tf1, tf2 or hf.")
  path_checks.ensure_writable_dir(output_dir, "output directory")
  # The config and vocab first: the checkpoint's `checkpoint` file, written last,
  # marks the directory complete (as the tf1 and hf writers do); an older one goes first.
  checkpoint_paths.check_no_other_model(output_dir, "tf2")
  files.remove_marker(os.path.join(output_dir, "checkpoint"))
  checkpoints.write_config_and_vocab(output_dir, config, vocab_file)
  files.write_extra_files(output_dir, extra_files)
  return checkpoints.save_tf2_checkpoint(model, os.path.join(output_dir, "model.ckpt"))
