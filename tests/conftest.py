"""Shared fixtures, and the thread settings of a parallel run.

Under pytest-xdist (the README's ``-n 2``) each worker process gets an equal share of the CPUs as
its OpenMP threads, and idle threads sleep, unless ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` were
set: set here, before any test imports torch, and inherited by the fits and notebook kernels a
test starts. Two workers of two spinning threads each on a two-core machine ran the tiny model's
small operations at a quarter of their speed (a test of 10 s alone took 39-94 s in the suite).
"""

import os

from sp_lightning.threads import usable_cpus

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # before anything imports torch (tests.helpers does)
    _share = max(1, usable_cpus() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # vLLM's CPU engine pins its OpenMP threads to the first cores it may use ("auto"): two
    # workers' engines would share one core and leave the other idle; each worker's engines get
    # their own share of the cores instead
    _cpus = sorted(os.sched_getaffinity(0))
    _worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    _mine = _cpus[_worker * _share:(_worker + 1) * _share] if len(_cpus) >= (_worker + 1) * _share else []
    if _mine:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, _mine)))

import pytest  # noqa: E402

from tests.helpers import ScriptedOpenAIServer  # noqa: E402


def pytest_collection_modifyitems(items):
    """The tests marked ``slow`` (training runs, notebooks, process launches) first on every
    worker. pytest-xdist's ``worksteal`` (the README's) hands each of its N workers a contiguous
    Nth of this list and lets an idle worker steal from the end of another's share: so each share
    starts with its part of the slow tests (dealt round-robin) and ends with short ones. A worker
    that sorted every slow test into the first share ran them all, and the other stole them from
    its end one by one, a minute-long notebook among the last. Within a share the collected
    order stays; the order is the same on every worker, as xdist requires."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    ordered, left = [], len(items)
    for share in range(workers):
        size = left // (workers - share)  # xdist's split: the Nth of what is left, in turn
        mine = slow[share::workers]
        take = max(0, size - len(mine))
        ordered += mine + fast[:take]
        fast = fast[take:]
        left -= size
    items[:] = ordered + fast


@pytest.fixture(scope="session")
def tiny_policy():
    """One tiny model + tokenizer for the whole session (fresh copies where a test trains)."""
    from sp_lightning.model import PolicySettings, load_policy

    return load_policy(PolicySettings())


def pytest_terminal_summary(terminalreporter):
    """Counts of the hostile-completion and exact-resume tests (long profiles go in the notes)."""
    import sys

    module = sys.modules.get("test_hostile_completions")
    if module is not None and module.COUNTS:
        counts = ", ".join(f"{n} {what}" for what, n in sorted(module.COUNTS.items()))
        terminalreporter.write_line(f"hostile completions: {counts}")
    resume = sys.modules.get("test_exact_resume")
    if resume is not None and resume.COUNTS:
        terminalreporter.write_line("exact resume: " + ", ".join(f"{what} {n}" for what, n in resume.COUNTS.items()))


@pytest.fixture
def serve():
    """Starts ScriptedOpenAIServer(**kwargs) on loopback; every one started is closed after the test."""
    servers = []

    def start(**kwargs):
        servers.append(ScriptedOpenAIServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
