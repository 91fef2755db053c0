"""Scratch directories of a process killed with SIGKILL are removed by the next process that makes one."""

import os
import signal
import subprocess
import sys
import tempfile

from sp_lightning.scratch_dirs import process_temp_dir, sweep_dead

KILLED = """
import os, signal, sys
from sp_lightning.scratch_dirs import process_temp_dir
path = process_temp_dir(sys.argv[1])
open(os.path.join(path, "adapter_model.safetensors"), "wb").write(b"weights")
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_directories_of_a_killed_process_go_and_a_live_ones_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", KILLED, "sp_lightning-league-rank1-"], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    left = killed.stdout.strip()
    assert os.path.isfile(os.path.join(left, "adapter_model.safetensors"))  # SIGKILL: nothing cleaned up
    other_kind = tmp_path / "someone-elses-pid1-x"
    other_kind.mkdir()

    ours = process_temp_dir("sp_lightning-league-rank1-")
    assert not os.path.exists(left) and os.path.isdir(ours) and other_kind.is_dir()
    assert os.path.basename(ours).startswith(f"sp_lightning-league-rank1-pid{os.getpid()}-")
    assert sweep_dead(str(tmp_path), "sp_lightning-league-rank1-") == []  # ours is alive: kept
