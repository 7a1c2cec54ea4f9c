"""The steps of a training run, in order, around the script's task adapter.

Every training script (run_pretraining, run_classifier, run_squad, run_ner,
run_swag) reads its flags once, in `main`, into frozen settings
(cli/settings.py) and hands the Runner those settings and its TaskAdapter
class (cli/task_adapter.py): what its task does its own way.
Runner(settings, adapter_class).run() performs the steps they all share,
always in this order. Each adapter step takes what earlier steps returned,
and the adapter keeps nothing that a step sets, so a step cannot run before
what it needs:

  1. flags: the required ones given, one --do_* set; the adapter made (its
     constructor checks the script's own flags); the evaluation flags agreeing
     (modeling/periodic_eval.py), TF_CONFIG; logged
  2. the model files: config (adapter.adjust_config(config) -> config), vocab,
     lengths, casing, the starting checkpoint readable, the tokenizer
     -> ModelFiles
  3. the outputs: --output_dir writable, --export_dir usable
  4. the run's identity: adapter.define(config) -> (what defines the run,
     `defined`); --output_dir holds no model of another run (run.json)
  5. the strategy (seeds and precision first), where this worker writes
     -> Worker; the chief removes what runs killed while writing left (best/
     put back first if it went missing)
  6. the data: adapter.read(defined, files, worker) -> `data`; every file is
     read now, so bad input stops the run before training rather than after it
  7. weights to use when evaluating or predicting without training
  8. adapter.train_steps(data) -> TrainSteps (training only),
     adapter.build_task(config, data) -> the Trainer, which reads the starting
     weights now -> Run
  9. train on adapter.train_input(data, run) (the chief then writes run.json
     with adapter.notes(run) and, after training, runs adapter.after_training(run))
     or restore; then adapter.evaluate(data, run) -> eval_results.txt,
     adapter.predict(data, run) -> `predicted`, adapter.serving(data, run,
     predicted) -> --export_dir

Each adapter method runs at most once, except `evaluate`: with
--eval_every_steps / --eval_every_epochs it also scores dev during training
(modeling/periodic_eval.py: eval_log.csv, the best checkpoint in
--output_dir/best, early stopping); --use_best_checkpoint then evaluates,
predicts and exports with that checkpoint (docs/protocol.md).

Each check raises ValueError (one `error:` line, cli/app.py) before the step
whose work it would waste. Only the chief writes the shared outputs.
"""

import os

import tensorflow as tf
from absl import logging

from cli import app, model_files, run_identity, signals
from cli.task_adapter import Run, TrainSteps, Worker
from data import files as data_files, path_checks
from modeling import (checkpoints, cluster, distribution, export, optimization, periodic_eval,
                      selection, training, vocab_growth)


class Runner:
  """One training run of a script: Runner(settings, adapter_class).run() (see the module's
  docstring for the steps)."""

  def __init__(self, settings, adapter_class):
    self.settings, self.adapter_class = settings, adapter_class

  def run(self):
    """The steps, in order (see the module's docstring)."""
    s = self.settings
    adapter = self._checked_adapter()  # 1
    files = self._model_files(adapter)  # 2

    app.make_output_dir(s.output_dir)  # 3
    path_checks.check_output_dir(s.export_dir, "--export_dir", "the SavedModel")
    what, defined = adapter.define(files.config)  # 4
    # The optimizer too (AdamW's and LAMB's checkpoints hold the same slots: a resume under
    # the other would go on from moments it did not make), and the vocab the rows are of.
    what = {**what, "optimizer": s.optimizer, **run_identity.vocab_entry(files.vocab_file)}
    identity = run_identity.identity(what, s.max_seq_length, s.init_checkpoint, s.output_dir,
                                     adapter.length_and_start_define_run, s.do_lower_case)
    run_identity.check(s.output_dir, identity, s)
    model_files.check_resumed_config(files.config, s.output_dir)

    strategy = strategy_from_flags(s)  # 5
    outputs = distribution.WorkerOutputs(strategy, s.output_dir)
    app.at_exit(outputs.remove_scratch)
    worker = Worker(strategy, outputs,
                    batch_length_multiple(s.batch_length_multiple, s.jit_compile, strategy),
                    training.static_shapes(s.jit_compile, strategy))
    if worker.chief:  # the others write only under .workers/
      remove_leftovers(s.output_dir, s.export_dir)

    data = adapter.read(defined, files, worker)  # 6
    model_files.check_has_weights(s.do_train, s.init_checkpoint, s.output_dir)  # 7
    steps = adapter.train_steps(data) if s.do_train else TrainSteps(0, 0)  # 8
    if s.do_train:
      logging.info("%d training steps, %d of them warming up.", steps.steps, steps.warmup)
    growth = vocab_growth.growth_for(s.init_checkpoint, files.vocab_file, files.config,
                                     s.new_token_embeddings, s.seed)
    trainer = make_trainer(strategy, adapter.build_task(files.config, data), steps.steps,
                           steps.warmup, s.train_batch_size, s, growth)
    run = Run(s, files, worker, trainer)

    if s.do_train:  # 9
      self._train(adapter, data, run, adapter.train_input(data, run), identity, steps)
    if s.use_best_checkpoint:
      distribution.wait_for_all(strategy)  # the chief's last best/ written before any reads it
      periodic_eval.load_best(trainer.state, s.output_dir)
    elif not s.do_train:
      logging.info("Model %s.", trainer.restore(s.init_checkpoint, for_training=False,
                                                heads_required=adapter.trained_head_required))
    # Made here on every worker if nothing made it yet: under several workers making a
    # variable is a collective, and a step first read by the chief alone (its results) hangs.
    trainer.global_step  # noqa: B018
    if s.do_eval:
      run.write_results("eval_results.txt", adapter.evaluate(data, run))
    predicted = adapter.predict(data, run) if s.do_predict else None
    serving = adapter.serving(data, run, predicted)
    if serving is not None and s.export_dir and worker.chief:
      export.save(serving, s.export_dir)
      logging.info("Exported a raw-text SavedModel to %s", s.export_dir)

  def _checked_adapter(self):
    """Step 1: the flags given and agreeing with each other, the adapter made (it checks
    the script's own); the flags logged. Returns the adapter."""
    s, adapter_class = self.settings, self.adapter_class
    required = adapter_class.required_flags(s)
    acts = any(getattr(s, action) for action in adapter_class.actions)
    if not acts:  # an export alone reads the trained run, no data
      required.pop("data_dir", None)
    app.check_given(**required)
    if not acts and not s.export_dir:
      names = [f"--{action}" for action in adapter_class.actions] + (
          ["--export_dir"] if adapter_class.exports else [])
      raise ValueError(f"At least one of {', '.join(names[:-1])} and {names[-1]} must be set.")
    adapter = adapter_class(s)
    selection.check_metric_name(adapter.script, s.best_metric, "--best_metric",
                                adapter.headline_metric())
    periodic_eval.check_options(s.eval_every_steps, s.eval_every_epochs, s.best_metric,
                                s.early_stopping_patience, s.use_best_checkpoint, s.do_train,
                                getattr(s, adapter.dev_action), adapter.dev_action,
                                s.output_dir, adapter.headline_metric())
    if s.strategy == "multi_worker" and not s.use_tpu:  # TF_CONFIG checked at once
      cluster.parse_tf_config(os.environ.get("TF_CONFIG"))
    app.log_flags(s)
    return adapter

  def _model_files(self, adapter):
    """Step 2: the config (as the adapter adjusts it), the vocab and its tokenizer, checked."""
    s = self.settings
    config, vocab_file = model_files.config_and_vocab(
        s.bert_config_file, s.vocab_file, s.init_checkpoint, s.output_dir,
        adapter.vocab_required)
    config = adapter.adjust_config(config)
    model_files.check_lengths_and_case(config, s.max_seq_length, s.do_lower_case,
                                       s.init_checkpoint)
    tokenizer = None
    if vocab_file:
      tokenizer = model_files.load_tokenizer(
          vocab_file, True if s.do_lower_case is None else s.do_lower_case, config,
          adapter.tokens)
    return model_files.ModelFiles(config, vocab_file, tokenizer)

  def _train(self, adapter, data, run, train_input, identity, steps):
    """The chief records the run's identity, config and vocab in --output_dir (which then
    reads as a checkpoint directory); then every worker trains, evaluating on dev as
    --eval_every_* asks."""
    s, chief = self.settings, run.worker.chief
    if chief:
      inputs = {name: getattr(s, name) for name in adapter.input_flags}
      run_identity.save(s.output_dir, {**identity, **inputs, **adapter.notes(run)})
      checkpoints.write_config_and_vocab(s.output_dir, run.files.config, run.files.vocab_file)
    with train_input.naming_errors():
      evaluator = periodic_eval.during_training(
          periodic_eval.every_steps(s.eval_every_steps, s.eval_every_epochs,
                                    steps.per_epoch or 0),
          lambda: adapter.evaluate(data, run),
          periodic_eval.chosen_metric(s.best_metric, adapter.headline_metric(), s.output_dir),
          s.early_stopping_patience, s.output_dir, run.files.config, run.files.vocab_file,
          chief)
      run.trainer.train(train_input.dataset_fn, s.init_checkpoint,
                        load_fn=train_input.load_fn, evaluator=evaluator,
                        source=train_input.source)
    if chief:
      adapter.after_training(run)


def remove_leftovers(output_dir, export_dir=None):
  """What runs killed while writing left: best/ back from a complete temporary copy if it
  went missing (periodic_eval.recover_best), then the temporary files and directories in
  output_dir and best/ (checkpoints, records) and beside export_dir (SavedModels). For
  the chief, before it writes: no other process writes these."""
  restored = periodic_eval.recover_best(output_dir)
  if restored:
    logging.warning("Restored %s/best from %s, which a run stopped while replacing it left.",
                    output_dir, restored)
  removed = data_files.remove_all_leftovers(output_dir)
  removed += data_files.remove_all_leftovers(os.path.join(output_dir, periodic_eval.BEST_DIR))
  if export_dir:
    removed += data_files.remove_leftovers(export_dir)
  if removed:
    logging.info("Removed %.1f MB of temporary files left by earlier runs that did not "
                 "finish.", removed / 1e6)


def strategy_from_flags(values):
  """Seeds (--seed), sets the precision policy (--dtype), then makes and describes the
  tf.distribute strategy of --strategy / --use_tpu and the TPU flags (multi-worker:
  TF_CONFIG's cluster, waited for up to --worker_timeout_seconds)."""
  distribution.set_seed(values.seed)
  distribution.set_precision(values.dtype)
  name = "tpu" if values.use_tpu else values.strategy
  tf_config = os.environ.get("TF_CONFIG")
  strategy = distribution.make_strategy(name, values.tpu_name or values.master,
                                        values.tpu_zone, values.gcp_project, tf_config,
                                        values.worker_timeout_seconds)
  if name == "multi_worker":
    app.joined_cluster(cluster.parse_tf_config(tf_config))
    signals.take_back_sigterm()
    distribution.check_same_flags(strategy, app.script_flags())
  distribution.describe(strategy, values.do_train)
  return strategy


def batch_length_multiple(multiple, jit_compile=False, strategy=None):
  """The trimming multiple to use: `multiple` (the flag), or chosen for the hardware.

  TPUs need one static shape (0). Unset, it is 16 under XLA, where every
  distinct length is a compilation; 8 on GPUs, whose tensor cores want
  multiples of 8; else 1, since exact lengths are fastest on CPUs (see
  docs/performance.md).
  """
  if isinstance(strategy, tf.distribute.TPUStrategy):
    if multiple:
      logging.info("TPU: batches keep --max_seq_length (--batch_length_multiple is ignored).")
    return 0
  if multiple is not None:
    return multiple
  if jit_compile:
    return 16
  return 8 if tf.config.list_logical_devices("GPU") else 1


def make_trainer(strategy, task, num_train_steps, num_warmup_steps, batch_size, values,
                 vocab_growth=None):
  """A Trainer for `task` configured from the original's and the runtime flags.

  Training, the weights it starts from (--init_checkpoint, or the checkpoint
  in --output_dir it resumes) are read now: one that is missing or does not
  fit the model stops the run before the script writes anything.
  """
  if values.do_train and num_train_steps < 1:
    raise ValueError(f"Training needs at least one step, not {num_train_steps}.")
  steps = max(num_train_steps, 1)  # not training: the optimizer is built but never stepped
  replicas, micro = strategy.num_replicas_in_sync, values.gradient_accumulation_steps
  if values.do_train and batch_size % (replicas * micro):
    raise ValueError(f"--train_batch_size={batch_size} must divide evenly into {replicas} "
                     f"replica(s) x --gradient_accumulation_steps={micro}.")
  if not values.do_train:  # no training batch is ever split: nothing to divide
    batch_size, micro = replicas, 1
  trainer = training.Trainer(
      strategy, task,
      lambda names: optimization.create_optimizer(values.optimizer, values.learning_rate, steps,
                                                  num_warmup_steps, names),
      training.TrainConfig(
          output_dir=values.output_dir, num_train_steps=steps, global_batch_size=batch_size,
          steps_per_loop=values.iterations_per_loop, log_steps=min(values.log_steps, steps),
          save_checkpoints_steps=values.save_checkpoints_steps,
          keep_checkpoint_max=values.keep_checkpoint_max,
          gradient_accumulation_steps=micro,
          jit_compile=values.jit_compile, loss_scaling=values.dtype == "float16",
          vocab_growth=vocab_growth))
  if values.do_train:
    trainer.load_start(values.init_checkpoint)
  return trainer
