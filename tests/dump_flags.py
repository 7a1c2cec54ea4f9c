"""Prints the flags an entry script defines, as JSON {name: [default, is_bool]}.

  python tests/dump_flags.py SCRIPT.py

The script is imported as a module (it defines its flags at import; two
scripts' flags cannot share one process), and absl's help flags are added as
app.run adds them.
"""

import importlib.util
import json
import os
import sys

from absl import app, flags

path = sys.argv[1]
sys.path.insert(0, os.path.dirname(path))
name = os.path.splitext(os.path.basename(path))[0]
spec = importlib.util.spec_from_file_location(name, path)
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
sys.argv = [path]
spec.loader.exec_module(module)
app.define_help_flags()
print(json.dumps({n: [f.default, f.boolean] for n, f in flags.FLAGS._flags().items()},
                 default=str))
