"""Exact resume: a fit killed with SIGKILL at random moments and resumed from last.ckpt each time
ends with the same weights, optimizer state and data state, bit for bit on one CPU thread, as
a fit that was never killed.

The fast profile kills 3 times (every kill must land while the fit runs); the long one runs from
    SP_RESUME_KILLS=20 python -m pytest tests/test_exact_resume.py -q
and prints its counts in the terminal summary.
"""

import os
import random
import time

import pytest
import torch

from test_e2e import CONFIGS
from tests.helpers import ForkedFit, forked_fit

pytestmark = pytest.mark.slow  # training runs killed and resumed

KILLS = int(os.environ.get("SP_RESUME_KILLS", "3"))
STEPS = 2 * KILLS + 4
COUNTS: dict[str, int] = {}


def _args(root, steps):
    """The Tic-Tac-Toe tiny config, 8 episodes a step, last.ckpt after every step, a validation
    (sampled play, which must not disturb the training streams) every 3 steps."""
    overlay = root / "overlay.yaml"
    overlay.write_text(
        "trainer:\n  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {root / 'ckpt'}, filename: last, every_n_train_steps: 1,"
        " enable_version_counter: false}\n"
    )
    return ["--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), "--config", str(overlay),
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", "3",
            "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root),
            "--data.episodes_per_batch", "8", "--data.eval.games", "4", "--data.eval.temperature", "1.0"]


def _step(path) -> int:
    try:
        return torch.load(path, weights_only=False)["global_step"]
    except Exception:  # not written yet, or being replaced
        return -1


def _run_and_kill(args, root, last, before, after_step, delay) -> tuple[bool, int | None]:
    """Start the fit in a process of its own (forked: the imports are this process's), in ``root``
    (``last`` holds step ``before``, -1 for none); once last.ckpt holds
    ``after_step``, wait ``delay`` seconds (the kill lands in a rollout, an update, a validation or
    a checkpoint write) and SIGKILL it. Returns whether the kill landed (the fit was still running)
    and the first step this fit wrote, None if it wrote none (a fit that ignored --ckpt_path would
    start again at 1; steps take far longer than the 50 ms poll)."""
    proc = ForkedFit(args, root)
    deadline = time.time() + 300
    first_written = None  # wait for this fit's own first write too: last.ckpt may hold after_step already
    while proc.poll() is None and time.time() < deadline:
        step = _step(last)
        if first_written is None and step not in (before, -1):
            first_written = step
        if first_written is not None and step >= after_step:
            break
        time.sleep(0.05)
    time.sleep(delay)
    landed = proc.poll() is None
    proc.kill()
    return landed, first_written


def test_a_fit_killed_at_random_moments_resumes_bit_for_bit(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    forked_fit(_args(reference, STEPS), reference)

    killed = tmp_path / "killed"
    killed.mkdir()
    last = killed / "ckpt" / "last.ckpt"
    rng = random.Random(0)
    kills = 0
    for kill in range(KILLS):
        args = _args(killed, STEPS)
        if last.exists():
            args += ["--ckpt_path", str(last)]
        # at most about two steps' time: the fit, with 3 or more steps to go, is still running
        start = _step(last)
        landed, first_written = _run_and_kill(args, killed, last, start, after_step=2 * kill + 1, delay=rng.uniform(0.0, 0.6))
        kills += landed
        assert first_written is not None and first_written > start, \
            f"the fit resumed at step {start} but wrote step {first_written} first"
        assert _step(last) >= 0, "after every kill last.ckpt (or its .prev) is readable"
    forked_fit(_args(killed, STEPS) + ["--ckpt_path", str(last)], killed)

    ours = torch.load(last, weights_only=False)
    theirs = torch.load(reference / "ckpt" / "last.ckpt", weights_only=False)
    assert ours["global_step"] == theirs["global_step"] == STEPS
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), f"weights differ at {key}"
    assert kills == KILLS, f"only {kills} of {KILLS} kills landed before the fit ended"
    mine, ref = ours["optimizer_states"][0]["state"], theirs["optimizer_states"][0]["state"]
    assert mine.keys() == ref.keys()
    for param in ref:
        assert all(torch.equal(mine[param][k], ref[param][k]) for k in ref[param]), "optimizer state differs"
    assert ours["SelfPlayDataModule"] == theirs["SelfPlayDataModule"]  # baselines, schedule, bots
    assert torch.equal(ours["rng_states"]["torch"], theirs["rng_states"]["torch"])
    COUNTS.update(kills=kills, steps=STEPS)
