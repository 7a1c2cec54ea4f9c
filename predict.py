r"""Runs a raw-text export (any script's --export_dir) over a file of text.

  python predict.py --export_dir=out/export --input_file=reviews.txt --output_file=labels.jsonl
  python predict.py --export_dir=squad/export --input_file=questions.jsonl \
    --output_file=answers.jsonl --id_field=id
  python predict.py --export_dir=mrpc/export --input_file=pairs.tsv --header \
    --output_file=out.tsv

Input: plain lines (one input per line), TSV (columns named by --fields or
--header) or JSON Lines (objects keyed by the export's input names); blank lines
are skipped. Output: one row per input row with its id and the export's outputs:
JSON Lines, or TSV when --output_file ends in .tsv (a tab, line break or
backslash in a cell escaped as \t, \n, \r, \\).
"""

from absl import flags, logging

from cli import app

flags.DEFINE_string("export_dir", None, "The SavedModel to run (a script's --export_dir).")
flags.DEFINE_string("input_file", None, "Rows of raw text: plain lines, .tsv or .jsonl.")
flags.DEFINE_string("output_file", None, "Where to write: JSON Lines, or TSV for a .tsv name.")
flags.DEFINE_enum("input_format", None, ["lines", "tsv", "jsonl"],
                  "How to read --input_file. Default: from its extension (.tsv, .jsonl or "
                  ".json, else plain lines).")
flags.DEFINE_list("fields", None, "TSV: the column names, in order (the export's inputs, "
                  "the id, others ignored).")
flags.DEFINE_bool("header", False, "TSV: the first line names the columns.")
flags.DEFINE_string("id_field", None, "The column or JSON key of each row's id (not the name of "
                    "one of the export's outputs). Default: the line number.")
flags.DEFINE_integer("batch_size", 32, "Rows per call of the export.", lower_bound=1)
FLAGS = flags.FLAGS


def main(_):
  app.check_given(export_dir=FLAGS.export_dir, input_file=FLAGS.input_file,
                  output_file=FLAGS.output_file)
  app.log_flags()
  from data import path_checks, progress, text_rows
  from modeling import distribution, served_model

  path_checks.check_input_files(input_file=FLAGS.input_file)
  path_checks.check_output_file(FLAGS.output_file, "--output_file", [FLAGS.input_file])
  inputs = served_model.signature_inputs(FLAGS.export_dir)  # rows are checked before loading
  if FLAGS.id_field:
    text_rows.check_id_field(FLAGS.id_field, served_model.signature_outputs(FLAGS.export_dir))
  fmt = text_rows.input_format(FLAGS.input_file, FLAGS.input_format)
  ids, values, blank = text_rows.read_rows(FLAGS.input_file, fmt, inputs, FLAGS.fields,
                                           FLAGS.header, FLAGS.id_field)
  logging.info("%d rows%s; inputs %s", len(ids),
               f" ({blank} blank lines skipped)" if blank else "", ", ".join(inputs))
  model = served_model.ServedModel(FLAGS.export_dir)
  logging.info("The export computes in %s%s.", model.precision,
               "; dense layers convert their weights once (TF_ONEDNN_ASSUME_FROZEN_WEIGHTS)"
               if app.frozen_weights() else "")
  distribution.warn_about_bfloat16(model.precision)
  report = progress.Progress("predicting", total=len(ids))
  outputs = []
  for first in range(0, len(ids), FLAGS.batch_size):
    outputs += model({k: v[first:first + FLAGS.batch_size] for k, v in values.items()})
    report.update(len(outputs), rows=len(outputs))
  text_rows.write_rows(FLAGS.output_file, ids, outputs, FLAGS.id_field or "id")
  seconds = report.elapsed()
  logging.info("Predicted %d rows in %s (%.1f rows/s); wrote %s.", len(ids),
               progress.format_duration(seconds), len(ids) / max(seconds, 1e-9),
               FLAGS.output_file)


if __name__ == "__main__":
  app.use_inference_defaults()  # this process only predicts: the export's weights never change
  app.run(main)
