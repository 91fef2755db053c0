"""``sp-lightning fit --config configs/tictactoe_vllm_tiny.yaml`` on a real vLLM engine (vLLM's
CPU build, in `.venv-vllm`): a new learner version served every step, the asynchronous fit within
its lag bound, and an imitation learner playing its own seats as its own adapter. Each fit starts
an engine of its own, in this process."""

import json
import os

import pytest
import torch

from tests.helpers import tensorboard_events
from tests.vllm_helpers import LOGPROB_TOLERANCE


def _fit_vllm_config(tmp_path, steps: int, *overrides: str):
    """``sp-lightning fit --config configs/tictactoe_vllm_tiny.yaml`` for ``steps`` steps (no
    validation, no checkpoints, every step logged), run in this process from the repository's
    root (a process of its own would only add its imports: the engine core is a process of
    vLLM's own either way); returns its TensorBoard events."""
    from sp_lightning.cli import main

    pytest.importorskip("vllm")
    command = ["fit", "--config", "configs/tictactoe_vllm_tiny.yaml",
               "--trainer.max_steps", str(steps), "--trainer.log_every_n_steps", "1",
               "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path),
               "--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false",
               "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "0", *overrides]
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        main(command)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)  # the command sets the process's thread count
    return tensorboard_events(tmp_path / "tb")


def test_fit_with_the_vllm_config_serves_a_new_learner_version_every_step(tmp_path):
    """``sp-lightning fit --config configs/tictactoe_vllm_tiny.yaml``, four steps: each batch is
    played by the version the previous optimizer step made, loaded into the engine as a new
    adapter (its load time logged), and trained with the importance correction."""
    events = _fit_vllm_config(tmp_path, 4)
    versions = [e.value for e in events.Scalars("rollout/policy_version")]
    assert versions == [0.0, 1.0, 2.0, 3.0]
    assert all(e.value > 0 for e in events.Scalars("rollout/adapter_load_seconds"))
    # the loss corrects for vLLM being another engine (truncated importance sampling), and the
    # trainer/sampler gap it corrects for is logged: float32 both, so a few 1e-6
    assert all(e.value < LOGPROB_TOLERANCE for e in events.Scalars("train/sampler_mismatch"))
    assert all(abs(e.value - 1) < 1e-3 for e in events.Scalars("train/tis_weight_mean"))


def test_async_fit_plays_on_vllm_while_the_trainer_steps_within_the_lag_bound(tmp_path):
    """The same config with ``data.async_rollouts``: batches are played by the engine while the
    trainer steps, so records reach the trainer one or two versions old (never more than
    ``max_policy_lag``), and the importance weights correct for it."""
    events = _fit_vllm_config(tmp_path, 5, "--data.async_rollouts",
                              '{"enabled": true, "queue_size": 1, "max_policy_lag": 2}')
    lags = [e.value for e in events.Scalars("rollout/policy_lag_max")]
    assert len(lags) == 5 and max(lags) <= 2 and max(lags) >= 1
    assert all(e.value == 0 for e in events.Scalars("rollout/dropped_records_total"))
    for name in ("rollout/queue_depth", "rollout/wait_seconds", "rollout/running_requests", "rollout/policy_lag/1"):
        assert events.Scalars(name), name
    weights = [e.value for e in events.Scalars("train/tis_weight_mean")]
    assert all(0 < w <= 2.0 for w in weights)  # the cap, loss.tis_cap
    # a record played by an older version differs from what the trainer computes now (unlike the
    # synchronous fit's few 1e-6): that gap is what the weights correct
    assert max(e.value for e in events.Scalars("train/sampler_mismatch")) > LOGPROB_TOLERANCE
    assert len(events.Histograms("rollout/policy_lag")) == 5


def test_an_imitation_learner_trains_and_plays_its_seats_as_its_own_adapter_on_vllm(tmp_path):
    """NFSP on the vLLM backend: an average learner imitating the main learner's moves (records
    made after play, so backend-free) trains every step, and every step plays mirror games' second
    seats (``imitate.anticipatory``), which only its own adapter in the engine can answer."""
    learners = {"main": {"roles": ["*"]},
                "average": {"imitate": {"teacher": "learner:main", "size": 500, "batch": 32, "anticipatory": 0.5}}}
    events = _fit_vllm_config(tmp_path, 3, "--model.learners", json.dumps(learners))
    nll = [e.value for e in events.Scalars("train/average/imitation_nll")]
    assert len(nll) == 3 and all(0 < value < 20 for value in nll)
    buffer = [e.value for e in events.Scalars("imitation/average/buffer")]
    assert buffer == sorted(buffer) and buffer[0] > 0
    tags = events.Tags()["scalars"]
    assert "train/main/pg_loss" in tags and "train/average/pg_loss" not in tags
    played = [e.value for e in events.Scalars("imitation/average/played")]
    assert len(played) == 3 and all(value > 0 for value in played)


