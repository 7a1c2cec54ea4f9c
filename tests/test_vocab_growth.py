"""New vocabulary rows from the base model's pieces (modeling/vocab_growth.py)."""

import dataclasses

import numpy as np

import original_tokenizer
from conftest import write_vocab
from helpers import randomize
from data import tokenization
from modeling import checkpoints, conversion, vocab_growth
from modeling.config import BertConfig
from modeling.encoder import BertEncoder
from modeling.pretraining import BertPretrainer

BASE = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]", "the", "cat",
         "card", "##io", "##s", "##my", "my", "##o", "path", "##path", "##y", "a", "##a"])
# [unused0] -> cats (cat ##s); appended: cardio (card ##io), ##opathy (##o ##path ##y),
# and zz, which the base vocab reads only as [UNK].
NEW = list(BASE)
NEW[5] = "cats"
NEW += ["cardio", "##opathy", "zz"]
CONFIG = BertConfig(vocab_size=len(BASE), hidden_size=8, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=16, max_position_embeddings=16)
PIECES = {5: [8, 11], 20: [9, 10], 21: [14, 16, 17]}


def test_base_pieces_split_words_and_continuations():
  wordpiece = tokenization.WordpieceTokenizer({t: i for i, t in enumerate(BASE)})
  assert vocab_growth.base_pieces("cats", wordpiece) == [8, 11]
  assert vocab_growth.base_pieces("##opathy", wordpiece) == [14, 16, 17]
  assert vocab_growth.base_pieces("zz", wordpiece) is None
  assert vocab_growth.new_rows(BASE, NEW, len(BASE)) == [
      (5, "cats"), (20, "cardio"), (21, "##opathy"), (22, "zz")]


def test_new_rows_take_the_pieces_the_original_tokenizer_gives():
  """New-row initialisation splits a word as the original's WordPiece does (the literal
  rendering in tests/original_tokenizer.py), through the tokenizer's own split; a "##"
  entry splits as the rest of a word whose first piece is known."""
  vocab = {t: i for i, t in enumerate(BASE)}
  wordpiece = tokenization.WordpieceTokenizer(vocab)
  for word in ("cats", "cardio", "mycard", "path", "paths", "catty", "zz", "the", "cardios"):
    pieces = original_tokenizer.wordpiece(word, vocab)
    expected = None if pieces == ["[UNK]"] else [vocab[p] for p in pieces]
    assert vocab_growth.base_pieces(word, wordpiece) == expected, word
  for rest in ("opathy", "s", "io", "zz"):  # "card" + rest, the first piece dropped
    pieces = original_tokenizer.wordpiece("card" + rest, vocab)
    expected = None if pieces == ["[UNK]"] else [vocab[p] for p in pieces[1:]]
    assert vocab_growth.base_pieces("##" + rest, wordpiece) == expected, rest


def test_grown_model_loads_stays_tied_and_converts(tmp_path, caplog):
  base = BertPretrainer(BertEncoder(CONFIG))
  weights = randomize(base, seed=3)
  base_dir = tmp_path / "base"
  checkpoints.save_tf1_checkpoint(checkpoints.model_weights(base), str(base_dir), CONFIG,
                                  write_vocab(tmp_path / "base_vocab.txt", BASE))
  config = dataclasses.replace(CONFIG, vocab_size=len(NEW))
  new_vocab = write_vocab(tmp_path / "vocab.txt", NEW)
  model = BertPretrainer(BertEncoder(config))
  for mode in ("random", "mean_of_pieces"):  # the second load is the one checked
    growth = vocab_growth.growth_for(str(base_dir), new_vocab, config, mode, seed=1)
    with caplog.at_level("INFO", logger="absl"):
      checkpoints.load_checkpoint(model, str(base_dir), growth=growth)
  table, bias = weights[vocab_growth.EMBEDDINGS], weights[vocab_growth.OUTPUT_BIAS]
  got = checkpoints.model_weights(model)
  emb, out_bias = got[vocab_growth.EMBEDDINGS], got[vocab_growth.OUTPUT_BIAS]
  untouched = [r for r in range(len(BASE)) if r != 5]
  np.testing.assert_array_equal(emb[untouched], table[untouched])  # exact: copied
  np.testing.assert_array_equal(out_bias[untouched], bias[untouched])
  for row, pieces in PIECES.items():
    # float32 means of 2-3 values: numpy's sum then divide, the same arithmetic as here.
    np.testing.assert_array_equal(emb[row], table[pieces].mean(axis=0))
    np.testing.assert_array_equal(out_bias[row], bias[pieces].mean())
  assert np.abs(emb[22]).max() <= 2 * config.initializer_range and out_bias[22] == 0.0
  lines = [r.getMessage() for r in caplog.records if "New vocabulary rows" in r.getMessage()]
  assert lines[-1] == ("New vocabulary rows (3 appended to the checkpoint's 20, 1 [unusedN] "
                       "rows now words): 3 initialised as the mean of their base pieces' "
                       "embeddings and output biases, 1 at random (no pieces in the "
                       "base vocab).")
  assert lines[0].endswith("0 initialised as the mean of their base pieces' embeddings "
                           "and output biases, 4 at random.")
  # Tied: the one [V, H] variable is both the input embedding and the output layer.
  assert [v.shape for v in model.weights].count((len(NEW), 8)) == 1
  for fmt in ("tf1", "hf"):
    out = tmp_path / fmt
    conversion.write_checkpoint(model, str(out), fmt, config, new_vocab)
    back = checkpoints.read_checkpoint(str(out)).weights
    assert set(back) == set(got)
    for name, value in got.items():
      np.testing.assert_array_equal(back[name], value, err_msg=name)  # exact: copied bits
  from safetensors.numpy import load_file
  hf = load_file(str(tmp_path / "hf" / "model.safetensors"))
  np.testing.assert_array_equal(hf["bert.embeddings.word_embeddings.weight"], emb)
  np.testing.assert_array_equal(hf["cls.predictions.bias"], out_bias)
  # convert_checkpoint.py given the grown vocab grows the base checkpoint's rows as the
  # load above (the [unusedN] and appended rows from their pieces), not the release's rows
  # beside the new words.
  from scripts import run_script
  config.to_json_file(str(tmp_path / "grown_config.json"))
  run_script("convert_checkpoint.py", f"--input_checkpoint={base_dir}",
             f"--vocab_file={new_vocab}", f"--bert_config_file={tmp_path / 'grown_config.json'}",
             f"--output_dir={tmp_path / 'converted'}")
  converted = checkpoints.read_checkpoint(str(tmp_path / "converted")).weights
  for row in PIECES:
    np.testing.assert_array_equal(converted[vocab_growth.EMBEDDINGS][row], emb[row])
    np.testing.assert_array_equal(converted[vocab_growth.OUTPUT_BIAS][row], out_bias[row])


def test_rows_past_the_base_vocab_are_new_and_random_rows_are_bert_s_initializer():
  """A checkpoint may hold more rows than its vocab has entries (padding): an appended
  token that lands there was never trained as it. Random rows are a normal truncated at
  two standard deviations by drawing again (none piled up at the bounds), and the same in
  every process without a seed (each worker of a multi-worker run grows its own copy)."""
  padded = BASE[:15]  # a 20-row checkpoint whose vocab lists 15 entries
  tokens = padded + ["cats", "zz", "qq", "xx", "ww", "vv"]
  assert [row for row, _ in vocab_growth.new_rows(padded, tokens, 20)] == list(range(15, 21))
  table = np.zeros((20, 400), np.float32)
  growth = vocab_growth.VocabGrowth(padded, tokens, len(tokens), initializer_range=0.02)
  grown = vocab_growth.grow({vocab_growth.EMBEDDINGS: table}, growth)[vocab_growth.EMBEDDINGS]
  np.testing.assert_array_equal(grown[15], table[[8, 11]].mean(axis=0))  # cats: cat ##s
  random_rows = grown[16:]
  assert np.abs(random_rows).max() < 0.04  # strictly inside: nothing clipped to the bound
  # A normal truncated at 2 sd has sd 0.880 of the untruncated one: 0.0176 (2,000 draws:
  # the estimate's own sd is about 0.0176 / sqrt(2 * 2000) = 0.0003).
  assert abs(random_rows.std() - 0.0176) < 5 * 0.0003
  again = vocab_growth.grow({vocab_growth.EMBEDDINGS: table}, growth)[vocab_growth.EMBEDDINGS]
  np.testing.assert_array_equal(again, grown)
