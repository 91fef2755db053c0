"""The SLURM launch (docs/slurm/fit_cpu.sbatch, the CPU twin of docs/slurm/fit.sbatch) on a
reachable SLURM cluster: srun starts one task per rank, Lightning reads the SLURM environment,
and a two-rank league fit finishes with one league. Skipped where no SLURM controller answers
(``sinfo``): this project's CI machines have none; a laptop with ``slurm-wlm`` set up for one
node runs it."""

import os
import shutil
import subprocess

import pytest

from sp_lightning.league.registry import LeagueRegistry

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _slurm_answers() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _slurm_answers(), reason="no SLURM controller answers here (sinfo)")
def test_the_sbatch_script_runs_a_two_rank_league_fit(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "RUN": str(run), "STEPS": "6"}
    done = subprocess.run(["sbatch", "--wait", f"--output={tmp_path}/job-%j.out", "docs/slurm/fit_cpu.sbatch"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    output = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert done.returncode == 0, done.stderr + output[-3000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in output and "SLURM auto-requeueing enabled" in output
    assert "`Trainer.fit` stopped: `max_steps=6` reached." in output
    league = LeagueRegistry(run / "league" / "league.json").read()
    assert league.matches, "both ranks' games were rated in the one league"
