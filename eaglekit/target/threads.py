"""How many threads torch's CPU work runs on: chosen from the cores this process may use and how busy other processes
keep them, or as the user sets it.

torch (OpenMP) splits each product of a decode step evenly between its threads and waits for the last one. Where
another process holds a core, the thread that shares it runs only part of the time and every split waits for it: on 2
cores beside one spinning process the demo's verify took 18.4-19.5 s with torch's default of two threads and 9.8-10.0
s with one (benchmarks/README, 2026-11-27), and 4-9x slower than one thread on a machine shared with more work. Alone,
two threads were the faster (7.4-9.0 s against 8.6-10.5 s). So the count follows the cores that are free:

- the cores this process may run on: its CPU affinity (``os.sched_getaffinity``), no more than a cgroup CPU quota
  allows (``cpu.max``: a container limited to 2 CPUs of a larger host), and no more than torch's own default;
- minus what other processes used of those cores while this one started: ``/proc/stat``'s busy time of those CPUs,
  less this process's own CPU time, over the seconds from the command's start to the moment torch is imported (the
  imports take 2-6 s; nothing is slept unless the window is shorter than ``MIN_WINDOW``);
- a core counts when at least half of it was free (``FREE_SHARE``): a thread given less than half a core makes each
  split wait longer than one thread doing the whole product would.

An explicit count wins: ``threads`` (the commands' flag), else ``EAGLEKIT_NUM_THREADS``, else torch's own
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` when the environment sets one (torch has read it; it is left as it is).
Where ``/proc/stat`` cannot be read (not Linux) torch's default is kept. The choice holds while the command runs and
torch's previous count comes back after it (``chosen``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import UsageError

ENV = "EAGLEKIT_NUM_THREADS"
TORCH_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch reads itself when it is imported
FREE_SHARE = 0.5  # a core counts as free when at least this share of it was idle (or this process's own)
MIN_WINDOW = 0.3  # seconds the load is measured over, at least (/proc/stat counts in ticks of 10 ms)
STAT = "/proc/stat"
CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"


def parse_threads(value: object, where: str) -> int:
    """A thread count as given (a flag, the environment): a positive integer; a UsageError naming ``where`` else."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"{where} {value!r}: expected a positive number of threads")
    return n


def allowed_cpus() -> list[int] | None:
    """The CPUs this process may run on (None where the platform does not say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def quota_cores(path: str = CPU_MAX) -> float | None:
    """The cgroup's CPU quota in cores (``cpu.max``), None where none is set or it cannot be read."""
    try:
        quota, period = open(path).read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def busy_seconds(cpus: list[int], path: str = STAT) -> float | None:
    """Seconds ``cpus`` have spent busy since boot (every ``/proc/stat`` field but idle and iowait: steal included, a
    hypervisor's time is not this process's either); None where the file cannot be read."""
    wanted = {f"cpu{i}" for i in cpus}
    busy = 0
    try:
        with open(path) as f:
            for line in f:
                name, *fields = line.split()
                if name in wanted:
                    ticks = [int(x) for x in fields[:8]]
                    busy += sum(ticks) - ticks[3] - ticks[4]
    except (OSError, ValueError, IndexError):
        return None
    return busy / os.sysconf("SC_CLK_TCK")


def free_threads(cores: int, others_busy: float, share: float = FREE_SHARE) -> int:
    """Threads for ``cores`` cores of which other processes kept ``others_busy`` (in cores) busy: the cores at least
    ``share`` free, at least 1."""
    return max(1, min(cores, math.floor(cores - max(others_busy, 0.0) + (1 - share))))


class Probe:
    """The load other processes put on this process's cores, measured from its creation to ``others``."""

    def __init__(self, cpus: list[int] | None = None):
        self.cpus = cpus if cpus is not None else allowed_cpus()
        self.start = self._now()

    def _now(self) -> tuple[float, float, float | None]:
        """(wall clock, this process's CPU seconds, busy seconds of its cores)."""
        return time.monotonic(), time.process_time(), busy_seconds(self.cpus) if self.cpus else None

    def others(self) -> float | None:
        """Cores other processes kept busy since the probe began, on average (None where it cannot tell)."""
        wall0, own0, busy0 = self.start
        if busy0 is None:
            return None
        wait = MIN_WINDOW - (time.monotonic() - wall0)
        if wait > 0:
            time.sleep(wait)
        wall1, own1, busy1 = self._now()
        if busy1 is None:
            return None
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)


@dataclass
class Choice:
    """What ``chosen`` settled: the count and why (``by``: asked for, an environment variable, the measured load or
    torch's default), with the measurement where one was made. ``to_dict`` goes into the report."""

    threads: int
    by: str
    cores: int | None = None
    others_busy: float | None = None

    def to_dict(self) -> dict:
        out: dict = {"threads": self.threads, "chosen_by": self.by}
        if self.cores is not None:
            out["cores"] = self.cores
        if self.others_busy is not None:
            out["others_busy_cores"] = round(self.others_busy, 2)
        return out


def decide(requested: int | None, probe: Probe | None, torch_default: int, environ=os.environ) -> Choice:
    """The count: ``requested``, else ``EAGLEKIT_NUM_THREADS``, else torch's own environment variable, else what the
    probe measured (within torch's default), else torch's default."""
    if requested is not None:
        return Choice(parse_threads(requested, "threads"), "asked")
    if environ.get(ENV, "").strip():
        return Choice(parse_threads(environ[ENV], ENV), ENV)
    for name in TORCH_ENV:
        if environ.get(name, "").strip():
            return Choice(torch_default, name)
    others = probe.others() if probe is not None else None
    if others is None or probe.cpus is None:
        return Choice(torch_default, "torch's default")
    cores = len(probe.cpus)
    quota = quota_cores()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota + (1 - FREE_SHARE))))
    cores = min(cores, torch_default)
    return Choice(free_threads(cores, others), "measured load", cores, others)


@dataclass
class _Scope:
    """One open ``chosen``: what was asked, the probe, and once settled the choice and torch's count before it."""

    requested: int | None
    probe: Probe
    choice: Choice | None = None
    before: int = 0


_open: list[_Scope] = []  # the ``chosen`` scopes open, innermost last
_default: list[int] = []  # torch's own count, as this process first saw it


@contextlib.contextmanager
def chosen(requested: int | None = None) -> Iterator[None]:
    """Inside, torch's CPU work runs on the count ``decide`` settles: the load is measured from entering until
    ``settle()`` is called (once torch is imported; this imports nothing itself). torch's count before comes back on
    leaving. ``requested`` and ``EAGLEKIT_NUM_THREADS`` are checked on entering: a bad count is a UsageError before
    anything loads."""
    if requested is not None:
        parse_threads(requested, "threads")
    if os.environ.get(ENV, "").strip():
        parse_threads(os.environ[ENV], ENV)
    scope = _Scope(requested, Probe())
    _open.append(scope)
    try:
        yield
    finally:
        _open.remove(scope)
        if scope.choice is not None:
            sys.modules["torch"].set_num_threads(scope.before)


def settle() -> Choice | None:
    """The innermost open ``chosen``'s count, applied to torch on the first call (torch must be imported by then; later
    calls return the same choice). None outside ``chosen``."""
    if not _open:
        return None
    scope = _open[-1]
    if scope.choice is None:
        import torch

        scope.before = torch.get_num_threads()
        if not _default:
            _default.append(scope.before)
        scope.choice = decide(scope.requested, scope.probe, _default[0])
        torch.set_num_threads(scope.choice.threads)
    return scope.choice
