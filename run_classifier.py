"""Fine-tunes BERT on a GLUE task (or XNLI): training, evaluation, prediction and export.

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/mrpc \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3

--bert_config_file and --vocab_file default to the files beside --init_checkpoint.
"""

import finetuning
import script_utils
from absl import flags, logging

finetuning.define_flags(
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
FLAGS = flags.FLAGS


def _read_held_out(task):
  """{split: examples} of the dev splits (--do_eval) and test splits (--do_predict).

  Read before training, so that a task without such a split or an empty file
  stops the run first.
  """
  from data import glue
  held_out = {}
  for wanted, splits in ((FLAGS.do_eval, ("dev", "dev_mismatched")),
                         (FLAGS.do_predict, ("test", "test_mismatched"))):
    present = [split for split in splits if split in task.splits] if wanted else []
    if wanted and not present:
      raise ValueError(f"--task_name={FLAGS.task_name} has no {splits[0]} set.")
    for split in present:
      held_out[split] = glue.examples(task, FLAGS.data_dir, split)
      if not held_out[split]:
        raise ValueError(f"{glue.split_file(FLAGS.data_dir, task.splits[split])} holds no "
                         "examples.")
  return held_out


def _evaluate(runner, task, examples, arrays, path, batch, spec):
  """(loss, GLUE metrics) of a dev split whose records are at `path`."""
  import numpy as np
  import scipy.special
  from data import metrics
  out = runner.predict(path, spec, batch, keep=("is_real_example",))
  real = out["is_real_example"] == 1
  logits, labels = out["logits"][real], arrays["label_ids"][:len(examples)]
  if task.is_regression:
    predictions = logits[:, 0]
    loss = float(np.mean((predictions - labels) ** 2))
  else:
    predictions = logits.argmax(-1)
    loss = float(-np.mean(scipy.special.log_softmax(logits, -1)[np.arange(len(labels)), labels]))
  return loss, metrics.glue_metrics(FLAGS.task_name, predictions, labels)


def main(_):
  runner = finetuning.Runner(FLAGS)
  runner.check_flags(data_dir=FLAGS.data_dir, task_name=FLAGS.task_name,
                     output_dir=FLAGS.output_dir)
  import scipy.special
  from data import features, glue
  from modeling import classification, export

  task = glue.get_task(FLAGS.task_name, FLAGS.xnli_language)
  config = runner.load_config()
  tokenizer = runner.setup()
  name = FLAGS.task_name.lower()
  runner.check_run(task_name=name + (f" ({FLAGS.xnli_language})" if name == "xnli" else ""),
                   labels=task.labels, bilstm_head=FLAGS.bilstm_head,
                   causal_attention=config.causal_attention)
  train_examples = glue.examples(task, FLAGS.data_dir, "train") if FLAGS.do_train else []
  held_out = _read_held_out(task)
  runner.train_steps(len(train_examples), f"the training set in {FLAGS.data_dir}")
  trainer = runner.start(classification.ClassificationTask(config, len(task.labels or [0]),
                                                  task.is_regression, FLAGS.bilstm_head))
  spec = features.classifier_feature_spec(FLAGS.max_seq_length, task.is_regression)

  if FLAGS.do_train:
    logging.info("%d training examples, %d steps", len(train_examples), runner.num_train_steps)
    path = runner.path("train.tf_record")
    glue.write_records(glue.feature_arrays(task, train_examples, tokenizer, FLAGS.max_seq_length),
                       path, task.is_regression)
    runner.train(path, spec)
  else:
    runner.restore()

  def prepared(split, batch, record_name):
    """Examples, features and the records file of a split, padded to whole batches."""
    examples = held_out[split]
    arrays = glue.feature_arrays(task, examples, tokenizer, FLAGS.max_seq_length, pad_to=batch)
    path = runner.path(record_name)
    glue.write_records(arrays, path, task.is_regression)
    return examples, arrays, path

  if FLAGS.do_eval:
    batch = runner.batch_size(FLAGS.eval_batch_size)
    results = {"global_step": trainer.global_step}
    for split, prefix in (("dev", "eval_"), ("dev_mismatched", "eval_mismatched_")):
      if split in task.splits:
        record_name = split.replace("dev", "eval") + ".tf_record"  # eval.tf_record as the original
        examples, arrays, path = prepared(split, batch, record_name)
        loss, values = _evaluate(runner, task, examples, arrays, path, batch, spec)
        results.update({prefix + "loss": loss, **{prefix + k: v for k, v in values.items()}})
    results["loss"] = results["eval_loss"]
    runner.write_results("eval_results.txt", results)

  if FLAGS.do_predict:
    batch = runner.batch_size(FLAGS.predict_batch_size)
    for split, results_name in (("test", "test_results.tsv"),
                                ("test_mismatched", "test_mismatched_results.tsv")):
      if split not in task.splits:
        continue
      examples, _, path = prepared(split, batch, split.replace("test", "predict") + ".tf_record")
      out = runner.predict(path, spec, batch, keep=("is_real_example",))
      logits = out["logits"][out["is_real_example"] == 1]
      if not runner.chief:
        continue
      if task.is_regression:
        predictions = logits[:, 0]
        glue.write_probabilities(runner.output(results_name), logits)
      else:
        probabilities = scipy.special.softmax(logits, -1)
        predictions = probabilities.argmax(-1)
        glue.write_probabilities(runner.output(results_name), probabilities)
      if split in task.submissions:
        submission = runner.output(task.submissions[split] + ".tsv")
        glue.write_submission(submission, task, examples, predictions)
        logging.info("Wrote %d predictions to %s", len(examples), submission)

  runner.export(export.TextClassifier, task.labels, task.is_pair)


if __name__ == "__main__":
  script_utils.run(main)
