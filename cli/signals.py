"""Stopping a run on SIGINT or SIGTERM at any point of its life, with one line.

SIGINT raises KeyboardInterrupt and SIGTERM raises Stopped in the main thread,
so the run unwinds (temporary files removed) and cli/app.run reports it. Python
acts on a signal only between two bytecodes of the main thread: while that
thread waits inside TensorFlow (a collective waiting for a worker that has not
reached it, which can last minutes), it could not. Python also writes each
signal's number to its wakeup fd, which a thread here reads: if the process
still runs GRACE_SECONDS later, it says so in one line and exits at once. A
signal whose handler is the training loop's (save a checkpoint, then stop) is
left to it.
"""

import os
import signal
import socket
import sys
import threading
import time

from absl import logging

NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}
GRACE_SECONDS = 5.0
_WAKEUP = []  # the socket pair signals are written to; kept open for the process's life


class Stopped(BaseException):
  """Raised in the main thread by SIGTERM, as SIGINT raises KeyboardInterrupt."""


def _on_sigterm(signum, frame):
  raise Stopped()


def watch():
  """Installs the SIGTERM handler and starts the thread that forces a blocked exit."""
  signal.signal(signal.SIGTERM, _on_sigterm)
  if _WAKEUP or threading.current_thread() is not threading.main_thread():
    return
  reader, writer = socket.socketpair()
  writer.setblocking(False)
  signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
  _WAKEUP.extend((reader, writer))

  def forced_exit():
    while True:
      signum = reader.recv(1)[0]
      if signum not in NAMES or signal.getsignal(signum) not in (
          _on_sigterm, signal.default_int_handler):
        continue
      time.sleep(GRACE_SECONDS)
      logging.flush()
      print(f"error: stopped by {NAMES[signum]} (forced: the run was blocked in "
            f"TensorFlow for {GRACE_SECONDS:g} s, e.g. waiting for another worker)",
            file=sys.stderr, flush=True)
      os._exit(128 + signum)

  threading.Thread(target=forced_exit, name="signal-watch", daemon=True).start()


def take_back_sigterm():
  """Sets Python's SIGTERM handler again where TensorFlow replaced it.

  Making a MultiWorkerMirroredStrategy installs TensorFlow's own C-level
  handler, which only records the signal (for a preemption protocol the
  scripts do not use); the training loop installs its own while it runs.
  """
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_sigterm)


def exit_code(error):
  """(signal name, exit code) of a KeyboardInterrupt or Stopped."""
  signum = signal.SIGINT if isinstance(error, KeyboardInterrupt) else signal.SIGTERM
  return NAMES[signum], 128 + signum
