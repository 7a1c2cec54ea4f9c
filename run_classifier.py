r"""Fine-tunes BERT on a GLUE task (or XNLI): training, evaluation, prediction and export.

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/mrpc \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3

--bert_config_file and --vocab_file default to the files beside --init_checkpoint.
"""

import scipy.special
from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner, TaskAdapter
from data import files, glue, metrics
from modeling import classification, export

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

# Held-out splits: (split, records file as the original named it, eval_results.txt key
# prefix or test_results file name).
DEV_SPLITS = (("dev", "eval.tf_record", "eval_"),
              ("dev_mismatched", "eval_mismatched.tf_record", "eval_mismatched_"))
TEST_SPLITS = (("test", "predict.tf_record", "test_results.tsv"),
               ("test_mismatched", "predict_mismatched.tf_record", "test_mismatched_results.tsv"))


class Classification(TaskAdapter):
  """A GLUE / XNLI task: tsv files in, eval_results.txt, test_results.tsv and the GLUE
  submission file out."""

  def required_flags(self):
    return {"data_dir": FLAGS.data_dir, "task_name": FLAGS.task_name,
            "output_dir": FLAGS.output_dir}

  def check_flags(self):
    self.task = glue.get_task(FLAGS.task_name, FLAGS.xnli_language)
    self.selection_task = FLAGS.task_name
    if FLAGS.doc_stride and self.task.is_pair:
      raise ValueError(f"--doc_stride windows single texts; {FLAGS.task_name} takes pairs.")

  def trained_with(self, config):
    name = FLAGS.task_name.lower()
    return {"task_name": name + (f" ({FLAGS.xnli_language})" if name == "xnli" else ""),
            "labels": self.task.labels, "bilstm_head": FLAGS.bilstm_head,
            "causal_attention": config.causal_attention}

  def read(self, run):
    self.train = glue.examples(self.task, FLAGS.data_dir, "train") if FLAGS.do_train else []
    self.held_out = glue.held_out(self.task, FLAGS.task_name, FLAGS.data_dir, FLAGS.do_eval,
                                  FLAGS.do_predict)
    logging.info("Examples: %d training, %s", len(self.train),
                 ", ".join(f"{len(v)} {k}" for k, v in self.held_out.items()) or "none held out")

  def train_steps(self, run):
    self.train_arrays = self._arrays(run, self.train)[0]  # an epoch: every window once
    return run.epoch_steps(len(self.train_arrays["input_ids"]),
                           f"the training set in {FLAGS.data_dir}")

  def build_task(self, run):
    return classification.ClassificationTask(run.config, len(self.task.labels or [0]),
                                             self.task.is_regression, FLAGS.bilstm_head)

  def _arrays(self, run, examples, pad_to=1):
    if FLAGS.doc_stride:
      return glue.window_arrays(self.task, examples, run.tokenizer, FLAGS.max_seq_length,
                                FLAGS.doc_stride, pad_to)
    return glue.feature_arrays(self.task, examples, run.tokenizer, FLAGS.max_seq_length,
                               pad_to=pad_to), None

  def train_input(self, run):
    return run.record_input(self.train_arrays)

  def _logits(self, run, split, records, batch_size):
    """(examples, their labels, their logits) of a held-out split; windows averaged."""
    batch = run.global_batch(batch_size)
    examples = self.held_out[split]
    arrays, example_of = self._arrays(run, examples, batch)
    out = run.predict_records(arrays, records, batch, keep=("is_real_example",))
    logits = out["logits"][out["is_real_example"] == 1]
    if example_of is None:
      return examples, arrays["label_ids"][:len(examples)], logits
    return (examples, *glue.combine_windows(arrays["label_ids"], logits, example_of,
                                            len(examples)))

  def evaluate(self, run):
    results = {"global_step": run.trainer.global_step}
    for split, records, prefix in DEV_SPLITS:
      if split not in self.held_out:
        continue
      _, labels, logits = self._logits(run, split, records, FLAGS.eval_batch_size)
      results.update(metrics.classifier_results(FLAGS.task_name, self.task.is_regression,
                                                logits, labels, prefix))
    results["loss"] = results["eval_loss"]
    return results

  def predict(self, run):
    for split, records, results_name in TEST_SPLITS:
      if split not in self.held_out:
        continue
      examples, _, logits = self._logits(run, split, records, FLAGS.predict_batch_size)
      if not run.chief:
        continue
      scores = logits if self.task.is_regression else scipy.special.softmax(logits, -1)
      files.write_score_rows(run.shared_path(results_name), scores)
      if split in self.task.submissions:
        predictions = logits[:, 0] if self.task.is_regression else scores.argmax(-1)
        glue.write_submission(run.shared_path(self.task.submissions[split] + ".tsv"),
                              self.task, examples, predictions)

  def serving(self, run):
    return export.TextClassifier(run.trainer.model, run.vocab_file, FLAGS.do_lower_case,
                                 FLAGS.max_seq_length, self.task.labels, self.task.is_pair,
                                 FLAGS.doc_stride)


def main(_):
  Runner(FLAGS, Classification()).run()


if __name__ == "__main__":
  app.run(main)
