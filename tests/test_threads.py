"""Thread defaults for a shared CPU (sp_lightning.threads)."""

import os
import subprocess
import sys

from sp_lightning.threads import default_threads, set_wait_policy, usable_cpus


def test_usable_cpus_is_the_affinity_mask_capped_by_a_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(str(tmp_path)) == affinity
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: still one thread
    assert usable_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text(f"{(affinity + 7) * 100000} 100000\n")  # a quota above the mask
    assert usable_cpus(str(tmp_path)) == affinity
    assert usable_cpus(str(tmp_path / "no_cgroup_here")) == affinity


def test_threads_follow_omp_num_threads_then_the_usable_cpus():
    assert default_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert default_threads({}) == usable_cpus()
    assert default_threads({"SP_LIGHTNING_THREADS": "torch", "OMP_NUM_THREADS": "3"}) is None
    assert default_threads({"OMP_NUM_THREADS": "lots"}) is None  # torch reports it


def test_waiting_threads_sleep_unless_the_user_chose():
    env = {}
    set_wait_policy(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    set_wait_policy(env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"
    env = {"SP_LIGHTNING_THREADS": "torch"}
    set_wait_policy(env)
    assert "OMP_WAIT_POLICY" not in env


def test_the_command_sets_the_policy_before_its_subcommand_loads_torch(tmp_path):
    """Importing the package changes nothing (tests/test_import_graph.py); starting the
    ``sp-lightning`` command sets the wait policy before the subcommand's module (and torch) loads."""
    (tmp_path / "probe_command.py").write_text(
        "import os, sys\n"
        "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n"
        "def main(args):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "SP_LIGHTNING_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    code = ("import sp_lightning.cli as cli\n"
            "cli.COMMANDS['probe'] = ('probe_command', 'a probe')\n"
            "cli.main(['probe'])\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["PASSIVE", "False"]