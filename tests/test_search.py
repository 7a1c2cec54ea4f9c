"""finetune_search.py over tests/fake_finetuning.py (results from its flags, no model): the
grid, pass-through flags, failures, resuming, the table, the choice on dev and best/."""

import csv
import json
import os
import statistics

import pytest

from modeling import search_results
from cli.search import RECORD
from scripts import ROOT, last_error_line, run_script

FAKE = os.path.join(ROOT, "tests", "fake_finetuning.py")
GRID = ("--learning_rates=5e-5,3e-5", "--batch_sizes=16", "--epochs=2,3", "--num_seeds=2")


def _search(tmp_path, *extra, fail="", stop="", expect_ok=True, passthrough=()):
  env_calls = tmp_path / "calls.txt"
  os.environ["FAKE_CALLS"], os.environ["FAKE_FAIL_LRS"] = str(env_calls), fail
  os.environ["FAKE_STOP_LRS"] = stop
  try:
    return run_script("finetune_search.py", f"--script={FAKE}",
                      f"--output_dir={tmp_path / 'search'}", *GRID, *extra, "--",
                      "--do_eval", "--task_name=SST-2", f"--export_dir={tmp_path / 'x'}",
                      *passthrough, expect_ok=expect_ok)
  finally:
    del os.environ["FAKE_CALLS"], os.environ["FAKE_FAIL_LRS"], os.environ["FAKE_STOP_LRS"]


def _calls(tmp_path):
  path = tmp_path / "calls.txt"
  return path.read_text().splitlines() if path.exists() else []


def _dev(run_dir):
  return search_results.read_results(str(run_dir / "eval_results.txt"))["eval_accuracy"]


def test_a_failed_run_is_reported_the_rest_go_on_and_a_restart_runs_only_what_is_left(
    tmp_path):
  proc = _search(tmp_path, "--parallel=2", fail="3e-05")
  search = tmp_path / "search"
  assert len(_calls(tmp_path)) == 8
  runs = {r["run"]: r for r in csv.DictReader(open(search / "runs.csv"))}
  assert sorted(r["status"] for r in runs.values()) == ["done"] * 4 + ["failed"] * 4
  record = json.loads((search / "runs" / "lr3e-05_bs16_ep2_seed1" / "search_run.json")
                      .read_text())
  assert record["error"] == "error: learning rate 3e-05 diverged"
  assert "Failed runs (not in the table): lr3e-05_bs16_ep2_seed1" in (
      search / "table.md").read_text()
  assert "failed (exit 1)" in proc.stderr
  # Started again (the failure gone): only the four failed runs run.
  _search(tmp_path)
  again = _calls(tmp_path)[8:]
  assert sorted(os.path.basename(p) for p in again) == [
      f"lr3e-05_bs16_ep{e}_seed{s}" for e in (2, 3) for s in (1, 2)]
  # A run killed half-way (no record of its end) runs again, alone.
  os.remove(search / "runs" / "lr5e-05_bs16_ep3_seed2" / "search_run.json")
  _search(tmp_path)
  assert [os.path.basename(p) for p in _calls(tmp_path)[12:]] == ["lr5e-05_bs16_ep3_seed2"]
  # Other flags after `--` would take the finished runs' results for theirs: refused.
  proc = _search(tmp_path, passthrough=("--max_seq_length=64",), expect_ok=False)
  assert last_error_line(proc) == (
      f"error: {search}/runs/lr5e-05_bs16_ep2_seed1 was trained with other flags (none there; "
      "--max_seq_length=64 now): pass the same flags after `--`, or a new --output_dir for a "
      "new search.")
  assert len(_calls(tmp_path)) == 13
  # Each run got its own flags and directory, the pass-through ones, and its own export.
  command = json.loads((search / "runs" / "lr5e-05_bs16_ep3_seed2" / "search_run.json")
                       .read_text())["command"]
  run_dir = search / "runs" / "lr5e-05_bs16_ep3_seed2"
  assert command[2:] == ["--do_eval", "--task_name=SST-2", f"--export_dir={run_dir}/export",
                         f"--output_dir={run_dir}", "--learning_rate=5e-05",
                         "--train_batch_size=16", "--num_train_epochs=3", "--seed=2"]


def test_a_stopped_run_keeps_no_record_and_runs_again(tmp_path):
  """A run that ends as a stopped script does (exit 143, after its checkpoint) is cut off,
  not failed: no search_run.json, not counted as failed, run again next time."""
  proc = _search(tmp_path, stop="3e-05")
  search = tmp_path / "search"
  assert "lr3e-05_bs16_ep2_seed1: stopped after" in proc.stderr
  assert "8 runs, 0 failed, 4 not finished (lr3e-05_bs16_ep2_seed1, " in proc.stderr
  assert "Runs not finished (not in the table; they resume when the search is started " \
      "again): lr3e-05_bs16_ep2_seed1, " in (search / "table.md").read_text()
  assert not (search / "runs" / "lr3e-05_bs16_ep2_seed1" / RECORD).exists()
  runs = {r["run"]: r["status"] for r in csv.DictReader(open(search / "runs.csv"))}
  assert sorted(runs.values()) == ["done"] * 4 + ["not run"] * 4
  _search(tmp_path)
  assert sorted(os.path.basename(p) for p in _calls(tmp_path)[8:]) == [
      f"lr3e-05_bs16_ep{e}_seed{s}" for e in (2, 3) for s in (1, 2)]


def test_keep_checkpoints_chosen_deletes_only_the_other_runs_checkpoints(tmp_path):
  """--keep_checkpoints=chosen: best/ written, then every other finished run loses its
  checkpoint files and keeps the rest; a restart still skips them and copies the same run."""
  _search(tmp_path, "--keep_checkpoints=chosen")
  search = tmp_path / "search"
  chosen = json.loads((search / "selected.json").read_text())["run"]
  for run in (search / "runs").iterdir():
    names = {p.name for p in run.iterdir()}
    kept = {"eval_results.txt", "test_results.txt", "log.txt", RECORD, "export"}
    assert kept <= names, run
    if run.name == chosen:
      assert {"checkpoint", "ckpt-7.index", "ckpt-3.index"} <= names
    else:
      assert not any(n == "checkpoint" or n.startswith("ckpt-") for n in names), run
  assert (search / "best" / "ckpt-7.index").read_text().endswith(chosen)
  _search(tmp_path, "--keep_checkpoints=chosen")
  assert len(_calls(tmp_path)) == 8  # nothing run again
  assert (search / "best" / "ckpt-7.index").read_text().endswith(chosen)
  before = {name: (search / name).read_bytes() for name in ("selected.json", "table.md")}
  proc = _search(tmp_path, "--seeds=2", expect_ok=False)  # the best of seed 2: deleted
  assert last_error_line(proc).startswith("error: The chosen run's ")
  assert "deleted by --keep_checkpoints=chosen" in last_error_line(proc)
  # Refused before anything is rewritten: the tables, the choice and best/ still agree.
  assert {name: (search / name).read_bytes() for name in before} == before
  assert (search / "best" / "ckpt-7.index").read_text().endswith(chosen)


def test_the_table_matches_the_runs_and_the_choice_reads_dev_only(tmp_path):
  _search(tmp_path, "--num_seeds=3")
  search = tmp_path / "search"
  rows = list(csv.DictReader(open(search / "table.csv")))
  assert len(rows) == 4
  best_run, best_value = None, -1.0
  for row in rows:
    name = f"lr{float(row['learning_rate']):g}_bs16_ep{float(row['epochs']):g}"
    values = [_dev(search / "runs" / f"{name}_seed{s}") for s in (1, 2, 3)]
    # Mean and sample standard deviation by Python's statistics module, from the files.
    assert float(row["mean"]) == pytest.approx(statistics.mean(values), rel=1e-12)
    assert float(row["std"]) == pytest.approx(statistics.stdev(values), rel=1e-9)
    assert (float(row["min"]), float(row["max"])) == (min(values), max(values))
    assert int(row["runs"]) == 3 and float(row["best"]) == max(values)
    for seed, value in zip((1, 2, 3), values):
      if value > best_value:
        best_run, best_value = f"{name}_seed{seed}", value
  table = (search / "table.md").read_text()
  first = rows[0]
  assert (f"| 5e-05 | 16 | 2 | 3 | {float(first['mean']):.4f} ± {float(first['std']):.4f} |"
          in table)
  selected = json.loads((search / "selected.json").read_text())
  assert selected["run"] == best_run and selected["dev"] == best_value
  assert selected["seeds"] == [1, 2, 3] and selected["metric"] == "eval_accuracy"
  assert selected["test_results"]["test_accuracy"] == pytest.approx(1 - best_value)
  # best/ is the chosen run's latest checkpoint (not an older one), config, vocab, export.
  best = search / "best"
  assert (best / "ckpt-7.index").read_text().endswith(best_run)
  assert not (best / "ckpt-3.index").exists()
  assert (best / "checkpoint").read_text() == 'model_checkpoint_path: "ckpt-7"\n'
  assert (best / "export" / "saved_model.pb").read_text().endswith(best_run)
  assert (best / "eval_results.txt").exists() and (best / "vocab.txt").exists()
  assert (search / "metric_vs_learning_rate.png").stat().st_size > 1000


def test_flags_the_search_sets_itself_are_refused(tmp_path):
  proc = run_script("finetune_search.py", f"--script={FAKE}", f"--output_dir={tmp_path}",
                    "--", "--do_eval", "--learning_rate=1e-5", expect_ok=False)
  assert last_error_line(proc).startswith("error: --learning_rate is set by the search")
  proc = run_script("finetune_search.py", f"--script={FAKE}", f"--output_dir={tmp_path}",
                    "--", "--do_train", expect_ok=False)
  assert last_error_line(proc).startswith("error: The runs write no dev scores to select on")


@pytest.mark.parametrize("flag, message", [
    ("--learning_rates=-1,1e-4", "--learning_rates=-1,1e-4: '-1' is not a finite number above 0."),
    ("--learning_rates=5e-5,inf", "--learning_rates=5e-5,inf: 'inf' is not a finite number "
     "above 0."),
    ("--learning_rates=nan", "--learning_rates=nan: 'nan' is not a finite number above 0."),
    ("--batch_sizes=16,0", "--batch_sizes=16,0: '0' is not an integer of 1 or more."),
    ("--batch_sizes=1.5", "--batch_sizes=1.5: '1.5' is not an integer of 1 or more."),
    ("--epochs=0", "--epochs=0: '0' is not a finite number above 0."),
    ("--epochs=3,x", "--epochs=3,x: 'x' is not a finite number above 0."),
    ("--epochs=", "--epochs is empty; give at least one value."),
])
def test_grid_values_out_of_range_are_refused_before_any_run(tmp_path, flag, message):
  """A grid value no run could take is one line naming the flag, before the search makes
  its directory or starts a run (each run would fail on it after loading its data)."""
  proc = run_script("finetune_search.py", f"--script={FAKE}",
                    f"--output_dir={tmp_path / 'search'}", flag, "--", "--do_eval",
                    "--task_name=SST-2", expect_ok=False)
  assert last_error_line(proc) == f"error: {message}"
  assert not (tmp_path / "search").exists()


def _row(lr, seed, value, status="done"):
  return {"learning_rate": lr, "batch_size": 32, "epochs": 3.0, "seed": seed,
          "run": f"{lr}_{seed}", "status": status, "dev": {"eval_f1": value}, "test": {}}


def test_best_run_and_best_mean_choose_differently_on_an_unstable_configuration():
  # 5e-5: one lucky restart (0.90) but mean 0.60; 2e-5: steady, mean 0.85.
  rows = [_row(5e-5, 1, 0.90), _row(5e-5, 2, 0.30), _row(2e-5, 1, 0.84), _row(2e-5, 2, 0.86),
          _row(3e-5, 1, 0.99, status="failed")]
  rows[-1]["dev"] = {}
  assert search_results.select(rows, "eval_f1", True, "best_run")["run"] == "5e-05_1"
  assert search_results.select(rows, "eval_f1", True, "best_mean")["run"] == "2e-05_2"
  assert search_results.select(rows, "eval_f1", False, "best_run")["run"] == "5e-05_2"
  entries = search_results.table(rows, "eval_f1")
  assert [e["runs"] for e in entries] == [2, 2, 0] and entries[2]["mean"] is None


@pytest.mark.parametrize("args", [
    ["--use_best_checkpoint"], ["--use_best_checkpoint=False"], ["--use_best_checkpoint=0"],
    ["--use_best_checkpoint=f"], ["--use_best_checkpoint=TRUE"], ["--use_best_checkpoint=1"],
    ["--nouse_best_checkpoint"], ["--use_best_checkpoint", "--nouse_best_checkpoint"],
    ["--use_best_checkpoint=false", "--use_best_checkpoint=t"], ["--do_eval"], []])
def test_pass_through_booleans_read_as_absl_reads_them(args):
  """uses_best and check_scored agree with absl's own parsing of the same arguments."""
  from absl import flags
  from cli import search
  own = flags.FlagValues()
  flags.DEFINE_boolean("use_best_checkpoint", False, "", flag_values=own)
  flags.DEFINE_boolean("do_eval", False, "", flag_values=own)
  own(["prog"] + args)
  assert search.uses_best(args) == own.use_best_checkpoint
  scored = [a.replace("use_best_checkpoint", "do_eval") for a in args]
  own(["prog"] + scored)
  if own.do_eval:
    search.check_scored(scored)
  else:
    with pytest.raises(ValueError, match="no dev scores"):
      search.check_scored(scored)


def test_a_restart_compares_the_flags_not_their_spelling():
  """Order, the spelling of a boolean and the search's own flags do not make other flags."""
  from cli import search
  assert search._passed_flags(["--do_eval", "--task_name=SST-2", "--output_dir=a", "--seed=1"]) \
      == search._passed_flags(["--task_name=SST-2", "--do_eval=True", "--output_dir=./a"])
  assert search._passed_flags(["--do_eval", "--nodo_eval"]) == {"do_eval": "false"}
  assert search._passed_flags(["--max_seq_length=64"]) != search._passed_flags(
      ["--max_seq_length=128"])


def _cluster(task_type, index, chief=False):
  cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"], **({"chief": ["127.0.0.1:3"]}
                                                          if chief else {})}
  return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_across_machines_only_the_chiefs_search_writes_the_shared_files(tmp_path):
  """Runs passed --strategy=multi_worker: every machine's search runs the whole grid (each
  run a worker of one cluster), but only the chief's writes records, logs, tables, best/."""
  from cli import search
  multi = ["--do_eval", "--strategy=multi_worker"]
  assert search.writes_shared_outputs(multi, _cluster("worker", 0))
  assert not search.writes_shared_outputs(multi, _cluster("worker", 1))
  assert not search.writes_shared_outputs(multi, _cluster("worker", 0, chief=True))
  assert search.writes_shared_outputs(multi, _cluster("chief", 0, chief=True))
  assert search.writes_shared_outputs(["--do_eval"], _cluster("worker", 1))  # one machine
  with pytest.raises(ValueError, match="TF_CONFIG"):
    search.writes_shared_outputs(multi, None)

  os.environ["TF_CONFIG"] = _cluster("worker", 1)
  try:
    proc = _search(tmp_path, passthrough=("--strategy=multi_worker",))
    refused = _search(tmp_path, "--parallel=2", passthrough=("--strategy=multi_worker",),
                      expect_ok=False)
  finally:
    del os.environ["TF_CONFIG"]
  search_dir = tmp_path / "search"
  assert len(_calls(tmp_path)) == 8  # every run ran here too
  written = {p.name for p in search_dir.rglob("*")}
  assert not written & {RECORD, "log.txt", "table.md", "runs.csv", "selected.json", "best"}
  assert "Not the chief" in proc.stderr
  assert last_error_line(refused).startswith("error: --parallel=2 with --strategy=multi_worker")
  assert len(_calls(tmp_path)) == 8

  os.environ["TF_CONFIG"] = _cluster("worker", 0)  # the chief, the same search: all written
  try:
    _search(tmp_path, passthrough=("--strategy=multi_worker",))
  finally:
    del os.environ["TF_CONFIG"]
  assert len(list(search_dir.glob(f"runs/*/{RECORD}"))) == 8
  assert (search_dir / "best" / "checkpoint").exists() and (search_dir / "table.md").exists()
