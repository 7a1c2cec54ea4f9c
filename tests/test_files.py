"""data/files.py's text reading, and every reader that uses it, on files that are not UTF-8."""

import pytest

from data import conll, corpus, features, files, path_checks, swag, text_decoding, tokenization, wordpiece_vocab
from data.pretraining import documents

# Bytes that are not UTF-8 text, each with the start of the one-line error it must give.
NOT_UTF8 = {
    "latin-1": (lambda text: text.encode("latin-1"), r":3: byte 0xe9 is not UTF-8"),
    "utf-16-bom": (lambda text: text.encode("utf-16"), r": starts with a UTF-16 byte order mark"),
    "utf-16-be-bom": (lambda text: b"\xfe\xff" + text.encode("utf-16-be"),
                      r": starts with a UTF-16 byte order mark"),
    "utf-32-bom": (lambda text: text.encode("utf-32"), r": starts with a UTF-32 byte order mark"),
    "utf-16-no-bom": (lambda text: text.encode("utf-16-le"), r": NUL bytes all through the text"),
}


def test_text_lines_end_only_at_line_breaks():
  text = "a\u2028b\u2029c\x85d\x1ce\x1df\x1eg\vh\fi\r\nj\rk\nl"
  assert text_decoding.text_lines(text) == ["a\u2028b\u2029c\x85d\x1ce\x1df\x1eg\vh\fi", "j", "k", "l"]
  assert text_decoding.text_lines("x\n") == ["x"] and text_decoding.text_lines("") == []


def test_decode_utf8_drops_a_bom_and_names_the_line():
  assert text_decoding.decode_utf8(b"\xef\xbb\xbfa\nb", "f") == "a\nb"
  with pytest.raises(ValueError, match=r"^f:2: byte 0xff is not UTF-8"):
    text_decoding.decode_utf8(b"\xef\xbb\xbfa\nb\xff", "f")
  assert text_decoding.decode_utf8(b"a stray\x00 NUL\n", "f") == "a stray\x00 NUL\n"  # still text


@pytest.mark.parametrize("encoding", NOT_UTF8)
def test_conll_swag_tsv_and_vocab_readers_fail_in_one_line(tmp_path, encoding):
  encode, message = NOT_UTF8[encoding]
  readers = {
      "train.txt": ("EU B-ORG\nrejects O\ncaf\u00e9 O\n", conll.read_conll),
      "labels.txt": ("O\nB-ORG\ncaf\u00e9\n", conll.read_labels),
      "train.csv": ("sent1,sent2,ending0,ending1,label\nA,b,c,d,0\ncaf\u00e9,b,c,d,1\n",
                    lambda p: swag.read_examples(p, num_choices=2)),
      "vocab.txt": ("[UNK]\na\ncaf\u00e9\n", tokenization.load_vocab),
  }
  for name, (text, read) in readers.items():
    path = tmp_path / name
    path.write_bytes(encode(text))
    with pytest.raises(ValueError, match=f"{path}{message}") as e:
      read(str(path))
    assert "\n" not in str(e.value), name


def test_conll_rows_end_only_at_line_breaks_and_columns_at_spaces_and_tabs(tmp_path):
  path = tmp_path / "train.txt"
  path.write_bytes("EU B-ORG\r\nsays\u2028so O\n\n5\xa0000\tO\n".encode("utf-8"))
  (doc,) = conll.read_conll(str(path))
  assert [(s.words, s.tags, s.line_numbers) for s in doc.sentences] == [
      (["EU", "says\u2028so"], ["B-ORG", "O"], [1, 2]), (["5\xa0000"], ["O"], [4])]


@pytest.mark.parametrize("encoding", ["utf-16-bom", "utf-32-bom", "utf-16-no-bom"])
def test_corpus_readers_refuse_wide_text(tmp_path, encoding):
  encode, message = NOT_UTF8[encoding]
  path = tmp_path / "corpus.txt"
  path.write_bytes(encode("One doc.\nTwo lines.\n\nAnother doc.\n"))
  with pytest.raises(ValueError, match=f"{path}:1{message}"):
    list(documents.read_lines([str(path)], documents.ReadStats()))
  with pytest.raises(ValueError, match=f"{path}:1{message}"):
    wordpiece_vocab.count_words([str(path)], True)
  with pytest.raises(ValueError, match=f"{path}{message}"):
    list(corpus.read_documents([str(path)], corpus.PrepareStats()))
  with pytest.raises(ValueError, match=f"{path}:1{message}"):
    features.read_text_pairs(str(path), text_decoding.Undecodable())


def test_corpus_reader_keeps_stray_bytes_and_utf8_bom(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_bytes(b"\xef\xbb\xbfOne\x00 doc.\nbad \xff byte\n")
  stats = documents.ReadStats()
  lines = list(documents.read_lines([str(path)], stats))
  # The BOM stays, as in the original: the tokenizer drops it (a format character).
  assert [text for _, _, text in lines] == ["\ufeffOne\x00 doc.", "bad  byte"]
  assert stats.undecodable.report() == f"dropped 1 undecodable byte (first at {path}:2)"


def test_every_lenient_reader_counts_dropped_bytes_and_names_the_first(tmp_path):
  """Bytes that are not UTF-8 are dropped, as the original's readers drop them, and the
  report names how many and the file:line of the first."""
  path = tmp_path / "text.txt"
  path.write_bytes(b"The caf\xe9 is open.\n\nNext ||| pair \xff\xfe here.\n")
  want = f"dropped 3 undecodable bytes (first at {path}:1)"
  undecodable = text_decoding.Undecodable()
  assert features.read_text_pairs(str(path), undecodable) == [
      ("The caf is open.", None), ("", None), ("Next", "pair  here.")]
  assert undecodable.report() == want
  undecodable = text_decoding.Undecodable()
  assert wordpiece_vocab.count_words([str(path)], True, undecodable=undecodable)["caf"] == 1
  assert undecodable.report() == want
  stats = corpus.PrepareStats()
  assert [d for d in corpus.read_documents([str(path)], stats)] == [
      ["The caf is open.", "", "Next ||| pair  here.", ""]]
  assert stats.undecodable.report() == want
  (tmp_path / "late.txt").write_bytes(b"fine\nfine\nbad \xe9\n")
  late = text_decoding.Undecodable()
  late.decode((tmp_path / "late.txt").read_bytes(), "late.txt")
  assert late.report() == "dropped 1 undecodable byte (first at late.txt:3)"
  assert text_decoding.Undecodable().report() == ""


def test_output_files_are_refused_before_any_work(tmp_path):
  (tmp_path / "in.txt").write_text("text\n")
  (tmp_path / "dir").mkdir()
  with pytest.raises(ValueError, match=r"^--out=.*dir is a directory; name a file\.$"):
    path_checks.check_output_file(str(tmp_path / "dir"), "--out")
  with pytest.raises(ValueError, match=r"^--out=.*in\.txt is also an input file; name another"):
    path_checks.check_output_file(f"file://{tmp_path}/./in.txt", "--out", [str(tmp_path / "in.txt")])
  with pytest.raises(ValueError) as error:
    path_checks.check_output_file(str(tmp_path / "in.txt" / "a" / "b"), "--out")
  assert str(error.value) == (f"--out={tmp_path}/in.txt/a/b: {tmp_path}/in.txt/a cannot be made: "
                              f"{tmp_path}/in.txt is a file.")
  with pytest.raises(ValueError) as error:
    path_checks.check_output_file(str(tmp_path / "in.txt" / "b"), "--out")
  assert str(error.value) == f"--out={tmp_path}/in.txt/b: {tmp_path}/in.txt is a file, not a directory."
  path_checks.check_output_file(str(tmp_path / "new" / "out.txt"), "--out", [str(tmp_path / "in.txt")])
  with pytest.raises(ValueError, match=r"^--vocab_size=7 leaves no room after 7 special and unused"):
    wordpiece_vocab.reserved_tokens(7, num_unused=2)


def test_an_output_named_twice_is_refused_under_any_spelling(tmp_path):
  (tmp_path / "d").mkdir()
  (tmp_path / "link").symlink_to(tmp_path / "d")
  t = str(tmp_path)
  for first, second in ((f"{t}/out", f"{t}/./out"), (f"{t}/d/out", f"{t}/link/out"),
                        (f"{t}/d/out", f"file://{t}/d/out"), ("gs://b/x", "gs://b/x")):
    with pytest.raises(ValueError) as error:
      path_checks.check_distinct_outputs([first, "gs://b/y", second], "--output_file")
    assert str(error.value) == (f"--output_file names one file twice: {first!r} and "
                                f"{second!r}; name each output once." if first != second else
                                f"--output_file names one file twice: {first!r}; name each "
                                "output once.")
  # Different files, and bucket paths differing in their bucket, are distinct.
  path_checks.check_distinct_outputs([f"{t}/a", f"{t}/b", "gs://b/a", "gs://c/a"],
                                     "--output_file")


def test_free_space_check_names_the_directory_and_the_need(tmp_path):
  path_checks.check_free_space(str(tmp_path), 1, "features")  # a byte fits
  with pytest.raises(ValueError) as e:
    path_checks.check_free_space(str(tmp_path), 10**18, "the encoder's features", ": use another")
  assert str(e.value).startswith(f"the encoder's features need 1000000000.00 GB in {tmp_path}, "
                                 "which has ")
  assert str(e.value).endswith("GB free: use another.")


def test_file_urls_are_the_local_paths_they_name(tmp_path, monkeypatch):
  """file:///x is /x for every helper (TensorFlow reads both): nothing lands under a
  folder called `file:` in the working directory."""
  monkeypatch.chdir(tmp_path)
  url = f"file://{tmp_path}/out"
  files.makedirs(url + "/sub")
  files.write_bytes(url + "/sub/a.txt", b"abc")
  with files.atomic_output(url + "/b.txt") as f:
    f.write("text")
  assert (tmp_path / "out" / "sub" / "a.txt").read_bytes() == b"abc"
  assert (tmp_path / "out" / "b.txt").read_text() == "text"
  assert files.exists(url + "/b.txt") and files.isdir(url + "/sub") and files.size(url + "/b.txt") == 4
  assert files.listdir(url) == ["b.txt", "sub"]
  assert files.walk_files(url) == ["b.txt", "sub/a.txt"]
  assert files.glob(url + "/*.txt") == [str(tmp_path / "out" / "b.txt")]
  assert files.read_bytes(url + "/sub/a.txt") == b"abc"
  assert files.parent_dir(url + "/b.txt") == str(tmp_path / "out")
  with files.atomic_dir(url + "/model", last=("saved_model.pb",)) as staging:
    files.makedirs(staging)
    files.write_bytes(staging + "/saved_model.pb", b"pb")
  assert (tmp_path / "out" / "model" / "saved_model.pb").read_bytes() == b"pb"
  files.rename(url + "/b.txt", url + "/c.txt")
  files.remove(url + "/c.txt")
  files.rmtree(url + "/sub")
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model"]
  assert not (tmp_path / "file:").exists()


def test_read_tail_reads_a_file_s_last_bytes(tmp_path):
  """Local paths, file:// URLs and ram:// (read through tf.io.gfile as gs:// is) alike."""
  import tensorflow as tf
  (tmp_path / "a.bin").write_bytes(b"0123456789")
  tf.io.gfile.makedirs("ram://read_tail")
  with tf.io.gfile.GFile("ram://read_tail/a.bin", "wb") as f:
    f.write(b"0123456789")
  for path in (str(tmp_path / "a.bin"), f"file://{tmp_path}/a.bin", "ram://read_tail/a.bin"):
    assert files.read_tail(path, 4) == b"6789", path
    assert files.read_tail(path, 100) == b"0123456789", path
  with pytest.raises(FileNotFoundError):
    files.read_tail("ram://read_tail/none.bin", 4)


def test_leftovers_of_killed_writes_are_removed_files_and_directories(tmp_path):
  """A run killed while writing leaves temporary files and whole directories (a best/ or
  SavedModel being built): they go, and nothing else does."""
  (tmp_path / ".best.tmp-0123abcd").mkdir()
  (tmp_path / ".best.tmp-0123abcd" / "ckpt-3.index").write_bytes(b"x" * 10)
  (tmp_path / ".train.tf_record.tmp-89abcdef").write_bytes(b"y" * 5)
  kept = ["notes.txt", ".workers/w1/.ckpt.tmp-00000000", "ckpt-1_temp/part", ".x.tmp-nothex00"]
  for name in kept:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("keep")
  (tmp_path / ".export.tmp-00ff00ff" / "variables").mkdir(parents=True)
  (tmp_path / ".export.tmp-00ff00ff" / "saved_model.pb").write_bytes(b"z" * 7)
  assert files.remove_leftovers(str(tmp_path / "export")) == 7
  assert files.remove_all_leftovers(str(tmp_path)) == 15
  assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == \
      sorted(kept)
