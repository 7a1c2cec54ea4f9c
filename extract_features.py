r"""Writes BERT activations for each token of each input line as JSON lines.

Input: one `text_a` or `text_a ||| text_b` per line. Output: one JSON object per
input line, in the original's layout:
  {"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]}]}]}
with values rounded to 6 decimals, for every real token including [CLS]/[SEP].

  python extract_features.py --input_file=input.txt --output_file=out.jsonl \
    --init_checkpoint=$BERT_DIR/bert_model.ckpt --layers=-1,-2,-3,-4
"""

from absl import flags, logging

from cli import app, model_files
from cli.flags import define_batching_flags
from cli.runner import batch_length_multiple

flags.DEFINE_string("input_file", None, "Text file, one `text_a` or `text_a ||| text_b` per line.")
flags.DEFINE_string("output_file", None, "JSON lines file to write.")
flags.DEFINE_string("layers", "-1,-2,-3,-4",
                    "Comma-separated transformer layer indexes to output; -1 is the last.")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json (or a Hugging Face config.json). Default: the one "
                    "beside --init_checkpoint.")
flags.DEFINE_integer("max_seq_length", 128,
                     "Maximum tokens per example after WordPiece, [CLS] and [SEP] included; "
                     "longer input is truncated. Pairs need at least 3.", lower_bound=2)
flags.DEFINE_string("init_checkpoint", None,
                    "Checkpoint to read: original TF1 prefix, Hugging Face directory or "
                    ".safetensors file, or one of ours.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("batch_size", 32, "Examples per inference batch.", lower_bound=1)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                  "Compute dtype of the matrix products (bfloat16: on CPUs with bfloat16 "
                  "instructions, GPUs and TPUs; the values then differ from float32's by "
                  "about half a percent: docs/performance.md).")
flags.DEFINE_bool("use_tpu", False, "Accepted for compatibility; TPUs are not used by this script.")
flags.DEFINE_string("master", None, "Accepted for compatibility; unused.")
flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility; unused.", lower_bound=1)
flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for compatibility; unused.")
define_batching_flags(training=False)
FLAGS = flags.FLAGS


def _layer_indexes(text, num_layers):
  try:
    indexes = [int(x) for x in text.split(",") if x.strip()]
  except ValueError:
    raise ValueError(f"--layers={text} must be comma-separated integers.") from None
  if not indexes:
    raise ValueError("--layers is empty; name at least one layer, e.g. -1.")
  for i in indexes:
    if not -num_layers <= i < num_layers:
      raise ValueError(f"--layers: {i} is out of range for a model with {num_layers} layers.")
  return indexes


def main(_):
  app.check_given(input_file=FLAGS.input_file, output_file=FLAGS.output_file,
                  init_checkpoint=FLAGS.init_checkpoint)
  app.log_flags()
  from data import features, path_checks, text_decoding
  from modeling import checkpoints, distribution, extracted_features, vocab_growth
  from modeling.encoder import BertEncoder

  path_checks.check_input_files(input_file=FLAGS.input_file)
  path_checks.check_output_file(FLAGS.output_file, "--output_file", [FLAGS.input_file])
  undecodable = text_decoding.Undecodable()
  pairs = features.read_text_pairs(FLAGS.input_file, undecodable)
  if undecodable.count:
    logging.warning(undecodable.report())
  config, vocab_file = model_files.config_and_vocab(
      FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.init_checkpoint)
  model_files.check_lengths_and_case(config, FLAGS.max_seq_length, FLAGS.do_lower_case,
                                      FLAGS.init_checkpoint)
  layer_indexes = _layer_indexes(FLAGS.layers, config.num_hidden_layers)
  tokenizer = model_files.load_tokenizer(vocab_file, FLAGS.do_lower_case, config)
  line = next((i + 1 for i, (_, b) in enumerate(pairs) if b), None)
  if line is not None and FLAGS.max_seq_length < 3:
    raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} leaves no room for the pair on "
                     f"line {line} of {FLAGS.input_file} ([CLS] a [SEP] b [SEP] needs 3 or "
                     "more).")
  if not pairs:
    raise ValueError(f"--input_file={FLAGS.input_file} holds no lines.")

  distribution.log_precision(FLAGS.dtype)
  encoder = BertEncoder(config, pack_tokens=True,  # layers on real tokens only (no XLA here)
                        dtype="mixed_bfloat16" if FLAGS.dtype == "bfloat16" else None)
  checkpoints.load_checkpoint(encoder, FLAGS.init_checkpoint, growth=vocab_growth.growth_for(
      FLAGS.init_checkpoint, vocab_file, config))  # new word rows: from their pieces
  extracted_features.write_features(
      encoder, tokenizer, pairs, layer_indexes, FLAGS.output_file, FLAGS.max_seq_length,
      FLAGS.batch_size, batch_length_multiple(FLAGS.batch_length_multiple))


if __name__ == "__main__":
  app.use_inference_defaults()  # the checkpoint is loaded before the encoder first runs
  app.run(main)
