r"""Loads a `convert_checkpoint.py --output_format=hf` directory in Hugging Face transformers.

Stand-alone: run it with a Python that has torch and transformers (not the project's venv;
it imports neither TensorFlow nor project code). It checks that the converted directory
loads into transformers' BertModel with no missing, unexpected or resized weights, that
its model.safetensors holds exactly the keys and shapes transformers' own save_pretrained
writes for that model, each tensor equal to the original file's (name, dtype, shape and
bytes; the original's only other entries may be buffers, such as the position_ids an
older transformers saved), that the tokenizer built from its vocab.txt gives the
original's ids, and that all hidden states (embeddings and every layer) and the pooled
output on held-out sentences equal the original model's. Prints one JSON line; exits 1 if
any check fails.

  .venv/bin/python convert_checkpoint.py --input_checkpoint=$MINILM --output_dir=/tmp/tf1
  .venv/bin/python convert_checkpoint.py --input_checkpoint=/tmp/tf1 \
      --output_dir=/tmp/hf --output_format=hf
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --converted_dir=/tmp/hf

With --head_dir (a directory made by hf_head_reference.py: a converted task-head
checkpoint and our logits in reference.npz) it loads the class named in config.json
(BertForPreTraining, BertForMaskedLM, BertLMHeadModel, BertForSequenceClassification,
BertForQuestionAnswering, BertForTokenClassification, BertForMultipleChoice) instead,
checks that nothing is missing, unexpected or resized, that the file holds exactly the
keys and shapes save_pretrained writes for that class (so no pooler where the class has
none), that every encoder tensor equals the original's, and compares its logits on the
reference inputs with ours (real positions only; tolerance 1e-4).
"""

import argparse
import glob
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("USE_TF", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "speed"))
from hf_peer import default_model_dir  # noqa: E402  (benchmarks/speed)

# Sentences that appear in no test: a batch with padding, and a pair with two segments.
HELD_OUT = ["The ferry leaves the harbour at dawn, weather permitting.",
            "Photosynthesis turns light into chemical energy.",
            "Could you pass the salt?",
            "In 1969 two astronauts walked on the Moon while a third stayed in orbit."]
HELD_OUT_PAIR = ("Which gas do plants take in?",
                 "Plants absorb carbon dioxide and release oxygen.")


def file_entries(path):
  """{key: (dtype, shape, raw bytes)} of a safetensors file."""
  with safe_open(path, "np") as f:
    return {k: (str(v.dtype), v.shape, v.tobytes()) for k in f.keys() for v in [f.get_tensor(k)]}


def saved_layout(model):
  """{key: shape} of the files transformers' own save_pretrained writes for `model`."""
  with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d)
    layout = {}
    for path in glob.glob(os.path.join(d, "*.safetensors")):
      layout.update({k: v[1] for k, v in file_entries(path).items()})
  return layout


def layout_report(model, path):
  """Keys of the file at `path` that save_pretrained would not write, and those it lacks,
  with those of another shape; all empty when the file is exactly the model's layout."""
  want = saved_layout(model)
  got = {k: v[1] for k, v in file_entries(path).items()}
  return {"layout_keys": len(want), "not_in_layout": sorted(set(got) - set(want)),
          "layout_missing": sorted(set(want) - set(got)),
          "layout_shape_differs": sorted(k for k in want if k in got and got[k] != want[k])}


def compare_files(original_dir, converted_dir, buffers):
  """The converted file against the original, entry by entry; `buffers`: the model's
  buffer names, the only entries the original may have that the converted file has not."""
  want = file_entries(os.path.join(original_dir, "model.safetensors"))
  got = file_entries(os.path.join(converted_dir, "model.safetensors"))
  differing = sorted(k for k in want if k in got and got[k] != want[k])
  not_written = sorted(set(want) - set(got))
  return {"tensors": len(want), "written": len(got),
          "missing": [k for k in not_written if k not in buffers],
          "buffers_not_written": [k for k in not_written if k in buffers],
          "extra": sorted(set(got) - set(want)), "differing": differing}


def in_fresh_memory(model):
  """`model` with each tensor copied out of the file's memory map. A tensor's address
  modulo 64 follows its offset in the file, and torch's CPU kernels for one row (the
  pooler of a one-sentence batch) round differently at other alignments (1 ulp seen);
  copied, equal weights give bit-equal outputs wherever they were stored."""
  with torch.no_grad():
    for tensor in list(model.parameters()) + list(model.buffers()):
      tensor.data = tensor.data.clone()
  return model


def hidden_states(model, batch):
  with torch.no_grad():
    out = model(**batch, output_hidden_states=True)
  return [h.numpy() for h in out.hidden_states], out.pooler_output.numpy()


def check_head(head_dir, original_dir):
  """Report of a converted task-head checkpoint against our logits in reference.npz."""
  with open(os.path.join(head_dir, "config.json")) as f:
    architecture = json.load(f)["architectures"][0]
  model, info = getattr(transformers, architecture).from_pretrained(
      head_dir, output_loading_info=True)
  model.eval()
  want = file_entries(os.path.join(original_dir, "model.safetensors"))
  # The task layouts prefix the encoder's names with "bert."; BertModel's file does not.
  got = {k.removeprefix("bert."): v
         for k, v in file_entries(os.path.join(head_dir, "model.safetensors")).items()}
  shared = [k for k in got if k in want]
  reference = np.load(os.path.join(head_dir, "reference.npz"))
  batch = {"input_ids": torch.tensor(reference["input_ids"], dtype=torch.long),
           "attention_mask": torch.tensor(reference["input_mask"], dtype=torch.long),
           "token_type_ids": torch.tensor(reference["segment_ids"], dtype=torch.long)}
  with torch.no_grad():
    out = model(**batch)
  real = reference["input_mask"].astype(bool)
  if architecture == "BertForQuestionAnswering":
    pairs = [(out.start_logits.numpy()[real], reference["start_logits"][real]),
             (out.end_logits.numpy()[real], reference["end_logits"][real])]
  elif architecture == "BertForPreTraining":  # every position's vocabulary, and [B, 2]
    pairs = [(out.prediction_logits.numpy()[real], reference["masked_lm_logits"][real]),
             (out.seq_relationship_logits.numpy(), reference["next_sentence_logits"])]
  elif architecture in ("BertForTokenClassification", "BertLMHeadModel",
                        "BertForMaskedLM"):  # [B, S, C]: real positions
    pairs = [(out.logits.numpy()[real], reference["logits"][real])]
  else:  # [B, C]: sentence classes, or the choices of a question
    pairs = [(out.logits.numpy(), reference["logits"])]
  diff = max(float(np.abs(a - b).max()) for a, b in pairs)
  loading = {k: sorted(v) for k, v in info.items() if k != "error_msgs"}
  layout = layout_report(model, os.path.join(head_dir, "model.safetensors"))
  # What the original has that the file need not: buffers, and the pooler of a class
  # built without one (transformers' own model says which).
  pooler = model.bert.pooler
  spare = {k.removeprefix("bert.") for k, _ in model.named_buffers()}
  if pooler is None:
    spare |= {"pooler.dense.weight", "pooler.dense.bias"}
  report = {"transformers": transformers.__version__, "architecture": architecture,
            "loading": loading, **layout, "has_pooler": pooler is not None,
            "head_tensors": sorted(set(got) - set(want)),
            "encoder_tensors_equal": f"{sum(got[k] == want[k] for k in shared)}/{len(shared)}",
            "original_tensors_not_written": sorted(set(want) - set(got)),
            "logits_compared": int(sum(a.size for a, _ in pairs)),
            "max_abs_logit_difference": diff}
  report["ok"] = (not any(loading.values())
                  and not any(v for k, v in layout.items() if k != "layout_keys")
                  and bool(report["head_tensors"])
                  and all(got[k] == want[k] for k in shared)
                  and not set(want) - set(got) - spare
                  and diff < 1e-4)
  return report


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--converted_dir",
                      help="Directory written by convert_checkpoint.py --output_format=hf.")
  parser.add_argument("--head_dir", help="A task-head directory from hf_head_reference.py.")
  parser.add_argument("--original_dir", default=default_model_dir(),
                      help="The original Hugging Face directory (default: the MiniLM package).")
  args = parser.parse_args()
  if bool(args.converted_dir) == bool(args.head_dir):
    parser.error("give one of --converted_dir and --head_dir")
  if args.head_dir:
    report = check_head(args.head_dir, args.original_dir)
    print(json.dumps(report))
    sys.exit(0 if report["ok"] else 1)

  original = in_fresh_memory(transformers.BertModel.from_pretrained(args.original_dir).eval())
  converted, info = transformers.BertModel.from_pretrained(args.converted_dir,
                                                           output_loading_info=True)
  in_fresh_memory(converted.eval())
  report = {"transformers": transformers.__version__,
            "files": compare_files(args.original_dir, args.converted_dir,
                                   set(dict(converted.named_buffers()))),
            "layout": layout_report(converted,
                                    os.path.join(args.converted_dir, "model.safetensors"))}
  report["loading"] = {k: sorted(v) for k, v in info.items() if k != "error_msgs"}
  state_a, state_b = original.state_dict(), converted.state_dict()
  report["state_dict_equal"] = (state_a.keys() == state_b.keys() and all(
      torch.equal(state_a[k], state_b[k]) for k in state_a))

  reference = transformers.AutoTokenizer.from_pretrained(args.original_dir)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.converted_dir)
  max_diff, tokens_equal = [], True
  for texts in (dict(text=HELD_OUT), dict(text=HELD_OUT_PAIR[0], text_pair=HELD_OUT_PAIR[1])):
    batch = reference(**texts, padding=True, return_tensors="pt")
    tokens_equal &= torch.equal(batch["input_ids"], tokenizer(
        **texts, padding=True, return_tensors="pt")["input_ids"])
    (states_a, pooled_a), (states_b, pooled_b) = (hidden_states(original, batch),
                                                  hidden_states(converted, batch))
    real = batch["attention_mask"].numpy().astype(bool)
    max_diff.append(max([float(np.abs(a[real] - b[real]).max())
                         for a, b in zip(states_a, states_b)]
                        + [float(np.abs(pooled_a - pooled_b).max())]))
    report["hidden_states_compared"] = len(states_a)
  report["tokenizer_ids_equal"] = bool(tokens_equal)
  report["max_abs_hidden_state_difference"] = max(max_diff)

  files = report["files"]
  ok = (not files["missing"] and not files["extra"] and not files["differing"]
        and not any(v for k, v in report["layout"].items() if k != "layout_keys")
        and not any(report["loading"].values()) and report["state_dict_equal"]
        and report["tokenizer_ids_equal"] and report["max_abs_hidden_state_difference"] == 0.0)
  report["ok"] = ok
  print(json.dumps(report))
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
