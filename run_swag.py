r"""Fine-tunes BERT on SWAG-style multiple choice: training, evaluation, prediction and export.

  python run_swag.py --data_dir=swag --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/swag \
    --max_seq_length=128 --train_batch_size=16 --learning_rate=2e-5 --num_train_epochs=3

The paper fine-tuned SWAG for 3 epochs at learning rate 2e-5 with batch 16,
which are this script's defaults. Batch sizes count questions: a batch of 16
four-choice questions runs 64 sequences. --bert_config_file and --vocab_file
default to the files beside --init_checkpoint.
"""

import os

import scipy.special
from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner
from cli.settings import FineTuningSettings, with_flags
from cli.task_adapter import TaskAdapter, epoch_steps
from data import files, metrics, swag
from modeling import export, multiple_choice

define_finetuning_flags(
    __name__,
    data_dir="Directory of train.csv, val.csv and test.csv (SWAG layout).",
    max_seq_length="Tokens per choice (context + ending) after WordPiece.",
    do_train="Fine-tune on train.csv.",
    do_eval="Evaluate on val.csv; writes eval_results.txt.",
    do_predict="Predict test.csv: test_results.tsv and test_predictions.tsv.",
    train_batch_size=(16, "Training batch size, in questions (paper: 16)."),
    eval_batch_size="Evaluation batch size, in questions.",
    predict_batch_size="Prediction batch size, in questions.",
    learning_rate=(2e-5, "Peak learning rate (paper: 2e-5)."),
    num_train_epochs="Passes over the training data (paper: 3).",
    export_dir="Write a SavedModel here that takes raw strings (sent1 [N], sent2 [N], endings "
               "[N, num_choices]) and returns a probability per ending.")
# Added.
flags.DEFINE_integer("num_choices", 4, "Endings per question (columns ending0 ..).",
                     lower_bound=2)
FLAGS = flags.FLAGS
# The settings: the flags the runner reads and this script's own (cli/settings.py).
Settings = with_flags(FineTuningSettings, "data_dir", "eval_batch_size", "num_choices")


class MultipleChoice(TaskAdapter):
  """SWAG-layout csv files in; eval_results.txt, test_results.tsv and
  test_predictions.tsv out."""

  script = "run_swag.py"

  @classmethod
  def required_flags(cls, s):
    return {"data_dir": s.data_dir, "output_dir": s.output_dir}

  def define(self, config):
    return {"task": "multiple choice", "num_choices": self.settings.num_choices,
            "causal_attention": config.causal_attention}, None

  def read(self, defined, files, worker):
    """{file name: questions} of the csv files the run uses."""
    s = self.settings
    questions = {name: swag.read_questions(os.path.join(s.data_dir, name), s.num_choices,
                                           labelled)
                 for wanted, name, labelled in ((s.do_train, "train.csv", True),
                                                (s.do_eval, "val.csv", True),
                                                (s.do_predict, "test.csv", False))
                 if wanted}
    logging.info("Questions: %s", ", ".join(f"{len(v)} in {k}" for k, v in questions.items()))
    return questions

  def train_steps(self, questions):
    return epoch_steps(self.settings, len(questions["train.csv"]),
                       os.path.join(self.settings.data_dir, "train.csv"))

  def build_task(self, config, questions):
    return multiple_choice.MultipleChoiceTask(config, self.settings.num_choices)

  def _arrays(self, tokenizer, questions, pad_to=1):
    s = self.settings
    return swag.feature_arrays(questions, tokenizer, s.max_seq_length, s.num_choices,
                               pad_to=pad_to)

  def train_input(self, questions, run):
    return run.record_input(self._arrays(run.files.tokenizer, questions["train.csv"]))

  def _logits(self, questions, run, batch_size, records):
    """(label ids, logits [N, C]) of a csv file's questions, run in whole padded batches."""
    batch = run.worker.global_batch(batch_size)
    arrays = self._arrays(run.files.tokenizer, questions, batch)
    out = run.predict_records(arrays, records, batch, keep=("is_real_example",))
    real = out["is_real_example"] == 1
    return arrays["label_ids"][:len(questions)], out["logits"][real]

  def evaluate(self, questions, run):
    labels, logits = self._logits(questions["val.csv"], run, self.settings.eval_batch_size,
                                  "eval.tf_record")
    return {"eval_accuracy": metrics.accuracy(logits.argmax(-1), labels),
            "eval_loss": metrics.cross_entropy(logits, labels),
            "global_step": run.trainer.global_step}

  def predict(self, questions, run):
    _, logits = self._logits(questions["test.csv"], run, self.settings.predict_batch_size,
                             "predict.tf_record")
    if run.worker.chief:
      probabilities = scipy.special.softmax(logits, axis=-1)
      files.write_score_rows(run.worker.shared_path("test_results.tsv"), probabilities)
      swag.write_predictions(run.worker.shared_path("test_predictions.tsv"),
                             questions["test.csv"], probabilities.argmax(-1))

  def serving(self, questions, run, predicted):
    s = self.settings
    return export.TextMultipleChoice(run.trainer.model, run.files.vocab_file, s.do_lower_case,
                                     s.max_seq_length)


def main(_):
  Runner(Settings.from_flags(FLAGS), MultipleChoice).run()


if __name__ == "__main__":
  app.run(main)
