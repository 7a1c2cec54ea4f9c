r"""Masked-LM + next-sentence pretraining from create_pretraining_data.py records.

  python run_pretraining.py --input_file='data/*.tfrecord' --output_dir=out \
    --bert_config_file=bert_config.json --do_train --do_eval \
    --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
    --num_train_steps=100000 --num_warmup_steps=10000 --learning_rate=1e-4

Restarting with the same --output_dir resumes from its latest checkpoint.
"""

import os

from absl import flags, logging

from cli import app
from cli.flags import define_runtime_flags, define_tpu_flags, must_be_positive
from cli.runner import Runner
from cli.settings import RunSettings, with_flags
from cli.task_adapter import TaskAdapter, TrainInput, TrainSteps
from data import dynamic_masking, features, path_checks, record_checks
from modeling import conversion, language_model, reports

flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "Training records: comma-separated files or globs.")
flags.DEFINE_string("output_dir", None, "Checkpoints, logs, summaries and results go here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Start from these weights (original TF1, Hugging Face or ours); "
                    "ignored when --output_dir already has a checkpoint to resume.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per record (must match the records).",
                     lower_bound=1)
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per record (must match).",
                     lower_bound=0)
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate and write eval_results.txt.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.", lower_bound=1)
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.", lower_bound=1)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer steps (at least 1 with --do_train).")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.", lower_bound=0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.",
                     lower_bound=1)
flags.DEFINE_integer("max_eval_steps", 100, "Most evaluation batches.", lower_bound=1)
define_tpu_flags()
define_runtime_flags()
# Added.
flags.DEFINE_string("eval_input_file", None, "Evaluation records; default: --input_file.")
flags.DEFINE_enum("input_compression", "none", ["none", "gzip"], "Compression of the records.")
flags.DEFINE_string("vocab_file", None,
                    "vocab.txt of the model, copied into --output_dir and export/. Default: the "
                    "one beside --init_checkpoint (without it, --output_dir's), if any.")
flags.DEFINE_float("next_sentence_weight", 1.0,
                   "Weight of the next-sentence loss in the total (the original: 1). 0 trains "
                   "masked LM only (the paper's 'No NSP'): the next-sentence head and pooler "
                   "stay as initialized and no next-sentence metrics are reported.")
flags.DEFINE_enum("objective", "mlm", ["mlm", "ltr"],
                  "mlm: masked LM, plus the next-sentence task as --next_sentence_weight says "
                  "(the original). ltr: a left-to-right language model (the paper's 'LTR & No "
                  "NSP'): causal attention, the next token predicted at every real position "
                  "from the records' text with the masked tokens put back, no next-sentence "
                  "head; the exported bert_config.json gets causal_attention: true.")
flags.DEFINE_bool("dynamic_masking", False,
                  "Draw new masks for every training batch (each pass over the records masks "
                  "anew) from the records' text with their masks put back; needs --vocab_file.")
flags.DEFINE_float("masked_lm_prob", 0.15, "With --dynamic_masking: fraction of tokens masked.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_bool("do_whole_word_mask", False,
                  "With --dynamic_masking: mask whole words, as create_pretraining_data.py's "
                  "flag of that name (the mix drawn per WordPiece).")
flags.DEFINE_bool("per_word_decision", False,
                  "With --dynamic_masking: whole words, the mix drawn once per word, as "
                  "create_pretraining_data.py's flag of that name.")
must_be_positive("learning_rate")
FLAGS = flags.FLAGS
# The settings: the flags the runner reads, this script's own and whether
# --next_sentence_weight and --masked_lm_prob were given (main resolves them).
Settings = with_flags(RunSettings, "input_file", "max_predictions_per_seq", "eval_batch_size",
                      "num_train_steps", "num_warmup_steps", "max_eval_steps",
                      "eval_input_file", "input_compression", "next_sentence_weight",
                      "next_sentence_weight_given", "objective", "dynamic_masking",
                      "masked_lm_prob", "masked_lm_prob_given", "do_whole_word_mask",
                      "per_word_decision")


class Pretraining(TaskAdapter):
  """Records in; checkpoints, export/ (the original's layout), training curves and
  eval_results.txt out."""

  actions = ("do_train", "do_eval")
  exports = False
  tokens = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
  @property
  def vocab_required(self):
    """A vocab, given or found, is only copied, unless --dynamic_masking masks anew."""
    return self.settings.dynamic_masking
  # The paper's second phase resumes the same run on records of 512 tokens.
  length_and_start_define_run = False
  # Scoring a checkpoint whose masked-LM head starts fresh is a step-0 baseline
  # (benchmarks/experiments/domain_adaptation.py); the log lists the fresh variables.
  trained_head_required = False

  def __init__(self, settings):
    super().__init__(settings)
    s = settings
    language_model.check_options(
        s.do_train, s.num_train_steps, s.objective, s.next_sentence_weight,
        s.next_sentence_weight_given, s.dynamic_masking, s.max_predictions_per_seq)
    given = [name for name, value in (("--do_whole_word_mask", s.do_whole_word_mask),
                                      ("--per_word_decision", s.per_word_decision),
                                      ("--masked_lm_prob", s.masked_lm_prob_given)) if value]
    if given and not s.dynamic_masking:
      raise ValueError(f"{' and '.join(given)} without --dynamic_masking: training reads the "
                       f"records' own masks (give {'them' if len(given) > 1 else 'it'} to "
                       "create_pretraining_data.py), or add --dynamic_masking to mask anew.")
    self.compression = "" if s.input_compression == "none" else "GZIP"
    self.eval_pattern = s.eval_input_file or s.input_file
    self.spec = features.pretraining_feature_spec(s.max_seq_length, s.max_predictions_per_seq)

  @classmethod
  def required_flags(cls, s):
    return {"bert_config_file": s.bert_config_file, "input_file": s.input_file,
            "output_dir": s.output_dir}

  def adjust_config(self, config):
    s = self.settings
    return language_model.objective_config(s.objective, config, s.bert_config_file)

  def define(self, config):  # a checkpoint of another objective, or head, is refused
    s = self.settings  # a weight of 0 leaves the next-sentence head out of the model
    return {"objective": s.objective, "next_sentence_weight": s.next_sentence_weight}, None

  def read(self, defined, files, worker):
    """Every records file's layout and first ids, before training (after the strategy:
    MultiWorkerMirroredStrategy must configure the runtime before any op runs)."""
    s = self.settings
    replicas = worker.strategy.num_replicas_in_sync
    if s.do_eval and s.eval_batch_size % replicas:  # before training, not after it
      raise ValueError(f"--eval_batch_size={s.eval_batch_size} must divide evenly into "
                       f"{replicas} replicas.")
    features.check_pretraining_inputs(
        s.input_file, s.eval_input_file, s.max_seq_length, s.max_predictions_per_seq,
        files.config, self.compression,
        # evaluation compiled for one shape runs whole batches only
        s.eval_batch_size if s.do_eval and worker.static_shapes else None)

  def train_steps(self, data):
    return TrainSteps(self.settings.num_train_steps, self.settings.num_warmup_steps)

  def build_task(self, config, data):
    s = self.settings
    return language_model.objective_task(s.objective, config, s.next_sentence_weight)

  def _records(self, static_shapes, pattern, batch_size, training, vocab=None):
    """Batches of the records at `pattern` (masked anew given a vocab). Compiled for one
    shape (XLA, TPUs), evaluation drops a last partial batch, as the original always did;
    otherwise it counts every record."""
    s = self.settings
    return dynamic_masking.pretraining_input(
        pattern, self.spec, batch_size, training, s.seed, self.compression,
        training or static_shapes, vocab, s.masked_lm_prob, s.do_whole_word_mask,
        s.per_word_decision)

  def train_input(self, data, run):
    s = self.settings
    records = self._records(run.worker.static_shapes, s.input_file, s.train_batch_size, True,
                            run.files.tokenizer.vocab if s.dynamic_masking else None)
    # The files by name: the same records moved (to a bucket) resume where they stopped.
    names = [os.path.basename(n) for n in path_checks.expand_file_patterns(s.input_file,
                                                                           "records")]
    return TrainInput(records, naming_errors=lambda: record_checks.naming_bad_files(
        s.input_file, self.compression, self._checks(run)), source="\n".join(
            [f"{s.max_seq_length} {s.max_predictions_per_seq}", self.compression,
             str(s.dynamic_masking), *names]))

  def _checks(self, run):
    """What a record met while training or evaluating is checked against when it fails."""
    s = self.settings
    return features.pretraining_record_checks(s.max_seq_length, s.max_predictions_per_seq,
                                              run.files.config)

  def notes(self, run):
    return {"objectives": list(run.trainer.task.objectives)}

  def after_training(self, run):
    out = self.settings.output_dir
    export = os.path.join(out, "export")
    # The vocab the run knows (--vocab_file, else beside --init_checkpoint, else
    # --output_dir's), so that the export reads as a checkpoint directory.
    conversion.write_checkpoint(run.trainer.model, export, "tf1", run.files.config,
                                run.files.vocab_file)
    logging.info("Exported the original checkpoint layout to %s", export)
    reports.plot_curves(os.path.join(out, "train_log.csv"),
                        os.path.join(out, "training_curves.png"),
                        [("loss", "loss"), run.trainer.task.curve])

  def evaluate(self, data, run):
    if run.worker.static_shapes:
      logging.info("Evaluation compiled for one shape scores whole batches of "
                   "--eval_batch_size=%d only, as the original did: a last partial batch of "
                   "each worker's records is left out.", self.settings.eval_batch_size)
    with record_checks.naming_bad_files(self.eval_pattern, self.compression, self._checks(run)):
      return run.trainer.evaluate(self._records(run.worker.static_shapes, self.eval_pattern,
                                                self.settings.eval_batch_size, False),
                                  self.settings.max_eval_steps)


def main(_):
  Runner(Settings.from_flags(
      FLAGS, next_sentence_weight_given=bool(FLAGS["next_sentence_weight"].present),
      masked_lm_prob_given=bool(FLAGS["masked_lm_prob"].present)), Pretraining).run()


if __name__ == "__main__":
  app.run(main)
