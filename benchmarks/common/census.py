"""Which operations a traced step runs in which dtype: the matrix products and the casts,
per encoder layer, forward and backward. Used by
benchmarks/investigations/precision_census.py and tests/test_precision_census.py.

Reads the graph TensorFlow traces (before grappler rewrites it: a product fused with its
bias by oneDNN keeps its dtype), nested functions included (gradient functions, loops).
"""

import collections
import dataclasses
import re

import tensorflow as tf

PRODUCTS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")


@dataclasses.dataclass
class Op:
  """One product or cast: where it sits and in which dtypes."""
  kind: str  # "product" or "cast"
  part: str  # "layer_3", "embeddings", "head", "optimizer", XLA_PART
  backward: bool
  dtypes: str  # a product's input dtype; a cast's "source->destination"
  elements: int  # a cast's output elements (-1: unknown), a product's 0
  name: str


# The part of the ops of a function compiled by XLA (GELU's in 16-bit training, one program
# for all layers): listed once, apart from the layers that call it.
XLA_PART = "XLA programs"


def _part(name):
  layer = re.search(r"/layer_(\d+)(?:_\d+)?/", "/" + name)
  if layer:
    return f"layer_{layer.group(1)}"
  for part in ("embeddings", "pooler", "adam_weight_decay", "lamb", "clip_by_global_norm"):
    if re.search(rf"(^|/){part}(_\d+)?/", name):
      return "optimizer" if part in ("adam_weight_decay", "lamb", "clip_by_global_norm") \
          else part
  return "head"


def _nodes(concrete_function):
  """(NodeDef, the name of the function holding it or "", whether XLA compiles that
  function) for every node of the graph and of the functions it calls."""
  definition = concrete_function.graph.as_graph_def()
  nodes = [(n, "", False) for n in definition.node]
  for function in definition.library.function:
    xla = function.attr["_XlaMustCompile"].b if "_XlaMustCompile" in function.attr else False
    nodes += [(n, function.signature.name, xla) for n in function.node_def]
  return nodes


def dtypes_of(concrete_function, op_type):
  """[(node name, its T attribute's dtype name)] of every op of that type the graph runs."""
  return [(node.name, tf.as_dtype(node.attr["T"].type).name)
          for node, _, _ in _nodes(concrete_function) if node.op == op_type]


def census(concrete_function):
  """Every matrix product and cast of a concrete function's graph, as Ops."""
  graph = concrete_function.graph
  shapes = {op.name: op.outputs[0].shape for op in graph.get_operations() if op.outputs}
  ops = []
  for node, function, xla in _nodes(concrete_function):
    name = node.name
    part = XLA_PART if xla else _part(name)
    backward = "gradient_tape" in name or "gradient" in function.lower() or "_grad" in name
    if node.op in PRODUCTS:
      dtype = tf.as_dtype(node.attr["Ta" if "Ta" in node.attr else "T"].type).name  # V3: Ta
      ops.append(Op("product", part, backward, dtype, 0, name))
    elif node.op == "Cast":
      source = tf.as_dtype(node.attr["SrcT"].type).name
      destination = tf.as_dtype(node.attr["DstT"].type).name
      if not (_is_float(source) and _is_float(destination)):
        continue  # index and mask arithmetic
      shape = shapes.get(name) if not function else None
      elements = shape.num_elements() if shape is not None and shape.is_fully_defined() else -1
      ops.append(Op("cast", part, backward, f"{source}->{destination}",
                    -1 if elements is None else elements, name))
  return ops


def _is_float(dtype):
  return dtype in ("float16", "bfloat16", "float32", "float64")


def per_part(ops):
  """{(part, "forward"|"backward"): {"products": Counter of dtypes, "casts": count,
  "cast_elements": elements (unknown ones left out)}}."""
  table = collections.defaultdict(
      lambda: {"products": collections.Counter(), "casts": 0, "cast_elements": 0})
  for op in ops:
    row = table[(op.part, "backward" if op.backward else "forward")]
    if op.kind == "product":
      row["products"][op.dtypes] += 1
    else:
      row["casts"] += 1
      row["cast_elements"] += max(op.elements, 0)
  return dict(table)
