"""Data-parallel fits on real processes (Lightning's DDP strategy on gloo, torchrun for two
"nodes" on loopback): the gradient of N ranks is the gradient of one rank on all their records,
no rank can leave another waiting, the league has one owner, and a killed run resumes exactly.

A fit of several ranks is ``sp-lightning fit`` run from this process with Lightning's
``ddp_fork`` (the DDP strategy, each rank a process forked from this one: real processes on gloo,
without importing every package again in each). FSDP2's strategy has no fork launcher: its ranks
are forked from this process and each told its rank by the environment, as torchrun tells it
(``tests.helpers.ForkedRanks``; so are the ranks of the non-finite test, each left to end by
itself), except in the sharded-gradient test, which runs the command whose launcher starts rank 1
by running it again. The command runs in a subprocess only where its own process start is the
point: that launcher, and torchrun. The fits killed with
SIGKILL are processes of their own forked from this one (``tests.helpers.ForkedFit``), killed
with every rank at once. A one-rank fit they are compared with runs in this process.
``tests/distributed_doubles.py`` holds the recorder callback and the arena that replays recorded
records, which the fits load by class path.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time

import pytest
import torch
import yaml

from tests.helpers import ForkedFit, ForkedRanks, forked_fit, free_ports

pytestmark = pytest.mark.slow  # several multi-process fits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
FIT = [sys.executable, "-m", "sp_lightning.cli", "fit"]


def _yaml(value) -> str:
    return json.dumps(value)  # JSON is YAML


def _overlay(root, devices: int, extra: dict | None = None) -> str:
    """Trainer settings of a test fit: ``devices`` CPU processes (DDP when more than one), the
    recorder, no logger; ``extra`` is merged in (nested dicts replace whole keys)."""
    extra = json.loads(json.dumps(extra or {}))
    callbacks = extra.get("trainer", {}).pop("callbacks", [])
    config = {
        "trainer": {"accelerator": "cpu", "devices": devices, "strategy": "ddp" if devices > 1 else "auto",
                    "default_root_dir": str(root), "logger": False, "enable_checkpointing": bool(callbacks),
                    "num_sanity_val_steps": 0, "limit_val_batches": 0, "enable_progress_bar": False,
                    "callbacks": [{"class_path": "tests.distributed_doubles.RankRecorder",
                                   "init_args": {"dir": str(root)}}, *callbacks]},
    }
    for section, values in extra.items():
        config.setdefault(section, {}).update(values)
    path = root / "overlay.yaml"
    path.write_text(_yaml(config))
    return str(path)


def _fit(config: str, root, devices: int, extra: dict | None = None, *args: str, timeout: int = 600,
         fork: bool = False):
    """``sp-lightning fit`` on ``devices`` ranks, in ``root``; ranks of its own: in a subprocess
    (Lightning starts the other ranks by running the same command again), or with ``fork`` from
    this process (Lightning's ``ddp_fork``: the same DDP strategy, its ranks forked from this
    process, so no rank imports the packages again; FSDP2, which has no fork launcher: each rank
    forked from this process and told its rank by the environment, as torchrun tells it)."""
    root.mkdir(parents=True, exist_ok=True)
    arguments = ["--config", os.path.join(CONFIGS, config), "--config", _overlay(root, devices, extra), *args]
    if devices == 1:
        _fit_in_this_process(root, arguments)
        return
    if fork and _is_sharded(extra):  # ModelParallelStrategy has no fork launcher: ranks forked here
        forked_fit(arguments, root, timeout, ranks=devices)
        return
    if fork:
        _fit_in_this_process(root, [*arguments, "--trainer.strategy", "ddp_fork"])
        return
    result = subprocess.run([*FIT, *arguments], env=ENV, cwd=root, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def _fit_in_this_process(root, arguments: list[str]) -> None:
    """A one-rank fit needs no process of its own: ``sp-lightning fit`` here, in ``root`` and on
    ENV's one thread (as the subprocesses run), so its numbers are the ones a subprocess gets."""
    from sp_lightning.cli import main

    threads, cwd = torch.get_num_threads(), os.getcwd()
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # read by the command's thread set-up
    os.chdir(root)
    try:
        main(["fit", *arguments])
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(threads)


def _lines(root, rank: int) -> list[dict]:
    with open(root / f"rank{rank}.jsonl") as f:
        return [json.loads(line) for line in f]


# ---- the gradient: N ranks x B records == 1 rank x N*B records -------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """32 records of Kuhn Poker played by the tiny model (real games, credit assigned), pickled."""
    from sp_lightning import build_from_config

    module, dm = build_from_config("--config", os.path.join(CONFIGS, "kuhn_poker_tiny.yaml"),
                                   "--data.episodes_per_batch", "16")
    engine = dm.build_engine(module)
    engine.start()
    try:
        records = engine.next_batch().records
    finally:
        engine.close()
    assert len(records) >= 16 and len({r.advantage for r in records}) > 1
    path = tmp_path_factory.mktemp("records") / "records.pkl"
    with open(path, "wb") as f:
        pickle.dump(records, f)
    return str(path), len(records)


def _replay(records: str, shares=None, nonfinite_rank=None, micro_batch_size: int = 4) -> dict:
    """Config keys that make every batch the recorded records (split by ``shares``), trained in
    micro-batches of ``micro_batch_size`` records: one optimizer step per batch."""
    return {"data": {"arena": {"class_path": "tests.distributed_doubles.RecordedRecordsArena",
                               "init_args": {"records": records, "shares": shares, "nonfinite_rank": nonfinite_rank}}},
            "model": {"micro_batch_size": micro_batch_size}}


def _gradients(root, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(root / f"grad-rank{rank}.pt")


def _assert_close(ours: dict, theirs: dict, tolerance: float = 1e-5) -> None:
    assert ours.keys() == theirs.keys() and ours
    worst = max(float((ours[k] - theirs[k]).abs().max()) for k in ours)
    assert worst <= tolerance, f"gradients differ by up to {worst:.3g}"
    assert any(float(g.abs().max()) > 1e-4 for g in ours.values()), "a gradient of zeros proves nothing"


@pytest.fixture(scope="module")
def alone(tmp_path_factory, recorded):
    """The first gradient of one rank training on every recorded record (micro-batches of 4)."""
    root = tmp_path_factory.mktemp("alone")
    _fit("kuhn_poker_tiny.yaml", root, 1, _replay(recorded[0]), "--trainer.max_steps", "1")
    return _gradients(root, 0)


def test_two_ranks_give_the_gradient_of_one_rank_training_on_both_ranks_records(tmp_path, recorded, alone):
    path, count = recorded
    pair = tmp_path / "two"
    _fit("kuhn_poker_tiny.yaml", pair, 2, _replay(path), "--trainer.max_steps", "1", fork=True)
    # each rank trained on its half (several micro-batches each), the loss normalised over both
    assert [line["records"] for line in _lines(pair, 0) + _lines(pair, 1)] == [(count + 1) // 2, count // 2]
    for rank in (0, 1):
        _assert_close(_gradients(pair, rank), alone)
    assert _lines(pair, 0)[0]["weights"] == _lines(pair, 1)[0]["weights"], "the ranks stepped alike"


def test_gae_on_two_ranks_gives_the_gradient_of_one_rank_value_heads_included(tmp_path, recorded):
    """GAE credit (a value head trained with the policy): each rank takes whole episodes (a
    trajectory never straddles two ranks, as in a real fit where each rank plays its own), and
    the gradient of every weight, the value head's among them, is the one-rank gradient; after
    two steps (the second's advantages from the trained head) both ranks hold the same weights."""
    path, count = recorded
    with open(path, "rb") as f:
        records = pickle.load(f)
    episodes = sorted({r.trajectory.split("/")[0] for r in records})
    shares = [[i for i, r in enumerate(records) if episodes.index(r.trajectory.split("/")[0]) % 2 == rank]
              for rank in (0, 1)]
    gae = {"class_path": "sp_lightning.credit.GAE", "init_args": {"lam": 0.9}}
    alone, pair = tmp_path / "one", tmp_path / "two"
    one, two = _replay(path), _replay(path, shares=shares)
    one["data"]["credit"] = two["data"]["credit"] = gae
    _fit("kuhn_poker_tiny.yaml", alone, 1, one, "--trainer.max_steps", "2")
    _fit("kuhn_poker_tiny.yaml", pair, 2, two, "--trainer.max_steps", "2", fork=True)
    gradients = _gradients(alone, 0)
    assert any(name.startswith("value_heads.") for name in gradients)
    for rank in (0, 1):
        _assert_close(_gradients(pair, rank), gradients)
    assert [line["weights"] for line in _lines(pair, 0)] == [line["weights"] for line in _lines(pair, 1)]


def test_a_rank_with_no_records_takes_part_and_nobody_waits(tmp_path, recorded, alone):
    """Rank 1 has nothing to train on while rank 0 runs all its micro-batches: one gradient sum
    per step (not one per backward pass), so the ranks' different counts cannot deadlock."""
    path, count = recorded
    pair = tmp_path / "two"
    _fit("kuhn_poker_tiny.yaml", pair, 2, _replay(path, shares=[list(range(count)), []]), "--trainer.max_steps", "2",
         fork=True)
    assert [line["records"] for line in _lines(pair, 1)] == [0, 0]
    for rank in (0, 1):
        _assert_close(_gradients(pair, rank), alone)
    assert [line["weights"] for line in _lines(pair, 0)] == [line["weights"] for line in _lines(pair, 1)]


def test_a_learner_without_records_in_a_step_is_not_moved_by_its_optimizer_state(tmp_path, recorded):
    """Two learners with AdamW and weight decay: ``b`` trains in step 1, only ``a`` in step 2.
    As on one process, ``b`` has no gradient in step 2 on either rank, so AdamW leaves it as it
    was (a zero gradient from the ranks' sum would move it by its momentum and the decay)."""
    path, _ = recorded
    learners = {"a": {"roles": ["*"]}, "b": {"roles": []}}
    extra = _replay(path)
    extra["data"]["arena"]["init_args"]["learner_by_step"] = ["b", "a"]
    extra["model"].update(learners=learners, optimizer={"weight_decay": 0.1})
    _fit("kuhn_poker_tiny.yaml", tmp_path, 2, extra, "--trainer.max_steps", "2", fork=True)
    for rank in (0, 1):
        first, second = (line["learner_weights"] for line in _lines(tmp_path, rank))
        assert second["b"] == first["b"], f"rank {rank}: learner b moved in a step without its records"
        assert second["a"] != first["a"], "learner a trained"
    assert _lines(tmp_path, 0)[1]["learner_weights"] == _lines(tmp_path, 1)[1]["learner_weights"]


def test_a_nonfinite_loss_on_one_rank_skips_the_step_on_every_rank(tmp_path, recorded):
    """Rank 1's loss is NaN at every step: every rank skips every step (one decision, from the
    summed loss), and after ``max_nonfinite_steps`` in a row both stop with the error that says
    so, rather than one waiting for the other."""
    path, _ = recorded
    pair = tmp_path / "two"
    pair.mkdir()
    arguments = ["--config", os.path.join(CONFIGS, "kuhn_poker_tiny.yaml"),
                 "--config", _overlay(pair, 2, _replay(path, nonfinite_rank=1)), "--trainer.max_steps", "2",
                 "--model.optimizer.max_nonfinite_steps", "3"]
    ranks = ForkedRanks(arguments, pair, 2)
    codes = [rank.wait(300) for rank in ranks.ranks]  # each rank ends by itself: none is ended for it
    if None in codes:
        ranks.kill()
    assert None not in codes and all(code != 0 for code in codes), f"exit codes {codes}:\n{ranks.tail()}"
    for rank in ranks.ranks:
        assert "RuntimeError: 3 optimizer steps in a row had a non-finite loss" in rank.tail(), rank.tail()
    zero, one = _lines(pair, 0), _lines(pair, 1)
    assert len(zero) == len(one) >= 2
    assert {line["step"] for line in zero + one} == {0}, "no rank took an optimizer step"
    assert len({line["weights"] for line in zero + one}) == 1, "the weights never moved on either rank"
    assert not list(pair.glob("grad-rank*.pt")), "no optimizer step was taken on any rank"


# ---- FSDP: the frozen base sharded over the ranks (ModelParallelStrategy on gloo) -----------------
with open(os.path.join(CONFIGS, "overlays", "fsdp2_cpu.yaml")) as _f:
    SHARDED = yaml.safe_load(_f)  # the shipped overlay: ModelParallelStrategy


def _is_sharded(extra: dict | None) -> bool:
    return (extra or {}).get("trainer", {}).get("strategy") == SHARDED["trainer"]["strategy"]


def _sharded(extra: dict) -> dict:
    merged = json.loads(json.dumps(extra))
    for block, settings in SHARDED.items():
        merged.setdefault(block, {}).update(settings)
    return merged


def test_a_sharded_base_gives_the_gradient_of_one_rank_even_when_a_rank_has_no_records(tmp_path, recorded):
    """FSDP2 over two ranks, the frozen base sharded and the adapter whole: rank 0 trains on
    every record in several micro-batches while rank 1 has none, so rank 1 runs filler passes
    (every pass of a sharded model is a collective); the adapter's gradient is the one-process
    gradient on all the records, and the ranks step alike."""
    path, count = recorded
    alone, pair = tmp_path / "one", tmp_path / "two"
    kl = ("--model.loss.kl.coef", "0.05")  # the reference forward too: one more pass to keep in step
    _fit("kuhn_poker_tiny.yaml", alone, 1, _replay(path), "--trainer.max_steps", "2", *kl)
    _fit("kuhn_poker_tiny.yaml", pair, 2, _sharded(_replay(path, shares=[list(range(count)), []])),
         "--trainer.max_steps", "2", *kl, timeout=300)
    assert [line["records"] for line in _lines(pair, 1)] == [0, 0]
    assert [line["sharded"] for line in _lines(pair, 0)] == [True, True]
    for rank in (0, 1):
        _assert_close(_gradients(pair, rank), _gradients(alone, 0))
    assert [line["weights"] for line in _lines(pair, 0)] == [line["weights"] for line in _lines(pair, 1)]


# ---- the league under DDP ---------------------------------------------------------------------
RECENT_EVERY, RECENT_WINDOW, ANCHOR_EVERY = 2, 4, 3
"""The league fits' schedule: a checkpoint every 2 steps, those of the last 4 kept, an anchor every
3 (kept for good), so that 8 steps see checkpoints leave the window and an anchor outlive it."""


def _league_fit(config: str, root, steps: int, *args: str, devices: int = 2):
    extra = {"data": {"episodes_per_batch": 16, "eval": {"games": 8}}}
    schedule = {"recent_every": RECENT_EVERY, "recent_window": RECENT_WINDOW, "anchor_every": ANCHOR_EVERY}
    return _fit(config, root, devices, extra, "--trainer.max_steps", str(steps),
                "--data.league.dir", str(root / "league"), "--data.league.games_per_match", "1",
                "--data.league.schedule", json.dumps(schedule),
                "--data.league.evaluator", '{"every": 4, "games_per_seat": 4}', *args, fork=True)


@pytest.mark.parametrize("config", ["kuhn_poker_league_tiny.yaml", "tictactoe_league_tiny.yaml"])
def test_a_two_rank_league_fit_has_one_league_fed_by_both_ranks(tmp_path, config):
    from sp_lightning.league.registry import LeagueRegistry

    steps = 8  # checkpoints at 2..8, the window keeping 6 and 8, anchors at 3 and 6
    # Kuhn Poker's best responses are cheap (12 states): rank 0 computes them, both ranks play them
    best_responses = "2" if config.startswith("kuhn") else "0"
    _league_fit(config, tmp_path, steps, "--data.league.exploitability_every", "0",
                "--data.league.best_response_every", best_responses)
    zero, one = _lines(tmp_path, 0), _lines(tmp_path, 1)
    assert [line["step"] for line in zero] == [line["step"] for line in one] == list(range(1, steps + 1))
    for a, b in zip(zero, one):
        assert a["weights"] == b["weights"], f"step {a['step']}: the ranks' weights differ"
        assert a["games"] != b["games"], f"step {a['step']}: both ranks played the same games"
        assert a["league"] == b["league"], f"step {a['step']}: the ranks see different leagues"
        assert not b["evaluator_running"], "only rank 0 runs the evaluator"
    assert any(line["evaluator_running"] for line in zero), "rank 0 ran the evaluator"

    league = LeagueRegistry(tmp_path / "league" / "league.json").read()
    checkpoints = sorted(a.step for a in league.agents.values() if a.type == "checkpoint")
    assert len(checkpoints) == len(set(checkpoints)), "no agent twice"
    expected = ({s for s in range(RECENT_EVERY, steps + 1, RECENT_EVERY) if steps - s < RECENT_WINDOW}
                | set(range(ANCHOR_EVERY, steps + 1, ANCHOR_EVERY)))
    assert expected == {3, 6, 8}
    elites = {a.step for a in league.agents.values() if "elite" in a.tags}
    assert set(checkpoints) == expected | elites
    # every game against a league member was rated once (games_per_match 1): both ranks' games
    trained = [m for m in league.matches if m.source == "train"]
    assert len(trained) == sum(line["rated_games"] for line in zero + one)
    assert sum(line["rated_games"] for line in one) > 0
    assert list((tmp_path / "league" / "evaluations").glob("*.result.json")), "the evaluator's results landed"
    if best_responses != "0":
        assert {"br-000002", "br-000004", "br-000006"} <= set(zero[-1]["league"])
        for lines in (zero, one):  # every rank seats them as bots
            assert any(p.startswith("bot:br-") for line in lines for seats in line["seats"] for p in seats)


def test_a_two_rank_league_with_an_exploiter_resets_it_alike_on_both_ranks(tmp_path):
    """The main exploiter succeeds at once every few steps: its snapshot joins the one league, and
    both ranks reset it to the same fresh adapter (the weights stay identical on both ranks)."""
    from sp_lightning.league.registry import LeagueRegistry

    with open(os.path.join(CONFIGS, "overlays", "exploiters.yaml")) as f:
        exploiters = yaml.safe_load(f)
    exploiters["data"]["league"]["exploiters"].update(min_games=4, success_win_rate=0.01, log_every=1)
    exploiters["data"].update(episodes_per_batch=16, eval={"games": 8})
    steps = 6
    _fit("kuhn_poker_league_tiny.yaml", tmp_path, 2, exploiters, "--trainer.max_steps", str(steps),
         "--data.league.dir", str(tmp_path / "league"), "--data.league.evaluator", '{"every": 0}',
         "--data.league.exploitability_every", "0", fork=True)
    zero, one = _lines(tmp_path, 0), _lines(tmp_path, 1)
    assert [line["weights"] for line in zero] == [line["weights"] for line in one]
    assert len(zero) == steps
    league = LeagueRegistry(tmp_path / "league" / "league.json").read()
    snapshots = [a for a in league.agents.values() if "exploiter" in a.tags]
    assert snapshots and len({a.id for a in snapshots}) == len(snapshots)


def test_an_imitation_learner_trains_alike_on_two_ranks_each_filling_its_own_buffer(tmp_path):
    """A student imitating RandomBot beside the main learner: each rank's buffer takes its own
    games' moves, both learners' weights stay identical on both ranks, and the student moves."""
    learners = {"main": {"roles": ["*"]}, "student": {"imitate": {"teacher": "bot:random", "size": 64, "batch": 16}}}
    _fit("kuhn_poker_tiny.yaml", tmp_path, 2, {"model": {"learners": learners}, "data": {"episodes_per_batch": 8}},
         "--trainer.max_steps", "3", fork=True)
    zero, one = _lines(tmp_path, 0), _lines(tmp_path, 1)
    assert len(zero) == len(one) == 3
    assert [line["weights"] for line in zero] == [line["weights"] for line in one]
    assert zero[0]["weights"] != zero[-1]["weights"]
    assert all(a["games"] != b["games"] for a, b in zip(zero, one)), "each rank plays (and imitates) its own games"
    assert all(line["records"] >= 16 for line in zero + one), "each rank draws the student's batch from its buffer"


# ---- two nodes on loopback ----------------------------------------------------------------------
def test_two_nodes_on_loopback_with_torchrun(tmp_path):
    """``trainer.num_nodes: 2``, one process per "node", each started by its own torchrun (what
    a cluster's launcher does on each machine), the nodes meeting at one address on loopback."""
    (port,) = free_ports(1)
    config = os.path.join(CONFIGS, "kuhn_poker_league_tiny.yaml")
    overlay = _overlay(tmp_path, 1, {"trainer": {"num_nodes": 2, "strategy": "ddp"},
                                      "data": {"episodes_per_batch": 16, "eval": {"games": 8}}})
    nodes = []
    for node in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
                   "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                   "-m", "sp_lightning.cli", "fit", "--config", config, "--config", overlay,
                   "--trainer.max_steps", "6", "--data.league.dir", str(tmp_path / "league")]
        nodes.append(subprocess.Popen(command, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in "".join(outputs)
    zero, one = _lines(tmp_path, 0), _lines(tmp_path, 1)
    assert len(zero) == len(one) == 6
    assert all(a["weights"] == b["weights"] and a["games"] != b["games"] for a, b in zip(zero, one))


# ---- exact resume under DDP -----------------------------------------------------------------------
def _last_step(path) -> int:
    try:
        return torch.load(path, weights_only=False)["global_step"]
    except Exception:  # not written yet, or being replaced
        return -1


@pytest.mark.parametrize("devices,sharded", [(1, False), (2, False), (2, True)], ids=["1-rank", "2-ddp", "2-fsdp"])
def test_a_league_fit_killed_with_sigkill_resumes_bit_for_bit(tmp_path, devices, sharded):
    steps = 8
    checkpoints = {"trainer": {"callbacks": [
        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
         "init_args": {"dirpath": "ckpt", "filename": "last", "every_n_train_steps": 1,
                       "enable_version_counter": False}}]},
        "data": {"episodes_per_batch": 8, "eval": {"games": 8}}}
    if sharded:  # the shipped FSDP2 overlay (its checkpoints: one file, the adapter only)
        checkpoints = _sharded(checkpoints)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    common = ["--trainer.max_steps", str(steps), "--data.league.schedule",
              '{"recent_every": 2, "recent_window": 4, "anchor_every": 6}',
              "--data.league.evaluator", '{"every": 0}', "--data.league.games_per_match", "1",
              "--data.league.best_response_every", "2"]  # bots that join mid-run, their streams resumed too
    _fit("kuhn_poker_league_tiny.yaml", reference, devices, checkpoints, *common,
         "--data.league.dir", str(reference / "league"), fork=True)  # the straight run

    killed.mkdir()
    arguments = ["--config", os.path.join(CONFIGS, "kuhn_poker_league_tiny.yaml"),
                 "--config", _overlay(killed, devices, checkpoints), *common, "--data.league.dir", str(killed / "league")]
    # processes of their own, forked from this one (no imports again): FSDP2's two ranks each
    # forked and told its rank, as torchrun does; DDP's one process forking its ranks (ddp_fork)
    ranks = devices if sharded else 0
    arguments += ["--trainer.strategy", "ddp_fork"] if devices > 1 and not sharded else []
    proc = ForkedRanks(arguments, killed, ranks) if ranks else ForkedFit(arguments, killed)
    last = killed / "ckpt" / "last.ckpt"
    deadline = time.time() + 300
    while _last_step(last) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.kill()  # SIGKILL to every rank at once, as a cluster's scheduler stops a job
    killed_at = _last_step(last)
    assert 3 <= killed_at < steps, proc.tail()
    forked_fit([*arguments, "--ckpt_path", str(last)], killed, ranks=ranks)

    ours = torch.load(last, weights_only=False)
    theirs = torch.load(reference / "ckpt" / "last.ckpt", weights_only=False)
    assert ours["global_step"] == theirs["global_step"] == steps
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), f"weights differ at {key}"
    assert ours["SelfPlayDataModule"] == theirs["SelfPlayDataModule"]  # every rank's games and streams
    if devices > 1:
        assert len(ours["SelfPlayDataModule"]["ranks"]) == devices
    for a, b in zip(*(s if devices > 1 else [s] for s in (ours["rng_states"], theirs["rng_states"]))):
        assert torch.equal(a["torch"], b["torch"])

    def league(checkpoint, root):
        callback = next(v for k, v in checkpoint["callbacks"].items() if k.startswith("LeagueCallback"))
        state = callback["registry"]
        agents = {k: {f: (os.path.relpath(v, root) if f == "adapter_path" and v else v)
                      for f, v in a.items() if f != "created_at"} for k, a in state["agents"].items()}
        matches = [(m["step"], m["agents"], m["scores"]) for m in state["matches"]]
        return agents, matches, callback["pooler"]

    ours_league, theirs_league = league(ours, killed), league(theirs, reference)
    assert ours_league[1], "games were rated"
    assert ours_league == theirs_league, "the same league: agents, ratings, every match and pending blocks"
    if sharded:  # the league's adapter of the last step, saved from the sharded model, is the
        # checkpoint's trained weights, whole, and loads with peft as any adapter does
        from peft import PeftModel

        from sp_lightning import build_from_config

        module, _ = build_from_config("--config", os.path.join(CONFIGS, "kuhn_poker_league_tiny.yaml"))
        loaded = dict(PeftModel.from_pretrained(module.model.unload(), killed / "league" / "adapters" /
                                                f"ckpt-{steps:06d}").named_parameters())
        for key, value in ours["state_dict"].items():
            if key.startswith("value_heads."):  # the recipe's value head (credit.GAE): no part of the adapter
                continue
            assert torch.equal(loaded[key.removeprefix("model.")], value), key
    # the resumed lines (killed_at+1..steps) of each rank match the reference's
    for rank in range(devices):
        assert {line["sharded"] for line in _lines(killed, rank)} == {sharded}
        mine = {line["step"]: line for line in _lines(killed, rank)}
        ref = {line["step"]: line for line in _lines(reference, rank)}
        for step in range(killed_at + 1, steps + 1):
            assert mine[step]["weights"] == ref[step]["weights"] and mine[step]["games"] == ref[step]["games"]
