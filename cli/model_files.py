"""The config, vocab and checkpoint a run uses, found and checked before any work.

The config and vocab default to the files beside --init_checkpoint; without
one, to the copies a training run wrote into --output_dir (which then reads
as a checkpoint directory).
"""

import dataclasses
import os
from typing import Optional

from data import files, path_checks, tokenization
from modeling import checkpoint_paths, checkpoints
from modeling.config import BertConfig


@dataclasses.dataclass(frozen=True)
class ModelFiles:
  """What a run's model is made from: its config, its vocab.txt (None: a run without one)
  and the tokenizer of that vocab."""
  config: BertConfig
  vocab_file: Optional[str]
  tokenizer: Optional[tokenization.FullTokenizer]


def config_and_vocab(bert_config_file, vocab_file, init_checkpoint, output_dir=None,
                     vocab_required=True):
  """(BertConfig, vocab path or None): the flags' files, else those beside init_checkpoint,
  else (no init_checkpoint) those a training run copied into output_dir. Without
  vocab_required, a vocab found nowhere is None rather than an error."""
  path_checks.check_input_files(bert_config_file=bert_config_file, vocab_file=vocab_file)
  if init_checkpoint and not (bert_config_file and vocab_file):
    check_checkpoint(init_checkpoint)  # a missing checkpoint is not a missing config
  saved = {}
  for name in ("bert_config.json", "vocab.txt") if output_dir and not init_checkpoint else ():
    if files.exists(os.path.join(output_dir, name)):
      saved[name] = os.path.join(output_dir, name)
  where = "--init_checkpoint is not given and --output_dir holds no trained model's"
  if bert_config_file or "bert_config.json" in saved:
    config = BertConfig.from_json_file(bert_config_file or saved["bert_config.json"])
  elif init_checkpoint:
    config = checkpoints.find_config(init_checkpoint)
  else:
    raise ValueError(f"--bert_config_file is required when {where} bert_config.json.")
  if not vocab_file and "vocab.txt" in saved:
    vocab_file = saved["vocab.txt"]
  elif not vocab_file and init_checkpoint:
    try:
      vocab_file = checkpoints.find_vocab(init_checkpoint)
    except ValueError:
      if vocab_required:
        raise
  elif not vocab_file and vocab_required:
    raise ValueError(f"--vocab_file is required when {where} vocab.txt.")
  return config, vocab_file


def check_lengths_and_case(config, max_seq_length, do_lower_case, init_checkpoint):
  """The original's checks: max_seq_length fits the model; casing fits the checkpoint's
  name, and a Hugging Face checkpoint's tokenizer_config.json (do_lower_case None: not
  checked); the checkpoint is readable."""
  if max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length={max_seq_length} exceeds the model's "
                     f"max_position_embeddings ({config.max_position_embeddings}).")
  if do_lower_case is not None:
    tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
    tokenization.validate_case_matches_tokenizer_config(do_lower_case, init_checkpoint)
  if init_checkpoint:
    check_checkpoint(init_checkpoint)


def check_checkpoint(path):
  """Raises ValueError naming --init_checkpoint when `path` holds no readable checkpoint."""
  try:
    checkpoint_paths.resolve_checkpoint(path)
  except ValueError as e:
    raise ValueError(f"--init_checkpoint: {e}") from None


def load_tokenizer(vocab_file, do_lower_case, config, tokens=("[UNK]", "[CLS]", "[SEP]")):
  """A FullTokenizer; ValueError when the vocab lacks `tokens` or outgrows the model.

  A vocab with more entries than the config's vocab_size would give ids the
  embedding table does not have.
  """
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  tokenizer.require_tokens(list(tokens))
  size = max(tokenizer.vocab.values()) + 1
  if size > config.vocab_size:
    raise ValueError(f"--vocab_file={vocab_file} has {size} entries but the model's "
                     f"vocab_size is {config.vocab_size}; pass the vocab the model was "
                     "made with, or raise vocab_size in bert_config.json to match (a vocab "
                     "extended with learn_vocab.py --extension=append).")
  return tokenizer


def check_has_weights(training, init_checkpoint, output_dir):
  """Raises ValueError when evaluation or prediction alone would run untrained weights."""
  import tensorflow as tf
  if training or init_checkpoint or tf.train.latest_checkpoint(output_dir):
    return
  raise ValueError("Evaluating or predicting without --do_train needs trained weights: pass "
                   "--init_checkpoint, or an --output_dir holding a checkpoint.")


# The fields that make a model's weights (their number and shapes) or what they compute;
# dropout and the initializer's range do neither, so a resume may change them.
_ARCHITECTURE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "hidden_act", "max_position_embeddings",
                 "type_vocab_size", "causal_attention")


def check_resumed_config(config, output_dir):
  """Raises ValueError naming the fields when output_dir holds a checkpoint (which the run
  would resume or use) of a model other than `config`, as its bert_config.json (the copy
  a training run wrote there) says."""
  import tensorflow as tf
  saved_path = os.path.join(output_dir, "bert_config.json")
  if not tf.train.latest_checkpoint(output_dir) or not files.exists(saved_path):
    return
  saved = BertConfig.from_json_file(saved_path)
  differ = [f"{name} {getattr(saved, name)!r}, not {getattr(config, name)!r}"
            for name in _ARCHITECTURE if getattr(saved, name) != getattr(config, name)]
  if differ:
    raise ValueError(f"--output_dir={output_dir} holds a model of another config ({saved_path}"
                     f": {'; '.join(differ)}); it would be reused. Pass that file as "
                     "--bert_config_file to use it, or a new --output_dir to start afresh.")
