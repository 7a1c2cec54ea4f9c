r"""Named-entity recognition on CoNLL-2003-style files: fine-tuned or feature-based BERT.

  python run_ner.py --data_dir=conll2003 --do_train --do_eval --do_predict \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/ner
  # Feature-based (the paper's section 5.3): frozen encoder, last four layers concatenated.
  python run_ner.py ... --feature_based --feature_layers=-1,-2,-3,-4 --feature_combine=concat
"""

import dataclasses
from typing import Optional

from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner
from cli.settings import FineTuningSettings, with_flags
from cli.task_adapter import TaskAdapter, TrainInput, epoch_steps
from data import conll, ner_metrics, tagging_inputs
from modeling import export, tagging, word_features

define_finetuning_flags(
    __name__,
    data_dir="Directory with train.txt, valid.txt (dev.txt, testa), test.txt (testb).",
    output_dir="Checkpoints, label_list.txt, records, results and predictions.",
    max_seq_length="WordPiece tokens per window.",
    do_train="Train on train.txt; saves label_list.txt.",
    do_eval="Score the dev file; writes eval_results.txt.",
    do_predict="Tag the test file; writes test_predictions.txt.",
    train_batch_size="Training batch size (windows).",
    learning_rate=(None, "Peak learning rate. Default: 5e-5 fine-tuning (the original's), "
                   "1e-3 feature-based (a BiLSTM trained from scratch)."),
    num_train_epochs="Passes over the training windows.",
    export_dir="Write a SavedModel here that takes raw sentences and returns a tag per "
               "whitespace-separated word.")
flags.DEFINE_bool("document_context", True,
                  "Fill each window with the neighbouring sentences (of the same document "
                  "when -DOCSTART- lines mark them); off: sentence by sentence.")
flags.DEFINE_integer("doc_stride", 64, "Pieces between the starts of consecutive windows.",
                     lower_bound=1)
flags.DEFINE_bool("feature_based", False,
                  "Freeze the encoder and train a 2-layer BiLSTM on its layers (paper 5.3).")
flags.DEFINE_list("feature_layers", ["-1"],
                  "Layers fed to the BiLSTM: 0 = embeddings, 1..L, or -1 (last) .. -L.")
flags.DEFINE_enum("feature_combine", "concat", ["concat", "sum", "weighted"],
                  "How the feature layers are combined; weighted: learned softmax weights.")
flags.DEFINE_integer("lstm_units", 768, "BiLSTM units in each direction.", lower_bound=1)
FLAGS = flags.FLAGS
# The flags only --feature_based reads.
FEATURE_FLAGS = ("feature_layers", "feature_combine", "lstm_units")
# The settings: the flags the runner reads, this script's own (cli/settings.py) and which
# of FEATURE_FLAGS were given (main resolves it).
Settings = with_flags(FineTuningSettings, "data_dir", "eval_batch_size", "document_context",
                      "doc_stride", "feature_based", "feature_layers", "feature_combine",
                      "lstm_units", "feature_flags_given")


@dataclasses.dataclass(frozen=True)
class Data:
  """What read() gives the later steps."""
  train: Optional[tagging_inputs.TrainingFile]  # --do_train
  labels: list  # the tag set: the training file's, else label_list.txt's
  task: tagging.TaggingTask
  train_arrays: Optional[dict]  # fine-tuned: the training windows
  held_out: dict  # {split: (documents, flat words)}
  features: Optional[word_features.ScratchFeatures]  # feature-based: each file's features


class Tagging(TaskAdapter):
  """CoNLL files in; label_list.txt, eval_results.txt, eval_predictions.txt,
  test_predictions.txt and test_results.txt out."""

  script = "run_ner.py"
  input_flags = ("doc_stride", "document_context")

  def __init__(self, settings):
    super().__init__(settings)
    s = settings
    if s.feature_flags_given and not s.feature_based:  # fine-tuning would ignore them
      many = len(s.feature_flags_given) > 1
      raise ValueError(f"{' and '.join(f'--{n}' for n in s.feature_flags_given)} "
                       f"need{'' if many else 's'} --feature_based (the BiLSTM on frozen "
                       "layers); fine-tuning tags from the last layer alone. Add "
                       f"--feature_based or drop {'them' if many else 'it'}.")
    tagging_inputs.check_window_length(s.max_seq_length)
    self.layers = tagging.parse_feature_layers(s.feature_layers)
    word_features.check_local_input(s.feature_based, s.use_tpu or s.strategy == "tpu",
                                    s.tpu_name or s.master)

  @classmethod
  def required_flags(cls, s):
    return {"data_dir": s.data_dir, "output_dir": s.output_dir}

  def adjust_config(self, config):
    if self.settings.feature_based:  # ValueError naming --feature_layers when one is not a layer
      tagging.layer_indices(self.layers, config.num_hidden_layers)
    return config

  def define(self, config):  # the labels come from the training file (or label_list.txt)
    s = self.settings
    train, labels = tagging_inputs.read_training_and_labels(
        s.data_dir, s.document_context, s.do_train, s.output_dir)
    task = tagging.TaggingTask(config, len(labels), s.feature_based, self.layers,
                               s.feature_combine, s.lstm_units)
    return {"task": "ner", "labels": labels, **task.settings()}, (train, labels, task)

  def _windows(self, tokenizer, labels, flat, training, pad_to=1):
    s = self.settings
    return tagging_inputs.window_arrays(tokenizer, flat, labels, s.max_seq_length,
                                        s.doc_stride, training, pad_to)[0]

  def read(self, defined, files, worker):
    s, (train, labels, task) = self.settings, defined
    # Fine-tuned, the training windows now (they count the steps); feature-based, later.
    train_arrays = None
    if s.do_train and not s.feature_based:
      train_arrays = self._windows(files.tokenizer, labels, train.words, True)
    held_out = tagging_inputs.read_held_out(s.data_dir, s.do_eval, s.do_predict,
                                            s.document_context, labels)
    logging.info("Labels: %s", " ".join(labels))
    features = None
    if s.feature_based and (s.do_train or held_out):  # each file's in turn, in a scratch file
      features = word_features.ScratchFeatures(app.scratch_dir("run_ner_"),
                                               task.feature_width(), held_out, train)
    return Data(train, labels, task, train_arrays, held_out, features)

  def train_steps(self, data):  # feature-based: batches of sentences; else of windows
    count = (len(data.train.sentence_lengths) if self.settings.feature_based
             else len(data.train_arrays["input_ids"]))
    return epoch_steps(self.settings, count, data.train.path)

  def build_task(self, config, data):
    return data.task

  def train_input(self, data, run):
    s = self.settings
    if run.worker.chief:
      conll.write_labels(run.worker.shared_path("label_list.txt"), data.labels)
    if not s.feature_based:
      return run.record_input(tagging_inputs.record_arrays(data.train_arrays))
    windows = self._windows(run.files.tokenizer, data.labels, data.train.words, False)
    return TrainInput(*data.features.train_input(run.trainer.model, windows, data.train,
                                                 s.train_batch_size, s.seed, s.bucket_by_length))

  def _tags(self, data, run, split, batch_size, records, predictions_file):
    """(documents, predicted IOB2 tags) of a held-out split; writes the tags (the chief)."""
    documents, flat = data.held_out[split]
    batch = run.worker.global_batch(batch_size)
    arrays = self._windows(run.files.tokenizer, data.labels, flat, False, pad_to=batch)
    if self.settings.feature_based:  # the encoder once, then the BiLSTM by sentence
      predicted = data.features.tag(run.trainer.model, arrays, flat, documents, batch)
    else:
      out = run.predict_records(tagging_inputs.record_arrays(arrays), records, batch)
      predicted = tagging_inputs.word_predictions(out["logits"], arrays["word_positions"],
                                                  len(flat.words))
    tags = [data.labels[i] for i in predicted]
    if run.worker.chief:
      conll.write_predictions(run.worker.shared_path(predictions_file), documents, tags)
    return documents, tags

  def evaluate(self, data, run):
    documents, tags = self._tags(data, run, "dev", self.settings.eval_batch_size,
                                 "eval.tf_record", "eval_predictions.txt")
    return {"global_step": run.trainer.global_step,
            **ner_metrics.file_scores(documents, tags, "eval_")}

  def predict(self, data, run):
    documents, tags = self._tags(data, run, "test", self.settings.predict_batch_size,
                                 "predict.tf_record", "test_predictions.txt")
    scores = ner_metrics.file_scores(documents, tags, "test_")
    if scores:  # a test file with tags is scored too
      run.write_results("test_results.txt", {"global_step": run.trainer.global_step, **scores},
                        "test")

  def serving(self, data, run, predicted):
    s = self.settings
    return export.TextTagger(run.trainer.model, run.files.vocab_file, s.do_lower_case,
                             s.max_seq_length, data.labels, s.doc_stride)


def main(_):
  learning_rate = FLAGS.learning_rate
  if learning_rate is None:  # the mode's default (see --learning_rate)
    learning_rate = 1e-3 if FLAGS.feature_based else 5e-5
  given = tuple(name for name in FEATURE_FLAGS if FLAGS[name].present)
  Runner(Settings.from_flags(FLAGS, learning_rate=learning_rate, feature_flags_given=given),
         Tagging).run()


if __name__ == "__main__":
  app.run(main)
