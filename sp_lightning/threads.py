"""CPU thread defaults that share a small machine well.

The tiny model's operations are small, so torch's OpenMP threads spend much of a step waiting
for each other. GNU OpenMP waits by spinning, and a spinning thread on a core another process
needs takes that core from it. Sleeping waiters cost some speed on an idle machine and save
much more when another process wants the cores (``benchmarks/bench_shared_cpu.py`` measures both;
docs/benchmarks.md has the figures); a shared laptop is the case this engine is built for. So,
unless the user chose otherwise:

- waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``), which must be set before torch loads its
  OpenMP runtime: the ``sp-lightning`` command calls :func:`set_wait_policy` when it starts,
  before its subcommand imports torch (importing the package changes nothing); a script sets
  ``OMP_WAIT_POLICY`` itself, or calls :func:`set_wait_policy` before importing torch;
- torch uses as many threads as this process may run on: the CPUs of its affinity mask, capped
  by a cgroup CPU quota (a container's ``--cpus``), not every core of the host.

``OMP_NUM_THREADS`` and ``OMP_WAIT_POLICY``, when set, win; ``SP_LIGHTNING_THREADS=torch`` leaves
both to torch (the benchmark's baseline).
"""

from __future__ import annotations

import math
import os

OPT_OUT = "SP_LIGHTNING_THREADS"


def _opted_out(environ) -> bool:
    return environ.get(OPT_OUT, "").lower() == "torch"


def set_wait_policy(environ=os.environ) -> None:
    """Idle OpenMP threads sleep instead of spinning, unless the user set a policy or opted out.
    Has an effect only before torch is imported."""
    if not _opted_out(environ):
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        with open(os.path.join(cgroup_root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def default_threads(environ=os.environ) -> int | None:
    """The intra-op thread count to use, or None to leave torch's own choice."""
    if _opted_out(environ):
        return None
    if environ.get("OMP_NUM_THREADS", "").strip():
        try:
            return max(1, int(environ["OMP_NUM_THREADS"]))
        except ValueError:
            return None  # torch reports a malformed value itself
    return usable_cpus()


def configure_torch_threads(environ=os.environ) -> int:
    """Apply :func:`default_threads` to torch; returns the thread count torch now uses."""
    import torch

    threads = default_threads(environ)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return torch.get_num_threads()
