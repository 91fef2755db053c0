"""The lead's league on disk (sp_lightning.league.store): the schedule's promotions and prunes,
adapters deleted only once no resumable checkpoint names them, and the league restored from
what a Lightning checkpoint carries."""

from __future__ import annotations

import json
import os

import pytest

from sp_lightning.league.settings import CheckpointSchedule, LeagueSettings
from sp_lightning.league.store import LeagueStore


def _settings(tmp_path) -> LeagueSettings:
    return LeagueSettings(dir=str(tmp_path / "league"), games_per_match=2,
                          schedule=CheckpointSchedule(recent_every=2, recent_window=4, anchor_every=6, elite=False))


def _save(path: str, learner: str) -> None:
    """A stand-in for SelfPlayModule.save_adapter: a directory that names its learner."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"learner": learner}, f)


def _run(store: LeagueStore, steps: range) -> list:
    promoted = []
    for step in steps:
        store.record([(["learner", "random_bot"], [1.0, -1.0])], step)
        state = store.read()
        promoted.append(store.promote(step, state, "", _save, {1: 0.5}))
        store.prune(step, state)
        store.delete_pruned()
    return promoted


def test_the_schedule_promotes_prunes_and_deletes_adapters_once_no_checkpoint_names_them(tmp_path):
    events = []
    store = LeagueStore(_settings(tmp_path), events.append)
    assert set(store.open().agents) == {"base_model", "random_bot", "chaos_bot", "learner"}
    promoted = _run(store, range(1, 9))
    assert [p.agent for p in promoted if p is not None] == ["ckpt-000002", "ckpt-000004", "ckpt-000006", "ckpt-000008"]
    assert promoted[1].path == str(tmp_path / "league" / "adapters" / "ckpt-000002") and promoted[1].learner == ""
    league = store.read()
    assert {a.id for a in league.agents.values() if a.type == "checkpoint"} == {"ckpt-000006", "ckpt-000008"}
    assert league.agents["ckpt-000008"].parent == "ckpt-000006" and league.agents["ckpt-000006"].tags == ["recent", "anchor"]
    assert league.agents["ckpt-000008"].stats == {"coverage_1": 0.5}
    assert len(league.matches) == 4, "eight games pooled by two into rated matches"
    adapters = tmp_path / "league" / "adapters"
    assert (adapters / "ckpt-000002").is_dir(), "pruned at step 6, but no checkpoint since: kept for a resume"
    store.saved(6)
    store.delete_pruned()
    assert not (adapters / "ckpt-000002").exists() and (adapters / "ckpt-000004").is_dir()  # pruned at step 8
    assert any("ckpt-000002 left the league" in e for e in events)
    store.saved(8)  # ckpt-000004, pruned at 8, is a gatekeeper of the tournament being played
    store.delete_pruned(in_play={"ckpt-000008", "ckpt-000004", "random_bot"})
    assert (adapters / "ckpt-000004").is_dir(), "its adapter is read when it first plays: kept"
    store.delete_pruned()
    assert not (adapters / "ckpt-000004").exists(), "deleted once the tournament is over"


def test_the_league_comes_back_from_its_state_dict_and_a_fresh_run_refuses_its_directory(tmp_path):
    store = LeagueStore(_settings(tmp_path), lambda text: None)
    store.open()
    _run(store, range(1, 8))
    saved = json.loads(json.dumps(store.state_dict()))  # what a Lightning checkpoint holds
    assert set(saved) == {"registry", "best_learner_rating", "pruned", "pooler"}
    assert saved["pooler"]["waiting"], "a game waits for its block of two"
    _run(store, range(8, 12))  # the run goes on, then is killed

    with pytest.raises(ValueError, match="already holds a league; resume its run with --ckpt_path"):
        LeagueStore(_settings(tmp_path), lambda text: None).open()
    resumed = LeagueStore(_settings(tmp_path), lambda text: None)
    resumed.load_state_dict(saved)
    state = resumed.open()
    assert state.to_dict() == saved["registry"]
    assert resumed.state_dict() == saved


def test_a_run_resumed_from_an_older_checkpoint_drops_the_agents_whose_adapters_are_gone(tmp_path):
    """``best.ckpt`` written at step 4 names ckpt-000002, pruned at 6 and deleted once ``last.ckpt``
    of step 6 was written: a run resumed from ``best.ckpt`` goes on without it, saying so (its
    first step had failed registering the missing adapter), and keeps every agent still on disk."""
    import logging

    store = LeagueStore(_settings(tmp_path), lambda text, level=logging.INFO: None)
    store.open()
    _run(store, range(1, 5))
    best = json.loads(json.dumps(store.state_dict()))  # best.ckpt at step 4
    _run(store, range(5, 7))
    store.saved(6)
    store.delete_pruned()
    assert not (tmp_path / "league" / "adapters" / "ckpt-000002").exists()

    events = []
    resumed = LeagueStore(_settings(tmp_path), lambda text, level=logging.INFO: events.append((text, level)))
    resumed.load_state_dict(best)
    league = resumed.open()
    assert {a.id for a in league.agents.values() if a.type == "checkpoint"} == {"ckpt-000004"}
    assert all(os.path.isdir(a.adapter_path) for a in league.agents.values() if a.adapter_path)
    ((text, level),) = events
    assert level == logging.WARNING and text.startswith("ckpt-000002 left the league on resume: its adapter ")


def test_the_waiting_games_of_a_pruned_checkpoint_are_dropped_with_it(tmp_path):
    """Games pooled by two: one game against ckpt-000002 waits for its pair when ckpt-000002 leaves
    the league (step 6); no game against it can come any more, so its block goes too, and the
    run's state stops carrying it."""
    store = LeagueStore(_settings(tmp_path), lambda text, level=None: None)
    store.open()
    _run(store, range(1, 4))  # ckpt-000002 promoted at 2
    store.record([(["learner", "ckpt-000002"], [1.0, -1.0])], 3)
    store.record([(["learner", "random_bot"], [1.0, -1.0])], 3)
    waiting = {tuple(key) for key, _ in store.state_dict()["pooler"]["waiting"]}
    assert ("ckpt-000002", "learner") in waiting
    _run(store, range(4, 7))  # pruned at 6
    waiting = {tuple(key) for key, _ in store.state_dict()["pooler"]["waiting"]}
    assert not any("ckpt-000002" in key for key in waiting) and ("learner", "random_bot") in waiting


def test_a_game_finished_after_its_checkpoint_left_the_league_rates_nobody(tmp_path):
    """Batches played ahead (asynchronous collection) can end with games seated before their
    checkpoint left: they reach the store after the prune, are counted, and rate nobody (the
    registry refuses an agent it does not hold; pooled, they would wait for ever)."""
    store = LeagueStore(_settings(tmp_path), lambda text, level=None: None)
    store.open()
    _run(store, range(1, 7))  # ckpt-000002 promoted at 2, pruned at 6
    matches = len(store.read().matches)
    late = [(["learner", "ckpt-000002"], [1.0, -1.0]), (["learner", "random_bot"], [1.0, -1.0])]
    assert store.record(late, 7) == 1
    assert store.record(late, 7) == 1  # the second random_bot game completes its block of two
    assert [m.agents for m in store.read().matches[matches:]] == [["learner", "random_bot"]]
    assert not any("ckpt-000002" in key for key, _ in store.state_dict()["pooler"]["waiting"])
