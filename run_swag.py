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

import script_utils
from absl import flags, logging

flags.DEFINE_string("data_dir", None, "Directory of train.csv, val.csv and test.csv (SWAG "
                    "layout).")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("output_dir", None, "Checkpoints, records, results and predictions.")
flags.DEFINE_string("init_checkpoint", None,
                    "Weights to start from: original TF1, Hugging Face or ours.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per choice (context + ending) after "
                     "WordPiece.", lower_bound=1)
flags.DEFINE_bool("do_train", False, "Fine-tune on train.csv.")
flags.DEFINE_bool("do_eval", False, "Evaluate on val.csv; writes eval_results.txt.")
flags.DEFINE_bool("do_predict", False,
                  "Predict test.csv: test_results.tsv and test_predictions.tsv.")
flags.DEFINE_integer("train_batch_size", 16, "Training batch size, in questions (paper: 16).", lower_bound=1)
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch size, in questions.", lower_bound=1)
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size, in questions.", lower_bound=1)
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate (paper: 2e-5).")
flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training data (paper: 3).")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.", lower_bound=1)
script_utils.define_tpu_flags()
script_utils.define_runtime_flags()
script_utils.define_batching_flags()
# Added.
flags.DEFINE_integer("num_choices", 4, "Endings per question (columns ending0 ..).", lower_bound=2)
flags.DEFINE_string("export_dir", None,
                    "Write a SavedModel here that takes raw strings (sent1 [N], sent2 [N], "
                    "endings [N, num_choices]) and returns a probability per ending.")
script_utils.require_positive("learning_rate", "num_train_epochs")
FLAGS = flags.FLAGS


def main(_):
  script_utils.require(data_dir=FLAGS.data_dir, output_dir=FLAGS.output_dir)
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise ValueError("At least one of --do_train, --do_eval and --do_predict must be set.")
  script_utils.log_flags()
  import numpy as np
  import scipy.special
  from data import files, pipeline, swag
  from modeling import export, multiple_choice, reports

  config, vocab_file = script_utils.config_and_vocab(
      FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
  script_utils.check_lengths_and_case(config, FLAGS.max_seq_length, FLAGS.do_lower_case,
                                      FLAGS.init_checkpoint)
  files.ensure_writable_dir(FLAGS.output_dir, "--output_dir")
  script_utils.check_export_dir(FLAGS.export_dir)
  tokenizer = script_utils.load_tokenizer(vocab_file, FLAGS.do_lower_case, config)
  run = script_utils.run_record(FLAGS, task="multiple choice", num_choices=FLAGS.num_choices)
  script_utils.check_run(FLAGS.output_dir, run)

  def read(name, labelled):
    path = os.path.join(FLAGS.data_dir, name)
    examples = swag.read_examples(path, FLAGS.num_choices, labelled)
    if not examples:
      raise ValueError(f"{path} holds no questions.")
    return examples
  train_examples = read("train.csv", True) if FLAGS.do_train else []
  # Held-out files are read now, so an empty one stops the run before training.
  held_out = {name: read(name, labelled) for flag, name, labelled in
              ((FLAGS.do_eval, "val.csv", True), (FLAGS.do_predict, "test.csv", False)) if flag}
  script_utils.require_weights(FLAGS)
  num_train_steps = 0 if not FLAGS.do_train else script_utils.train_steps(
      len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs,
      os.path.join(FLAGS.data_dir, "train.csv"))
  strategy, _ = script_utils.runtime(FLAGS)
  outputs = script_utils.worker_outputs(strategy, FLAGS.output_dir)
  replicas = strategy.num_replicas_in_sync
  multiple = script_utils.batch_length_multiple(
      FLAGS.batch_length_multiple, FLAGS.jit_compile, strategy)
  spec = swag.feature_spec(FLAGS.num_choices, FLAGS.max_seq_length)
  trainer = script_utils.make_trainer(
      strategy, multiple_choice.MultipleChoiceTask(config), num_train_steps,
      int(num_train_steps * FLAGS.warmup_proportion), FLAGS.train_batch_size, FLAGS)

  if FLAGS.do_train:
    logging.info("%d training questions, %d steps", len(train_examples), num_train_steps)
    path = outputs.path("train.tf_record")
    swag.write_records(swag.feature_arrays(train_examples, tokenizer, FLAGS.max_seq_length,
                                           FLAGS.num_choices), path)
    if outputs.chief:
      script_utils.save_run(FLAGS.output_dir, run)
    trainer.train(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(FLAGS.train_batch_size), True, FLAGS.seed,
        ctx, shuffle_buffer=10000, length_multiple=multiple,
        bucket_by_length=FLAGS.bucket_by_length), FLAGS.init_checkpoint)
  else:
    logging.info("Model %s.", trainer.restore(FLAGS.init_checkpoint, for_training=False))

  def scored(name, batch_size, record_name):
    """(questions, label ids, logits [N, C]) of a csv file, run in whole padded batches."""
    batch = batch_size * replicas // np.gcd(batch_size, replicas)
    examples = held_out[name]
    arrays = swag.feature_arrays(examples, tokenizer, FLAGS.max_seq_length, FLAGS.num_choices,
                                 pad_to=batch)
    path = outputs.path(record_name)
    swag.write_records(arrays, path)
    out = trainer.predict(lambda ctx: pipeline.global_batches(
        path, spec, batch, ctx, length_multiple=multiple, by_length=True),
        keep=("is_real_example",))
    logits = out["logits"][out["is_real_example"] == 1] if out else np.zeros((0, 1))
    return examples, arrays["label_ids"][:len(examples)], logits

  if FLAGS.do_eval:
    examples, labels, logits = scored("val.csv", FLAGS.eval_batch_size, "eval.tf_record")
    log_probs = scipy.special.log_softmax(logits, axis=-1)
    results = {"eval_accuracy": float(np.mean(logits.argmax(-1) == labels)),
               "eval_loss": float(-np.mean(log_probs[np.arange(len(labels)), labels])),
               "global_step": trainer.global_step}
    if trainer.chief:
      reports.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
    for key in sorted(results):
      logging.info("eval %s = %s", key, results[key])

  if FLAGS.do_predict:
    examples, _, logits = scored("test.csv", FLAGS.predict_batch_size,
                                 "predict.tf_record")
    if trainer.chief:
      probabilities = scipy.special.softmax(logits, axis=-1)
      swag.write_probabilities(os.path.join(FLAGS.output_dir, "test_results.tsv"),
                               probabilities)
      swag.write_predictions(os.path.join(FLAGS.output_dir, "test_predictions.tsv"), examples,
                             probabilities.argmax(-1))
      logging.info("Wrote predictions for %d questions.", len(examples))

  if FLAGS.export_dir and trainer.chief:
    module = export.TextMultipleChoice(trainer.model, vocab_file, FLAGS.do_lower_case,
                                       FLAGS.max_seq_length)
    export.save(module, FLAGS.export_dir)
    logging.info("Exported a raw-text SavedModel to %s", FLAGS.export_dir)


if __name__ == "__main__":
  script_utils.run(main)
