"""Helpers the benchmarks share. Importing the package first gives TensorFlow the settings
the entry scripts run with (cli/app.py), so that what a benchmark times in its own process
is what the scripts run."""

from cli.app import use_tensorflow_defaults

use_tensorflow_defaults()
