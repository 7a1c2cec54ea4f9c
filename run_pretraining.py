"""Masked-LM + next-sentence pretraining from create_pretraining_data.py records.

  python run_pretraining.py --input_file='data/*.tfrecord' --output_dir=out \
    --bert_config_file=bert_config.json --do_train --do_eval \
    --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
    --num_train_steps=100000 --num_warmup_steps=10000 --learning_rate=1e-4

Restarting with the same --output_dir resumes from its latest checkpoint.
--objective=ltr trains a left-to-right language model on the same records
instead (the paper's "LTR & No NSP"); its exported bert_config.json says
causal_attention, so the fine-tuning scripts build the causal encoder from it.
"""

import os

import script_utils
from absl import flags, logging

flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "Training records: comma-separated files or globs.")
flags.DEFINE_string("output_dir", None, "Checkpoints, logs, summaries and results go here.")
flags.DEFINE_string("init_checkpoint", None,
                    "Start from these weights (original TF1, Hugging Face or ours); "
                    "ignored when --output_dir already has a checkpoint to resume.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per record (must match the records).",
                     lower_bound=1)
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per record (must match).",
                     lower_bound=0)
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate and write eval_results.txt.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.", lower_bound=1)
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.", lower_bound=1)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer steps (at least 1 with --do_train).")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.", lower_bound=0)
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.", lower_bound=1)
flags.DEFINE_integer("iterations_per_loop", 1000, "Most steps run per call to the device.",
                     lower_bound=1)
flags.DEFINE_integer("max_eval_steps", 100, "Most evaluation batches.", lower_bound=1)
script_utils.define_tpu_flags()
script_utils.define_runtime_flags()
# Added.
flags.DEFINE_string("eval_input_file", None, "Evaluation records; default: --input_file.")
flags.DEFINE_enum("input_compression", "none", ["none", "gzip"], "Compression of the records.")
flags.DEFINE_string("vocab_file", None, "vocab.txt to copy beside the exported checkpoint.")
flags.DEFINE_float("next_sentence_weight", 1.0,
                   "Weight of the next-sentence loss in the total (the original: 1). 0 trains "
                   "masked LM only (the paper's 'No NSP'): the next-sentence head and pooler "
                   "stay as initialized and no next-sentence metrics are reported.")
flags.DEFINE_enum("objective", "mlm", ["mlm", "ltr"],
                  "mlm: masked LM, plus the next-sentence task as --next_sentence_weight says "
                  "(the original). ltr: a left-to-right language model (the paper's 'LTR & No "
                  "NSP'): causal attention, the next token predicted at every real position "
                  "from the records' text with the masked tokens put back, no next-sentence "
                  "head; the exported bert_config.json gets causal_attention: true.")
script_utils.require_positive("learning_rate")
FLAGS = flags.FLAGS


def main(_):
  script_utils.require(bert_config_file=FLAGS.bert_config_file, input_file=FLAGS.input_file,
                       output_dir=FLAGS.output_dir)
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise ValueError("At least one of --do_train and --do_eval must be set.")
  if FLAGS.do_train and FLAGS.num_train_steps < 1:
    raise ValueError(f"--num_train_steps={FLAGS.num_train_steps}: training needs at least 1.")
  if not FLAGS.next_sentence_weight >= 0:
    raise ValueError(f"--next_sentence_weight={FLAGS.next_sentence_weight} must be 0 or more.")
  if FLAGS.objective == "ltr" and FLAGS["next_sentence_weight"].present:
    raise ValueError("--next_sentence_weight applies to --objective=mlm; --objective=ltr "
                     "trains no next-sentence task.")
  script_utils.check_cluster(FLAGS)
  script_utils.log_flags()
  from data import features, files, pipeline
  from modeling import checkpoints, language_model, pretraining, reports
  from modeling.config import BertConfig

  config = BertConfig.from_json_file(FLAGS.bert_config_file)
  if FLAGS.objective == "ltr":
    config = language_model.causal_config(config)
  elif config.causal_attention:
    raise ValueError(f"--bert_config_file={FLAGS.bert_config_file} has causal_attention "
                     "(a left-to-right model) but masked LM reads both sides: pass "
                     "--objective=ltr, or a config without causal_attention.")
  script_utils.check_lengths_and_case(config, FLAGS.max_seq_length, None,
                                      FLAGS.init_checkpoint)
  if FLAGS.vocab_file:  # copied beside the export: checked now, not after training
    script_utils.load_tokenizer(FLAGS.vocab_file, True, config,
                                ("[UNK]", "[CLS]", "[SEP]", "[MASK]"))
  script_utils.make_output_dir(FLAGS.output_dir)
  run = {"objective": FLAGS.objective}  # a checkpoint there of the other objective is refused
  script_utils.check_run(FLAGS.output_dir, run)
  compression = "" if FLAGS.input_compression == "none" else "GZIP"
  spec = features.pretraining_feature_spec(FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)
  hints = {n: "--max_seq_length" for n in ("input_ids", "input_mask", "segment_ids")}
  hints.update({n: "--max_predictions_per_seq" for n in
                ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")})
  # Ids the embedding tables lack would fail deep in a step (or read zeros on GPUs).
  limits = {"input_ids": (config.vocab_size, "the config's vocab_size"),
            "masked_lm_ids": (config.vocab_size, "the config's vocab_size"),
            "segment_ids": (config.type_vocab_size, "the config's type_vocab_size"),
            "masked_lm_positions": (FLAGS.max_seq_length, "--max_seq_length")}
  # Before the first TensorFlow op (reading the records): MultiWorkerMirroredStrategy
  # must configure the runtime before it starts.
  strategy, policy = script_utils.runtime(FLAGS)
  outputs = script_utils.worker_outputs(strategy, FLAGS.output_dir)
  for flag, pattern in (("--input_file", FLAGS.input_file),
                        ("--eval_input_file", FLAGS.eval_input_file)):
    if pattern:
      files.expand_file_patterns(pattern, flag)  # a pattern matching nothing names the flag
      pipeline.check_records(pattern, spec, hints, compression, limits)
  script_utils.require_weights(FLAGS)

  if FLAGS.objective == "ltr":
    task = language_model.LanguageModelTask(config)
  else:
    task = pretraining.PretrainingTask(config, FLAGS.next_sentence_weight)
  logging.info("Objectives trained: %s", ", ".join(task.objectives))
  trainer = script_utils.make_trainer(strategy, task, FLAGS.num_train_steps,
                                     FLAGS.num_warmup_steps, FLAGS.train_batch_size, FLAGS)
  eval_pattern = FLAGS.eval_input_file or FLAGS.input_file
  if FLAGS.do_eval and trainer.static_shapes:  # evaluation runs whole batches only
    found = pipeline.count_records(eval_pattern, compression, FLAGS.eval_batch_size)
    if found < FLAGS.eval_batch_size:
      raise ValueError(f"{eval_pattern} holds {found} record(s), fewer than "
                       f"--eval_batch_size={FLAGS.eval_batch_size}: with --jit_compile or "
                       "on a TPU evaluation runs whole batches only, so none would be "
                       "evaluated.")

  # Compiled for one shape (XLA, TPUs), evaluation drops a last partial batch, as the
  # original always did; otherwise it counts every record.
  def dataset_fn(pattern, batch_size, is_training):
    return lambda ctx: pipeline.record_dataset(
        pattern, spec, ctx.get_per_replica_batch_size(batch_size), is_training, FLAGS.seed,
        ctx, compression, drop_remainder=is_training or trainer.static_shapes)

  accuracy = (("next_token_accuracy", "next-token accuracy") if FLAGS.objective == "ltr"
              else ("masked_lm_accuracy", "masked LM accuracy"))
  if FLAGS.do_train:
    def finish():
      export = os.path.join(FLAGS.output_dir, "export")
      checkpoints.save_tf1_checkpoint(checkpoints.model_weights(trainer.model), export,
                                      config, FLAGS.vocab_file)
      logging.info("Exported the original checkpoint layout to %s", export)
      reports.plot_curves(os.path.join(FLAGS.output_dir, "train_log.csv"),
                          os.path.join(FLAGS.output_dir, "training_curves.png"),
                          [("loss", "loss"), accuracy])
    if trainer.chief:
      script_utils.save_run(FLAGS.output_dir, run)
    with pipeline.naming_bad_files(FLAGS.input_file, compression):
      trainer.train(dataset_fn(FLAGS.input_file, FLAGS.train_batch_size, True),
                    FLAGS.init_checkpoint, on_finish=finish)
  if FLAGS.do_eval:
    if not FLAGS.do_train:
      logging.info("Model %s.", trainer.restore(FLAGS.init_checkpoint, for_training=False))
    pattern = FLAGS.eval_input_file or FLAGS.input_file
    with pipeline.naming_bad_files(pattern, compression):
      results = trainer.evaluate(dataset_fn(pattern, FLAGS.eval_batch_size, False),
                                 FLAGS.max_eval_steps)
    if outputs.chief:
      reports.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
    for key in sorted(results):
      logging.info("eval %s = %s", key, results[key])


if __name__ == "__main__":
  script_utils.run(main)
