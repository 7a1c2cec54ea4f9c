"""The cluster of a multi-worker run, from TF_CONFIG: checked, waited for, connected.

TensorFlow's MultiWorkerMirroredStrategy() connects to the other tasks in one
C++ call that holds Python's global lock. While it waits for a task that has
not started, no Python code runs: nothing is logged, Ctrl-C and SIGTERM are
not acted on, and TensorFlow gives up only after an hour. So each worker first
waits here, in Python, until every other task of the cluster accepts TCP
connections on its address: it logs what it waits for, answers signals, and
gives up after a bound. Meanwhile it listens on its own address, so that the
others see it up as well. TensorFlow's own registration, which follows, then
takes a moment, and is bounded by the time left (its coordination service's
register timeout, with the register barrier so that the leader is bounded too).

Imports only the standard library at the top: TF_CONFIG is checked, and the
cluster waited for, before TensorFlow starts.
"""

import collections
import errno
import json
import os
import re
import selectors
import socket
import struct
import time

from absl import logging

JOBS = ("chief", "worker", "ps", "evaluator")  # TensorFlow's task types
CONNECTED_JOBS = ("chief", "worker")  # the tasks MultiWorkerMirroredStrategy connects
EXAMPLE = '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}'

TfConfig = collections.namedtuple("TfConfig", ["cluster", "task_type", "task_index"])
Task = collections.namedtuple("Task", ["job", "index", "address"])


class ClusterError(RuntimeError):
  """The cluster did not come together, or lost a task (reported as one line)."""


def parse_tf_config(text):
  """TF_CONFIG's text as a TfConfig, checked as TensorFlow's multi-worker strategy reads it.

  Raises:
    ValueError: one line naming TF_CONFIG and what is wrong with it.
  """
  if text is None:
    raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable "
                     f"describing the cluster and this worker's task, e.g. {EXAMPLE}")
  if not text.strip():
    raise ValueError(f"TF_CONFIG is empty; expected JSON such as {EXAMPLE}")
  try:
    config = json.loads(text)
  except json.JSONDecodeError as e:
    shown = text if len(text) <= 200 else text[:200] + "..."
    raise ValueError(f"TF_CONFIG: not valid JSON ({e}): {shown}") from None
  if not isinstance(config, dict):
    raise ValueError(f'TF_CONFIG: expected a JSON object with "cluster" and "task", found '
                     f"{json.dumps(config)}")
  cluster = _check_cluster(config.get("cluster"))
  task_type, task_index = _check_task(config.get("task"), cluster)
  # TensorFlow accepts these, but the scripts would make such a task a cluster of its own
  # that trains and writes the shared outputs beside the real chief.
  if task_type not in CONNECTED_JOBS:
    raise ValueError(f'TF_CONFIG: this task is "{task_type}", but --strategy=multi_worker runs '
                     "chief and worker tasks only (no side evaluator: evaluate with --do_eval "
                     "on --output_dir once training ends)")
  if "ps" in cluster:
    raise ValueError('TF_CONFIG: the cluster has a "ps" job; --strategy=multi_worker '
                     "(MultiWorkerMirroredStrategy) has no parameter servers: list chief and "
                     "worker tasks only")
  return TfConfig(cluster, task_type, task_index)


def _check_cluster(cluster):
  if not cluster:
    raise ValueError('TF_CONFIG has no "cluster" (or an empty one): it must list every '
                     f"task's host:port, e.g. {EXAMPLE}")
  if not isinstance(cluster, dict):
    raise ValueError('TF_CONFIG: "cluster" must map job names to lists of "host:port", found '
                     f"{json.dumps(cluster)}")
  seen = {}
  for job, addresses in cluster.items():
    if job not in JOBS:
      raise ValueError(f'TF_CONFIG: the cluster has a job "{job}"; TensorFlow knows '
                       f"{', '.join(JOBS)}")
    if not isinstance(addresses, list) or not addresses:
      raise ValueError(f'TF_CONFIG: cluster "{job}" must be a non-empty list of "host:port" '
                       f"strings, found {json.dumps(addresses)}")
    for i, address in enumerate(addresses):
      if not _is_address(address):
        raise ValueError(f'TF_CONFIG: cluster "{job}" entry {i} is {json.dumps(address)}, '
                         'not a "host:port" address')
      if address in seen:
        raise ValueError(f"TF_CONFIG: {address} is the address of both {seen[address]} and "
                         f"{job} {i}")
      seen[address] = f"{job} {i}"
    if job in ("chief", "evaluator") and len(addresses) > 1:
      raise ValueError(f'TF_CONFIG: cluster "{job}" lists {len(addresses)} tasks; '
                       "TensorFlow allows one")
  return cluster


def _is_address(address):
  if not isinstance(address, str):
    return False
  host, _, port = address.rpartition(":")
  return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _check_task(task, cluster):
  if not isinstance(task, dict):
    raise ValueError('TF_CONFIG has no "task" object saying which task this process is, e.g. '
                     '"task": {"type": "worker", "index": 0}' if task is None else
                     f'TF_CONFIG: "task" must be an object such as {{"type": "worker", '
                     f'"index": 0}}, found {json.dumps(task)}')
  task_type = task.get("type")
  if not isinstance(task_type, str):
    raise ValueError(f'TF_CONFIG: the task needs a "type" ({", ".join(JOBS)}), found '
                     f"{json.dumps(task)}")
  if task_type not in cluster and task_type != "evaluator":  # an evaluator may stand outside
    raise ValueError(f'TF_CONFIG: task type "{task_type}" is not a job of the cluster, which '
                     f"has {', '.join(cluster)}")
  index = task.get("index")
  if isinstance(index, str) and index.isdigit():  # TensorFlow takes int() of it
    index = int(index)
  if isinstance(index, bool) or not isinstance(index, int) or index < 0:
    raise ValueError(f'TF_CONFIG: the task needs an "index", a whole number from 0, found '
                     f"{json.dumps(task)}")
  count = len(cluster.get(task_type, ()))
  if task_type in cluster and index >= count:
    raise ValueError(f'TF_CONFIG: task index {index} is out of range: cluster "{task_type}" '
                     f"lists {count} task(s), indices 0 to {count - 1}")
  return task_type, index


def connected_tasks(config):
  """The tasks MultiWorkerMirroredStrategy connects (chief, then workers), as Tasks."""
  return [Task(job, i, address) for job in CONNECTED_JOBS
          for i, address in enumerate(config.cluster.get(job, ()))]


def _names(tasks):
  return ", ".join(f"{t.job} {t.index} at {t.address}" for t in tasks) or "none"


def wait_for_cluster(config, timeout, flag="--worker_timeout_seconds", report_every=15.0,
                     probe_every=1.0):
  """Returns once every other connected task has accepted a TCP connection on its address.

  Meanwhile listens on this task's own port (so that the others see it), logs
  what it waits for at the start and every `report_every` seconds, and can be
  interrupted by signals. A task alone does not wait.

  Args:
    config: a TfConfig.
    timeout: seconds before giving up; 0 waits for ever.
    flag: the flag that sets `timeout`, named in messages.

  Returns:
    the seconds waited.

  Raises:
    ValueError: this task's port is taken on this machine.
    ClusterError: some task was still not reachable after `timeout` seconds.
  """
  me = (config.task_type, config.task_index)
  others = [t for t in connected_tasks(config) if (t.job, t.index) != me]
  if not others:
    return 0.0
  own = config.cluster[config.task_type][config.task_index]
  listener = _listen(own, f"{config.task_type} {config.task_index}")
  start = time.monotonic()
  bound = f"gives up after {timeout:g} s, {flag}" if timeout else f"no time limit, {flag}=0"
  reported, seen = None, set()
  try:
    while True:
      # Once seen, a task counts as up: it may have stopped waiting already, and its port
      # is then closed for a moment until TensorFlow's server opens it again.
      up = _reachable([t.address for t in others if t not in seen], probe_every)
      seen.update(t for t in others if up.get(t.address))
      missing = [t for t in others if t not in seen]
      waited = time.monotonic() - start
      if not missing:
        if reported is not None:
          logging.info("Every task of the cluster is reachable after %.0f s.", waited)
        return waited
      reachable = [t for t in others if t in seen]
      if timeout and waited >= timeout:
        raise ClusterError(
            f"{flag}={timeout:g}: gave up after {waited:.0f} s waiting for the cluster of "
            f"TF_CONFIG: not reachable: {_names(missing)} (not started, stopped, or a wrong "
            f"address?); reachable: {_names(reachable)}")
      if reported is None:
        logging.info("Waiting for the other tasks of TF_CONFIG's cluster to listen on their "
                     "addresses (this task: %s %d at %s; %s). Not reachable yet: %s; "
                     "reachable: %s.", config.task_type, config.task_index, own, bound,
                     _names(missing), _names(reachable))
        reported = waited
      elif waited - reported >= report_every:
        logging.info("Still waiting for the cluster after %.0f s (%s). Not reachable: %s; "
                     "reachable: %s.", waited, bound, _names(missing), _names(reachable))
        reported = waited
      _answer(listener, probe_every)
  finally:
    listener.close()


def _listen(address, name):
  """A socket listening on the port of `address` on every interface, as TensorFlow's server
  will once this worker connects."""
  port = int(address.rpartition(":")[2])
  try:
    if socket.has_dualstack_ipv6():
      return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))
  except OSError as e:
    raise ValueError(f"TF_CONFIG: this task ({name}) is to listen on {address}, but port "
                     f"{port} is taken on this machine ({os.strerror(e.errno)}): another program, or "
                     "another task given the same index?") from None


def _answer(listener, seconds):
  """Accepts the other tasks' probes for `seconds`, closing each at once (with a reset,
  which leaves the port free for TensorFlow's server)."""
  deadline = time.monotonic() + seconds
  with selectors.DefaultSelector() as selector:
    selector.register(listener, selectors.EVENT_READ)
    while (left := deadline - time.monotonic()) > 0:
      if selector.select(left):
        connection, _ = listener.accept()
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()


def _reachable(addresses, seconds):
  """{address: whether it accepts a TCP connection within `seconds`}, tried all at once."""
  result = dict.fromkeys(addresses, False)
  pending = {}
  with selectors.DefaultSelector() as selector:
    for address in addresses:
      host, _, port = address.rpartition(":")
      try:
        family, kind, proto, _, target = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
      except OSError:  # a name that does not resolve (yet)
        continue
      s = socket.socket(family, kind, proto)
      s.setblocking(False)
      error = s.connect_ex(target)
      if error in (errno.EINPROGRESS, errno.EAGAIN):
        pending[s] = address
        selector.register(s, selectors.EVENT_WRITE)
      else:  # answered at once (as the loopback does)
        result[address] = error == 0
        s.close()
    deadline = time.monotonic() + seconds
    while pending and (left := deadline - time.monotonic()) > 0:
      for key, _ in selector.select(left):
        s = key.fileobj
        result[pending.pop(s)] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        selector.unregister(s)
        s.close()
    for s in pending:
      s.close()
  return result


def connect(config, timeout):
  """tf.distribute.MultiWorkerMirroredStrategy() for the cluster of TF_CONFIG, TensorFlow's
  registration bounded by `timeout` seconds (0: TensorFlow's default, an hour).

  Raises:
    ClusterError: TensorFlow's registration timed out or failed.
  """
  import tensorflow as tf
  from tensorflow.python.distribute import multi_worker_util
  from tensorflow.python.eager import context

  if timeout and config.task_type in CONNECTED_JOBS:
    # What the strategy would configure (it leaves a configured service alone), with a
    # register timeout; the register barrier makes the leader honour it too, where
    # otherwise it would wait an hour for the others' devices.
    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(tf.train.ClusterSpec(
            config.cluster)),
        cluster_register_timeout_in_ms=int(timeout * 1000))
    for job in CONNECTED_JOBS:
      if job in config.cluster:
        ctx.coordination_service.coordinated_job_list.add(
            name=job, num_tasks=len(config.cluster[job]))
    ctx.coordination_service.cluster_register_with_barrier = True
  try:
    return tf.distribute.MultiWorkerMirroredStrategy()
  except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
    named = _named_tasks(e.message, config)
    raise ClusterError(
        f"TensorFlow could not connect the cluster of TF_CONFIG within {timeout:g} s "
        f"({_first_sentence(e.message)})"
        f"{': no answer from ' + _names(named) if named else ''}") from e


def _first_sentence(message):
  return message.strip().splitlines()[0].split(". ")[0].rstrip(".: ")


def _named_tasks(message, config):
  """The tasks of the cluster, other than this one, that TensorFlow's message names."""
  named = {(job, int(i)) for job, i in _TASK_NAME.findall(message)}
  named.discard((config.task_type, config.task_index))
  return [t for t in connected_tasks(config) if (t.job, t.index) in named]


# How TensorFlow words a collective aborted because a task died or stopped answering (its
# coordination service misses the task's heartbeats for 10 s, or a connection is reset).
_ABORTED = "Collective ops is aborted by:"
_TASK_NAME = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def lost_task(error, config):
  """One line for TensorFlow's error when a collective was aborted because a task of the
  cluster died or stopped answering, else None.

  Args:
    error: an exception raised while the cluster worked together.
    config: the TfConfig of the run.
  """
  message = getattr(error, "message", None)
  if not isinstance(message, str) or _ABORTED not in message:
    return None
  reason = _first_sentence(message.split(_ABORTED, 1)[1])
  lost = _named_tasks(message, config)
  if not lost and "CoordinationService" in message:  # the leader, which runs the service
    lost = connected_tasks(config)[:1]
  who = _names(lost) if lost else "a task"
  return (f"the cluster of TF_CONFIG lost {who} (its process ended or stopped answering): "
          f"{reason}. Every worker stops; start them all again.")
