"""Flag definitions that several entry scripts share.

The original's flags keep their names, types and defaults; the flags this
project adds are marked as such in each script's --help text.
"""

import sys

from absl import flags

from modeling import selection, vocab_growth  # no TensorFlow

ACTIONS = ("do_train", "do_eval", "do_predict")

# The original fine-tuning scripts' flags (export_dir added): (kind, name, default, help, bounds).
_FINETUNING = (
    ("string", "data_dir", None, "The task's data directory.", {}),
    ("string", "bert_config_file", None,
     "bert_config.json. Default: the one beside --init_checkpoint (without it: the one a "
     "training run wrote to --output_dir).", {}),
    ("string", "vocab_file", None, "vocab.txt. Default: the one beside --init_checkpoint "
     "(without it: the one a training run wrote to --output_dir).", {}),
    ("string", "output_dir", None, "Checkpoints, records, results and predictions.", {}),
    ("string", "init_checkpoint", None,
     "Weights to start from: original TF1, Hugging Face or ours.", {}),
    ("bool", "do_lower_case", True, "Lower-case and strip accents (uncased models).", {}),
    ("integer", "max_seq_length", 128, "Tokens per example after WordPiece.",
     {"lower_bound": 1}),
    ("bool", "do_train", False, "Fine-tune on the training data.", {}),
    ("bool", "do_eval", False, "Evaluate on the dev data; writes eval_results.txt.", {}),
    ("bool", "do_predict", False, "Predict the test data.", {}),
    ("integer", "train_batch_size", 32, "Training batch size.", {"lower_bound": 1}),
    ("integer", "eval_batch_size", 8, "Evaluation batch size.", {"lower_bound": 1}),
    ("integer", "predict_batch_size", 8, "Prediction batch size.", {"lower_bound": 1}),
    ("float", "learning_rate", 5e-5, "Peak learning rate.", {}),
    ("float", "num_train_epochs", 3.0, "Passes over the training data.", {}),
    ("float", "warmup_proportion", 0.1, "Share of the steps with a rising learning rate.",
     {"lower_bound": 0.0, "upper_bound": 1.0}),
    ("integer", "save_checkpoints_steps", 1000, "Steps between checkpoints.", {"lower_bound": 1}),
    ("integer", "iterations_per_loop", 1000, "Most steps run per call to the device.",
     {"lower_bound": 1}),
    ("string", "export_dir", None, "Write a raw-text SavedModel here.", {}),  # added
)


def define_finetuning_flags(module_name, omit=(), **changed):
  """Defines the fine-tuning scripts' shared flags, then the TPU, runtime and batching ones.

  module_name: the calling script's __name__; its --help lists the shared flags
  as its own. changed: name="help" or name=(default, "help") where the script
  words or sets a flag its own way; omit: shared flags the script does not have.
  """
  module = sys.argv[0] if module_name == "__main__" else module_name  # as absl names scripts
  for kind, flag, default, text, bounds in _FINETUNING:
    if flag in omit:
      continue
    change = changed.pop(flag, text)
    default, text = change if isinstance(change, tuple) else (default, change)
    getattr(flags, f"DEFINE_{kind}")(flag, default, text, module_name=module, **bounds)
  if changed:
    raise TypeError(f"Not shared fine-tuning flags: {', '.join(sorted(changed))}")
  define_tpu_flags()
  define_runtime_flags(exports=True)
  define_batching_flags()
  define_protocol_flags()
  must_be_positive("learning_rate", "num_train_epochs")


def define_tpu_flags():
  """The original's TPU flags (run_pretraining, run_classifier, run_squad)."""
  flags.DEFINE_bool("use_tpu", False, "Train on a TPU (same as --strategy=tpu).")
  flags.DEFINE_string("tpu_name", None, "TPU name or grpc:// address; empty on a TPU VM.")
  flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU (else detected).")
  flags.DEFINE_string("gcp_project", None, "GCP project of the TPU (else detected).")
  flags.DEFINE_string("master", None, "TPU master address; same role as --tpu_name.")
  flags.DEFINE_integer("num_tpu_cores", 8,
                       "Accepted for compatibility: TPUStrategy uses every core it finds.",
                       lower_bound=1)


def define_runtime_flags(exports=False):
  """Flags added to the original's, shared by the training scripts (`exports`: the script
  has --export_dir)."""
  flags.DEFINE_enum("strategy", "default", ["default", "one_device", "mirrored",
                                            "multi_worker", "tpu"],
                    "tf.distribute strategy: default (one device), one_device, mirrored (the "
                    "GPUs of this machine), multi_worker (machines listed in TF_CONFIG), tpu.")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16", "float16"],
                    "Compute dtype of every matrix product, forward and backward (a BiLSTM "
                    "head's excepted: float32); bfloat16/float16 keep float32 weights, "
                    "optimizer state, LayerNorm and losses; float16 adds dynamic loss scaling."
                    + (" An --export_dir model computes in it and stores its products' "
                       "weights in it." if exports else ""))
  flags.DEFINE_bool("jit_compile", False,
                    "Compile the training, evaluation and prediction steps with XLA (on one "
                    "device the whole training step; with several replicas each one's "
                    "forward and backward). TPUs compile everything anyway.")
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw: the original's AdamWeightDecay; lamb: LAMB, for large batches.")
  flags.DEFINE_integer("gradient_accumulation_steps", 1,
                       "Split each batch into this many micro-batches whose gradients add up "
                       "to the full batch's (less memory, same update).", lower_bound=1)
  flags.DEFINE_integer("log_steps", 100, "Steps between progress lines and summaries.",
                       lower_bound=1)
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in --output_dir.",
                       lower_bound=1)
  flags.DEFINE_integer("seed", None, "Seeds weights, dropout and data order; unset: random.")
  flags.DEFINE_enum("new_token_embeddings", "mean_of_pieces", vocab_growth.MODES,
                    "Rows of --vocab_file that --init_checkpoint lacks (a larger vocab, or "
                    "[unusedN] slots now words): the mean of the base model's embeddings of "
                    "the word's pieces (and of their output biases), or random values.")
  flags.DEFINE_integer("worker_timeout_seconds", 900,
                       "With --strategy=multi_worker: seconds to wait for the other tasks of "
                       "TF_CONFIG's cluster to come up before giving up; 0 waits for ever.",
                       lower_bound=0)


def define_batching_flags(training=True):
  """Flags added for the fine-tuning scripts (training) and extract_features.py (not
  training: no buckets, no --jit_compile, no TPU): batches trimmed to their real length."""
  unset = ("1 (exact lengths) on CPUs, 8 on GPUs, 16 with --jit_compile (each length is one "
           "XLA compilation); TPUs always use 0." if training else
           "1 (exact lengths) on CPUs, 8 on GPUs.")
  flags.DEFINE_integer("batch_length_multiple", None,
                       "Cut each batch to its longest sequence rounded up to a multiple of "
                       "this (at most --max_seq_length); 0 pads every batch to "
                       "--max_seq_length as the original did. Only padding is cut, so "
                       "results do not change. Records on disk keep the fixed length. "
                       f"Unset: {unset}", lower_bound=0)
  if not training:
    return
  flags.DEFINE_bool("bucket_by_length", False,
                    "Training: fill each batch with examples of similar length (buckets 16 "
                    "positions wide; feature-based run_ner: sentences of similar word counts). "
                    "Faster still, but it changes which examples share a batch.")


def _headline_metrics():
  """modeling/selection.py's table of headline metrics as help text: "cola
  eval_matthews_corrcoef, ..., else eval_accuracy"."""
  named = [f"{task} {metric}" for task, metric in selection.HEADLINE.items()
           if metric != selection.DEFAULT_METRIC]
  return ", ".join(named + [f"else {selection.DEFAULT_METRIC}"])


def define_protocol_flags():
  """Flags added for the fine-tuning scripts: evaluation during training, the best
  checkpoint, early stopping (cli/runner.py, modeling/periodic_eval.py)."""
  flags.DEFINE_integer("eval_every_steps", 0,
                       "Also evaluate on the dev data every this many training steps and at "
                       "the last (needs --do_eval; run_squad: --do_predict on a file with "
                       "answers): eval_log.csv, TensorBoard eval/, and the best checkpoint "
                       "in --output_dir/best. 0: off.", lower_bound=0)
  flags.DEFINE_float("eval_every_epochs", 0.0,
                     "As --eval_every_steps, every this many epochs (may be fractional). "
                     "0: off.", lower_bound=0.0)
  flags.DEFINE_string("best_metric", None,
                      "The eval_results.txt key that chooses the best checkpoint (keys with "
                      "'loss' go down, others up). Default: the task's headline metric "
                      f"({_headline_metrics()}).")
  flags.DEFINE_integer("early_stopping_patience", 0,
                       "Stop training after this many evaluations in a row without a better "
                       "--best_metric. 0: never.", lower_bound=0)
  flags.DEFINE_bool("use_best_checkpoint", False,
                    "Evaluate, predict and export with --output_dir/best (the best "
                    "checkpoint of evaluation during training) instead of the last one.")


def must_be_positive(*names):
  """Makes absl refuse a zero or negative value (None passes) of each named float flag."""
  for name in names:
    flags.register_validator(name, lambda value: value is None or value > 0,
                             "must be greater than 0")
