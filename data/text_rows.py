"""Rows of raw text for an export (predict.py): reading plain lines, TSV or JSON Lines, and
writing the outputs as JSON Lines or TSV.

Every row is checked before anything runs: a bad one raises ValueError naming
the file and line. Blank lines are skipped in every format (ids stay line numbers).
Written TSV escapes what would break its cells: a tab, a line break and a backslash
become \\t, \\n (\\r) and \\\\. JSON Lines writes a number that is not finite (the score of
a question-answering row without a valid span) as null, since JSON has no infinity.
"""

import json
import math

from data import files

FORMATS = ("lines", "tsv", "jsonl")


def input_format(path, given=None):
  """The format to read `path` in: `given`, else from its extension (.tsv, .jsonl or .json
  for JSON Lines, anything else plain lines)."""
  if given:
    if given not in FORMATS:
      raise ValueError(f"--input_format={given} must be one of {', '.join(FORMATS)}.")
    return given
  lower = path.lower()
  return "tsv" if lower.endswith(".tsv") else "jsonl" if lower.endswith((".jsonl", ".json")) \
      else "lines"


def check_id_field(id_field, outputs):
  """ValueError when `id_field` (--id_field) is also the name of one of the export's
  `outputs`: the written rows would hold two values under one name (JSON Lines keeps one)."""
  if id_field in outputs:
    raise ValueError(f"--id_field={id_field} is also the name of one of the export's outputs "
                     f"({', '.join(outputs)}), which the id's column would clash with; rename "
                     "that column or key in the input.")


def read_rows(path, fmt, inputs, fields=None, header=False, id_field=None):
  """(ids, {input name: list of values}, blank lines skipped) of the rows of `path`.

  Args:
    path: the input file.
    fmt: "lines" (each line is the one input), "tsv" (columns named by `fields` or, with
      `header`, by the first line) or "jsonl" (one object a line, keys named as inputs).
    inputs: {input name: rank}; rank 1 is a string, rank 2 a non-empty list of strings
      (the same length on every row).
    fields: TSV column names, in order.
    header: TSV: the first line names the columns (and is skipped).
    id_field: the column or key holding each row's id; else the line number.
  Raises:
    ValueError naming the file and line of the first bad row.
  """
  if fmt != "tsv" and (header or fields):
    raise ValueError(f"{path} is read as {fmt}: --header and --fields are for TSV input "
                     "(--input_format=tsv).")
  if fmt == "lines" and id_field:
    raise ValueError(f"{path} is read as plain lines, which have no --id_field column: each "
                     "row's id is its line number (TSV or JSON Lines carry ids).")
  if fmt == "lines" and len(inputs) != 1:
    raise ValueError(f"{path}: plain lines give one input, but the export takes "
                     f"{', '.join(inputs)}: use TSV (--fields) or JSON Lines.")
  try:
    with files.open_file(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise ValueError(f"Cannot read {path}: {e.strerror or e}") from None
  try:
    text = data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise ValueError(f"{path}:{line}: not UTF-8 ({e.reason}).") from None
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  columns = list(fields or [])
  first = 0
  if fmt == "tsv":
    if header:
      if not lines:
        raise ValueError(f"{path}: empty; --header expects a line naming the columns.")
      columns = columns or lines[0].rstrip("\r").split("\t")
      first = 1
    if not columns:
      raise ValueError(f"{path}: name the TSV columns with --fields or --header.")
    missing = [n for n in list(inputs) + ([id_field] if id_field else []) if n not in columns]
    if missing:
      raise ValueError(f"{path}: no column named {', '.join(missing)} (columns: "
                       f"{', '.join(columns)}); name every column in order with --fields, "
                       f"the export's inputs ({', '.join(inputs)}) among them.")
  ids, values = [], {name: [] for name in inputs}
  width, blank = None, 0
  for number in range(first, len(lines)):
    where = f"{path}:{number + 1}"
    line = lines[number].rstrip("\r")
    if not line.strip() and not (fmt == "tsv" and "\t" in line):  # tabs alone: empty cells
      blank += 1
      continue
    if fmt == "lines":
      row = {next(iter(inputs)): line}
    elif fmt == "tsv":
      cells = line.split("\t")
      if len(cells) != len(columns):
        raise ValueError(f"{where}: {len(cells)} column(s), expected {len(columns)} "
                         f"({', '.join(columns)}).")
      row = dict(zip(columns, cells))
    else:
      try:
        row = json.loads(line, parse_constant=_no_constant)
      except ValueError as e:
        raise ValueError(f"{where}: not JSON ({e}).") from None
      if not isinstance(row, dict):
        raise ValueError(f"{where}: a JSON object expected, not {type(row).__name__}.")
    for name, rank in inputs.items():
      value = row.get(name)
      if rank == 2 and fmt == "tsv" and isinstance(value, str):
        value = value.split("|||")  # a list in a TSV cell: items separated by |||
      if rank == 1 and not isinstance(value, str):
        raise ValueError(f"{where}: {name!r} must be a string, not "
                         f"{'missing' if value is None else type(value).__name__}.")
      if rank == 2:
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
          raise ValueError(f"{where}: {name!r} must be a list of strings.")
        if not value:  # the export scores each item: no items, nothing to choose from
          raise ValueError(f"{where}: {name!r} is an empty list; give at least one item.")
        if width is not None and len(value) != width:
          raise ValueError(f"{where}: {name!r} has {len(value)} items; earlier rows have "
                           f"{width}.")
        width = len(value)
      values[name].append(value)
    if id_field:
      if id_field not in row:
        raise ValueError(f"{where}: no {id_field!r} (--id_field).")
      ids.append(row[id_field])
    else:
      ids.append(number + 1)
  if not ids:
    raise ValueError(f"{path}: no rows.")
  return ids, values, blank


def _no_constant(name):
  """json.loads' hook for NaN and Infinity, which Python reads but JSON does not have."""
  raise ValueError(f"{name} is not JSON")


def _tsv_cell(value):
  """A value as one TSV cell: lists joined by spaces, booleans as JSON writes them (true,
  false); tab, line breaks, backslash escaped."""
  word = lambda v: json.dumps(v) if isinstance(v, bool) else str(v)  # noqa: E731
  text = " ".join(map(word, value)) if isinstance(value, list) else word(value)
  return (text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
          .replace("\r", "\\r"))


def _json_ready(value):
  """`value` with every float that is not finite as None (JSON has no infinity or NaN)."""
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, list):
    return [_json_ready(v) for v in value]
  return value


def write_rows(path, ids, outputs, id_name="id"):
  """Writes one row per id with its outputs (a list of dicts): TSV when `path` ends in .tsv
  (`_tsv_cell`), else JSON Lines; under a temporary name, then renamed."""
  with files.atomic_output(path) as f:
    if path.lower().endswith(".tsv"):
      names = list(outputs[0]) if outputs else []
      f.write("\t".join(_tsv_cell(n) for n in [id_name] + names) + "\n")
      for row_id, out in zip(ids, outputs):
        f.write("\t".join(_tsv_cell(v) for v in [row_id] + [out[n] for n in names]) + "\n")
    else:
      for row_id, out in zip(ids, outputs):
        row = {id_name: row_id, **{k: _json_ready(v) for k, v in out.items()}}
        f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
