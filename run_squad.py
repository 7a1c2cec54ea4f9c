"""SQuAD v1.1 / v2.0 span prediction: fine-tuning, prediction and built-in official scoring.

  python run_squad.py --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
    --init_checkpoint=$BERT/bert_model.ckpt --do_train --train_file=train-v1.1.json \
    --do_predict --predict_file=dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2 --max_seq_length=384 --doc_stride=128 --output_dir=out/squad

Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json as the
original; when the predict file has answers, also the official scores in
eval_results.txt and eval_results.json.
"""

import os

import script_utils
from absl import flags, logging

flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("output_dir", None, "Checkpoints, records, predictions and scores.")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json to predict, e.g. dev-v1.1.json.")
flags.DEFINE_string("init_checkpoint", None, "Weights to start from (any format we read).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 384, "Tokens per feature (query and document span).", lower_bound=1)
flags.DEFINE_integer("doc_stride", 128, "Stride between document spans.", lower_bound=1)
flags.DEFINE_integer("max_query_length", 64, "Most question tokens; longer ones are cut.", lower_bound=1)
flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
flags.DEFINE_bool("do_predict", False, "Predict --predict_file (and score it when it has answers).")
flags.DEFINE_integer("train_batch_size", 32, "Training batch size.", lower_bound=1)
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.", lower_bound=1)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training data.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.", lower_bound=1)
flags.DEFINE_integer("n_best_size", 20, "Candidates kept per question in nbest_predictions.json.", lower_bound=1)
flags.DEFINE_integer("max_answer_length", 30, "Longest answer in WordPiece tokens.", lower_bound=1)
flags.DEFINE_bool("verbose_logging", False, "Log answer alignment failures.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "v2.0: predict no answer when null score - best span score exceeds this.")
script_utils.define_tpu_flags()
script_utils.define_runtime_flags()
script_utils.define_batching_flags()
# Added.
flags.DEFINE_bool("tune_null_threshold", False,
                  "v2.0, when --predict_file has answers: predict with the threshold that "
                  "maximises F1 on it (reported as null_score_diff_threshold).")
flags.DEFINE_bool("bilstm_head", False,
                  "Put a randomly initialised bidirectional LSTM (hidden_size / 2 units per "
                  "direction) between the encoder and the span layer, as the paper's "
                  "'+ BiLSTM' ablation.")
script_utils.require_positive("learning_rate", "num_train_epochs")
FLAGS = flags.FLAGS


def _validate():
  script_utils.require(output_dir=FLAGS.output_dir)
  if not FLAGS.do_train and not FLAGS.do_predict:
    raise ValueError("At least one of --do_train and --do_predict must be set.")
  if FLAGS.do_train and not FLAGS.train_file:
    raise ValueError("--do_train needs --train_file.")
  if FLAGS.do_predict and not FLAGS.predict_file:
    raise ValueError("--do_predict needs --predict_file.")
  if FLAGS.tune_null_threshold and not (FLAGS.version_2_with_negative and FLAGS.do_predict):
    raise ValueError("--tune_null_threshold needs --version_2_with_negative and --do_predict "
                     "(it tunes SQuAD 2.0's no-answer threshold on --predict_file).")
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} must exceed --max_query_length "
                     f"({FLAGS.max_query_length}) + 3.")


def main(_):
  _validate()
  script_utils.log_flags()
  import random

  import numpy as np
  from data import (features, files, pipeline, squad, squad_evaluation, squad_predictions,
                    tfrecords)
  from modeling import reports, span_labeling

  config, vocab_file = script_utils.config_and_vocab(
      FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
  script_utils.check_lengths_and_case(config, FLAGS.max_seq_length, FLAGS.do_lower_case,
                                      FLAGS.init_checkpoint)
  files.ensure_writable_dir(FLAGS.output_dir, "--output_dir")
  tokenizer = script_utils.load_tokenizer(vocab_file, FLAGS.do_lower_case, config)
  run = script_utils.run_record(FLAGS, task="squad",
                                version_2_with_negative=FLAGS.version_2_with_negative,
                                bilstm_head=FLAGS.bilstm_head,
                                causal_attention=config.causal_attention)
  script_utils.check_run(FLAGS.output_dir, run)
  convert = lambda examples, training_: squad.convert_examples_to_features(
      examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length,
      training_)

  train_examples = []
  if FLAGS.do_train:
    train_examples = squad.read_squad_examples(FLAGS.train_file, True,
                                               FLAGS.version_2_with_negative)
    random.Random(12345).shuffle(train_examples)
  if FLAGS.do_predict:  # read now, so a bad file stops the run before training
    examples = squad.read_squad_examples(FLAGS.predict_file, False, FLAGS.version_2_with_negative)
    eval_features = convert(examples, False)
    if not eval_features:  # contexts whose words all tokenize to nothing
      raise ValueError(f"{FLAGS.predict_file}: no context has a WordPiece token to predict from.")
    gold = squad.load_json(FLAGS.predict_file)
    if squad_evaluation.has_answers(gold):  # scored after prediction: checked now
      squad_evaluation.check_scorable(gold, FLAGS.version_2_with_negative, FLAGS.predict_file)
    elif FLAGS.tune_null_threshold:
      raise ValueError(f"--tune_null_threshold: --predict_file={FLAGS.predict_file} has no "
                       "answers to tune on.")
  script_utils.require_weights(FLAGS)
  num_train_steps = 0 if not FLAGS.do_train else script_utils.train_steps(
      len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs, FLAGS.train_file)
  strategy, _ = script_utils.runtime(FLAGS)
  outputs = script_utils.worker_outputs(strategy, FLAGS.output_dir)
  multiple = script_utils.batch_length_multiple(
      FLAGS.batch_length_multiple, FLAGS.jit_compile, strategy)
  trainer = script_utils.make_trainer(
      strategy, span_labeling.SpanTask(config, FLAGS.bilstm_head), num_train_steps,
      int(num_train_steps * FLAGS.warmup_proportion), FLAGS.train_batch_size, FLAGS)

  if FLAGS.do_train:
    train_features = convert(train_examples, True)
    logging.info("%d training examples, %d features, %d steps", len(train_examples),
                 len(train_features), num_train_steps)
    path = outputs.path("train.tf_record")
    tfrecords.write_arrays(path, squad.feature_arrays(train_features, FLAGS.max_seq_length, True))
    if outputs.chief:
      script_utils.save_run(FLAGS.output_dir, run)
    spec = features.squad_feature_spec(FLAGS.max_seq_length, True)
    trainer.train(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(FLAGS.train_batch_size), True, FLAGS.seed,
        ctx, shuffle_buffer=10000, length_multiple=multiple,
        bucket_by_length=FLAGS.bucket_by_length), FLAGS.init_checkpoint)
  else:
    logging.info("Model %s.", trainer.restore(FLAGS.init_checkpoint, for_training=False))

  if FLAGS.do_predict:
    replicas = strategy.num_replicas_in_sync
    batch = FLAGS.predict_batch_size * replicas // np.gcd(FLAGS.predict_batch_size, replicas)
    path = outputs.path("eval.tf_record")
    tfrecords.write_arrays(path, squad.feature_arrays(eval_features, FLAGS.max_seq_length,
                                                      False, pad_to=batch))
    logging.info("%d examples, %d features to predict", len(examples), len(eval_features))
    spec = features.squad_feature_spec(FLAGS.max_seq_length, False)
    # Positions cut from a trimmed batch can never be an answer: fill them with -inf.
    out = trainer.predict(lambda ctx: pipeline.global_batches(
        path, spec, batch, ctx, length_multiple=multiple, by_length=True),
        keep=("unique_ids",), fill=-float("inf"))
    if not trainer.chief:
      return
    results = [squad_predictions.RawResult(int(u), [float(x) for x in s],
                                           [float(x) for x in e])
               for u, s, e in zip(out["unique_ids"], out["start_logits"], out["end_logits"]) if u]
    dataset = squad.load_json(FLAGS.predict_file)
    scored = squad_evaluation.has_answers(dataset)

    # v2.0: post-process once, keeping every question's best non-null answer; any
    # threshold is then a cheap pass over the null odds.
    v2 = FLAGS.version_2_with_negative
    predictions, nbest, null_odds = squad_predictions.compute_predictions(
        examples, eval_features, results, FLAGS.n_best_size, FLAGS.max_answer_length,
        FLAGS.do_lower_case, v2, float("inf") if v2 else FLAGS.null_score_diff_threshold,
        FLAGS.verbose_logging)
    answers = predictions
    if v2:
      predictions = squad_predictions.apply_null_threshold(answers, null_odds,
                                                           FLAGS.null_score_diff_threshold)
    scores = None
    if scored:
      if v2:
        scores = squad_evaluation.evaluate_v2(dataset, predictions, null_odds)
        if FLAGS.tune_null_threshold:
          threshold = squad_evaluation.tune_null_threshold(dataset, answers, null_odds)
          predictions = squad_predictions.apply_null_threshold(answers, null_odds, threshold)
          tuned = squad_evaluation.evaluate_v2(dataset, predictions, null_odds)
          scores.update({"null_score_diff_threshold": threshold, "tuned_exact": tuned["exact"],
                         "tuned_f1": tuned["f1"]})
      else:
        scores = squad_evaluation.evaluate_v1(dataset, predictions)
      scores["global_step"] = trainer.global_step
    squad_predictions.write_json(os.path.join(FLAGS.output_dir, "predictions.json"), predictions)
    squad_predictions.write_json(os.path.join(FLAGS.output_dir, "nbest_predictions.json"), nbest)
    if FLAGS.version_2_with_negative:
      squad_predictions.write_json(os.path.join(FLAGS.output_dir, "null_odds.json"), null_odds)
    if scores is not None:
      reports.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), scores)
      squad_predictions.write_json(os.path.join(FLAGS.output_dir, "eval_results.json"), scores)
      for key in sorted(scores):
        logging.info("eval %s = %s", key, scores[key])
    logging.info("Wrote predictions for %d questions to %s", len(predictions), FLAGS.output_dir)


if __name__ == "__main__":
  script_utils.run(main)
