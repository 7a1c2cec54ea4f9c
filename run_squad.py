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

import finetuning
import script_utils
from absl import flags, logging

finetuning.define_flags(
    omit=("data_dir", "do_eval", "eval_batch_size", "export_dir"),
    output_dir="Checkpoints, records, predictions and scores.",
    max_seq_length=(384, "Tokens per feature (query and document span)."),
    do_train="Fine-tune on --train_file.",
    do_predict="Predict --predict_file (and score it when it has answers).")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json to predict, e.g. dev-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128, "Stride between document spans.", lower_bound=1)
flags.DEFINE_integer("max_query_length", 64, "Most question tokens; longer ones are cut.", lower_bound=1)
flags.DEFINE_integer("n_best_size", 20, "Candidates kept per question in nbest_predictions.json.", lower_bound=1)
flags.DEFINE_integer("max_answer_length", 30, "Longest answer in WordPiece tokens.", lower_bound=1)
flags.DEFINE_bool("verbose_logging", False, "Log answer alignment failures.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "v2.0: predict no answer when null score - best span score exceeds this.")
# Added.
flags.DEFINE_bool("tune_null_threshold", False,
                  "v2.0, when --predict_file has answers: predict with the threshold that "
                  "maximises F1 on it (reported as null_score_diff_threshold).")
flags.DEFINE_bool("bilstm_head", False,
                  "Put a randomly initialised bidirectional LSTM (hidden_size / 2 units per "
                  "direction) between the encoder and the span layer, as the paper's "
                  "'+ BiLSTM' ablation.")
FLAGS = flags.FLAGS


def _check_flags(runner):
  """The original's flag checks, and those of the flags added."""
  runner.check_flags(output_dir=FLAGS.output_dir)
  if FLAGS.do_train and not FLAGS.train_file:
    raise ValueError("--do_train needs --train_file.")
  if FLAGS.do_predict and not FLAGS.predict_file:
    raise ValueError("--do_predict needs --predict_file.")
  script_utils.require_files(train_file=FLAGS.do_train and FLAGS.train_file,
                             predict_file=FLAGS.do_predict and FLAGS.predict_file)
  if FLAGS.tune_null_threshold and not (FLAGS.version_2_with_negative and FLAGS.do_predict):
    raise ValueError("--tune_null_threshold needs --version_2_with_negative and --do_predict "
                     "(it tunes SQuAD 2.0's no-answer threshold on --predict_file).")
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} must exceed --max_query_length "
                     f"({FLAGS.max_query_length}) + 3.")


def _score(dataset, predictions, answers, null_odds, step):
  """The official scores of `predictions`; v2.0 with --tune_null_threshold: also those at the
  best threshold, whose predictions are returned instead. (scores, predictions)"""
  from data import squad_evaluation, squad_predictions
  if not FLAGS.version_2_with_negative:
    return {**squad_evaluation.evaluate_v1(dataset, predictions), "global_step": step}, predictions
  scores = squad_evaluation.evaluate_v2(dataset, predictions, null_odds)
  if FLAGS.tune_null_threshold:
    threshold = squad_evaluation.tune_null_threshold(dataset, answers, null_odds)
    predictions = squad_predictions.apply_null_threshold(answers, null_odds, threshold)
    tuned = squad_evaluation.evaluate_v2(dataset, predictions, null_odds)
    scores.update({"null_score_diff_threshold": threshold, "tuned_exact": tuned["exact"],
                   "tuned_f1": tuned["f1"]})
  return {**scores, "global_step": step}, predictions


def main(_):
  runner = finetuning.Runner(FLAGS, actions=("do_train", "do_predict"))
  _check_flags(runner)
  import random

  from data import features, squad, squad_evaluation, squad_predictions, tfrecords
  from modeling import span_labeling

  config = runner.load_config()
  tokenizer = runner.setup()
  runner.check_run(task="squad", version_2_with_negative=FLAGS.version_2_with_negative,
                   bilstm_head=FLAGS.bilstm_head, causal_attention=config.causal_attention)
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
  runner.train_steps(len(train_examples), FLAGS.train_file)
  trainer = runner.start(span_labeling.SpanTask(config, FLAGS.bilstm_head))

  if FLAGS.do_train:
    train_features = convert(train_examples, True)
    logging.info("%d training examples, %d features, %d steps", len(train_examples),
                 len(train_features), runner.num_train_steps)
    path = runner.path("train.tf_record")
    tfrecords.write_arrays(path, squad.feature_arrays(train_features, FLAGS.max_seq_length, True))
    runner.train(path, features.squad_feature_spec(FLAGS.max_seq_length, True))
  else:
    runner.restore()

  if FLAGS.do_predict:
    batch = runner.batch_size(FLAGS.predict_batch_size)
    path = runner.path("eval.tf_record")
    tfrecords.write_arrays(path, squad.feature_arrays(eval_features, FLAGS.max_seq_length,
                                                      False, pad_to=batch))
    logging.info("%d examples, %d features to predict", len(examples), len(eval_features))
    # Positions cut from a trimmed batch can never be an answer: fill them with -inf.
    out = runner.predict(path, features.squad_feature_spec(FLAGS.max_seq_length, False), batch,
                         keep=("unique_ids",), fill=-float("inf"))
    if not runner.chief:
      return
    results = [squad_predictions.RawResult(int(u), [float(x) for x in s],
                                           [float(x) for x in e])
               for u, s, e in zip(out["unique_ids"], out["start_logits"], out["end_logits"]) if u]
    # v2.0: post-process once, keeping every question's best non-null answer; any
    # threshold is then a cheap pass over the null odds.
    v2 = FLAGS.version_2_with_negative
    answers, nbest, null_odds = squad_predictions.compute_predictions(
        examples, eval_features, results, FLAGS.n_best_size, FLAGS.max_answer_length,
        FLAGS.do_lower_case, v2, float("inf") if v2 else FLAGS.null_score_diff_threshold,
        FLAGS.verbose_logging)
    predictions = answers if not v2 else squad_predictions.apply_null_threshold(
        answers, null_odds, FLAGS.null_score_diff_threshold)
    scores = None
    if squad_evaluation.has_answers(gold):
      scores, predictions = _score(gold, predictions, answers, null_odds, trainer.global_step)
    squad_predictions.write_json(runner.output("predictions.json"), predictions)
    squad_predictions.write_json(runner.output("nbest_predictions.json"), nbest)
    if v2:
      squad_predictions.write_json(runner.output("null_odds.json"), null_odds)
    if scores is not None:
      runner.write_results("eval_results.txt", scores)
      squad_predictions.write_json(runner.output("eval_results.json"), scores)
    logging.info("Wrote predictions for %d questions to %s", len(predictions), FLAGS.output_dir)


if __name__ == "__main__":
  script_utils.run(main)
