"""Runtime set-up shared by the training scripts: strategy, precision, seeds, preemption.

Strategies are TensorFlow's own: the default (one device), MirroredStrategy
(the GPUs of one machine), MultiWorkerMirroredStrategy (several machines,
described by the TF_CONFIG environment variable) and TPUStrategy.
"""

import hashlib
import os
import platform

import keras
import tensorflow as tf
from absl import logging

from data import files
from modeling import cluster

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")
DTYPES = ("float32", "bfloat16", "float16")


def make_strategy(name, tpu=None, tpu_zone=None, gcp_project=None, tf_config=None,
                  worker_timeout=900):
  """A tf.distribute strategy by name ("tpu" connects to the given TPU).

  Args:
    name: one of STRATEGIES.
    tpu: TPU name or grpc:// address (the original's --tpu_name / --master);
      empty for a TPU VM's local TPU.
    tf_config: the TF_CONFIG environment variable's text (None: unset), for
      "multi_worker": checked, and its cluster waited for (modeling/cluster.py),
      before TensorFlow connects it.
    worker_timeout: seconds "multi_worker" waits for the other tasks before giving
      up (0: for ever).

  Raises:
    ValueError: a bad name or TF_CONFIG.
    cluster.ClusterError: the cluster did not come together within worker_timeout.
  """
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  if name == "mirrored":
    return tf.distribute.MirroredStrategy()
  if name == "multi_worker":
    config = cluster.parse_tf_config(tf_config)
    waited = cluster.wait_for_cluster(config, worker_timeout)
    # TensorFlow's registration gets the time left, and at least a few seconds: the
    # others passed their own wait at about the same moment.
    left = max(worker_timeout - waited, 10.0) if worker_timeout else 0
    return cluster.connect(config, left)
  if name == "tpu":
    where = (f"--tpu_name={tpu}" if tpu else
             "the TPU of TPU_NAME or of this TPU VM (no --tpu_name)")
    try:  # no name: the TPU_NAME variable, else this TPU VM's own TPU ("local")
      resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
          tpu=tpu or os.environ.get("TPU_NAME") or "local", zone=tpu_zone, project=gcp_project)
    except Exception as e:  # the resolver asks GCP's metadata server and API: any failure
      raise _tpu_error("find", where, e) from None
    try:  # "local" on a machine without a TPU resolves, then fails here
      tf.config.experimental_connect_to_cluster(resolver)
      tf.tpu.experimental.initialize_tpu_system(resolver)
    except (tf.errors.OpError, ValueError, RuntimeError) as e:
      raise _tpu_error("initialize", where, e) from None
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"--strategy={name}: expected one of {', '.join(STRATEGIES)}.")


def _tpu_error(verb, where, error):
  """A one-line ValueError for a TPU that could not be found or initialized."""
  # TensorFlow's first line can go on with the op's attributes: keep what it says.
  detail = (str(error).splitlines() or [""])[0].split(" used by {{")[0]
  return ValueError(f"Cannot {verb} {where}: {type(error).__name__}: {detail} "
                    "(run on a TPU VM, or name a TPU this machine can reach).")


def set_precision(dtype):
  """Sets the Keras global dtype policy for a compute dtype name."""
  if dtype not in DTYPES:
    raise ValueError(f"--dtype={dtype}: expected one of {', '.join(DTYPES)}.")
  policy = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
  keras.mixed_precision.set_global_policy(policy[dtype])
  return policy[dtype]


def set_seed(seed):
  """Seeds Python, numpy, TensorFlow and Keras (weights, dropout) when seed is not None."""
  if seed is not None:
    keras.utils.set_random_seed(seed)


def is_chief(strategy):
  """True on the worker that writes the shared outputs, as TensorFlow decides it: the
  `chief` task, else worker 0 of a cluster without one; one worker: always."""
  return strategy.extended.should_checkpoint


SCRATCH_DIR = ".workers"


def worker_dir(strategy, output_dir):
  """Where this worker writes: output_dir on the chief, else its private scratch
  directory output_dir/.workers/<task_type>_<task_id>."""
  if is_chief(strategy):
    return output_dir
  resolver = strategy.cluster_resolver
  return os.path.join(output_dir, SCRATCH_DIR, f"{resolver.task_type}_{resolver.task_id}")


class WorkerOutputs:
  """One writer per cluster: the chief writes the shared outputs, the others a scratch copy.

  Every worker of a multi-worker run runs the same script with the same
  output_dir, so two processes writing one file would race. The chief writes
  output_dir/<name>; any other worker writes what it must (its own copy of the
  converted records, its part of each checkpoint) under worker_dir(), which
  remove_scratch() removes at the end of the run. Results, predictions,
  exports and logs are written by the chief only (check .chief).
  """

  def __init__(self, strategy, output_dir):
    self.output_dir = output_dir
    self.chief = is_chief(strategy)
    self.directory = worker_dir(strategy, output_dir)
    if not self.chief:
      # Emptied first: TF's preemption handler would restore this worker's own
      # latest checkpoint, which a killed run may have left at another step than
      # the chief's checkpoint that every worker resumes from.
      if files.exists(self.directory):
        files.rmtree(self.directory)
      files.makedirs(self.directory)
    resolver = getattr(strategy, "cluster_resolver", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver.task_type:
      task = f"{resolver.task_type}:{resolver.task_id}"
      if self.chief:
        logging.info("Worker %s is the chief: it writes the shared outputs in %s.", task,
                     output_dir)
      else:
        logging.info("Worker %s is not the chief: shared outputs are left to the chief; its "
                     "own records and checkpoints go to %s, removed at the end.", task,
                     self.directory)

  def path(self, name):
    """output_dir/name on the chief, scratch/name on the other workers."""
    return os.path.join(self.directory, name)

  def remove_scratch(self):
    """Removes this worker's scratch directory (and .workers once empty); chief: nothing."""
    if self.chief:
      return
    if files.exists(self.directory):
      files.rmtree(self.directory)
    parent = os.path.dirname(self.directory)
    try:
      if not files.listdir(parent):  # other workers may still hold theirs
        files.rmtree(parent)
    except OSError:  # another worker removed it first
      pass


def wait_for_all(strategy):
  """Returns once every worker of a multi-worker `strategy` has called it (at once with one
  worker): for a file the chief writes and every worker then reads."""
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    strategy.gather(strategy.run(lambda: tf.constant([0], tf.int64)), axis=0)


def check_same_flags(strategy, text):
  """ValueError unless every worker of a multi-worker `strategy` passes the same `text` (its
  flags): workers started with different flags would train one model on mixed settings."""
  digest = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:7], "little")
  every = strategy.gather(strategy.run(lambda: tf.constant([digest], tf.int64)), axis=0)
  if len(set(every.numpy().tolist())) > 1:
    raise ValueError("the workers of TF_CONFIG's cluster were started with different flags "
                     "(compare the 'Flags:' line each logs): start the same command on every "
                     "worker, only TF_CONFIG's task differing.")


def preemption_handler(strategy, checkpoint_manager, exit_fn):
  """TF's coordinated preemption handling where it applies (multi-worker, TPU), else None.

  Under MultiWorkerMirroredStrategy `exit_fn` runs once the checkpoint is saved (TF's
  default there exits with code 42); a TPU keeps TF's own exit, which waits for its
  workers to go down first."""
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint_manager)
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint_manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn))
  return None


def describe(strategy, training=True):
  """One line on the strategy, for the log (and a warning where bfloat16 is emulated);
  `training`: whether the run trains (the precision line then speaks of gradients)."""
  name = type(strategy).__name__
  text = f"{name} with {strategy.num_replicas_in_sync} replica(s)"
  logging.info("Distribution: %s", text)
  dtype = keras.mixed_precision.global_policy().compute_dtype
  tpu = isinstance(strategy, tf.distribute.TPUStrategy)
  gpu = bool(tf.config.list_logical_devices("GPU"))
  log_precision(dtype, training, tpu, gpu)
  if dtype == "float16" and not (tpu or gpu):
    logging.warning("--dtype=float16 on a CPU: most CPUs have no float16 matrix units (AVX512-"
                    "FP16 and AMX-FP16 apart), so its products are emulated and slower than "
                    "float32; it is meant for GPUs, bfloat16 for CPUs with AMX or AVX-512 BF16.")
  return text


def warn_about_bfloat16(compute_dtype):
  """Logs bfloat16_warning for this process (its GPUs, /proc/cpuinfo, and whether
  TensorFlow hands bfloat16 products to oneDNN), if it has one; on a CPU or GPU."""
  warning = bfloat16_warning(compute_dtype, bool(tf.config.list_logical_devices("GPU")),
                             read_cpuinfo(), onednn_bfloat16(),
                             platform.machine().lower() in ("x86_64", "amd64"))
  if warning:
    logging.warning(warning)


def onednn_bfloat16():
  """Whether TensorFlow hands this process's bfloat16 products to oneDNN's kernels (its
  oneDNN kernels on, TF_ENABLE_ONEDNN_OPTS, and a CPU it deems able: AVX-512 or
  AVX-NE-CONVERT), as TensorFlow itself reports it; None where it cannot say."""
  try:
    from tensorflow.python.util import _pywrap_util_port, _pywrap_utils
    return bool(_pywrap_util_port.IsMklEnabled()) and bool(
        _pywrap_utils.IsDataTypeSupportedByOneDNNOnThisCPU(tf.bfloat16.as_datatype_enum))
  except (ImportError, AttributeError):  # another TensorFlow: no claim
    return None


def cpu_units(cpuinfo):
  """What multiplies bfloat16 matrices on this CPU: "AMX", "AVX-512 BF16", or None
  (emulated, or not Linux)."""
  if cpuinfo and "amx_bf16" in cpuinfo:
    return "AMX"
  if cpuinfo and "avx512_bf16" in cpuinfo:
    return "AVX-512 BF16"
  return None


def log_precision(dtype, training=False, tpu=False, gpu=None):
  """Logs precision_line for compute `dtype` on this machine's units (and, off TPUs, the
  warning where bfloat16 is emulated)."""
  gpu = bool(tf.config.list_logical_devices("GPU")) if gpu is None else gpu
  if tpu or gpu:
    units = "TPU" if tpu else "GPU"
  elif dtype == "bfloat16":  # the CPU's units, where TensorFlow hands them to oneDNN
    units = cpu_units(read_cpuinfo()) if onednn_bfloat16() is not False else None
  else:  # float16 has no units of its own on the CPUs these scripts name
    units = None
  logging.info("Precision: %s", precision_line(dtype, units, training))
  if not tpu:
    warn_about_bfloat16(dtype)


def precision_line(compute_dtype, units, training=True):
  """The log's line on precision: what runs in 16 bits, what stays float32, and on what
  (`training`: a run that trains, with gradients and optimizer state)."""
  if compute_dtype == "float32":
    return "float32 throughout."
  where = f", on the CPU's {units} units" if units in ("AMX", "AVX-512 BF16") else \
      f", on the {units}" if units else ""
  if not training:
    return (f"{compute_dtype} matrix products{where}; the residual stream, LayerNorm and "
            "losses stay float32.")
  scaling = ("; dynamic loss scaling skips a step whose gradients overflow"
             if compute_dtype == "float16" else "")
  return (f"{compute_dtype} matrix products, forward and backward{where}; the weights, "
          f"optimizer state, residual stream, LayerNorm and losses stay float32{scaling}.")


def read_cpuinfo():
  """/proc/cpuinfo's text, or None where there is none."""
  try:
    with open("/proc/cpuinfo") as f:  # the host's CPU flags, not a user path
      return f.read()
  except OSError:
    return None


def bfloat16_warning(compute_dtype, has_gpu, cpuinfo, onednn_bfloat16, x86=True):
  """The warning for bfloat16 where the CPU emulates it or its products round toward zero,
  else None.

  An x86 CPU without bfloat16 instructions emulates bfloat16 products, which then run
  slower than float32 (measured 0.91x on an SST-2 run). Where TensorFlow leaves them to its
  own kernels rather than oneDNN's (`onednn_bfloat16` False: see onednn_bfloat16), those
  kernels round each product toward zero, a bias of about -0.3%, where oneDNN's and XLA's
  round to nearest (docs/design.md). `cpuinfo` is /proc/cpuinfo's text, None where there
  is none; `x86`: the CPU is x86 (elsewhere nothing was measured but the rounding).
  """
  if compute_dtype != "bfloat16" or has_gpu:
    return None
  toward_zero = onednn_bfloat16 is False
  rounding = ("TensorFlow's own kernels compute the bfloat16 products here and round every "
              "one toward zero (not under --jit_compile, whose XLA rounds to nearest)")
  if x86 and cpuinfo is not None and not ("avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo):
    return ("bfloat16 on a CPU without bfloat16 instructions (AVX-512 BF16 or AMX) is "
            "emulated and slower than float32 here" + (f"; {rounding}" if toward_zero else "")
            + "; float32 is faster.")
  if toward_zero:
    return (f"bfloat16: {rounding}" + ("; TF_ENABLE_ONEDNN_OPTS=1 (the scripts' default) "
                                        "hands them to oneDNN, which rounds to nearest."
                                        if x86 else "."))
  return None
