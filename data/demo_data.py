"""Data the demo needs and every machine has: a corpus from Python's own documentation,
and a small sentiment task in the GLUE SST-2 layout written for this project."""

import itertools
import os
import pkgutil
import pydoc
import random
import sys
import warnings

from data import files

# --- A corpus from the Python documentation ----------------------------------


def python_documentation(max_modules=None):
  """Yields (name, text) documents: every pydoc topic, then standard-library docstrings.

  These ship with every Python installation, so the demo needs no download.
  """
  import pydoc_data.topics
  for name, text in sorted(pydoc_data.topics.topics.items()):
    yield f"topic:{name}", text
  names = sorted(m.name for m in pkgutil.iter_modules() if m.module_finder.path.startswith(
      sys.base_prefix) and not m.name.startswith("_") and m.name not in _SKIPPED)
  for name in names[:max_modules]:
    text = _module_text(name)
    if text:
      yield f"module:{name}", text


_SKIPPED = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "pydoc_data",
            "lib2to3", "ensurepip", "venv", "test", "site-packages", "xxsubtype", "sre_compile",
            "sre_parse", "sre_constants", "crypt", "nntplib", "telnetlib", "pipes", "imghdr",
            "sndhdr", "cgi", "cgitb", "asynchat", "asyncore", "smtpd", "mailcap", "msilib",
            "nis", "ossaudiodev", "spwd", "uu", "xdrlib", "audioop", "chunk", "aifc", "sunau"}


def _module_text(name):
  """The module's docstring and its public members' docstrings, as plain paragraphs."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      module = __import__(name)
  except Exception:  # noqa: BLE001 - some modules do not import everywhere
    return ""
  parts = [pydoc.getdoc(module)]
  for attr in sorted(vars(module)):
    if attr.startswith("_"):
      continue
    member = getattr(module, attr, None)
    if getattr(member, "__module__", None) == name:
      doc = pydoc.getdoc(member)
      if doc:
        parts.append(doc)
  return "\n\n".join(p for p in parts if p)


def write_python_documentation(directory, max_documents=None, max_modules=None):
  """Writes each document of python_documentation() as a text file; returns their glob."""
  files.makedirs(directory)
  documents = python_documentation(max_modules)
  for name, text in itertools.islice(documents, max_documents):
    with files.atomic_output(os.path.join(directory, name.replace(":", "_") + ".txt")) as f:
      f.write(text)
  return os.path.join(directory, "*.txt")


# --- A small sentiment task --------------------------------------------------

_POSITIVE = ["wonderful", "excellent", "delightful", "great", "superb", "charming", "brilliant",
             "enjoyable", "moving", "beautiful", "clever", "fantastic", "lovely", "gripping",
             "memorable", "fresh", "warm", "inspiring", "satisfying", "elegant"]
_NEGATIVE = ["terrible", "awful", "dull", "boring", "dreadful", "clumsy", "tedious", "bland",
             "painful", "messy", "forgettable", "lifeless", "shallow", "annoying", "weak",
             "predictable", "sloppy", "irritating", "disappointing", "tiresome"]
_SUBJECTS = ["film", "movie", "story", "plot", "cast", "soundtrack", "ending", "script",
             "performance", "book", "show", "direction", "dialogue", "camera work", "finale"]
_TEMPLATES = ["The {s} was {a}.", "What a {a} {s}!", "I found the {s} {a}.",
              "Honestly, the {s} is {a}.", "It was a {a} {s} from start to finish.",
              "Everyone agreed the {s} felt {a}.", "A truly {a} {s}.",
              "The {s} turned out {a}, as I expected.", "Such a {a} {s} this year.",
              "My friends called the {s} {a}."]


def write_sentiment_task(directory, train=400, dev=100, test=40, seed=7):
  """Writes train.tsv, dev.tsv and test.tsv in the SST-2 layout (sentence, label 1 = positive).

  Sentences come from templates with adjectives of clear polarity; the dev and
  test sets use held-out adjectives, so a model has to know what the words mean.
  """
  rng = random.Random(seed)
  files.makedirs(directory)

  def sentence(label, held_out):
    pool = _POSITIVE if label else _NEGATIVE
    adjectives = pool[-5:] if held_out else pool[:-5]
    return rng.choice(_TEMPLATES).format(s=rng.choice(_SUBJECTS), a=rng.choice(adjectives))

  def write(name, rows, header):
    with files.atomic_output(os.path.join(directory, name)) as f:
      f.write(header + "\n" + "".join(r + "\n" for r in rows))

  labels = [rng.randint(0, 1) for _ in range(train)]
  write("train.tsv", [f"{sentence(y, False)}\t{y}" for y in labels], "sentence\tlabel")
  labels = [rng.randint(0, 1) for _ in range(dev)]
  write("dev.tsv", [f"{sentence(y, True)}\t{y}" for y in labels], "sentence\tlabel")
  write("test.tsv", [f"{i}\t{sentence(rng.randint(0, 1), True)}" for i in range(test)],
        "index\tsentence")
  return directory
