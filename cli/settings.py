"""A training run's settings: its flags, read once in `main` into one frozen object.

RunSettings lists the flags the runner reads (cli/runner.py), FineTuningSettings
adds those every fine-tuning script shares, and a script adds its own flags by
name with with_flags. Its `main` makes the settings with
`Settings.from_flags(FLAGS)`; from then on nothing reads absl's flags and
nothing changes a value: the runner and the script's adapter take the settings
as an argument, a misspelled name fails where it is read, and a test builds the
settings directly, without absl.

A field without a default must be a flag the script defines (or a value `main`
works out and passes to from_flags); the fields with defaults, all here in
RunSettings, are the flags some scripts do not define, set to the value that
turns them off there.
"""

import dataclasses
from typing import Optional

from absl import logging

from cli import run_identity


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
  """The flags the runner reads (cli/runner.py), as every training script has them."""
  # The model files and outputs.
  bert_config_file: Optional[str]
  vocab_file: Optional[str]
  init_checkpoint: Optional[str]
  output_dir: Optional[str]
  max_seq_length: int
  # Training.
  do_train: bool
  train_batch_size: int
  learning_rate: float
  save_checkpoints_steps: int
  iterations_per_loop: int
  # TPUs and the runtime (cli/flags.py: define_tpu_flags, define_runtime_flags).
  use_tpu: bool
  tpu_name: Optional[str]
  tpu_zone: Optional[str]
  gcp_project: Optional[str]
  master: Optional[str]
  strategy: str
  dtype: str
  jit_compile: bool
  optimizer: str
  gradient_accumulation_steps: int
  log_steps: int
  keep_checkpoint_max: int
  seed: Optional[int]
  new_token_embeddings: str
  worker_timeout_seconds: int
  # Flags some scripts do not define (run_pretraining most), as "off".
  do_eval: bool = False
  do_predict: bool = False
  do_lower_case: Optional[bool] = None  # None: the casing is not checked; the vocab lower-cases
  export_dir: Optional[str] = None
  batch_length_multiple: Optional[int] = None
  bucket_by_length: bool = False
  eval_every_steps: int = 0
  eval_every_epochs: float = 0.0
  best_metric: Optional[str] = None
  early_stopping_patience: int = 0
  use_best_checkpoint: bool = False

  @property
  def evaluates_during_training(self):
    """Whether --eval_every_steps or --eval_every_epochs asks for evaluation while training."""
    return bool(self.eval_every_steps or self.eval_every_epochs)

  @classmethod
  def from_flags(cls, flag_values, **resolved):
    """The settings from parsed absl `flag_values`; `resolved`: values `main` works out
    itself (a default that depends on another flag, whether a flag was given), by field.
    A run that does not train takes each flag it is not given from --output_dir's
    run.json where that records one (run_identity.flags_to_take; logged), so that
    evaluating or predicting with a trained model needs only --output_dir and the data.

    TypeError naming a field without a default that is neither a defined flag nor
    resolved. Lists become tuples, so that no value can change.
    """
    taken = {}
    if "do_train" in flag_values and not flag_values["do_train"].value:
      output_dir = flag_values["output_dir"].value
      taken = run_identity.flags_to_take(output_dir, {
          f.name: flag_values[f.name].parser.parse for f in dataclasses.fields(cls)
          if f.name in flag_values and not flag_values[f.name].present
          and f.name not in resolved})
      for name, value in taken.items():
        logging.info("--%s=%s, as %s/%s records the model was trained with.", name,
                     run_identity.as_flag(value), output_dir, run_identity.TRAINED_WITH)
    values = {}
    for field in dataclasses.fields(cls):
      if field.name in resolved:
        values[field.name] = resolved.pop(field.name)
      elif field.name in taken:
        value = taken[field.name]
        values[field.name] = tuple(value) if isinstance(value, list) else value
      elif field.name in flag_values:
        value = flag_values[field.name].value
        values[field.name] = tuple(value) if isinstance(value, list) else value
      elif field.default is dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{field.name}: the script defines no flag "
                        f"--{field.name} and main does not resolve it.")
    if resolved:
      raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(resolved))}.")
    return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningSettings(RunSettings):
  """RunSettings and the fine-tuning flags every fine-tuning script reads
  (cli/flags.py: define_finetuning_flags)."""
  predict_batch_size: int
  num_train_epochs: float
  warmup_proportion: float


def with_flags(base, *names):
  """A frozen settings class: `base`'s fields and one field for each of the script's own
  flags in `names` (no default: from_flags takes each from its flag)."""
  return dataclasses.make_dataclass("Settings", names, bases=(base,), frozen=True,
                                    kw_only=True)
