"""The flow the fine-tuning scripts share (run_classifier, run_squad, run_ner, run_swag).

A script defines the shared flags with its own wording and defaults
(define_flags) beside its own, and its `main` walks a Runner through the
original's steps:

  runner = finetuning.Runner(FLAGS)
  runner.check_flags(data_dir=FLAGS.data_dir, output_dir=FLAGS.output_dir)
  config = runner.load_config()         # bert_config, vocab, length and case checks
  tokenizer = runner.setup()            # --output_dir, --export_dir, the tokenizer
  runner.check_run(task=...)            # --output_dir holds no other run's model
  ... read the data (every file now, so a bad one stops the run before training)
  runner.train_steps(len(train_examples), source)
  trainer = runner.start(task)          # strategy, this worker's outputs, the Trainer
  runner.train(path, spec) or runner.restore()
  runner.predict(path, spec, runner.batch_size(FLAGS.eval_batch_size)) ...
  runner.write_results("eval_results.txt", results)
  runner.export(export.TextClassifier, labels)

The script keeps what is its own: reading, features, the task, post-processing.
Every check raises ValueError (one line, see script_utils.run) before the step
that would make its work useless.
"""

import math
import os
import sys

import script_utils
from absl import flags, logging

ACTIONS = ("do_train", "do_eval", "do_predict")

# The original's flags (export_dir added): (kind, name, default, help, bounds).
_SHARED = (
    ("string", "data_dir", None, "The task's data directory.", {}),
    ("string", "bert_config_file", None,
     "bert_config.json. Default: the one beside --init_checkpoint (without it: the one a "
     "training run wrote to --output_dir).", {}),
    ("string", "vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint "
     "(without it: the one a training run wrote to --output_dir).", {}),
    ("string", "output_dir", None, "Checkpoints, records, results and predictions.", {}),
    ("string", "init_checkpoint", None,
     "Weights to start from: original TF1, Hugging Face or ours.", {}),
    ("bool", "do_lower_case", True, "Lower-case and strip accents (uncased models).", {}),
    ("integer", "max_seq_length", 128, "Tokens per example after WordPiece.",
     {"lower_bound": 1}),
    ("bool", "do_train", False, "Fine-tune on the training data.", {}),
    ("bool", "do_eval", False, "Evaluate on the dev data; writes eval_results.txt.", {}),
    ("bool", "do_predict", False, "Predict the test data.", {}),
    ("integer", "train_batch_size", 32, "Training batch size.", {"lower_bound": 1}),
    ("integer", "eval_batch_size", 8, "Evaluation batch size.", {"lower_bound": 1}),
    ("integer", "predict_batch_size", 8, "Prediction batch size.", {"lower_bound": 1}),
    ("float", "learning_rate", 5e-5, "Peak learning rate.", {}),
    ("float", "num_train_epochs", 3.0, "Passes over the training data.", {}),
    ("float", "warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
     {"lower_bound": 0.0, "upper_bound": 1.0}),
    ("integer", "save_checkpoints_steps", 1000, "Steps between checkpoints.", {"lower_bound": 1}),
    ("integer", "iterations_per_loop", 1000, "Most steps run per call to the device.",
     {"lower_bound": 1}),
    ("string", "export_dir", None, "Write a raw-text SavedModel here.", {}),  # added
)


def define_flags(omit=(), **changed):
  """Defines the shared fine-tuning flags, then the TPU, runtime and batching ones.

  changed: name="help" or name=(default, "help") where the script words or sets
  a flag its own way; omit: shared flags the script does not have. The flags
  are filed under the calling script, so that its --help lists them and
  script_utils.log_flags logs them.
  """
  name = sys._getframe(1).f_globals["__name__"]
  module = sys.argv[0] if name == "__main__" else name  # as absl names a script's flags
  for kind, flag, default, text, bounds in _SHARED:
    if flag in omit:
      continue
    change = changed.pop(flag, text)
    default, text = change if isinstance(change, tuple) else (default, change)
    getattr(flags, f"DEFINE_{kind}")(flag, default, text, module_name=module, **bounds)
  if changed:
    raise TypeError(f"Not shared fine-tuning flags: {', '.join(sorted(changed))}")
  script_utils.define_tpu_flags()
  script_utils.define_runtime_flags()
  script_utils.define_batching_flags()
  script_utils.require_positive("learning_rate", "num_train_epochs")


class Runner:
  """One fine-tuning run, step by step, from the parsed flags `values`.

  actions: the script's --do_* flags. After start(): `strategy`, `outputs`
  (where this worker writes) and `trainer`; only the chief writes the shared
  outputs (run.json, results, predictions, the export).
  """

  def __init__(self, values, actions=ACTIONS):
    self.values, self.actions = values, actions
    self.config = self.vocab_file = self.tokenizer = self.run = None
    self.strategy = self.outputs = self.trainer = self.multiple = None
    self.num_train_steps = 0

  def check_flags(self, **required):
    """The first checks: each of `required` (flag=value) is given, one action is set,
    TF_CONFIG is right (--strategy=multi_worker). Then logs the flags."""
    script_utils.require(**required)
    if not any(getattr(self.values, action) for action in self.actions):
      names = [f"--{action}" for action in self.actions]
      raise ValueError(f"At least one of {', '.join(names[:-1])} and {names[-1]} must be set.")
    script_utils.check_cluster(self.values)
    script_utils.log_flags()

  def load_config(self):
    """The BertConfig and vocab (by default beside --init_checkpoint), checked against
    --max_seq_length, --do_lower_case and the checkpoint; returns the config."""
    v = self.values
    self.config, self.vocab_file = script_utils.config_and_vocab(
        v.bert_config_file, v.vocab_file, v.init_checkpoint, v.output_dir)
    script_utils.check_lengths_and_case(self.config, v.max_seq_length, v.do_lower_case,
                                        v.init_checkpoint)
    return self.config

  def setup(self):
    """Creates --output_dir, checks --export_dir, returns the tokenizer of the vocab."""
    from data import files
    v = self.values
    script_utils.make_output_dir(v.output_dir)
    files.check_output_dir(getattr(v, "export_dir", None), "--export_dir", "the SavedModel")
    self.tokenizer = script_utils.load_tokenizer(self.vocab_file, v.do_lower_case, self.config)
    return self.tokenizer

  def check_run(self, **what):
    """Refuses an --output_dir holding the checkpoints of another run than the one
    `what` (and the length and start) defines; see script_utils.check_run."""
    self.run = script_utils.run_record(self.values, **what)
    script_utils.check_run(self.values.output_dir, self.run)

  def train_steps(self, num_examples, source):
    """The number of training steps (0 without --do_train); ValueError when there is
    no step. `source` names the training data in the message."""
    v = self.values
    if v.do_train:
      self.num_train_steps = script_utils.train_steps(num_examples, v.train_batch_size,
                                                      v.num_train_epochs, source)
    return self.num_train_steps

  def start(self, task):
    """Checks there are weights to use, then makes the strategy (seeding first), this
    worker's outputs and the Trainer of `task`, which reads the starting weights now."""
    v = self.values
    script_utils.require_weights(v)
    self.strategy, _ = script_utils.runtime(v)
    self.outputs = script_utils.worker_outputs(self.strategy, v.output_dir)
    self.multiple = script_utils.batch_length_multiple(v.batch_length_multiple, v.jit_compile,
                                                       self.strategy)
    self.trainer = script_utils.make_trainer(
        self.strategy, task, self.num_train_steps,
        int(self.num_train_steps * v.warmup_proportion), v.train_batch_size, v)
    return self.trainer

  @property
  def chief(self):
    """Whether this worker writes the shared outputs."""
    return self.outputs.chief

  def path(self, name):
    """Where this worker writes its records file `name` (--output_dir on the chief)."""
    return self.outputs.path(name)

  def output(self, name):
    """--output_dir/name, for the chief's shared outputs."""
    return os.path.join(self.values.output_dir, name)

  def train(self, path, spec):
    """Saves what defines the run (the chief), then fine-tunes on the records at `path`."""
    from data import pipeline
    v = self.values
    self.train_on(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(v.train_batch_size), True, v.seed, ctx,
        shuffle_buffer=10000, length_multiple=self.multiple,
        bucket_by_length=v.bucket_by_length))

  def train_on(self, dataset_fn, load_fn=None):
    """Saves what defines the run and the model's config and vocab (the chief: --output_dir
    then reads as a checkpoint directory), then trains on dataset_fn(input_context):
    per-replica batches, repeating (load_fn: see Trainer.train)."""
    from modeling import checkpoints
    v = self.values
    if self.chief:
      script_utils.save_run(v.output_dir, self.run)
      checkpoints.write_config_and_vocab(v.output_dir, self.config, self.vocab_file)
    self.trainer.train(dataset_fn, v.init_checkpoint, load_fn=load_fn)

  def restore(self):
    """Not training: loads the weights to evaluate or predict with."""
    logging.info("Model %s.", self.trainer.restore(self.values.init_checkpoint,
                                                   for_training=False))

  def batch_size(self, size):
    """The smallest multiple of `size` that splits evenly over the replicas: evaluation
    and prediction run whole batches, padded with examples that are not real."""
    replicas = self.strategy.num_replicas_in_sync
    return size * replicas // math.gcd(size, replicas)

  def predict(self, path, spec, batch, **options):
    """The model's outputs over the records at `path` in global batches of `batch`
    (options: Trainer.predict's keep and fill)."""
    from data import pipeline
    return self.trainer.predict(lambda ctx: pipeline.global_batches(
        path, spec, batch, ctx, length_multiple=self.multiple, by_length=True), **options)

  def write_results(self, name, results, prefix="eval"):
    """Writes `results` to --output_dir/name as the original's eval_results.txt (the
    chief), and logs them."""
    from modeling import reports
    if self.chief:
      reports.write_eval_results(self.output(name), results)
    for key in sorted(results):
      logging.info("%s %s = %s", prefix, key, results[key])

  def export(self, serving, *args):
    """With --export_dir, the chief saves serving(model, vocab_file, do_lower_case,
    max_seq_length, *args), a raw-text module of modeling.export, as a SavedModel."""
    from modeling import export
    v = self.values
    if not (v.export_dir and self.chief):
      return
    export.save(serving(self.trainer.model, self.vocab_file, v.do_lower_case,
                        v.max_seq_length, *args), v.export_dir)
    logging.info("Exported a raw-text SavedModel to %s", v.export_dir)
