"""A league over several games (``data.games`` with more than one): exact figures and best
responses for each game that has them, a best response seated only in its own game, per-game
metric names, and the refusals that name the key when no game has what a setting asks for."""

from __future__ import annotations

import csv
import json
import os
import random

import pytest

from sp_lightning.games import GameSettings
from sp_lightning.league import best_responses
from sp_lightning.league.exact import check_games
from sp_lightning.league.matchmaking import MatchmakingSettings
from sp_lightning.league.messages import EvaluatorResult, GatekeeperResult
from sp_lightning.league.metrics import evaluation, per_game
from sp_lightning.league.registry import AgentRecord
from sp_lightning.league.sampler import LeagueSampler
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.types import LEARNER_ID

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
KUHN, TICTACTOE, LIARS_DICE = (GameSettings(id=g) for g in ("kuhn_poker_v1", "tictactoe_v1", "liars_dice_v1"))


@pytest.mark.parametrize("key", ["best_response_every", "exploitability_every"])
def test_a_setting_is_refused_only_when_no_game_of_the_run_has_it(key):
    settings = LeagueSettings(dir="unused", **{key: 5})
    with pytest.raises(ValueError, match=rf"^data.league.{key}: the game 'liars_dice_v1' has no exact "):
        check_games(settings, [LIARS_DICE])
    with pytest.raises(ValueError, match=rf"^data.league.{key}: none of the games \['liars_dice_v1', 'liars_dice_v1'\]"):
        check_games(settings, [LIARS_DICE, LIARS_DICE])
    check_games(settings, [LIARS_DICE, KUHN])  # one game has it: done there, skipped in the other
    check_games(LeagueSettings(dir="unused"), [LIARS_DICE])  # not asked for: nothing to refuse
    hands = GameSettings(id="kuhn_poker_v1", env_kwargs={"num_hands": 3})  # a game the exact figures do not cover
    with pytest.raises(ValueError, match=rf"^data.league.{key}: the game 'kuhn_poker_v1' has no exact .* "
                                         r"\(kuhn_poker_v1 with num_hands 3 \(OpenSpiel's Kuhn Poker is one hand\)\)"):
        check_games(settings, [hands])
    check_games(settings, [hands, TICTACTOE])


def test_a_best_response_of_several_games_is_named_and_tagged_by_its_game():
    assert best_responses.agent_id(10) == "br-000010" and best_responses.tags() == ["best_response"]
    assert best_responses.agent_id(10, "kuhn_poker_v1") == "br-kuhn_poker_v1-000010"
    tagged = AgentRecord("br-kuhn_poker_v1-000010", "best_response", "bot:br-kuhn_poker_v1-000010",
                         tags=best_responses.tags("kuhn_poker_v1"))
    assert best_responses.game_of(tagged) == "kuhn_poker_v1"
    assert best_responses.game_of(AgentRecord("br-000010", "best_response", "bot:br-000010")) is None
    assert best_responses.game_of(AgentRecord("x", "checkpoint", "checkpoint:x", tags=["game:kuhn_poker_v1"])) is None


def test_the_sampler_seats_a_best_response_only_in_its_own_game():
    learner = AgentRecord(LEARNER_ID, "learner", "learner", step=10)
    league = [learner, AgentRecord("random_bot", "baseline", "bot:random")]
    league += [AgentRecord(f"ckpt-00000{s}", "checkpoint", f"checkpoint:ckpt-00000{s}", adapter_path="x", step=s)
               for s in (1, 2)]
    for game in ("kuhn_poker_v1", "tictactoe_v1"):
        agent = best_responses.agent_id(10, game)
        league.append(AgentRecord(agent, "best_response", f"bot:{agent}", step=10, tags=best_responses.tags(game)))
    sampler = LeagueSampler(MatchmakingSettings(bucket_weights={"mirror": 0.1, "best_response": 0.9}))
    sampler.refresh(league, learner)
    rng = random.Random(0)
    for game in (KUHN, TICTACTOE):
        seated = {str(p) for _ in range(200) for p in sampler.seats(game, rng).values()}
        assert {p for p in seated if p.startswith("bot:br-")} == {f"bot:br-{game.name}-000010"}


def test_one_game_keeps_its_metric_names_and_several_carry_the_game():
    assert per_game("league/exploitability", "kuhn_poker_v1", several=False) == "league/exploitability"
    assert per_game("league/exploitability", "kuhn_poker_v1", several=True) == "league/exploitability/kuhn_poker_v1"
    one = EvaluatorResult("ckpt-000004", 4, {"kuhn_poker_v1": {"ckpt-000002": GatekeeperResult(0.5, 0.0, 1.0, 8)}},
                          seconds=2.0)
    labels = {"ckpt-000002": "best"}
    assert evaluation(one, labels, several=False) == {"league/eval/seconds": 2.0, "league/eval/win_rate_vs_best": 0.5}
    two = EvaluatorResult("ckpt-000004", 4, {**one.results, "tictactoe_v1": {"random_bot": GatekeeperResult(1.0, 1.0, 1.0, 8)}},
                          seconds=2.0)
    assert evaluation(two, labels, several=True) == {
        "league/eval/seconds": 2.0, "league/eval/kuhn_poker_v1/win_rate_vs_best": 0.5,
        "league/eval/tictactoe_v1/win_rate_vs_random_bot": 1.0}


@pytest.mark.slow
def test_a_league_of_two_games_does_each_game_that_has_them(tmp_path):
    """Kuhn Poker and Tic-Tac-Toe in one run: each game's exact exploitability and best
    responses, the evaluator's tournament in both games, every figure named by its game."""
    from sp_lightning.cli import main

    games = [{"id": "kuhn_poker_v1", "env_kwargs": {"invalid_move": "random"},
              "reward": {"outcome": "payoff", "invalid_move_penalty": 3.0}}, {"id": "tictactoe_v1"}]
    main(["fit", "--config", os.path.join(CONFIGS, "kuhn_poker_league_tiny.yaml"), "--data.games", json.dumps(games),
          "--trainer.max_steps", "4", "--trainer.default_root_dir", str(tmp_path),
          "--data.league.dir", str(tmp_path / "league"), "--data.episodes_per_batch", "16",
          "--trainer.limit_val_batches", "0", "--data.league.evaluator", '{"every": 2, "games_per_seat": 2}',
          "--data.league.schedule", '{"recent_every": 1, "recent_window": 10, "anchor_every": 100}',
          "--data.league.best_response_every", "2", "--data.league.exploitability_every", "2",
          "--data.league.games_per_match", "1", "--data.league.matchmaking.min_checkpoints", "1",
          "--data.league.matchmaking.bucket_weights", '{"mirror": 0.1, "best_response": 0.9}',
          "--trainer.enable_progress_bar", "false", "--trainer.callbacks", "[]",
          "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(tmp_path)])
    league = json.load(open(tmp_path / "league" / "league.json"))
    added = {a: r["tags"] for a, r in league["agents"].items() if r["type"] == "best_response"}
    assert added == {f"br-{g}-{s:06d}": ["best_response", f"game:{g}"]
                     for g in ("kuhn_poker_v1", "tictactoe_v1") for s in (2, 4)}
    assert all(os.path.isfile(tmp_path / "league" / "best_responses" / f"{a}.json") for a in added)
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    logged = {k for row in rows for k, v in row.items() if v}
    for game in ("kuhn_poker_v1", "tictactoe_v1"):
        assert {f"league/exploitability/{game}/learner", f"league/exploitability/{game}/learner_legal_mass",
                f"league/eval/{game}/win_rate_vs_random_bot"} <= logged
    assert "league/exploitability/kuhn_poker_v1/mixture" in logged  # Kuhn Poker alone has the mixture's
    assert not {"league/exploitability/learner", "league/exploitability/tictactoe_v1/mixture"} & logged
    assert any(m["source"] == "eval" for m in league["matches"]), "the evaluator recorded its games"
    assert any(float(row.get("league/mix/best_response") or 0) > 0.5 for row in rows), "the best responses played"
