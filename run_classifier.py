r"""Fine-tunes BERT on a GLUE task (or XNLI): training, evaluation, prediction and export.

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/mrpc \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3

--bert_config_file and --vocab_file default to the files beside --init_checkpoint.
"""

import dataclasses
from typing import Optional

import scipy.special
from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner
from cli.settings import FineTuningSettings, with_flags
from cli.task_adapter import TaskAdapter, epoch_steps
from data import files, glue, metrics
from modeling import classification, export, selection

define_finetuning_flags(
    __name__,
    data_dir="The task's directory (train.tsv, dev.tsv, test.tsv ...).",
    do_train="Fine-tune on train.tsv.",
    do_eval="Evaluate on the dev set(s); writes eval_results.txt.",
    do_predict="Predict the test set(s): test_results.tsv and the GLUE submission file.",
    export_dir="Write a SavedModel here that takes raw text and returns probabilities (a "
               "score for sts-b).")
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, "
                    "ax or xnli (any case).")
# Added.
flags.DEFINE_string("xnli_language", "zh", "XNLI language (the original fixed zh).")
flags.DEFINE_bool("bilstm_head", False,
                  "Put a randomly initialised bidirectional LSTM (hidden_size / 2 units per "
                  "direction) between the encoder and the classifier, as the paper's "
                  "'+ BiLSTM' ablation; its forward output at the last token and backward "
                  "output at [CLS] feed the classifier.")
flags.DEFINE_integer("doc_stride", 0, "Single texts: windows of --max_seq_length every this "
                     "many tokens, not a cut; windows train with the text's label, their logits "
                     "are averaged. 0: cut, as the original.", lower_bound=0)
FLAGS = flags.FLAGS
# The settings: the flags the runner reads and this script's own (cli/settings.py).
Settings = with_flags(FineTuningSettings, "data_dir", "eval_batch_size", "task_name",
                      "xnli_language", "bilstm_head", "doc_stride")

# Held-out splits: (split, records file as the original named it, eval_results.txt key
# prefix or test_results file name).
DEV_SPLITS = (("dev", "eval.tf_record", "eval_"),
              ("dev_mismatched", "eval_mismatched.tf_record", "eval_mismatched_"))
TEST_SPLITS = (("test", "predict.tf_record", "test_results.tsv"),
               ("test_mismatched", "predict_mismatched.tf_record", "test_mismatched_results.tsv"))


@dataclasses.dataclass(frozen=True)
class Data:
  """What read() gives the later steps: the training features (--do_train; windows with
  --doc_stride) and {split: examples} of the held-out splits."""
  train_arrays: Optional[dict]
  held_out: dict


class Classification(TaskAdapter):
  """A GLUE / XNLI task: tsv files in, eval_results.txt, test_results.tsv and the GLUE
  submission file out."""

  script = "run_classifier.py"
  input_flags = ("doc_stride",)  # a model trained on windows is evaluated on windows

  def __init__(self, settings):
    super().__init__(settings)
    self.task = glue.get_task(settings.task_name, settings.xnli_language)
    if settings.doc_stride and self.task.is_pair:
      raise ValueError(f"--doc_stride windows single texts; {settings.task_name} takes pairs.")

  @classmethod
  def required_flags(cls, s):
    return {"data_dir": s.data_dir, "task_name": s.task_name, "output_dir": s.output_dir}

  def headline_metric(self):
    return selection.script_metric(self.script, self.settings.task_name)

  def define(self, config):
    s, name = self.settings, self.settings.task_name.lower()
    language = {"xnli_language": s.xnli_language} if name == "xnli" else {}
    return {"task_name": name, **language, "labels": self.task.labels,
            "bilstm_head": s.bilstm_head, "causal_attention": config.causal_attention}, None

  def read(self, defined, files, worker):
    s = self.settings
    train = glue.examples(self.task, s.data_dir, "train") if s.do_train else []
    held_out = glue.held_out(self.task, s.task_name, s.data_dir, s.do_eval, s.do_predict)
    logging.info("Examples: %d training, %s", len(train),
                 ", ".join(f"{len(v)} {k}" for k, v in held_out.items()) or "none held out")
    # An epoch: every window once.
    return Data(self._arrays(files.tokenizer, train)[0] if s.do_train else None, held_out)

  def train_steps(self, data):
    return epoch_steps(self.settings, len(data.train_arrays["input_ids"]),
                       f"the training set in {self.settings.data_dir}")

  def build_task(self, config, data):
    return classification.ClassificationTask(config, len(self.task.labels or [0]),
                                             self.task.is_regression, self.settings.bilstm_head)

  def _arrays(self, tokenizer, examples, pad_to=1):
    s = self.settings
    return glue.model_arrays(self.task, examples, tokenizer, s.max_seq_length, s.doc_stride,
                             pad_to)

  def train_input(self, data, run):
    return run.record_input(data.train_arrays)

  def _logits(self, data, run, split, records, batch_size):
    """(examples, their labels, their logits) of a held-out split; windows averaged."""
    batch = run.worker.global_batch(batch_size)
    examples = data.held_out[split]
    arrays, example_of = self._arrays(run.files.tokenizer, examples, batch)
    out = run.predict_records(arrays, records, batch, keep=("is_real_example",))
    logits = out["logits"][out["is_real_example"] == 1]
    if example_of is None:
      return examples, arrays["label_ids"][:len(examples)], logits
    return (examples, *glue.combine_windows(arrays["label_ids"], logits, example_of,
                                            len(examples)))

  def evaluate(self, data, run):
    results = {"global_step": run.trainer.global_step}
    for split, records, prefix in DEV_SPLITS:
      if split in data.held_out:
        _, labels, logits = self._logits(data, run, split, records,
                                         self.settings.eval_batch_size)
        results.update(metrics.classifier_results(self.settings.task_name,
                                                  self.task.is_regression, logits, labels,
                                                  prefix))
    results["loss"] = results["eval_loss"]
    return results

  def predict(self, data, run):
    task, out = self.task, run.worker
    for split, records, results_name in TEST_SPLITS:
      if split not in data.held_out:
        continue
      examples, _, logits = self._logits(data, run, split, records,
                                         self.settings.predict_batch_size)
      if not out.chief:
        continue
      scores = logits if task.is_regression else scipy.special.softmax(logits, -1)
      files.write_score_rows(out.shared_path(results_name), scores)
      if split in task.submissions:
        predictions = logits[:, 0] if task.is_regression else scores.argmax(-1)
        glue.write_submission(out.shared_path(task.submissions[split] + ".tsv"), task,
                              examples, predictions)

  def serving(self, data, run, predicted):
    s = self.settings
    return export.TextClassifier(run.trainer.model, run.files.vocab_file, s.do_lower_case,
                                 s.max_seq_length, self.task.labels, self.task.is_pair,
                                 s.doc_stride)


def main(_):
  Runner(Settings.from_flags(FLAGS), Classification).run()


if __name__ == "__main__":
  app.run(main)
