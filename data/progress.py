"""Progress lines on stderr for long work: counts, rates and an ETA, at most once a second."""

import sys
import time


def format_duration(seconds):
  """'1h02m', '3m05s' or '12.3s'."""
  if seconds >= 3600:
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
  if seconds >= 60:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
  return f"{seconds:.1f}s"


class Progress:
  """Reports `done` of `total` (for the ETA) plus named counters and their rates.

  Args:
    label: what is being done, e.g. "reading".
    total: the amount `done` counts towards, or None when unknown.
    interval: seconds between lines.
    stream: where to write (stderr by default).
  """

  def __init__(self, label, total=None, interval=1.0, stream=None):
    self.label = label
    self.total = total
    self.interval = interval
    self.stream = stream or sys.stderr
    self.start = time.time()
    self.last = self.start  # the first line after one interval: an ETA needs progress to go on

  def update(self, done, force=False, **counters):
    """Writes a line when `interval` has passed (or `force`): counters and rates."""
    now = time.time()
    if not force and now - self.last < self.interval:
      return
    self.last = now
    elapsed = max(now - self.start, 1e-9)
    parts = [f"{name} {value:,} ({value / elapsed:,.0f}/s)" for name, value in counters.items()]
    if self.total:
      fraction = min(done / self.total, 1.0)
      eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("inf")
      parts.append(f"{100 * fraction:.0f}%, ETA {format_duration(eta) if eta != float('inf') else '?'}")
    print(f"[{self.label}] " + ", ".join(parts), file=self.stream, flush=True)

  def elapsed(self):
    return time.time() - self.start
