"""The README and docs/: what a user copies works as written, every flag and default the README
names is the scripts' own, every relative link resolves, and the README stays short."""

import concurrent.futures
import functools
import glob
import json
import os
import re

from data import glue
from scripts import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MAX_README_LINES = 600


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def _section(title):
  text = _read(README)
  start = text.index(f"### {title}")
  return text[start:text.index("\n## ", start)]


def test_own_task_snippet_reads_its_files(tmp_path):
  """The "Your own task" entry, added to the task table, reads the layout it describes."""
  section = _section("Your own task")
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  name, expression = re.match(r'\s*"([^"]+)":\s*(.*),\s*$', code, re.S).groups()
  task = eval(expression, {"Task": glue.Task, "Layout": glue.Layout})  # noqa: S307
  assert name in section.split("--task_name=")[1]
  (tmp_path / "train.tsv").write_text("sentence\tlabel\ngreat film\tpositive\n"
                                      "dull plot\tnegative\nit was a film\tneutral\n")
  (tmp_path / "dev.tsv").write_text("sentence\tlabel\nvery good\tpositive\n")
  (tmp_path / "test.tsv").write_text("index\tsentence\n7\tgood plot\n")
  train = glue.examples(task, str(tmp_path), "train")
  assert [(e.text_a, e.text_b, e.label) for e in train] == [
      ("great film", None, "positive"), ("dull plot", None, "negative"),
      ("it was a film", None, "neutral")]
  assert [e.label for e in glue.examples(task, str(tmp_path), "dev")] == ["positive"]
  test = glue.examples(task, str(tmp_path), "test")
  assert [(e.text_a, e.index, e.label) for e in test] == [("good plot", "7", None)]
  assert task.labels == ["negative", "neutral", "positive"] and not task.is_pair


# --- The flags the README names ----------------------------------------------

# Imports a script as a module (not __main__: its main does not run) in a fresh
# interpreter, since scripts define their flags at import and two scripts' flags
# cannot share one process; absl's help flags (--helpfull) are added as app.run
# adds them. Prints {name: [default, is_bool]} as JSON.
def _dump_flags(path):
  """{flag: [default, is_bool]} of the script at `path`, from tests/dump_flags.py run as a
  script (a child of the test server that has TensorFlow imported already)."""
  result = run_script(os.path.join("tests", "dump_flags.py"), path)
  return json.loads(result.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=None)
def _script_flags():
  """{script path relative to the root: {flag: (default, is_bool)}} of every entry script,
  each imported in its own subprocess, all at once."""
  scripts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py")))
  with concurrent.futures.ThreadPoolExecutor(len(scripts)) as pool:
    dumps = pool.map(_dump_flags, [os.path.join(ROOT, s) for s in scripts])
  return {s: {n: tuple(v) for n, v in d.items()} for s, d in zip(scripts, dumps)}


_SCRIPT = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py)\b")
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z_]\w*)(?![\w-])")
_PROSE_DEFAULT = re.compile(r"`--(\w+)` \(default ([^),;]+)")


def _flag_name(name, flags):
  """The flag `name` refers to in `flags` (absl's --noX for a boolean X), or None."""
  if name in flags:
    return name
  if name.startswith("no") and flags.get(name[2:], (None, False))[1]:
    return name[2:]
  return None


def _same(stated, default, is_bool):
  """Whether the README's `stated` default is the script's `default`."""
  stated = stated.replace("`", "").strip()
  if default is None:
    return stated.startswith(("unset", "--"))
  if is_bool:
    return stated.lower() == str(default).lower()
  if isinstance(default, list):
    return stated == ",".join(default)
  if isinstance(default, str):
    return stated == default
  try:
    return float(stated.replace(",", "")) == float(default)
  except ValueError:
    return False


def _scripts_in(text, known):
  return [s for s in _SCRIPT.findall(text) if s in known]


def _table_defaults(text):
  """{table row: (flag, stated default)} of the rows of tables with a `default` column
  whose first cell names a flag."""
  rows, column = {}, None
  lines = text.splitlines()
  rule = re.compile(r"\|[-| :]+\|")
  for i, line in enumerate(lines):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if line.startswith("|") and i + 1 < len(lines) and rule.fullmatch(lines[i + 1]):
      column = cells.index("default") if "default" in cells else None
    elif not line.startswith("|"):
      column = None
    elif column is not None and not rule.fullmatch(line):
      flag = _FLAG.search(cells[0])
      if flag:
        rows[line] = (flag.group(1), cells[column])
  return rows


class _Readme:
  """The flags a README names, as `mentions`: (line number, flag, the scripts that may
  define it, the scripts whose default a stated default must equal, the stated default or
  None); `problems`: commands running a script that does not exist.

  A command line (in a code block, or an inline span that runs a script) names the flags
  of the script it runs. Prose names flags of the scripts its section's heading names and
  those named in the same paragraph or table; under a heading naming none, of any script.
  A default is
  stated in a table's `default` column or as "`--flag` (default X)"; it must equal the
  default of the heading's scripts, or of every script defining the flag.
  """

  def __init__(self, text, known):
    self.known, self.mentions, self.problems = known, [], []
    self.rows = _table_defaults(text)
    lines = text.splitlines()
    h2 = h3 = []
    in_code, command, paragraph = False, "", None
    for number, line in enumerate(lines, 1):
      if line.startswith("```"):
        in_code = not in_code
        continue
      if in_code:
        command += re.sub(r"(^|\s)#.*$", "", line)
        if command.endswith("\\"):
          command = command[:-1] + " "
          continue
        self._command(number, command)
        command = ""
        continue
      if line.startswith("#"):
        scripts = _scripts_in(line, known)
        h2, h3 = (scripts, []) if line.startswith("## ") else (h2, scripts)
        continue
      if not line.strip():
        paragraph = None
        continue
      if paragraph is None:  # a new paragraph or table: the scripts it names
        end = next((i for i in range(number, len(lines)) if not lines[i].strip()), len(lines))
        paragraph = _scripts_in("\n".join(lines[number - 1:end]), known)
      self._prose(number, line, h3 or h2, paragraph)

  def _command(self, number, command):
    tokens = command.split()
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    if script is None:  # make, pip, ... without a script of ours: not checked
      return
    path = tokens[script]
    if path not in self.known:
      self.problems.append(f"README.md:{number}: {path} is not a script of this repository")
      return
    for token in tokens[script + 1:]:
      if token == "--" and path == "finetune_search.py":  # the rest is passed to --script
        path = next((t.split("=", 1)[1] for t in tokens if t.startswith("--script=")), path)
        continue
      for name in _FLAG.findall(token.split("=")[0]):
        self.mentions.append((number, name, [path], [], None))

  def _prose(self, number, line, scope, named):
    row = self.rows.get(line)
    for span in re.findall(r"`([^`]*)`", line):  # a span running a script: its flags
      scripts = _scripts_in(span, self.known)
      rest = span.split(scripts[0], 1)[1] if scripts else ""
      if _FLAG.search(rest):
        for name in _FLAG.findall(rest):
          self.mentions.append((number, name, scripts[:1], [], None))
        line = line.replace(f"`{span}`", "")
    stated = dict(_PROSE_DEFAULT.findall(line))
    if row:
      stated[row[0]] = row[1]
    for name in _FLAG.findall(line):
      where = scope + named if scope else []  # no heading's scripts: any script
      self.mentions.append((number, name, where, scope, stated.pop(name, None)))


def _problems(readme, known):
  """(what disagrees with the scripts, one line each; how many stated defaults were checked)."""
  problems, checked = list(readme.problems), 0
  for number, name, where, scope, stated in readme.mentions:
    if not [s for s in (where or known) if _flag_name(name, known[s])]:
      problems.append(f"README.md:{number}: --{name} is not a flag of "
                      f"{', '.join(where) if where else 'any script'}")
      continue
    if stated is None:
      continue
    checked += 1
    owners = [s for s in scope if _flag_name(name, known[s])] or [
        s for s in known if _flag_name(name, known[s])]
    for script in owners:
      default, is_bool = known[script][_flag_name(name, known[script])]
      if not _same(stated, default, is_bool):
        problems.append(f"README.md:{number}: --{name} default {stated!r}, but {script} "
                        f"has {default!r}")
  return problems, checked


def test_readme_flags_exist_in_their_scripts_with_the_stated_defaults():
  known = _script_flags()
  readme = _Readme(_read(README), known)
  problems, checked = _problems(readme, known)
  assert not problems, "\n".join(problems)
  assert len(readme.mentions) > 100 and checked > 20  # the parser found them


def test_flag_check_reports_wrong_names_scripts_and_defaults():
  """The checker itself, on a small text: a default that differs, a flag of another
  script, and a command passing a flag its script lacks are reported; absl's --noX is
  the boolean X; a comment in a command is not read."""
  known = {"a.py": {"alpha": (1, False), "beta": (True, True)},
           "b.py": {"gamma": ("x", False)}, "c.py": {"gamma": ("y", False)}}
  text = ("## Section: `a.py`\n\n| flag | default |\n|---|---|\n| `--alpha` | 2 |\n\n"
          "`--nobeta` and `--gamma`.\n\n## Other\n\n`--gamma` (default y).\n\n"
          "```bash\npython b.py --gamma=z \\\n  --alpha=1  # a comment --beta\n```\n")
  readme = _Readme(text, known)
  found = {(name, tuple(where), stated) for _, name, where, _, stated in readme.mentions}
  assert found == {("alpha", ("a.py",), "2"), ("nobeta", ("a.py",), None),
                   ("gamma", ("a.py",), None), ("gamma", (), "y"),
                   ("gamma", ("b.py",), None), ("alpha", ("b.py",), None)}, found
  problems, checked = _problems(readme, known)
  assert checked == 2
  assert problems == [
      "README.md:5: --alpha default '2', but a.py has 1",
      "README.md:7: --gamma is not a flag of a.py",
      "README.md:11: --gamma default 'y', but b.py has 'x'",
      "README.md:15: --alpha is not a flag of b.py"], problems
  assert _same("unset", None, False) and not _same("none", None, False)
  assert _same("false", False, True) and _same("-1", ["-1"], False)
  assert _same("100000", 100_000, False) and _same("none", "none", False)


# --- Links and length --------------------------------------------------------

def _slug(heading):
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def _anchors(path):
  anchors, seen, in_code = set(), {}, False
  for line in _read(path).splitlines():
    if line.startswith("```"):
      in_code = not in_code
    elif not in_code and re.match(r"#{1,6} ", line):
      slug = _slug(line.lstrip("#"))
      anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
      seen[slug] = seen.get(slug, 0) + 1
  return anchors


def _links(path):
  """(line number, target) of every link and image outside code blocks."""
  in_code = False
  for number, line in enumerate(_read(path).splitlines(), 1):
    if line.startswith("```"):
      in_code = not in_code
    elif not in_code:
      for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
        yield number, target


def test_relative_links_point_to_existing_files_and_anchors():
  documents = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
  problems, checked = [], 0
  for path in documents:
    for number, target in _links(path):
      if re.match(r"[a-z]+:", target):  # https:, mailto:
        continue
      checked += 1
      file_part, _, anchor = target.partition("#")
      resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
          if file_part else path
      where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
      if not os.path.exists(resolved):
        problems.append(f"{where}: no such file")
      elif anchor and anchor not in _anchors(resolved):
        problems.append(f"{where}: no heading with that anchor")
  assert not problems, "\n".join(problems)
  assert checked > 10


def test_slugs_follow_github():
  assert _slug(" Named entities (CoNLL-2003): `run_ner.py`") == "named-entities-conll-2003-run_nerpy"
  assert _slug(" SQuAD v1.1 and v2.0") == "squad-v11-and-v20"


def test_readme_is_short():
  lines = len(_read(README).splitlines())
  assert lines <= MAX_README_LINES, f"README.md has {lines} lines, more than {MAX_README_LINES}"
