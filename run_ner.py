r"""Named-entity recognition on CoNLL-2003-style files: fine-tuned or feature-based BERT.

  python run_ner.py --data_dir=conll2003 --do_train --do_eval --do_predict \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/ner
  # Feature-based (the paper's section 5.3): frozen encoder, last four layers concatenated.
  python run_ner.py ... --feature_based --feature_layers=-1,-2,-3,-4 --feature_combine=concat
"""

from absl import flags, logging

from cli import app
from cli.flags import define_finetuning_flags
from cli.runner import Runner, TaskAdapter, TrainInput
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


class Tagging(TaskAdapter):
  """CoNLL files in; label_list.txt, eval_results.txt, eval_predictions.txt,
  test_predictions.txt and test_results.txt out."""

  selection_task = "ner"

  def required_flags(self):
    return {"data_dir": FLAGS.data_dir, "output_dir": FLAGS.output_dir}

  def check_flags(self):
    if FLAGS.learning_rate is None:
      FLAGS.learning_rate = 1e-3 if FLAGS.feature_based else 5e-5
    tagging_inputs.check_window_length(FLAGS.max_seq_length)
    self.layers = tagging.parse_feature_layers(FLAGS.feature_layers)
    word_features.check_local_input(FLAGS.feature_based, FLAGS.use_tpu or FLAGS.strategy == "tpu",
                                    FLAGS.tpu_name or FLAGS.master)

  def adjust_config(self, config):
    if FLAGS.feature_based:  # ValueError naming --feature_layers when one is not a layer
      tagging.layer_indices(self.layers, config.num_hidden_layers)
    return config

  def trained_with(self, config):
    self.train, self.labels = tagging_inputs.read_training_and_labels(
        FLAGS.data_dir, FLAGS.document_context, FLAGS.do_train, FLAGS.output_dir)
    self.task = tagging.TaggingTask(config, len(self.labels), FLAGS.feature_based, self.layers,
                                    FLAGS.feature_combine, FLAGS.lstm_units)
    return {"task": "ner", "labels": self.labels, **self.task.settings()}

  def _windows(self, run, flat, training, pad_to=1):
    return tagging_inputs.window_arrays(run.tokenizer, flat, self.labels, FLAGS.max_seq_length,
                                        FLAGS.doc_stride, training, pad_to)[0]

  def read(self, run):
    # Fine-tuned, the training windows now (they count the steps); feature-based, later.
    if FLAGS.do_train and not FLAGS.feature_based:
      self.train_arrays = self._windows(run, self.train.words, True)
    self.held_out = tagging_inputs.read_held_out(FLAGS.data_dir, FLAGS.do_eval, FLAGS.do_predict,
                                                 FLAGS.document_context, self.labels)
    logging.info("Labels: %s", " ".join(self.labels))
    if FLAGS.feature_based:  # each file's features in turn, in a local scratch file
      self.features = word_features.ScratchFeatures(
          app.scratch_dir("run_ner_"), self.task.feature_width(), self.held_out, self.train)

  def train_steps(self, run):  # feature-based: batches of sentences; else of windows
    count = (len(self.train.sentence_lengths) if FLAGS.feature_based
             else len(self.train_arrays["input_ids"]))
    return run.epoch_steps(count, self.train.path)

  def build_task(self, run):
    return self.task

  def train_input(self, run):
    if run.chief:
      conll.write_labels(run.shared_path("label_list.txt"), self.labels)
    if not FLAGS.feature_based:
      return run.record_input(tagging_inputs.record_arrays(self.train_arrays))
    return TrainInput(*self.features.train_input(
        run.trainer.model, self._windows(run, self.train.words, False), self.train,
        FLAGS.train_batch_size, FLAGS.seed, FLAGS.bucket_by_length))

  def _tags(self, run, split, batch_size, records, predictions_file):
    """(documents, predicted IOB2 tags) of a held-out split; writes the tags (the chief)."""
    documents, flat = self.held_out[split]
    batch = run.global_batch(batch_size)
    arrays = self._windows(run, flat, False, pad_to=batch)
    if FLAGS.feature_based:  # the encoder once, then the BiLSTM by sentence
      predicted = self.features.tag(run.trainer.model, arrays, flat, documents, batch)
    else:
      out = run.predict_records(tagging_inputs.record_arrays(arrays), records, batch)
      predicted = tagging_inputs.word_predictions(out["logits"], arrays["word_positions"],
                                                  len(flat.words))
    tags = [self.labels[i] for i in predicted]
    if run.chief:
      conll.write_predictions(run.shared_path(predictions_file), documents, tags)
    return documents, tags

  def evaluate(self, run):
    documents, tags = self._tags(run, "dev", FLAGS.eval_batch_size, "eval.tf_record",
                                 "eval_predictions.txt")
    return {"global_step": run.trainer.global_step,
            **ner_metrics.file_scores(documents, tags, "eval_")}

  def predict(self, run):
    documents, tags = self._tags(run, "test", FLAGS.predict_batch_size, "predict.tf_record",
                                 "test_predictions.txt")
    scores = ner_metrics.file_scores(documents, tags, "test_")
    if scores:  # a test file with tags is scored too
      run.write_results("test_results.txt", {"global_step": run.trainer.global_step, **scores},
                        "test")

  def serving(self, run):
    return export.TextTagger(run.trainer.model, run.vocab_file, FLAGS.do_lower_case,
                             FLAGS.max_seq_length, self.labels)


def main(_):
  Runner(FLAGS, Tagging()).run()


if __name__ == "__main__":
  app.run(main)
