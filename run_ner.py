"""Named-entity recognition on CoNLL-2003-style files: fine-tuned or feature-based BERT.

  python run_ner.py --data_dir=conll2003 --do_train --do_eval --do_predict \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/ner

  # Feature-based (paper section 5.3): frozen encoder, last four layers concatenated.
  python run_ner.py ... --feature_based --feature_layers=-1,-2,-3,-4 --feature_combine=concat

Feature-based, the encoder runs once over each file's windows; the BiLSTM
then reads each sentence's words (their features at their first piece), and
training steps and --num_train_epochs count batches of --train_batch_size
sentences. The features go to a scratch file under TMPDIR (words x width x 4
bytes), read back through a memory map, so they need not fit in memory.

data_dir holds train.txt, valid.txt (or dev.txt, testa) and test.txt (or
testb). Evaluation writes eval_results.txt (conlleval precision, recall, F1)
and eval_predictions.txt; prediction writes test_predictions.txt (the test
file with a predicted-tag column) and, when the test file has tags,
test_results.txt. --bert_config_file and --vocab_file default to the files
beside --init_checkpoint.
"""

import os

import finetuning
import script_utils
from absl import flags, logging

finetuning.define_flags(
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
flags.DEFINE_integer("doc_stride", 64, "Pieces between the starts of consecutive windows.", lower_bound=1)
flags.DEFINE_bool("feature_based", False,
                  "Freeze the encoder and train a 2-layer BiLSTM on its layers (paper 5.3).")
flags.DEFINE_list("feature_layers", ["-1"],
                  "Layers fed to the BiLSTM: 0 = embeddings, 1..L, or -1 (last) .. -L.")
flags.DEFINE_enum("feature_combine", "concat", ["concat", "sum", "weighted"],
                  "How the feature layers are combined; weighted: learned softmax weights.")
flags.DEFINE_integer("lstm_units", 768, "BiLSTM units in each direction.", lower_bound=1)
FLAGS = flags.FLAGS


def _layers():
  """--feature_layers as ints."""
  try:
    return [int(v) for v in FLAGS.feature_layers]
  except ValueError:
    raise ValueError(f"--feature_layers={','.join(FLAGS.feature_layers)}: expected integers "
                     "such as -1,-2,-3,-4.") from None


def _read_split(split):
  """(documents, flat words) of a split's file; ValueError when it is missing or empty."""
  from data import conll
  path = conll.find_split_file(FLAGS.data_dir, split)
  if path is None:
    raise ValueError(f"--data_dir={FLAGS.data_dir} has no {split} file "
                     f"({' or '.join(conll.SPLIT_FILES[split])}).")
  documents = conll.read_conll(path)
  flat = conll.flatten(documents, path, FLAGS.document_context)
  if not flat.words:
    raise ValueError(f"{path} holds no words to tag.")
  return documents, flat


def _check_held_out_tags(held_out, labels):
  """Before training: the dev file must have tags to score; tags the model cannot
  predict (types absent from training) are reported, as they can only count as missed."""
  for split, (_, flat) in held_out.items():
    path = flat.origins[0][0]
    if split == "dev" and any(t is None for t in flat.tags):
      raise ValueError(f"{path} has no tag column to score; --do_eval needs the dev file's "
                       "gold tags (to tag a file without scoring it, use it as the test "
                       "file with --do_predict).")
    unknown = [i for i, t in enumerate(flat.tags) if t is not None and t not in labels]
    if unknown:
      first = unknown[0]
      logging.warning("%s:%d: tag %s is not one the model was trained on (%s); its %d "
                      "word(s) can only be scored as missed.", *flat.origins[first],
                      flat.tags[first], " ".join(labels), len(unknown))


def _tag_split(runner, labels, documents, flat, batch, records, scratch):
  """Predicted IOB2 tags of a split's words: fine-tuned, through the records file
  `records`; feature-based, the encoder's features once (a file in `scratch`), then the
  BiLSTM by sentence."""
  from data import conll
  from modeling import tagging
  arrays, _ = conll.window_arrays(runner.tokenizer, flat, labels, FLAGS.max_seq_length,
                                  FLAGS.doc_stride, False, pad_to=batch)
  if FLAGS.feature_based:
    model = runner.trainer.model
    features, path = _word_features(runner, arrays, len(flat.words), batch, scratch)
    predicted = tagging.tag_sentences(model, features, conll.sentence_lengths(documents), batch)
    del features  # unmapped, so the file can go: the next file's features take its place
    os.remove(path)  # local scratch, not a user path
    return [labels[i] for i in predicted]
  conll.write_records(arrays, records)
  out = runner.predict(records, conll.feature_spec(FLAGS.max_seq_length), batch)
  predicted = conll.word_predictions(out["logits"], arrays["word_positions"], len(flat.words))
  return [labels[i] for i in predicted]


def _word_features(runner, arrays, num_words, batch, scratch):
  """The frozen encoder's features of every word, in a memory-mapped file in `scratch`:
  (the features, the file's path)."""
  from modeling import tagging
  path = os.path.join(scratch, "features.npy")
  width = runner.trainer.model.feature_width
  logging.info("Features of %d words x %d (%.2f GB) into %s", num_words, width,
               num_words * width * 4 / 1e9, path)
  return tagging.word_features(runner.trainer.model, arrays, num_words, batch, path), path


def _train_feature_based(runner, labels, flat, lengths, scratch):
  """Features of the training words once (the frozen encoder's prediction pass, into a
  file in `scratch`), then the BiLSTM and dense trained over shuffled batches of
  sentences, whose features the input pipeline reads from that file."""
  from data import conll
  arrays, _ = conll.window_arrays(runner.tokenizer, flat, labels, FLAGS.max_seq_length,
                                  FLAGS.doc_stride, False)
  features, path = _word_features(runner, arrays, len(flat.words), FLAGS.train_batch_size,
                                  scratch)
  del features  # the input pipeline maps the file batch by batch
  index = {label: i for i, label in enumerate(labels)}
  label_ids = [index[t] for t in flat.tags]
  if runner.chief:
    conll.write_labels(runner.output("label_list.txt"), labels)
  runner.train_on(lambda ctx: conll.sentence_dataset(
      lengths, label_ids, ctx.get_per_replica_batch_size(FLAGS.train_batch_size), FLAGS.seed,
      ctx, FLAGS.bucket_by_length), lambda batches: conll.with_word_features(batches, path))
  os.remove(path)  # local scratch: the held-out files' features take its place


def _scores(documents, tags, prefix):
  """conlleval scores of predicted tags against a file's own tags, keys prefixed."""
  from data import ner_metrics
  gold = [s.tags for d in documents for s in d.sentences]
  guessed, start = [], 0
  for sentence in gold:
    guessed.append(tags[start:start + len(sentence)])
    start += len(sentence)
  return {prefix + k: v for k, v in ner_metrics.conll_scores(gold, guessed).items()}


def main(_):
  if FLAGS.learning_rate is None:
    FLAGS.learning_rate = 1e-3 if FLAGS.feature_based else 5e-5
  runner = finetuning.Runner(FLAGS)
  runner.check_flags(data_dir=FLAGS.data_dir, output_dir=FLAGS.output_dir)
  from data import conll, path_checks
  from modeling import export, tagging

  config = runner.load_config()
  if FLAGS.max_seq_length < 3:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} leaves no room for words.")
  layers = _layers()
  if FLAGS.feature_based:
    tagging.layer_indices(layers, config.num_hidden_layers)
    if (FLAGS.use_tpu or FLAGS.strategy == "tpu") and (FLAGS.tpu_name or FLAGS.master or
                                                       "local") != "local":
      raise ValueError("--feature_based reads its features in this process, which a remote "
                       "TPU's input pipeline cannot: run it on the TPU VM (no --tpu_name).")
  tokenizer = runner.setup()
  labels_path = runner.output("label_list.txt")
  model = {"feature_based": FLAGS.feature_based, "causal_attention": config.causal_attention}
  if FLAGS.feature_based:
    model.update(feature_layers=layers, feature_combine=FLAGS.feature_combine,
                 lstm_units=FLAGS.lstm_units)
  if FLAGS.do_train:
    train_path = conll.find_split_file(FLAGS.data_dir, "train")
    if train_path is None:
      raise ValueError(f"--data_dir={FLAGS.data_dir} has no train.txt.")
    train_docs = conll.read_conll(train_path)
    labels = conll.labels_of(train_docs, train_path)
  else:
    labels = conll.read_labels(labels_path)
  runner.check_run(task="ner", labels=labels, **model)
  if FLAGS.do_train:
    flat = conll.flatten(train_docs, train_path, FLAGS.document_context)
    if FLAGS.feature_based:  # steps are batches of sentences
      lengths = conll.sentence_lengths(train_docs)
      runner.train_steps(len(lengths), train_path)
    else:  # steps are batches of windows
      train_arrays, num_windows = conll.window_arrays(
          tokenizer, flat, labels, FLAGS.max_seq_length, FLAGS.doc_stride, True)
      runner.train_steps(num_windows, train_path)
  # Held-out files are read now, so a missing or empty one stops the run before training.
  held_out = {split: _read_split(split) for flag, split in
              ((FLAGS.do_eval, "dev"), (FLAGS.do_predict, "test")) if flag}
  _check_held_out_tags(held_out, labels)
  scratch = None
  if FLAGS.feature_based:  # each file's features in turn, in a local scratch file
    scratch = script_utils.scratch_dir("run_ner_")
    words = [len(f.words) for _, f in held_out.values()]
    words += [len(flat.words)] if FLAGS.do_train else []
    path_checks.check_free_space(
        scratch, max(words) * tagging.feature_width(config.hidden_size, len(layers),
                                                    FLAGS.feature_combine) * 4,
        "The encoder's features (--feature_based)", ": point TMPDIR at a larger local disk")
  logging.info("Labels: %s", " ".join(labels))
  task = tagging.TaggingTask(config, len(labels), FLAGS.feature_based, layers,
                             FLAGS.feature_combine, FLAGS.lstm_units)
  trainer = runner.start(task)

  if FLAGS.do_train and FLAGS.feature_based:
    logging.info("%d training sentences, %d steps of %d sentences", len(lengths),
                 runner.num_train_steps, FLAGS.train_batch_size)
    _train_feature_based(runner, labels, flat, lengths, scratch)
  elif FLAGS.do_train:
    logging.info("%d training windows, %d steps", num_windows, runner.num_train_steps)
    path = runner.path("train.tf_record")
    conll.write_records(train_arrays, path)
    if runner.chief:
      conll.write_labels(labels_path, labels)
    runner.train(path, conll.feature_spec(FLAGS.max_seq_length))
  else:
    runner.restore()

  for flag, split, batch_size, stem, prefix in (
      (FLAGS.do_eval, "dev", FLAGS.eval_batch_size, "eval", "eval_"),
      (FLAGS.do_predict, "test", FLAGS.predict_batch_size, "test", "test_")):
    if not flag:
      continue
    record = "eval.tf_record" if split == "dev" else "predict.tf_record"
    documents, flat = held_out[split]
    tags = _tag_split(runner, labels, documents, flat, runner.batch_size(batch_size),
                      runner.path(record), scratch)
    if not runner.chief:
      continue
    conll.write_predictions(runner.output(f"{stem}_predictions.txt"), documents, tags)
    if any(t is None for t in flat.tags):  # a test file to tag (dev files were checked)
      continue
    runner.write_results(f"{stem}_results.txt", {"global_step": trainer.global_step,
                                                  **_scores(documents, tags, prefix)}, stem)

  runner.export(export.TextTagger, labels)


if __name__ == "__main__":
  script_utils.run(main)
