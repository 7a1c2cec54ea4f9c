"""Converts a BERT checkpoint between formats.

Reads Google's original TF1 checkpoints, Hugging Face BERT safetensors and our
own TF2 checkpoints. Writes one of:
  tf1 (default): the original layout (`bert_model.ckpt` with `bert_config.json`
       and `vocab.txt`), readable by every tool that reads Google's releases;
  tf2: our tf.train.Checkpoint layout (`model.ckpt`);
  hf:  a Hugging Face directory (`model.safetensors`, `config.json`,
       `vocab.txt`) that transformers' BertModel, BertForPreTraining,
       BertForSequenceClassification or BertForQuestionAnswering loads.
Heads present in the input (pretraining, classifier, SQuAD) are carried over.

  python convert_checkpoint.py --input_checkpoint=path/to/hf_model_dir \
    --output_dir=converted --output_format=tf1
  python convert_checkpoint.py --input_checkpoint=converted \
    --output_dir=back_to_hf --output_format=hf
"""

import os

import script_utils
from absl import flags, logging

flags.DEFINE_string("input_checkpoint", None,
                    "TF1 checkpoint prefix, our TF2 checkpoint, a directory holding either, "
                    "or a Hugging Face directory / .safetensors file.")
flags.DEFINE_string("output_dir", None, "Directory to write the converted checkpoint into.")
flags.DEFINE_enum("output_format", "tf1", ["tf1", "tf2", "hf"],
                  "tf1: Google's original layout; tf2: our tf.train.Checkpoint layout; "
                  "hf: Hugging Face model.safetensors with config.json.")
flags.DEFINE_string("bert_config_file", None,
                    "Model config. Default: bert_config.json or config.json beside the input.")
flags.DEFINE_string("vocab_file", None,
                    "vocab.txt to copy to the output. Default: the one beside the input, if any.")
FLAGS = flags.FLAGS


def main(_):
  script_utils.require(input_checkpoint=FLAGS.input_checkpoint, output_dir=FLAGS.output_dir)
  script_utils.log_flags()
  from data import files, tokenization
  from modeling import checkpoints, hf_checkpoints
  from modeling.config import BertConfig

  if FLAGS.bert_config_file:
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
  else:
    config = checkpoints.find_config(FLAGS.input_checkpoint)
  vocab_file = FLAGS.vocab_file
  if not vocab_file:
    try:
      vocab_file = checkpoints.find_vocab(FLAGS.input_checkpoint)
    except ValueError:
      logging.warning("No vocab.txt beside the input; the output will have none.")
  if vocab_file:  # checked before anything is written
    size = max(tokenization.load_vocab(vocab_file).values()) + 1
    if size > config.vocab_size:
      raise ValueError(f"{vocab_file} has {size} entries but the model's vocab_size is "
                       f"{config.vocab_size}; pass the checkpoint's own --vocab_file.")
  ckpt = checkpoints.read_checkpoint(FLAGS.input_checkpoint)
  model = checkpoints.model_for(ckpt, config)
  checkpoints.load_checkpoint(model, FLAGS.input_checkpoint, ckpt=ckpt)
  if FLAGS.output_format == "tf1":
    path = checkpoints.save_tf1_checkpoint(
        checkpoints.model_weights(model), FLAGS.output_dir, config, vocab_file)
  elif FLAGS.output_format == "hf":
    path = hf_checkpoints.save_hf_checkpoint(
        checkpoints.model_weights(model), FLAGS.output_dir, config, vocab_file)
  else:
    files.ensure_writable_dir(FLAGS.output_dir, "--output_dir")
    path = checkpoints.save_tf2_checkpoint(model, os.path.join(FLAGS.output_dir, "model.ckpt"))
    with files.atomic_output(os.path.join(FLAGS.output_dir, "bert_config.json")) as f:
      f.write(config.to_json_string())
    if vocab_file:
      with files.atomic_output(os.path.join(FLAGS.output_dir, "vocab.txt"), "wb") as f:
        with files.open_file(vocab_file, "rb") as src:
          f.write(src.read())
  logging.info("Converted %s (%s, %s) to %s (%s).", ckpt.path, ckpt.format,
               type(model).__name__, path, FLAGS.output_format)


if __name__ == "__main__":
  script_utils.run(main)
