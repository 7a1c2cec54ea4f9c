r"""The paper's fine-tuning protocol as one command: a grid of runs and seeds, chosen on dev.

  python finetune_search.py --script=run_classifier.py --output_dir=out/mrpc_search \
    --num_seeds=5 -- --task_name=MRPC --data_dir=glue/MRPC --do_train --do_eval \
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --max_seq_length=128

Runs the script once per learning rate x batch size x epochs x seed (default: the
paper's 5e-5,3e-5,2e-5 x 16,32 x 2,3,4, one seed), each in --output_dir/runs/<run>,
with the flags after `--` passed through. Started again, it skips the finished runs.
Writes table.md and table.csv (per configuration: mean ± std over seeds, min, max,
best), runs.csv, metric_vs_learning_rate.png, selected.json and best/ (the chosen
run's model). Selection reads dev figures only. --keep_checkpoints=chosen then deletes
the other runs' checkpoints. See docs/protocol.md.
"""

import json
import os

from absl import flags, logging

from cli import app, search
from data import files
from modeling import search_results, selection

flags.DEFINE_string("script", None, "The fine-tuning script to run, e.g. run_classifier.py.")
flags.DEFINE_string("output_dir", None, "The search's directory: runs/, tables, best/.")
flags.DEFINE_list("learning_rates", ["5e-5", "3e-5", "2e-5"], "Learning rates to try.")
flags.DEFINE_list("batch_sizes", ["16", "32"], "Training batch sizes to try.")
flags.DEFINE_list("epochs", ["2", "3", "4"], "Numbers of training epochs to try.")
flags.DEFINE_integer("num_seeds", 1, "Seeds per configuration: 1, 2, ... (random restarts).",
                     lower_bound=1)
flags.DEFINE_list("seeds", None, "The seeds to use instead of 1 .. --num_seeds.")
flags.DEFINE_integer("parallel", 1, "Runs at once (each uses the machine's cores).",
                     lower_bound=1)
flags.DEFINE_enum("select", "best_run", ["best_run", "best_mean"],
                  "best_run: the best single run on dev (the paper's choice among restarts); "
                  "best_mean: the best run of the configuration with the best mean.")
flags.DEFINE_string("metric", None, "The eval_results.txt key to select on. Default: the "
                    "task's headline metric (modeling/selection.py).")
flags.DEFINE_enum("keep_checkpoints", "all", ["all", "chosen"],
                  "chosen: once best/ is written, delete every other run's checkpoints "
                  "(their results, logs and exports stay); a later search can then choose "
                  "only the same run.")
FLAGS = flags.FLAGS


def main(argv):
  app.check_given(script=FLAGS.script, output_dir=FLAGS.output_dir)
  app.log_flags()
  passthrough = argv[1:]
  search.check_passthrough(passthrough)
  search.check_scored(passthrough)
  script = search.find_script(FLAGS.script)
  values = search.grid_values(FLAGS.learning_rates, FLAGS.batch_sizes, FLAGS.epochs)
  seeds = search.seeds_from(FLAGS.seeds, FLAGS.num_seeds)
  metric = FLAGS.metric or search.default_metric(script, passthrough)
  selection.check_metric_name(script, metric, "--metric", search.default_metric(script,
                                                                                passthrough))
  higher = selection.higher_is_better(metric)
  writer = search.writes_shared_outputs(passthrough, os.environ.get("TF_CONFIG"))
  if FLAGS.parallel > 1 and search.multi_worker(passthrough):
    raise ValueError(f"--parallel={FLAGS.parallel} with --strategy=multi_worker: runs at once "
                     "would all take this machine's TF_CONFIG address; run one at a time.")
  app.make_output_dir(FLAGS.output_dir)
  runs = search.grid(**values, seeds=seeds)
  logging.info("Searching %d configurations x %d seeds (%s) of %s on dev %s (%s is better).",
               len(runs) // len(seeds), len(seeds), ",".join(map(str, seeds)), script, metric,
               "higher" if higher else "lower")
  runner = search.Search(script, passthrough, FLAGS.output_dir, runs, FLAGS.parallel,
                         writer=writer)
  records = runner.run_all()
  if not writer:
    logging.info("Not the chief: the chief's search writes the records, tables and best/ "
                 "in %s.", FLAGS.output_dir)
    return
  rows = runner.rows(records)
  failed = [r["run"] for r in rows if r["status"] == "failed"]
  unfinished = [r["run"] for r in rows if r["status"] not in ("done", "failed")]
  entries = search_results.table(rows, metric, higher)
  out = lambda name: os.path.join(FLAGS.output_dir, name)  # noqa: E731
  chosen = search_results.select(rows, metric, higher, FLAGS.select)
  if chosen is not None:  # checked before anything is rewritten: all outputs agree or none
    chosen_dir = runner.directory(search.Run(chosen["learning_rate"], chosen["batch_size"],
                                             chosen["epochs"], chosen["seed"]))
    search.model_source(chosen_dir, search.uses_best(passthrough))
  for name, text in (("table.md", search_results.table_markdown(entries, metric, higher, failed,
                                                                unfinished)),
                     ("table.csv", search_results.table_csv(entries)),
                     ("runs.csv", search_results.runs_csv(rows))):
    with files.atomic_output(out(name)) as f:
      f.write(text)
  search_results.plot(entries, metric, out("metric_vs_learning_rate.png"))
  if chosen is None:
    keys = sorted({k for r in rows if r["status"] == "done" for k in r["dev"]})
    raise ValueError(f"No finished run reports dev {metric} (their eval_results.txt hold: "
                     f"{', '.join(keys) or 'nothing'}); see --metric and the log.txt files "
                     f"under {out('runs')}.")
  with files.atomic_output(out("selected.json")) as f:
    f.write(search_results.selection_json(chosen, entries, metric, higher, FLAGS.select, seeds))
  search.copy_model(chosen_dir, out("best"), search.uses_best(passthrough))
  if FLAGS.keep_checkpoints == "chosen":
    for row in rows:
      if row["run"] != chosen["run"] and row["status"] == "done":
        search.drop_checkpoints(runner.directory(search.Run(
            row["learning_rate"], row["batch_size"], row["epochs"], row["seed"])))
  logging.info("Selected %s: dev %s %.4f. %d runs, %d failed%s, %d not finished%s. Table: %s",
               chosen["run"], metric, chosen["dev"][metric], len(rows), len(failed),
               f" ({', '.join(failed)})" if failed else "", len(unfinished),
               f" ({', '.join(unfinished)})" if unfinished else "", out("table.md"))
  print(files.read_bytes(out("table.md")).decode("utf-8"), end="")
  print(json.dumps({k: chosen[k] for k in ("learning_rate", "batch_size", "epochs", "seed")}))


if __name__ == "__main__":
  app.run(main)
