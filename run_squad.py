r"""SQuAD v1.1 / v2.0 span prediction: fine-tuning, prediction and built-in official scoring.

  python run_squad.py --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
    --init_checkpoint=$BERT/bert_model.ckpt --do_train --train_file=train-v1.1.json \
    --do_predict --predict_file=dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
    --num_train_epochs=2 --max_seq_length=384 --doc_stride=128 --output_dir=out/squad

Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json as the original;
with answers in the predict file, the official scores (eval_results.txt and .json).
"""

import dataclasses
import random
from typing import Optional

from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner
from cli.settings import FineTuningSettings, with_flags
from cli.task_adapter import TaskAdapter, epoch_steps
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
# The settings: the flags the runner reads and this script's own (cli/settings.py).
Settings = with_flags(FineTuningSettings, "train_file", "predict_file", "doc_stride",
                      "max_query_length", "n_best_size", "max_answer_length", "verbose_logging",
                      "version_2_with_negative", "null_score_diff_threshold",
                      "tune_null_threshold", "bilstm_head")


@dataclasses.dataclass(frozen=True)
class Data:
  """What read() gives the later steps: the training examples (in the original's order),
  and with --do_predict the predict file's examples, features and answers."""
  train: list
  examples: Optional[list] = None
  features: Optional[list] = None
  gold: Optional[dict] = None


class SpanPrediction(TaskAdapter):
  """SQuAD: json files in; predictions.json, nbest_predictions.json, null_odds.json and,
  when the predict file has answers, the official scores out."""

  actions = ("do_train", "do_predict")
  dev_action, script = "do_predict", "run_squad.py"  # scored during training: --predict_file
  input_flags = ("doc_stride", "max_query_length")

  def __init__(self, settings):
    super().__init__(settings)
    s = settings
    squad.check_options(s.do_train, s.train_file, s.do_predict, s.predict_file,
                        s.version_2_with_negative, s.tune_null_threshold, s.max_seq_length,
                        s.max_query_length)

  @classmethod
  def required_flags(cls, s):
    return {"output_dir": s.output_dir}

  def define(self, config):
    s = self.settings
    return {"task": "squad", "version_2_with_negative": s.version_2_with_negative,
            "bilstm_head": s.bilstm_head, "causal_attention": config.causal_attention}, None

  def _features(self, tokenizer, examples, training):
    s = self.settings
    return squad.convert_examples_to_features(examples, tokenizer, s.max_seq_length,
                                              s.doc_stride, s.max_query_length, training)

  def read(self, defined, files, worker):
    s, v2 = self.settings, self.settings.version_2_with_negative
    train = []
    if s.do_train:
      train = squad.read_squad_examples(s.train_file, True, v2)
      random.Random(12345).shuffle(train)  # the original's order
    if not s.do_predict:
      return Data(train)
    examples = squad.read_squad_examples(s.predict_file, False, v2)
    features = self._features(files.tokenizer, examples, False)
    if not features:  # contexts whose words all tokenize to nothing
      raise ValueError(f"{s.predict_file}: no context has a WordPiece token to predict.")
    gold = squad_evaluation.read_gold(s.predict_file, v2, s.tune_null_threshold,
                                      s.evaluates_during_training)
    return Data(train, examples, features, gold)

  def train_steps(self, data):
    return epoch_steps(self.settings, len(data.train), self.settings.train_file)

  def build_task(self, config, data):
    return span_labeling.SpanTask(config, self.settings.bilstm_head)

  def train_input(self, data, run):
    features = self._features(run.files.tokenizer, data.train, True)
    logging.info("%d training examples, %d features", len(data.train), len(features))
    return run.record_input(squad.feature_arrays(features, self.settings.max_seq_length, True))

  def evaluate(self, data, run):  # during training: --predict_file's scores, as --do_predict's
    s = self.settings
    predictions, _, null_odds, answers = self._predictions(data, run)
    scores, _ = squad_evaluation.score(data.gold, predictions, answers, null_odds,
                                       s.version_2_with_negative, s.tune_null_threshold)
    return {**scores, "global_step": run.trainer.global_step}

  def _predictions(self, data, run):  # predictions, nbest, null_odds, best non-null answers
    s = self.settings
    batch = run.worker.global_batch(s.predict_batch_size)
    arrays = squad.feature_arrays(data.features, s.max_seq_length, False, pad_to=batch)
    logging.info("%d examples, %d features to predict", len(data.examples), len(data.features))
    out = run.predict_records(arrays, "eval.tf_record", batch, keep=("unique_ids",),
                              fill=-float("inf"))  # positions cut from a batch: never answers
    return squad_predictions.predictions_from_outputs(
        data.examples, data.features, out, s.n_best_size, s.max_answer_length,
        s.do_lower_case, s.version_2_with_negative, s.null_score_diff_threshold,
        s.verbose_logging)

  def predict(self, data, run):
    """Returns the v2.0 threshold to export: the tuned one when tuning, else the flag's."""
    s, v2 = self.settings, self.settings.version_2_with_negative
    predictions, nbest, null_odds, answers = self._predictions(data, run)
    if not run.worker.chief:
      return None
    scores, predictions = squad_evaluation.score(data.gold, predictions, answers, null_odds, v2,
                                                 s.tune_null_threshold)
    squad_predictions.write_predictions(run.worker.shared_path, predictions, nbest,
                                        null_odds if v2 else None)
    threshold = s.null_score_diff_threshold
    if scores is not None:
      scores["global_step"] = run.trainer.global_step
      threshold = scores.get("null_score_diff_threshold", threshold)  # tuned
      run.write_results("eval_results.txt", scores)
      squad_predictions.write_json(run.worker.shared_path("eval_results.json"), scores)
    logging.info("Wrote predictions for %d questions to %s", len(predictions), s.output_dir)
    return threshold

  def serving(self, data, run, predicted):
    s = self.settings
    return squad_export.TextQuestionAnswerer(
        run.trainer.model, run.files.vocab_file, s.do_lower_case, s.max_seq_length,
        s.doc_stride, s.max_query_length, s.n_best_size, s.max_answer_length,
        s.version_2_with_negative,
        s.null_score_diff_threshold if predicted is None else predicted)


def _tuned_threshold():
  """{"null_score_diff_threshold": the tuned one} for a v2.0 run that only exports, where
  --output_dir's eval_results.txt records the threshold --tune_null_threshold chose and the
  flag is not given (logged); else {}."""
  if not (FLAGS.version_2_with_negative and FLAGS.export_dir and FLAGS.output_dir) or \
      FLAGS.do_train or FLAGS.do_predict or FLAGS["null_score_diff_threshold"].present:
    return {}
  import os
  from modeling import search_results
  path = os.path.join(FLAGS.output_dir, "eval_results.txt")
  tuned = search_results.read_results(path).get("null_score_diff_threshold")
  if tuned is None:
    return {}
  logging.info("--null_score_diff_threshold=%s, as %s records the tuned one.", tuned, path)
  return {"null_score_diff_threshold": tuned}


def main(_):
  Runner(Settings.from_flags(FLAGS, **_tuned_threshold()), SpanPrediction).run()


if __name__ == "__main__":
  app.run(main)
