"""Fine-tunes BERT on SWAG-style multiple choice: training, evaluation, prediction and export.

  python run_swag.py --data_dir=swag --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/swag \
    --max_seq_length=128 --train_batch_size=16 --learning_rate=2e-5 --num_train_epochs=3

The paper fine-tuned SWAG for 3 epochs at learning rate 2e-5 with batch 16,
which are this script's defaults. Batch sizes count questions: a batch of 16
four-choice questions runs 64 sequences. --bert_config_file and --vocab_file
default to the files beside --init_checkpoint.
"""

import os

import finetuning
import script_utils
from absl import flags, logging

finetuning.define_flags(
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
flags.DEFINE_integer("num_choices", 4, "Endings per question (columns ending0 ..).", lower_bound=2)
FLAGS = flags.FLAGS


def _read(name, labelled):
  """The questions of data_dir/name; ValueError when there are none."""
  from data import swag
  path = os.path.join(FLAGS.data_dir, name)
  examples = swag.read_examples(path, FLAGS.num_choices, labelled)
  if not examples:
    raise ValueError(f"{path} holds no questions.")
  return examples


def main(_):
  runner = finetuning.Runner(FLAGS)
  runner.check_flags(data_dir=FLAGS.data_dir, output_dir=FLAGS.output_dir)
  import numpy as np
  import scipy.special
  from data import swag
  from modeling import export, multiple_choice

  config = runner.load_config()
  tokenizer = runner.setup()
  runner.check_run(task="multiple choice", num_choices=FLAGS.num_choices,
                   causal_attention=config.causal_attention)
  train_examples = _read("train.csv", True) if FLAGS.do_train else []
  # Held-out files are read now, so an empty one stops the run before training.
  held_out = {name: _read(name, labelled) for flag, name, labelled in
              ((FLAGS.do_eval, "val.csv", True), (FLAGS.do_predict, "test.csv", False)) if flag}
  runner.train_steps(len(train_examples), os.path.join(FLAGS.data_dir, "train.csv"))
  trainer = runner.start(multiple_choice.MultipleChoiceTask(runner.config))
  spec = swag.feature_spec(FLAGS.num_choices, FLAGS.max_seq_length)

  if FLAGS.do_train:
    logging.info("%d training questions, %d steps", len(train_examples), runner.num_train_steps)
    path = runner.path("train.tf_record")
    swag.write_records(swag.feature_arrays(train_examples, tokenizer, FLAGS.max_seq_length,
                                           FLAGS.num_choices), path)
    runner.train(path, spec)
  else:
    runner.restore()

  def scored(name, batch_size, record_name):
    """(questions, label ids, logits [N, C]) of a csv file, run in whole padded batches."""
    batch = runner.batch_size(batch_size)
    examples = held_out[name]
    arrays = swag.feature_arrays(examples, tokenizer, FLAGS.max_seq_length, FLAGS.num_choices,
                                 pad_to=batch)
    path = runner.path(record_name)
    swag.write_records(arrays, path)
    out = runner.predict(path, spec, batch, keep=("is_real_example",))
    logits = out["logits"][out["is_real_example"] == 1] if out else np.zeros((0, 1))
    return examples, arrays["label_ids"][:len(examples)], logits

  if FLAGS.do_eval:
    examples, labels, logits = scored("val.csv", FLAGS.eval_batch_size, "eval.tf_record")
    log_probs = scipy.special.log_softmax(logits, axis=-1)
    runner.write_results("eval_results.txt", {
        "eval_accuracy": float(np.mean(logits.argmax(-1) == labels)),
        "eval_loss": float(-np.mean(log_probs[np.arange(len(labels)), labels])),
        "global_step": trainer.global_step})

  if FLAGS.do_predict:
    examples, _, logits = scored("test.csv", FLAGS.predict_batch_size, "predict.tf_record")
    if runner.chief:
      probabilities = scipy.special.softmax(logits, axis=-1)
      swag.write_probabilities(runner.output("test_results.tsv"), probabilities)
      swag.write_predictions(runner.output("test_predictions.tsv"), examples,
                             probabilities.argmax(-1))
      logging.info("Wrote predictions for %d questions.", len(examples))

  runner.export(export.TextMultipleChoice)


if __name__ == "__main__":
  script_utils.run(main)
