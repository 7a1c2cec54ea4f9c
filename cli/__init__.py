"""What the entry scripts share, above data/ and modeling/ (imports go one way:
data -> modeling -> cli -> the scripts).

  app.py          the process: TensorFlow's environment defaults, one-line errors, flag
                  parsing, logging the flags, clean-up
  flags.py        flag definitions several scripts share (runtime, TPU, batching, fine-tuning)
  model_files.py  the config, vocab and checkpoint a run uses, checked before any work
  runner.py       the steps of a training run, in order, around a script's task adapter
  task_adapter.py what a script's task adapter says, and what its steps are given
  settings.py     a run's flags, read once in main into a frozen settings object
"""
