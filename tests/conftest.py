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
    """The tests marked ``slow`` (training runs, notebooks, process launches) first, each group in
    its collected order: pytest-xdist's workers then take the long tests early and share the short
    ones at the end, instead of one worker starting a minute-long test while the other runs out of
    work. The sort is stable and the same on every worker, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
