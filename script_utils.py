"""What every entry script shares: one-line errors, logging of the flags, config lookup."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

from absl import app, flags, logging  # noqa: E402


def run(main):
  """absl's app.run, with a bad-input ValueError reported as one line on stderr."""
  def guarded(argv):
    try:
      main(argv)
    except ValueError as e:
      logging.debug("Failure details", exc_info=True)
      sys.exit(f"error: {e}")
  app.run(guarded)


def log_flags():
  """Logs the flags the running script defines, once, at start."""
  values = flags.FLAGS.get_flags_for_module(sys.argv[0])
  logging.info("Flags: %s", " ".join(f"--{f.name}={f.value}" for f in values))


def require(**named_values):
  """Raises ValueError naming the first flag whose value is missing."""
  for name, value in named_values.items():
    if value is None or value == "":
      raise ValueError(f"--{name} is required.")


def config_and_vocab(bert_config_file, vocab_file, init_checkpoint):
  """The BertConfig and vocab path, defaulting to the files beside the checkpoint."""
  from modeling import checkpoints
  from modeling.config import BertConfig
  if bert_config_file:
    config = BertConfig.from_json_file(bert_config_file)
  elif init_checkpoint:
    config = checkpoints.find_config(init_checkpoint)
  else:
    raise ValueError("--bert_config_file is required when --init_checkpoint is not given.")
  if not vocab_file:
    if not init_checkpoint:
      raise ValueError("--vocab_file is required when --init_checkpoint is not given.")
    vocab_file = checkpoints.find_vocab(init_checkpoint)
  return config, vocab_file
