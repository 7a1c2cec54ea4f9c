r"""SQuAD v1.1 / v2.0 span prediction: fine-tuning, prediction and built-in official scoring.

  python run_squad.py --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
    --init_checkpoint=$BERT/bert_model.ckpt --do_train --train_file=train-v1.1.json \
    --do_predict --predict_file=dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2 --max_seq_length=384 --doc_stride=128 --output_dir=out/squad

Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json as the original;
with answers in the predict file, the official scores (eval_results.txt and .json).
"""

import random

from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner, TaskAdapter
from data import squad, squad_evaluation, squad_predictions
from modeling import span_labeling, squad_export

define_finetuning_flags(
    __name__,
    omit=("data_dir", "do_eval", "eval_batch_size"),
    output_dir="Checkpoints, records, predictions and scores.",
    max_seq_length=(384, "Tokens per feature (query and document span)."),
    do_train="Fine-tune on --train_file.",
    do_predict="Predict --predict_file (and score it when it has answers).",
    export_dir="Write a SavedModel here that answers raw (question, context) strings.")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json to predict, e.g. dev-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128, "Stride between document spans.", lower_bound=1)
flags.DEFINE_integer("max_query_length", 64, "Most question tokens; longer ones are cut.",
                     lower_bound=1)
flags.DEFINE_integer("n_best_size", 20, "Candidates kept per question in nbest_predictions.json.",
                     lower_bound=1)
flags.DEFINE_integer("max_answer_length", 30, "Longest answer in WordPiece tokens.",
                     lower_bound=1)
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


class SpanPrediction(TaskAdapter):
  """SQuAD: json files in; predictions.json, nbest_predictions.json, null_odds.json and,
  when the predict file has answers, the official scores out."""

  actions = ("do_train", "do_predict")
  dev_action, selection_task = "do_predict", "squad"  # scored during training: --predict_file

  def required_flags(self):
    return {"output_dir": FLAGS.output_dir}

  def check_flags(self):
    self.threshold = FLAGS.null_score_diff_threshold  # v2.0 export's; tuned when tuning
    squad.check_options(FLAGS.do_train, FLAGS.train_file, FLAGS.do_predict, FLAGS.predict_file,
                        FLAGS.version_2_with_negative, FLAGS.tune_null_threshold,
                        FLAGS.max_seq_length, FLAGS.max_query_length)

  def trained_with(self, config):
    return {"task": "squad", "version_2_with_negative": FLAGS.version_2_with_negative,
            "bilstm_head": FLAGS.bilstm_head, "causal_attention": config.causal_attention}

  def _features(self, run, examples, training):
    return squad.convert_examples_to_features(examples, run.tokenizer, FLAGS.max_seq_length,
                                              FLAGS.doc_stride, FLAGS.max_query_length, training)

  def read(self, run):
    v2 = FLAGS.version_2_with_negative
    self.train = []
    if FLAGS.do_train:
      self.train = squad.read_squad_examples(FLAGS.train_file, True, v2)
      random.Random(12345).shuffle(self.train)  # the original's order
    if FLAGS.do_predict:
      self.examples = squad.read_squad_examples(FLAGS.predict_file, False, v2)
      self.features = self._features(run, self.examples, False)
      if not self.features:  # contexts whose words all tokenize to nothing
        raise ValueError(f"{FLAGS.predict_file}: no context has a WordPiece token to predict.")
      self.gold = squad_evaluation.read_gold(FLAGS.predict_file, v2, FLAGS.tune_null_threshold,
                                             run.evaluates_during_training)

  def train_steps(self, run):
    return run.epoch_steps(len(self.train), FLAGS.train_file)

  def build_task(self, run):
    return span_labeling.SpanTask(run.config, FLAGS.bilstm_head)

  def train_input(self, run):
    features = self._features(run, self.train, True)
    logging.info("%d training examples, %d features", len(self.train), len(features))
    return run.record_input(squad.feature_arrays(features, FLAGS.max_seq_length, True))

  def evaluate(self, run):  # during training: --predict_file's scores, as --do_predict's
    predictions, _, null_odds, answers = self._predictions(run)
    scores, _ = squad_evaluation.score(self.gold, predictions, answers, null_odds,
                                       FLAGS.version_2_with_negative, FLAGS.tune_null_threshold)
    return {**scores, "global_step": run.trainer.global_step}

  def _predictions(self, run):  # predictions, nbest, null_odds, best non-null answers
    batch = run.global_batch(FLAGS.predict_batch_size)
    arrays = squad.feature_arrays(self.features, FLAGS.max_seq_length, False, pad_to=batch)
    logging.info("%d examples, %d features to predict", len(self.examples), len(self.features))
    out = run.predict_records(arrays, "eval.tf_record", batch, keep=("unique_ids",),
                              fill=-float("inf"))  # positions cut from a batch: never answers
    return squad_predictions.predictions_from_outputs(
        self.examples, self.features, out, FLAGS.n_best_size, FLAGS.max_answer_length,
        FLAGS.do_lower_case, FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold,
        FLAGS.verbose_logging)

  def predict(self, run):
    predictions, nbest, null_odds, answers = self._predictions(run)
    if not run.chief:
      return
    v2 = FLAGS.version_2_with_negative
    scores, predictions = squad_evaluation.score(self.gold, predictions, answers, null_odds, v2,
                                                 FLAGS.tune_null_threshold)
    squad_predictions.write_predictions(run.shared_path, predictions, nbest,
                                        null_odds if v2 else None)
    if scores is not None:
      scores["global_step"] = run.trainer.global_step
      self.threshold = scores.get("null_score_diff_threshold", self.threshold)  # tuned
      run.write_results("eval_results.txt", scores)
      squad_predictions.write_json(run.shared_path("eval_results.json"), scores)
    logging.info("Wrote predictions for %d questions to %s", len(predictions), FLAGS.output_dir)

  def serving(self, run):
    return squad_export.TextQuestionAnswerer(
        run.trainer.model, run.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length,
        FLAGS.doc_stride, FLAGS.max_query_length, FLAGS.n_best_size, FLAGS.max_answer_length,
        FLAGS.version_2_with_negative, self.threshold)


def main(_):
  Runner(FLAGS, SpanPrediction()).run()


if __name__ == "__main__":
  app.run(main)
