"""``sp-lightning evaluate`` over several checkpoints (table, JSON, determinism) and
``sp-lightning crossplay`` over a league directory on disk (its baselines and kept adapters)."""

import json

import pytest
import torch

from sp_lightning.cli.common import build_from_config
from sp_lightning.cli.crossplay import league_players, unique_label
from sp_lightning.cli.crossplay import main as crossplay_main
from sp_lightning.cli.evaluate import main as evaluate_main
from sp_lightning.evaluation.matches import Match, Serving, evaluate, play
from sp_lightning.games import GameSettings
from sp_lightning.league.registry import AgentRecord, LeagueRegistry
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings

TICTACTOE = "configs/tictactoe_tiny.yaml"


def _adapters(tmp_path, names):
    """Adapter dirs of the config's policy: the first untrained, each later one with its
    trainable weights (LoRA and move-token rows) moved by a different random draw."""
    module, _ = build_from_config("--config", TICTACTOE)
    paths = []
    for k, name in enumerate(names):
        if k:
            gen = torch.Generator().manual_seed(k)
            with torch.no_grad():
                for p in module.model.parameters():
                    if p.requires_grad:
                        p.add_(torch.randn(p.shape, generator=gen))
        module.save_adapter(tmp_path / name)
        paths.append(str(tmp_path / name))
    return paths


def test_evaluate_several_checkpoints_prints_a_table_and_repeats_exactly(tmp_path, capsys):
    first, second = _adapters(tmp_path, ["a", "b"])
    output = tmp_path / "eval.json"
    # invalid moves replaced by random ones, so that the untrained policies' games differ by seed
    common = ["--config", TICTACTOE, "--games_per_seat", "20", "--data.eval.invalid_move", "random"]
    report = evaluate_main([*common, "--checkpoint", first, second, first, "--seed", "11", "--output", str(output)])
    assert list(report) == [first, second] and json.loads(output.read_text()) == report
    entry = report[first]["tictactoe_v1"]
    assert entry["games"] == 40 and report[second]["tictactoe_v1"] != entry
    assert entry["tictactoe_v1/payoff_ci_low"] <= entry["tictactoe_v1/payoff"] <= entry["tictactoe_v1/payoff_ci_high"]
    out = capsys.readouterr().out
    assert "win [95% CI]" in out and "payoff [95% CI]" in out
    rows = [line for line in out.splitlines() if line.startswith(f"{first}  tictactoe_v1")]
    assert len(rows) == 2 and rows[0] == rows[1]  # evaluated again after `second` was loaded
    # the same checkpoint evaluated twice in the run (after another was loaded): the same figures
    assert evaluate_main([*common, "--checkpoint", first, "--seed", "11"])["tictactoe_v1"] == entry
    # "" after a checkpoint is the untrained policy again, not the checkpoint left loaded
    after = evaluate_main([*common, "--checkpoint", second, "", "--seed", "11"])
    assert after[second] == report[second] != after["untrained"]
    assert after["untrained"] == evaluate_main([*common, "--seed", "11"])
    assert evaluate_main([*common, "--checkpoint", first, "--seed", "12"])["tictactoe_v1"] != entry


def test_a_bot_plays_the_evaluated_seats_with_player(capsys):
    """``--player bot:random`` against RandomBot on the same seats: a yardstick's own figures,
    labelled with its name, with no model move among them."""
    report = evaluate_main(["--config", TICTACTOE, "--games_per_seat", "30", "--player", "bot:random",
                            "--opponent", "bot:random", "--seed", "3"])["tictactoe_v1"]
    assert report["games"] == 60 and 0.2 < report["tictactoe_v1/win_rate"] < 0.8
    assert report["tictactoe_v1/legal_move_rate"] == 1.0
    assert any(line.startswith("bot:random  tictactoe_v1") for line in capsys.readouterr().out.splitlines())


def test_games_lost_by_an_opponent_forfeit_can_be_left_out(tiny_policy):
    """The untrained model as the opponent under the forfeit rule loses many games by its own
    invalid move: left out, they leave the other games' figures, and are still counted."""
    model, tok = tiny_policy
    worker = HFRolloutWorker(model, tok)
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "forfeit"})
    kwargs = dict(policy="bot:random", opponent="base", games_per_seat=40, seed=4,
                  sampling=SamplingSettings(max_new_tokens=1))
    counted = evaluate(worker, game, **kwargs)
    match = Match(game, "bot:random", "base", 40, 4)
    left_out, _ = play(worker, match, Serving(SamplingSettings(max_new_tokens=1), exclude_opponent_forfeits=True))
    assert counted.opponent_forfeits > 0 and left_out.opponent_forfeits == counted.opponent_forfeits
    assert left_out.games == counted.games - counted.opponent_forfeits
    assert left_out.wins == counted.wins - counted.opponent_forfeits and left_out.losses == counted.losses
    assert left_out.opponent_forfeit_rate == counted.opponent_forfeit_rate
    assert counted.opponent_forfeit_rate == counted.opponent_forfeits / counted.games
    assert "(left out)" in left_out.summary() and "(left out)" not in counted.summary()


def test_with_every_game_left_out_the_figures_are_none_not_zero(tmp_path, capsys):
    """bot:chaos forfeits every game here: left out, no game remains, and the figures are NaN
    (null in the JSON) with a line that says why; they read win 0 [0, 1] and payoff +0 [+0, +0]."""
    import json
    import math

    output = tmp_path / "none.json"
    report = evaluate_main(["--config", TICTACTOE, "--games_per_seat", "10", "--player", "bot:random",
                            "--opponent", "bot:chaos", "--held_out", "false", "--exclude_opponent_forfeits", "true",
                            "--output", str(output)])["tictactoe_v1"]
    assert report["games"] == 0 and report["tictactoe_v1/opponent_forfeit_rate"] == 1.0
    assert all(math.isnan(report[f"tictactoe_v1/{key}"]) for key in ("win_rate", "win_rate_ci_low", "payoff",
                                                                       "legal_move_rate"))
    assert json.loads(output.read_text())["tictactoe_v1"]["tictactoe_v1/win_rate"] is None
    assert "0 games left to score: all 20 played were lost by the opponent's invalid move (left out)" in capsys.readouterr().out


def test_crossplay_over_a_league_directory_writes_ratings_and_plots(tmp_path, capsys):
    league = tmp_path / "league"
    adapter_paths = _adapters(league / "adapters", ["ckpt-000010", "ckpt-000020", "ckpt-000030"])
    registry = LeagueRegistry(league / "league.json")
    registry.add_agent(AgentRecord(id="random_bot", type="baseline", policy="bot:random"))
    registry.add_agent(AgentRecord(id="learner", type="learner", policy="learner", step=30))
    for step, path in zip((10, 20, 30), adapter_paths):
        name = f"ckpt-{step:06d}"
        registry.add_agent(AgentRecord(id=name, type="checkpoint", policy=f"checkpoint:{name}",
                                       adapter_path=f"/elsewhere/{name}", step=step))  # the league moved
    players = league_players(str(league), max_checkpoints=2, baselines=True)
    assert list(players) == ["random_bot", "ckpt-000010", "ckpt-000030"]  # thinned, the last one kept
    assert list(league_players(str(league), max_checkpoints=1, baselines=False)) == ["ckpt-000030"]
    out = crossplay_main(["--config", TICTACTOE, "--league", str(league), "--max_checkpoints", "2",
                          "--checkpoint", adapter_paths[1], "--games_per_seat", "6", "--resamples", "30",
                          "--output_dir", str(tmp_path / "cp")])  # the thinned-out one named again
    table, ratings = out["table"], out["ratings"]
    assert table.labels == ["random_bot", "ckpt-000010", "ckpt-000030", "ckpt-000020"]
    assert all(r.games == 12 for r in table.results.values())
    report = json.loads(open(out["paths"]["json"]).read())
    assert report["policies"]["random_bot"] == "bot:random" and len(report["payoff_matrix"]) == 4
    assert set(report["ratings"]["bradley_terry"]) == set(table.labels)
    assert report["policies"]["ckpt-000020"] == "checkpoint:ckpt-000020"  # registered by its label
    for (a, b), result in table.results.items():  # a pair's two cells: the same games, either side
        if a != b:
            assert result.payoff_mean == pytest.approx(-table.results[(b, a)].payoff_mean, abs=1e-12)
    assert all(lo <= v <= hi for v, (lo, hi) in zip(ratings.bradley_terry, ratings.bradley_terry_ci))
    assert "Bradley-Terry [95% CI]" in capsys.readouterr().out


def test_players_named_alike_get_distinct_labels():
    taken = {"last": "checkpoint:/runs/a/checkpoints/last"}
    assert unique_label("/runs/b/checkpoints/last.ckpt", taken) == "checkpoints-last"
    taken["checkpoints-last"] = "..."
    assert unique_label("/runs/b/checkpoints/last.ckpt", taken) == "b-checkpoints-last"
    assert unique_label("/last", {"last": ""}) == "last-2"  # no parent left to tell them apart
    assert unique_label("/runs/b/checkpoints/best.ckpt", taken) == "best"
