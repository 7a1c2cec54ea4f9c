"""The house of imports: no circle among the library modules, and data -> modeling -> cli ->
scripts.

Imports are read from the source with `ast`, including those inside
functions (which hide a circle from Python but not from a reader).
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("data", "modeling", "cli")


def _library_modules():
  """{dotted name: path} of every module under data/, modeling/ and cli/."""
  modules = {}
  for package in PACKAGES:
    for path in sorted((ROOT / package).rglob("*.py")):
      parts = path.relative_to(ROOT).with_suffix("").parts
      if parts[-1] == "__init__":
        parts = parts[:-1]
      modules[".".join(parts)] = path
  return modules


def _script_names():
  return {p.stem for p in ROOT.glob("*.py")}


def imported_names(path):
  """Every dotted name `path` imports, anywhere in the file (absolute imports only)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      assert node.level == 0, f"{path}: relative import"
      names.add(node.module)
      names.update(f"{node.module}.{alias.name}" for alias in node.names)
  return names


def import_graph():
  """{module: sorted library modules it imports} over data/, modeling/ and cli/."""
  modules = _library_modules()
  return {name: sorted(n for n in imported_names(path) if n in modules and n != name)
          for name, path in modules.items()}


def find_cycle(graph):
  """One circle of `graph` as a list of names (first == last), or None."""
  state = {}  # name -> 1 on the current path, 2 done

  def visit(name, path):
    state[name] = 1
    for dep in graph.get(name, ()):
      if state.get(dep) == 1:
        return path[path.index(dep):] + [dep]
      if dep not in state:
        found = visit(dep, path + [dep])
        if found:
          return found
    state[name] = 2
    return None

  for name in graph:
    if name not in state:
      found = visit(name, [name])
      if found:
        return found
  return None


def test_find_cycle_sees_a_circle():
  assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def test_function_level_imports_are_read(tmp_path):
  source = tmp_path / "m.py"
  source.write_text("import os\n\ndef f():\n  from modeling import export\n")
  assert {"modeling", "modeling.export", "os"} <= imported_names(source)


def test_library_has_no_import_circle():
  graph = import_graph()
  assert "modeling.checkpoints" in graph and "data.squad" in graph  # the walk found the files
  assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_layers_data_then_modeling_then_cli_then_scripts():
  scripts = _script_names()
  for name, path in _library_modules().items():
    imported = imported_names(path)
    top = {n.split(".")[0] for n in imported}
    assert not top & scripts, f"{name} imports an entry script: {sorted(top & scripts)}"
    if name.startswith("data"):
      assert not top & {"modeling", "cli"}, f"{name} imports a layer above data"
    if name.startswith("modeling"):
      assert "cli" not in top, f"{name} imports cli"


def test_pyflakes_finds_nothing():
  """No unused import or variable, no undefined name (a placeholder, a removed module), no
  shadowed import, in any Python file of the repository."""
  import io

  from pyflakes import api, reporter
  paths = sorted(str(p) for p in ROOT.glob("*.py"))
  paths += [str(ROOT / d) for d in (*PACKAGES, "tests", "benchmarks")]
  out = io.StringIO()
  found = api.checkRecursive(paths, reporter.Reporter(out, out))
  assert found == 0, out.getvalue()


def test_scripts_turn_onednn_on_unless_told_otherwise():
  """cli/app.py, imported first by every entry script, turns oneDNN's kernels on for x86
  (TensorFlow leaves them off on CPUs without AVX512-VNNI, AVX512-BF16 or AMX), and a value
  in the environment wins."""
  import os
  import platform
  import subprocess
  import sys
  code = "import cli.app, os; print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))"
  env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  env["PYTHONPATH"] = str(ROOT)
  run = lambda env: subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout.strip()
  x86 = platform.machine().lower() in ("x86_64", "amd64")
  assert run(env) == ("1" if x86 else "None")
  assert run({**env, "TF_ENABLE_ONEDNN_OPTS": "0"}) == "0"


def test_scripts_help_keeps_their_command_lines():
  """absl's --help prints a script's docstring: a backslash at a line's end there must stay
  (a raw string), or Python joins the example's lines into one."""
  for path in sorted(ROOT.glob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py")):
    tree = ast.parse(path.read_text())
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
      continue
    source = ast.get_source_segment(path.read_text(), first.value)
    assert "\\\n" not in source or source.startswith("r"), path.name
    assert not any(c in source for c in "\t\r\f\v"), f"{path.name}: a control character"
