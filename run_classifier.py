"""Fine-tunes BERT on a GLUE task (or XNLI): training, evaluation, prediction and export.

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/mrpc \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3

--bert_config_file and --vocab_file default to the files beside --init_checkpoint.
"""

import os

import script_utils
from absl import flags, logging

flags.DEFINE_string("data_dir", None, "The task's directory (train.tsv, dev.tsv, test.tsv ...).")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("task_name", None, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, "
                    "ax or xnli (any case).")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("output_dir", None, "Checkpoints, records, results and predictions.")
flags.DEFINE_string("init_checkpoint", None,
                    "Weights to start from: original TF1, Hugging Face or ours.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per example after WordPiece.", lower_bound=1)
flags.DEFINE_bool("do_train", False, "Fine-tune on train.tsv.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the dev set(s); writes eval_results.txt.")
flags.DEFINE_bool("do_predict", False,
                  "Predict the test set(s): test_results.tsv and the GLUE submission file.")
flags.DEFINE_integer("train_batch_size", 32, "Training batch size.", lower_bound=1)
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch size.", lower_bound=1)
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.", lower_bound=1)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training data.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.", lower_bound=1)
script_utils.define_tpu_flags()
script_utils.define_runtime_flags()
script_utils.define_batching_flags()
# Added.
flags.DEFINE_string("export_dir", None,
                    "Write a SavedModel here that takes raw text and returns probabilities "
                    "(a score for sts-b).")
flags.DEFINE_string("xnli_language", "zh", "XNLI language (the original fixed zh).")
flags.DEFINE_bool("bilstm_head", False,
                  "Put a randomly initialised bidirectional LSTM (hidden_size / 2 units per "
                  "direction) between the encoder and the classifier, as the paper's "
                  "'+ BiLSTM' ablation; its forward output at the last token and backward "
                  "output at [CLS] feed the classifier.")
script_utils.require_positive("learning_rate", "num_train_epochs")
FLAGS = flags.FLAGS


def _evaluate(trainer, task, examples, arrays, path, batch, spec, multiple):
  """(loss, GLUE metrics) of a dev split whose records are at `path`."""
  import numpy as np
  import scipy.special
  from data import metrics, pipeline
  out = trainer.predict(lambda ctx: pipeline.global_batches(
      path, spec, batch, ctx, length_multiple=multiple, by_length=True),
      keep=("is_real_example",))
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
  script_utils.require(data_dir=FLAGS.data_dir, task_name=FLAGS.task_name,
                       output_dir=FLAGS.output_dir)
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise ValueError("At least one of --do_train, --do_eval and --do_predict must be set.")
  script_utils.log_flags()
  import numpy as np
  import scipy.special
  from data import features, files, glue, pipeline
  from modeling import classification, export, reports

  task = glue.get_task(FLAGS.task_name, FLAGS.xnli_language)
  config, vocab_file = script_utils.config_and_vocab(
      FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
  script_utils.check_lengths_and_case(config, FLAGS.max_seq_length, FLAGS.do_lower_case,
                                      FLAGS.init_checkpoint)
  files.ensure_writable_dir(FLAGS.output_dir, "--output_dir")
  script_utils.check_export_dir(FLAGS.export_dir)
  tokenizer = script_utils.load_tokenizer(vocab_file, FLAGS.do_lower_case, config)
  name = FLAGS.task_name.lower()
  run = script_utils.run_record(FLAGS, task_name=name + (
      f" ({FLAGS.xnli_language})" if name == "xnli" else ""), labels=task.labels,
      bilstm_head=FLAGS.bilstm_head, causal_attention=config.causal_attention)
  script_utils.check_run(FLAGS.output_dir, run)
  train_examples = glue.examples(task, FLAGS.data_dir, "train") if FLAGS.do_train else []
  # Held-out splits are read now, so an empty one stops the run before training.
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
  script_utils.require_weights(FLAGS)
  num_train_steps = 0 if not FLAGS.do_train else script_utils.train_steps(
      len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs,
      f"the training set in {FLAGS.data_dir}")
  strategy, _ = script_utils.runtime(FLAGS)
  outputs = script_utils.worker_outputs(strategy, FLAGS.output_dir)
  replicas = strategy.num_replicas_in_sync
  multiple = script_utils.batch_length_multiple(
      FLAGS.batch_length_multiple, FLAGS.jit_compile, strategy)
  spec = features.classifier_feature_spec(FLAGS.max_seq_length, task.is_regression)
  trainer = script_utils.make_trainer(
      strategy, classification.ClassificationTask(config, len(task.labels or [0]), task.is_regression,
                                         FLAGS.bilstm_head),
      num_train_steps, int(num_train_steps * FLAGS.warmup_proportion), FLAGS.train_batch_size,
      FLAGS)

  if FLAGS.do_train:
    logging.info("%d training examples, %d steps", len(train_examples), num_train_steps)
    path = outputs.path("train.tf_record")
    glue.write_records(glue.feature_arrays(task, train_examples, tokenizer, FLAGS.max_seq_length),
                       path, task.is_regression)
    if outputs.chief:
      script_utils.save_run(FLAGS.output_dir, run)
    trainer.train(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(FLAGS.train_batch_size), True, FLAGS.seed,
        ctx, shuffle_buffer=10000, length_multiple=multiple,
        bucket_by_length=FLAGS.bucket_by_length), FLAGS.init_checkpoint)
  else:
    logging.info("Model %s.", trainer.restore(FLAGS.init_checkpoint, for_training=False))

  def prepared(split, batch, record_name):
    """Examples, features and the records file of a split, padded to whole batches."""
    examples = held_out[split]
    arrays = glue.feature_arrays(task, examples, tokenizer, FLAGS.max_seq_length, pad_to=batch)
    path = outputs.path(record_name)
    glue.write_records(arrays, path, task.is_regression)
    return examples, arrays, path

  if FLAGS.do_eval:
    batch = FLAGS.eval_batch_size * replicas // np.gcd(FLAGS.eval_batch_size, replicas)
    results = {"global_step": trainer.global_step}
    for split, prefix in (("dev", "eval_"), ("dev_mismatched", "eval_mismatched_")):
      if split in task.splits:
        record_name = split.replace("dev", "eval") + ".tf_record"  # eval.tf_record as the original
        examples, arrays, path = prepared(split, batch, record_name)
        loss, values = _evaluate(trainer, task, examples, arrays, path, batch, spec,
                                 multiple)
        results.update({prefix + "loss": loss, **{prefix + k: v for k, v in values.items()}})
    results["loss"] = results["eval_loss"]
    if outputs.chief:
      reports.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
    for key in sorted(results):
      logging.info("eval %s = %s", key, results[key])

  if FLAGS.do_predict:
    batch = FLAGS.predict_batch_size * replicas // np.gcd(FLAGS.predict_batch_size, replicas)
    for split, results_name in (("test", "test_results.tsv"),
                                ("test_mismatched", "test_mismatched_results.tsv")):
      if split not in task.splits:
        continue
      examples, _, path = prepared(split, batch, split.replace("test", "predict") + ".tf_record")
      out = trainer.predict(lambda ctx: pipeline.global_batches(
          path, spec, batch, ctx, length_multiple=multiple, by_length=True),
          keep=("is_real_example",))
      logits = out["logits"][out["is_real_example"] == 1]
      if not trainer.chief:
        continue
      if task.is_regression:
        predictions = logits[:, 0]
        glue.write_probabilities(os.path.join(FLAGS.output_dir, results_name), logits)
      else:
        probabilities = scipy.special.softmax(logits, -1)
        predictions = probabilities.argmax(-1)
        glue.write_probabilities(os.path.join(FLAGS.output_dir, results_name), probabilities)
      if split in task.submissions:
        submission = os.path.join(FLAGS.output_dir, task.submissions[split] + ".tsv")
        glue.write_submission(submission, task, examples, predictions)
        logging.info("Wrote %d predictions to %s", len(examples), submission)

  if FLAGS.export_dir and trainer.chief:
    module = export.TextClassifier(trainer.model, vocab_file, FLAGS.do_lower_case,
                                   FLAGS.max_seq_length, task.labels, task.is_pair)
    export.save(module, FLAGS.export_dir)
    logging.info("Exported a raw-text SavedModel to %s", FLAGS.export_dir)


if __name__ == "__main__":
  script_utils.run(main)
