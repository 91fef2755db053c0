"""The league file: round trips, rating updates, and what concurrent writers and kills leave."""

import json
import multiprocessing as mp
import os
import random
import signal
import time
from collections import Counter

import pytest
from filelock import FileLock

from sp_lightning.league import registry as registry_module
from sp_lightning.league.registry import AgentRecord, LeagueRegistry, MatchRecord

# fork starts a child in milliseconds; spawn (where fork is missing) re-imports everything
CTX = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def league(tmp_path, **kwargs):
    reg = LeagueRegistry(tmp_path / "league.json", run_name="test", **kwargs)
    reg.add_agent(AgentRecord("random", "baseline", "bot:random"))
    reg.add_agent(AgentRecord("ckpt-1", "checkpoint", "checkpoint:ckpt-1", adapter_path="a/1", step=1))
    reg.add_agent(AgentRecord("ckpt-2", "checkpoint", "checkpoint:ckpt-2", step=2, parent="ckpt-1",
                              tags=["recent"], stats={"coverage": 0.5}))
    return reg


def test_missing_file_reads_empty_and_is_not_created(tmp_path):
    reg = LeagueRegistry(tmp_path / "league.json", run_name="r")
    state = reg.read()
    assert state.agents == {} and state.matches == [] and state.schema_version == 1
    assert state.metadata["run_name"] == "r" and state.metadata["best_agent"] is None
    assert not (tmp_path / "league.json").exists()


def test_round_trip_of_agents_and_matches(tmp_path):
    reg = league(tmp_path)
    recorded = reg.record_matches([(["ckpt-1", "random"], [1, -1]), (["ckpt-2", "ckpt-1"], [0, 0])],
                                  step=7, source="eval")
    assert [m.id for m in recorded] == [0, 1]
    again = LeagueRegistry(tmp_path / "league.json").read()  # a fresh object reads it all back
    assert again == reg.read()
    assert list(again.agents) == ["random", "ckpt-1", "ckpt-2"]
    assert again.agents["ckpt-2"].parent == "ckpt-1" and again.agents["ckpt-2"].stats == {"coverage": 0.5}
    assert again.matches[0] == MatchRecord(0, 7, "eval", ["ckpt-1", "random"], [1.0, -1.0],
                                           recorded[0].created_at)
    assert again.metadata["next_match_id"] == 2 and again.metadata["run_name"] == "test"
    assert json.loads((tmp_path / "league.json").read_text())["schema_version"] == 1
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "league.json").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600

    snap = reg.snapshot_dict()
    other = LeagueRegistry(tmp_path / "restored.json")
    other.restore(json.loads(json.dumps(snap)))  # as it would come back from a checkpoint
    assert other.read() == reg.read() and other.snapshot_dict() == snap


def test_agent_crud(tmp_path):
    reg = league(tmp_path)
    with pytest.raises(ValueError, match="already in the league"):
        reg.add_agent(AgentRecord("random", "fixed", "base"))
    assert reg.add_agent(AgentRecord("random", "fixed", "base"), exist_ok=True).type == "baseline"
    assert [a.id for a in reg.agents(type="checkpoint")] == ["ckpt-1", "ckpt-2"]
    assert reg.get("nobody") is None and reg.get("ckpt-1").adapter_path == "a/1"
    reg.update_agent("ckpt-1", tags=["anchor"], stats={"coverage": 0.25})
    assert reg.get("ckpt-1").tags == ["anchor"] and reg.get("ckpt-1").stats == {"coverage": 0.25}
    with pytest.raises(ValueError, match="no fields \\['colour'\\]"):
        reg.update_agent("ckpt-1", colour="red")
    reg.remove_agent("ckpt-2")
    assert [a.id for a in reg.agents()] == ["random", "ckpt-1"]
    with pytest.raises(ValueError, match="unknown agent 'ckpt-2'"):
        reg.remove_agent("ckpt-2")
    with pytest.raises(ValueError, match="type must be one of"):
        AgentRecord("x", "hero", "learner")
    reg.set_metadata(note="hello", best_step=3)
    assert reg.read().metadata["note"] == "hello" and reg.read().metadata["run_name"] == "test"


def test_schema_version_mismatch_is_refused(tmp_path):
    path = tmp_path / "league.json"
    path.write_text(json.dumps({"schema_version": 2, "metadata": {}, "agents": {}, "matches": []}))
    reg = LeagueRegistry(path)
    with pytest.raises(ValueError, match="schema_version 2 is not supported, expected 1.*newer"):
        reg.read()
    with pytest.raises(ValueError, match="schema_version 2"):
        reg.set_metadata(x=1)
    assert json.loads(path.read_text())["schema_version"] == 2  # left as it was
    with pytest.raises(ValueError, match="schema_version None"):
        LeagueRegistry(tmp_path / "other.json").restore({"metadata": {}})
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        reg.read()


def test_unknown_agent_names_it_and_writes_nothing(tmp_path):
    reg = league(tmp_path)
    before = (tmp_path / "league.json").read_text()
    with pytest.raises(ValueError, match=r"unknown agent 'ghost'; known agents: \['ckpt-1', 'ckpt-2', 'random'\]"):
        reg.record_matches([(["ckpt-1", "random"], [1, 0]), (["ckpt-1", "ghost"], [1, 0])])
    with pytest.raises(ValueError, match="one finite score per agent"):
        reg.record_matches([(["ckpt-1", "random"], [1.0, float("nan")])])
    assert (tmp_path / "league.json").read_text() == before


def test_failed_and_nested_transactions_write_nothing(tmp_path):
    reg = league(tmp_path)
    before = reg.read()
    with pytest.raises(KeyError):
        with reg.transaction() as state:
            state.metadata["half"] = True
            raise KeyError("boom")
    with pytest.raises(RuntimeError, match="nested transaction"):
        with reg.transaction():
            reg.set_metadata(inner=True)
    assert reg.read() == before


def test_history_cap_keeps_the_newest(tmp_path):
    reg = league(tmp_path, max_history=5)
    for i in range(4):
        reg.record_matches([(["ckpt-1", "random"], [1, 0])] * 2, step=i)
    state = reg.read()
    assert [m.id for m in state.matches] == [3, 4, 5, 6, 7]
    assert state.metadata["next_match_id"] == 8 and state.agents["random"].matches == 8


def test_record_matches_moves_ratings_and_counts(tmp_path):
    reg = league(tmp_path)
    reg.record_matches([(["random", "ckpt-2"], [-1, 1])])
    state = reg.read()
    winner, loser = state.agents["ckpt-2"], state.agents["random"]
    assert winner.mu > 25 > loser.mu and winner.sigma < 25 / 3 and loser.sigma < 25 / 3
    assert (winner.elo, loser.elo) == (1016.0, 984.0)  # equal Elo, K=32: +-16
    assert (winner.matches, loser.matches, state.agents["ckpt-1"].matches) == (1, 1, 0)
    assert state.metadata["best_agent"] == "ckpt-2"
    assert state.metadata["best_rating"] == pytest.approx(winner.mu - 3 * winner.sigma)

    # a three-player match: 2 > 1 > 0, pairwise Elo with K/2
    reg.record_matches([(["ckpt-1", "ckpt-2", "random"], [2, 1, 0])])
    state = reg.read()
    assert state.agents["ckpt-1"].elo > 1000 and state.agents["random"].elo < 984
    assert [state.agents[a].matches for a in ("random", "ckpt-1", "ckpt-2")] == [2, 1, 2]

    # a baseline beating everyone is never best_agent: only checkpoints are
    for _ in range(5):
        reg.record_matches([(["random", "ckpt-1"], [1, 0]), (["random", "ckpt-2"], [1, 0])])
    state = reg.read()
    assert state.agents["random"].mu > max(state.agents["ckpt-1"].mu, state.agents["ckpt-2"].mu)
    assert state.metadata["best_agent"] in ("ckpt-1", "ckpt-2")


def test_an_agent_in_several_seats_is_rated_once_by_its_mean_score_and_mirror_play_not_at_all(tmp_path):
    reg = league(tmp_path)
    before = reg.get("ckpt-1")
    reg.record_matches([(["ckpt-1", "ckpt-1"], [1, 0])])  # mirror play: counted, nobody to be rated against
    mirrored = reg.get("ckpt-1")
    assert (mirrored.mu, mirrored.sigma, mirrored.elo) == (before.mu, before.sigma, before.elo)
    assert mirrored.matches == 1
    # a seven-power table draws a member into several seats: it is one entry, scored by its mean
    reg.record_matches([(["ckpt-1", "random", "random", "random"], [3, 0, 4, 2])])
    state = reg.read()
    assert state.agents["ckpt-1"].matches == 2 and state.agents["random"].matches == 1
    assert state.agents["ckpt-1"].mu > 25.0 > state.agents["random"].mu  # 3 beats the mean of 0, 4 and 2
    assert [m.agents for m in state.matches] == [["ckpt-1", "ckpt-1"], ["ckpt-1", "random", "random", "random"]]


# -- processes ---------------------------------------------------------------------------------

AGENTS = ["a0", "a1", "a2", "a3"]
WORKERS, UPDATES = 8, 50  # 400 transactions by 8 writers at once, each rewriting the whole file


def pair(worker):
    return [AGENTS[worker % len(AGENTS)], AGENTS[(worker + 1) % len(AGENTS)]]


def _record_many(path, worker):
    # durable=False skips only the two fsyncs (half the time of the transactions on a VM
    # disk); the locking and the atomic rename under test are the same code either way
    reg = LeagueRegistry(path, max_history=5000, durable=False)
    for i in range(UPDATES):
        reg.record_matches([(pair(worker), [i % 2, 1 - i % 2])], step=i, source=f"w{worker}")


@pytest.mark.slow
def test_concurrent_writer_processes_lose_no_update(tmp_path):
    path = tmp_path / "league.json"
    reg = LeagueRegistry(path, max_history=5000)
    for a in AGENTS:
        reg.add_agent(AgentRecord(a, "checkpoint", f"checkpoint:{a}"))
    procs = [CTX.Process(target=_record_many, args=(str(path), w)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    seen = 0
    while any(p.is_alive() for p in procs):  # a lock-free reader meanwhile: always a whole file
        n = len(reg.read().matches)
        assert n >= seen
        seen = n
        time.sleep(0.1)
    for p in procs:
        p.join()
        assert p.exitcode == 0

    data = json.loads(path.read_text())  # valid JSON
    state = reg.read()
    assert sorted(m.id for m in state.matches) == list(range(WORKERS * UPDATES))
    assert state.metadata["next_match_id"] == WORKERS * UPDATES
    expected = Counter(a for w in range(WORKERS) for a in pair(w) for _ in range(UPDATES))
    assert {a: r.matches for a, r in state.agents.items()} == dict(expected)
    assert {a: r["matches"] for a, r in data["agents"].items()} == dict(expected)
    for w in range(WORKERS):  # each writer's matches are all there, in its own order
        mine = [m for m in state.matches if m.source == f"w{w}"]
        assert [m.step for m in mine] == list(range(UPDATES)) and all(m.agents == pair(w) for m in mine)
    assert not list(tmp_path.glob("*.tmp"))


PAYLOAD = 2_000_000  # characters of metadata, so that each write takes a while


def _write_forever(path, ready):
    reg = LeagueRegistry(path)
    while True:
        with reg.transaction() as state:
            n = state.metadata.get("counter", 0) + 1
            state.metadata["counter"] = n
            state.metadata["payload"] = str(n % 10) * PAYLOAD
        ready.set()


def _die_before_rename(path, ready):
    def hang(*args, **kwargs):
        ready.set()
        time.sleep(60)

    registry_module.os.replace = hang  # this child only: stop with the temp file written, lock held
    LeagueRegistry(path).set_metadata(counter=-1)


def assert_whole_state(reg, at_least):
    meta = reg.read().metadata
    assert meta["counter"] >= at_least
    assert meta["payload"] == str(meta["counter"] % 10) * PAYLOAD  # one complete write
    return meta["counter"]


def assert_lock_free(path):
    lock = FileLock(str(path) + ".lock")
    lock.acquire(timeout=5)  # raises filelock.Timeout if the dead writer's lock survived it
    lock.release()


def test_kill_mid_write_leaves_a_valid_file_and_a_free_lock(tmp_path):
    path = tmp_path / "league.json"
    reg = LeagueRegistry(path)
    rng, counter = random.Random(0), 0
    for _ in range(5):
        ready = CTX.Event()
        p = CTX.Process(target=_write_forever, args=(str(path), ready))
        p.start()
        assert ready.wait(30), "the writer never finished a first write"
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        assert p.exitcode == -signal.SIGKILL
        counter = assert_whole_state(reg, counter + 1)
        assert_lock_free(path)

    # deterministic: killed with the new file written but not yet renamed, holding the lock
    ready = CTX.Event()
    p = CTX.Process(target=_die_before_rename, args=(str(path), ready))
    p.start()
    assert ready.wait(30)
    assert list(tmp_path.glob("league.json.*.tmp")), "the temp file should be there"
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert assert_whole_state(reg, counter) == counter  # the previous state, not the dead one's
    assert_lock_free(path)
    reg.set_metadata(after="kill")  # the next writer goes ahead and sweeps the dead one's temp file
    assert reg.read().metadata["after"] == "kill" and reg.read().metadata["counter"] == counter
    assert not list(tmp_path.glob("*.tmp"))
