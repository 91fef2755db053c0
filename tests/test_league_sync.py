"""Each rank's side of the league (sp_lightning.league.sync): the checkpoints its worker serves.

A checkpoint that leaves the league stays served until every batch that may have seated it has
been trained on (batches played ahead under asynchronous collection go on with it), on a real
Hugging Face worker, for the lead (the league's own folder) and a follower (its own copy)."""

from __future__ import annotations

import os

import pytest

from sp_lightning.league.messages import Promotion
from sp_lightning.league.sync import RankSync
from sp_lightning.learners import save_learner_adapter
from sp_lightning.model import PolicySettings, load_policy
from sp_lightning.rollout import HFRolloutWorker


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicySettings())


@pytest.mark.parametrize("lead", [True, False])
def test_a_pruned_checkpoint_is_served_until_the_batches_that_may_seat_it_are_trained(tmp_path, policy, lead):
    model, tokenizer = policy

    def save_adapter(path, learner):  # SelfPlayModule.save_adapter's adapter half
        save_learner_adapter(model, path, learner)

    sync = RankSync()
    sync.attach(HFRolloutWorker(model, tokenizer), lead=lead)
    save_adapter(str(tmp_path / "ckpt-000001"), "")  # the lead's file in the league's folder
    sync.serve([Promotion("ckpt-000001", "", str(tmp_path / "ckpt-000001"))], save_adapter)
    served = sync.worker.adapter_paths["ckpt-000001"]
    sync.trained(3)
    sync.forget(["ckpt-000001"], seated_through=5)  # the producer may be playing batch 5 with it
    for index in (4, 3):
        sync.trained(index)
        assert "ckpt-000001" in sync.worker.adapter_paths and os.path.isdir(served)
        assert sync.still_served == {"ckpt-000001"}
    sync.trained(5)
    assert "ckpt-000001" not in sync.worker.adapter_paths and sync.still_served == set()
    assert os.path.isdir(served) == lead  # a follower's copy goes; the lead's file is the store's
    sync.remove_copies()


def test_a_synchronous_run_lets_a_pruned_checkpoint_go_at_once(tmp_path, policy):
    model, tokenizer = policy
    sync = RankSync()
    sync.attach(HFRolloutWorker(model, tokenizer), lead=True)
    save_learner_adapter(model, str(tmp_path / "ckpt-000001"))
    sync.worker.register_adapter("ckpt-000001", str(tmp_path / "ckpt-000001"))
    sync.trained(7)
    sync.forget(["ckpt-000001"], seated_through=7)  # the last batch played is the one trained
    assert "ckpt-000001" not in sync.worker.adapter_paths and sync.still_served == set()
