"""Text from users' files: UTF-8 decoding, strict or lenient as the original's readers were.

Strict (decode_utf8, read_text): a byte that is not UTF-8 stops the run naming
file:line. Lenient (Undecodable): such bytes are dropped and counted, as the
original's readers dropped them. Either way UTF-16 and UTF-32 text is refused:
read byte by byte it would pass as NUL-laced ASCII.
"""

import io

from data import files

# Byte order marks of the wide encodings, longest first (UTF-32LE starts like UTF-16LE).
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def check_not_wide(data, where, at_start=True):
  """Raises ValueError naming `where` when bytes `data` look like UTF-16 or UTF-32.

  Such text is mostly valid UTF-8 byte by byte (ASCII comes out NUL-laced), so
  decoding it would not fail but silently yield garbage. The signs: a UTF-16/32
  byte order mark (checked when `data` starts a file) or NUL bytes making up a
  quarter or more of `data`; stray NULs in UTF-8 text pass.
  """
  if at_start:
    for bom, name in _WIDE_BOMS:
      if data.startswith(bom):
        raise ValueError(f"{where}: starts with a {name} byte order mark; expected UTF-8 "
                         f"text (convert it, e.g. iconv -f {name} -t UTF-8).")
  nuls = data.count(b"\0")
  if nuls and 4 * nuls >= len(data):
    raise ValueError(f"{where}: NUL bytes all through the text, as in UTF-16 or UTF-32; "
                     "expected UTF-8 text (convert it, e.g. with iconv).")


def decode_utf8(data, path):
  """Bytes of the file `path` as str, a leading UTF-8 byte order mark dropped.

  Raises ValueError naming path:line for UTF-16/32 text or bytes that are not UTF-8.
  """
  check_not_wide(data, path)
  if data.startswith(b"\xef\xbb\xbf"):
    data = data[3:]
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{path}:{line}: byte 0x{data[e.start]:02x} is not UTF-8; expected UTF-8 "
                     "text (convert the file, e.g. with iconv).") from None


class Undecodable:
  """Lenient UTF-8 decoding, as the original's readers decode: bytes that are not UTF-8
  are dropped, counted, and the first one's place kept for the report."""

  def __init__(self):
    self.count, self.first = 0, ""

  def decode(self, data, path, line=1):
    """`data`, bytes starting at `line` of `path`, as str without its undecodable bytes."""
    try:
      return data.decode("utf-8")  # the common case, at full speed
    except UnicodeDecodeError as e:
      first_bad = e.start
    text = data.decode("utf-8", "ignore")
    self.count += len(data) - len(text.encode("utf-8"))
    if not self.first:
      line += data.count(b"\n", 0, first_bad)
      self.first = f"{path}:{line}"
    return text

  def merge(self, other):
    """Adds the bytes `other` dropped; its first place counts only when this has none."""
    self.count += other.count
    self.first = self.first or other.first

  def report(self):
    """One line for the log ("" when every byte was UTF-8)."""
    plural = "" if self.count == 1 else "s"
    return (f"dropped {self.count:,} undecodable byte{plural} (first at {self.first})"
            if self.count else "")


def read_text(path):
  """The whole UTF-8 file `path` as str; ValueError naming the file if unreadable or not UTF-8."""
  try:
    with files.open_file(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise ValueError(f"Cannot read {path}: {e}") from None
  return decode_utf8(data, path)


def text_lines(text):
  """Lines of `text` as a file reads them: only \\n, \\r\\n and \\r end one.

  str.splitlines() would also break at U+2028, U+2029, U+0085, \\v, \\f and
  \\x1c-\\x1e, which are legal inside a field. The lines keep no line ending.
  """
  return [line[:-1] if line.endswith("\n") else line for line in io.StringIO(text, newline=None)]

