"""Best-response opponents (sp_lightning.league.best_responses): the exact best response to the
learner joins the league, is played by PFSP, and survives a resume."""

from __future__ import annotations

import csv
import json
import os

import pytest

from envs import make, play
from envs.tictactoe import PerfectBot
from sp_lightning.evaluation.exploitability import kuhn_exploitability, kuhn_information_states, observation_key
from sp_lightning.evaluation.tictactoe_exploitability import tictactoe_exploitability
from sp_lightning.league.best_responses import BestResponseBot, load_table, save_table
from sp_lightning.league.matchmaking import (
    BEST_RESPONSE, Candidate, LearnerInfo, MatchmakingSettings, by_agent, opponent_distribution,
)

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def uniform(batch):
    return [{move: 1.0 / len(legal) for move in legal} for _, legal in batch]


def always_first(batch):
    """A pure policy: the first legal move everywhere (the worst kind to meet its best response)."""
    return [{legal[0]: 1.0} for _, legal in batch]


def test_tictactoe_best_response_wins_what_the_exploitability_says():
    """Played as a bot against the pure policy it answers, the table wins every game in both
    seats, as the exploitability of 1.0 says a best response does."""
    result = tictactoe_exploitability(always_first)
    assert result.exploitability == pytest.approx(1.0)
    bot = BestResponseBot("tictactoe_v1", result.best_response, seed=0)

    def first(observation, legal):
        return legal[0]

    for seat in (0, 1):
        for seed in range(3):
            players = [first, first]
            players[seat] = bot
            returns = play(make("tictactoe_v1"), dict(zip(("player_0", "player_1"), players)), seed=seed)
            assert returns[f"player_{seat}"] == 1.0


def test_tictactoe_best_response_to_perfect_play_never_loses_to_it():
    """Against perfect play the best response's moves are the minimax moves: it draws."""
    from tests.test_tictactoe_exploitability import perfect

    table = tictactoe_exploitability(perfect).best_response
    bot = BestResponseBot("tictactoe_v1", table, seed=1)
    for seed in range(5):
        returns = play(make("tictactoe_v1"), {"player_0": bot, "player_1": PerfectBot(seed=seed)}, seed=seed)
        assert returns["player_0"] == 0.0


def test_kuhn_best_response_reads_every_information_state():
    result = kuhn_exploitability(uniform)
    assert set(result.best_response) == {d.info_state for d in kuhn_information_states()}
    assert result.best_response["0b"] == ["[fold]"] and result.best_response["2b"] == ["[call]"]
    for d in kuhn_information_states():
        assert observation_key(d.text + "\n\nAnswer with a move.") == d.info_state
    with pytest.raises(ValueError, match="kuhn_poker_v1 observation"):
        observation_key("Tic-Tac-Toe.")


def test_a_table_round_trips_and_a_bad_one_is_refused(tmp_path):
    path = str(tmp_path / "br.json")
    save_table(path, "kuhn_poker_v1", {"0": ["[bet]"]}, step=5, exploitability=0.25)
    assert load_table(path) == {"game": "kuhn_poker_v1", "step": 5, "exploitability": 0.25, "moves": {"0": ["[bet]"]}}
    (tmp_path / "bad.json").write_text(json.dumps({"game": "chess", "moves": {}}))
    with pytest.raises(ValueError, match="best-response table"):
        load_table(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="game expected one of"):
        BestResponseBot("chess", {})


def test_a_missing_position_plays_a_legal_move():
    bot = BestResponseBot("tictactoe_v1", {".........": ["[9]"]}, seed=0)  # no such move
    env = make("tictactoe_v1")
    env.reset(seed=0)
    legal = env.infos[env.agent_selection]["legal_actions"]
    assert {bot.act(env.observe(env.agent_selection)["text"], legal) for _ in range(50)} == set(legal)


def test_pfsp_plays_the_best_responses_the_learner_loses_to():
    learner = LearnerInfo(step=100)
    candidates = [Candidate("random_bot", "baseline"), Candidate("ckpt-000050", "checkpoint", step=50),
                  Candidate("ckpt-000100", "checkpoint", step=100),
                  Candidate("br-000050", BEST_RESPONSE, step=50, win_prob=0.9),
                  Candidate("br-000100", BEST_RESPONSE, step=100, win_prob=0.1)]
    entries = opponent_distribution(learner, candidates, MatchmakingSettings())
    shares = by_agent(e for e in entries if e.bucket == BEST_RESPONSE)
    assert sum(shares.values()) == pytest.approx(0.2 / 1.2)
    assert shares["br-000100"] > 10 * shares["br-000050"]
    without = opponent_distribution(learner, candidates[:3], MatchmakingSettings())
    assert {e.bucket for e in without} == {"mirror", "peer", "exploitable", "baseline"}


def _fit(tmp_path, config, steps, *extra):
    from sp_lightning.cli import main

    main(["fit", "--config", os.path.join(CONFIGS, config), "--config", os.path.join(CONFIGS, "overlays", "best_responses.yaml"),
          "--trainer.max_steps", str(steps),
          "--trainer.default_root_dir", str(tmp_path), "--data.league.dir", str(tmp_path / "league"),
          "--data.episodes_per_batch", "8", "--trainer.limit_val_batches", "0",
          "--data.league.evaluator", '{"every": 0}',
          "--data.league.schedule", '{"recent_every": 1, "recent_window": 10, "anchor_every": 100}',
          "--data.league.best_response_every", "2", "--data.league.matchmaking.min_checkpoints", "1",
          "--data.league.matchmaking.bucket_weights", '{"mirror": 0.1, "best_response": 0.9}',
          "--trainer.enable_progress_bar", "false",
          "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(tmp_path),
          "--trainer.callbacks", json.dumps([{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                              "init_args": {"dirpath": str(tmp_path / "ckpt"), "filename": "last",
                                                            "every_n_train_steps": 2}}]),
          *extra])


@pytest.mark.slow
@pytest.mark.parametrize("config, mixture", [("tictactoe_league_tiny.yaml", False), ("kuhn_poker_league_tiny.yaml", True)])
def test_a_league_trains_against_its_best_responses_and_resumes_with_them(tmp_path, config, mixture):
    """Also the exploitability it logs on both games: the learner's figure always, the league
    mixture's where its computation exists (Kuhn Poker)."""
    _fit(tmp_path, config, 3)
    league = json.load(open(tmp_path / "league" / "league.json"))["agents"]
    added = sorted(a for a, record in league.items() if record["type"] == "best_response")
    assert added == ["br-000002"]
    assert all(os.path.isfile(tmp_path / "league" / "best_responses" / f"{a}.json") for a in added)
    rows = _metrics(tmp_path)
    assert max(float(r.get("league/mix/best_response") or 0) for r in rows) > 0.5  # nine games in ten from step 3
    assert any(r.get("league/win_rate/best_response") for r in rows)
    learner = [float(r["league/exploitability/learner"]) for r in rows if r.get("league/exploitability/learner")]
    assert learner and all(0.0 <= value <= 1.0 for value in learner)
    assert any(r.get("league/exploitability/mixture") for r in rows) == mixture

    # the run killed at step 3: resumed from its step-2 checkpoint, the table of step 2 seated again
    _fit(tmp_path, config, 4, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    league = json.load(open(tmp_path / "league" / "league.json"))["agents"]
    assert sorted(a for a, r in league.items() if r["type"] == "best_response") == ["br-000002", "br-000004"]
    resumed = _metrics(tmp_path, newest=True)
    assert max(float(r.get("league/mix/best_response") or 0) for r in resumed) > 0.5  # the tables were seated again


def _metrics(tmp_path, newest: bool = False) -> list[dict]:
    files = sorted(tmp_path.rglob("metrics.csv"), key=os.path.getmtime)
    return list(csv.DictReader(open(files[-1] if newest else files[0])))


def test_a_game_without_a_best_response_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        _fit(tmp_path, "liars_dice_league_tiny.yaml", 1)
    assert refused.value.code == 2
    assert "best_response_every: the game 'liars_dice_v1'" in capsys.readouterr().err


def test_a_bot_that_joins_after_a_resume_continues_its_saved_stream():
    """The engine restores a bot's random stream when the bot joins after the checkpoint was
    loaded (the league seats its best responses when training starts, after the restore)."""
    from sp_lightning import build_from_config

    module, dm = build_from_config("--config", os.path.join(CONFIGS, "kuhn_poker_tiny.yaml"))
    engine = dm.build_engine(module)
    played = BestResponseBot("kuhn_poker_v1", {}, seed=3)
    played.rng.integers(100, size=7)
    engine.arena.bots["br-000002"] = played
    state = engine.state_dict()
    del engine.arena.bots["br-000002"]

    engine.load_state_dict(state)
    joined = BestResponseBot("kuhn_poker_v1", {}, seed=3)
    engine.add_bot("br-000002", joined)
    assert joined.rng.integers(10**9) == played.rng.integers(10**9)
    with pytest.raises(ValueError, match="already registered"):
        engine.add_bot("br-000002", joined)
