"""Named-entity recognition on CoNLL-2003-style files: fine-tuned or feature-based BERT.

  python run_ner.py --data_dir=conll2003 --do_train --do_eval --do_predict \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/ner

  # Feature-based (paper section 5.3): frozen encoder, last four layers concatenated.
  python run_ner.py ... --feature_based --feature_layers=-1,-2,-3,-4 --feature_combine=concat

data_dir holds train.txt, valid.txt (or dev.txt, testa) and test.txt (or
testb). Evaluation writes eval_results.txt (conlleval precision, recall, F1)
and eval_predictions.txt; prediction writes test_predictions.txt (the test
file with a predicted-tag column) and, when the test file has tags,
test_results.txt. --bert_config_file and --vocab_file default to the files
beside --init_checkpoint.
"""

import os

import script_utils
from absl import flags, logging

flags.DEFINE_string("data_dir", None,
                    "Directory with train.txt, valid.txt (dev.txt, testa), test.txt (testb).")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint.")
flags.DEFINE_string("output_dir", None,
                    "Checkpoints, label_list.txt, records, results and predictions.")
flags.DEFINE_string("init_checkpoint", None,
                    "Weights to start from: original TF1, Hugging Face or ours.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "WordPiece tokens per window.", lower_bound=1)
flags.DEFINE_bool("do_train", False, "Train on train.txt; saves label_list.txt.")
flags.DEFINE_bool("do_eval", False, "Score the dev file; writes eval_results.txt.")
flags.DEFINE_bool("do_predict", False, "Tag the test file; writes test_predictions.txt.")
flags.DEFINE_integer("train_batch_size", 32, "Training batch size (windows).", lower_bound=1)
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch size.", lower_bound=1)
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.", lower_bound=1)
flags.DEFINE_float("learning_rate", None,
                   "Peak learning rate. Default: 5e-5 fine-tuning (the original's), 1e-3 "
                   "feature-based (a BiLSTM trained from scratch).")
flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training windows.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.", lower_bound=1)
script_utils.define_tpu_flags()
script_utils.define_runtime_flags()
script_utils.define_batching_flags()
flags.DEFINE_string("export_dir", None,
                    "Write a SavedModel here that takes raw sentences and returns a tag per "
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
script_utils.require_positive("learning_rate", "num_train_epochs")
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


def _tag_split(trainer, tokenizer, labels, documents, flat, batch, multiple, records):
  """Predicted IOB2 tags of a split's words, run through the records file `records`."""
  from data import conll, pipeline
  arrays, _ = conll.window_arrays(tokenizer, flat, labels, FLAGS.max_seq_length,
                                  FLAGS.doc_stride, False, pad_to=batch)
  conll.write_records(arrays, records)
  spec = conll.feature_spec(FLAGS.max_seq_length)
  out = trainer.predict(lambda ctx: pipeline.global_batches(
      records, spec, batch, ctx, length_multiple=multiple, by_length=True))
  predicted = conll.word_predictions(out["logits"], arrays["word_positions"], len(flat.words))
  return [labels[i] for i in predicted]


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
  script_utils.require(data_dir=FLAGS.data_dir, output_dir=FLAGS.output_dir)
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise ValueError("At least one of --do_train, --do_eval and --do_predict must be set.")
  if FLAGS.learning_rate is None:
    FLAGS.learning_rate = 1e-3 if FLAGS.feature_based else 5e-5
  script_utils.log_flags()
  import numpy as np
  from data import conll, files, pipeline
  from modeling import export, reports, tagging

  config, vocab_file = script_utils.config_and_vocab(
      FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
  script_utils.check_lengths_and_case(config, FLAGS.max_seq_length, FLAGS.do_lower_case,
                                      FLAGS.init_checkpoint)
  if FLAGS.max_seq_length < 3:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} leaves no room for words.")
  layers = _layers()
  if FLAGS.feature_based:
    tagging.layer_indices(layers, config.num_hidden_layers)
  files.ensure_writable_dir(FLAGS.output_dir, "--output_dir")
  script_utils.check_export_dir(FLAGS.export_dir)
  tokenizer = script_utils.load_tokenizer(vocab_file, FLAGS.do_lower_case, config)
  labels_path = os.path.join(FLAGS.output_dir, "label_list.txt")
  num_train_steps = 0
  model = {"feature_based": FLAGS.feature_based}
  if FLAGS.feature_based:
    model.update(feature_layers=layers, feature_combine=FLAGS.feature_combine,
                 lstm_units=FLAGS.lstm_units)
  if FLAGS.do_train:
    train_path = conll.find_split_file(FLAGS.data_dir, "train")
    if train_path is None:
      raise ValueError(f"--data_dir={FLAGS.data_dir} has no train.txt.")
    train_docs = conll.read_conll(train_path)
    labels = conll.labels_of(train_docs, train_path)
    run = script_utils.run_record(FLAGS, task="ner", labels=labels, **model)
    script_utils.check_run(FLAGS.output_dir, run)
    flat = conll.flatten(train_docs, train_path, FLAGS.document_context)
    train_arrays, num_windows = conll.window_arrays(
        tokenizer, flat, labels, FLAGS.max_seq_length, FLAGS.doc_stride, True)
    num_train_steps = script_utils.train_steps(num_windows, FLAGS.train_batch_size,
                                               FLAGS.num_train_epochs, train_path)
  else:
    labels = conll.read_labels(labels_path)
    script_utils.check_run(FLAGS.output_dir, script_utils.run_record(
        FLAGS, task="ner", labels=labels, **model))
  # Held-out files are read now, so a missing or empty one stops the run before training.
  held_out = {split: _read_split(split) for flag, split in
              ((FLAGS.do_eval, "dev"), (FLAGS.do_predict, "test")) if flag}
  _check_held_out_tags(held_out, labels)
  script_utils.require_weights(FLAGS)
  logging.info("Labels: %s", " ".join(labels))
  strategy, _ = script_utils.runtime(FLAGS)
  outputs = script_utils.worker_outputs(strategy, FLAGS.output_dir)
  replicas = strategy.num_replicas_in_sync
  multiple = script_utils.batch_length_multiple(
      FLAGS.batch_length_multiple, FLAGS.jit_compile, strategy)
  task = tagging.TaggingTask(config, len(labels), FLAGS.feature_based, layers,
                             FLAGS.feature_combine, FLAGS.lstm_units)
  trainer = script_utils.make_trainer(strategy, task, num_train_steps,
                                      int(num_train_steps * FLAGS.warmup_proportion),
                                      FLAGS.train_batch_size, FLAGS)

  if FLAGS.do_train:
    logging.info("%d training windows, %d steps", num_windows, num_train_steps)
    path = outputs.path("train.tf_record")
    conll.write_records(train_arrays, path)
    if outputs.chief:
      conll.write_labels(labels_path, labels)
      script_utils.save_run(FLAGS.output_dir, run)
    spec = conll.feature_spec(FLAGS.max_seq_length)
    trainer.train(lambda ctx: pipeline.record_dataset(
        path, spec, ctx.get_per_replica_batch_size(FLAGS.train_batch_size), True, FLAGS.seed,
        ctx, shuffle_buffer=10000, length_multiple=multiple,
        bucket_by_length=FLAGS.bucket_by_length), FLAGS.init_checkpoint)
  else:
    logging.info("Model %s.", trainer.restore(FLAGS.init_checkpoint, for_training=False))

  for flag, split, batch_size, stem, prefix in (
      (FLAGS.do_eval, "dev", FLAGS.eval_batch_size, "eval", "eval_"),
      (FLAGS.do_predict, "test", FLAGS.predict_batch_size, "test", "test_")):
    if not flag:
      continue
    batch = batch_size * replicas // np.gcd(batch_size, replicas)
    record = "eval.tf_record" if split == "dev" else "predict.tf_record"
    documents, flat = held_out[split]
    tags = _tag_split(trainer, tokenizer, labels, documents, flat, batch, multiple,
                      outputs.path(record))
    if not trainer.chief:
      continue
    conll.write_predictions(os.path.join(FLAGS.output_dir, f"{stem}_predictions.txt"),
                            documents, tags)
    if any(t is None for t in flat.tags):  # a test file to tag (dev files were checked)
      continue
    results = {"global_step": trainer.global_step, **_scores(documents, tags, prefix)}
    reports.write_eval_results(os.path.join(FLAGS.output_dir, f"{stem}_results.txt"), results)
    for key in sorted(results):
      logging.info("%s %s = %s", stem, key, results[key])

  if FLAGS.export_dir and trainer.chief:
    module = export.TextTagger(trainer.model, vocab_file, FLAGS.do_lower_case,
                               FLAGS.max_seq_length, labels)
    export.save(module, FLAGS.export_dir)
    logging.info("Exported a raw-text SavedModel to %s", FLAGS.export_dir)


if __name__ == "__main__":
  script_utils.run(main)
