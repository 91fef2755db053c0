"""The background evaluator as the trainer drives it (sp_lightning.league.evaluator_process):
whom the newest checkpoint plays, the spec it writes for every game of the run, and the result
read back as metrics (the process itself replaced by a stand-in; the real one runs in the
league fits of test_league_e2e.py and test_league_several_games.py)."""

from __future__ import annotations

import pytest

from sp_lightning.games import GameSettings
from sp_lightning.league import evaluator_process
from sp_lightning.league.evaluator_process import EvaluatorProcess, Players, gatekeepers
from sp_lightning.league.messages import EvaluatorResult, EvaluatorSpec, GatekeeperResult
from sp_lightning.league.registry import AgentRecord, LeagueState
from sp_lightning.league.settings import EvaluatorSettings
from sp_lightning.model import PolicySettings
from sp_lightning.rollout import SamplingSettings


def _league(best: str | None) -> LeagueState:
    agents = [AgentRecord("random_bot", "baseline", "bot:random"), AgentRecord("learner", "learner", "learner")]
    agents += [AgentRecord(f"ckpt-00000{s}", "checkpoint", f"checkpoint:ckpt-00000{s}", step=s) for s in (6, 2, 4)]
    return LeagueState(metadata={"best_agent": best}, agents={a.id: a for a in agents})


def test_the_newest_checkpoint_plays_the_gatekeepers_by_their_labels():
    labels = ["random_bot", "best", "recent", "not_in_the_league", "ckpt-000006"]
    newest, chosen = gatekeepers(_league(best="ckpt-000002"), labels)
    assert newest.id == "ckpt-000006"
    assert chosen == {"random_bot": "random_bot", "ckpt-000002": "best", "ckpt-000004": "recent"}
    _, chosen = gatekeepers(_league(best="ckpt-000004"), labels)
    assert chosen == {"random_bot": "random_bot", "ckpt-000004": "best"}  # best and recent alike: once
    assert gatekeepers(LeagueState(metadata={}), labels) == (None, {})


class _Finished:
    """Stands in for the evaluator's process: started with ``args``, already exited."""

    started: list = []

    def __init__(self, args, **kwargs):
        self.args, self.code = args, 0
        _Finished.started.append(self)

    def poll(self):
        return self.code

    def wait(self):
        return self.code


@pytest.mark.parametrize("games", [["kuhn_poker_v1"], ["kuhn_poker_v1", "tictactoe_v1"]])
def test_a_tournament_plays_every_game_and_lands_as_metrics(tmp_path, monkeypatch, games):
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _Finished)
    events = []
    process = EvaluatorProcess(EvaluatorSettings(every=2, games_per_seat=3), str(tmp_path), "league.json", 4,
                               events.append)
    assert process.due(4) and not process.due(3)
    players = Players(PolicySettings(), [GameSettings(id=g) for g in games], SamplingSettings(), {})
    process.start(4, _league(best="ckpt-000002"), players)
    assert not process.due(6), "one tournament at a time"
    assert _Finished.started[-1].args[1:] == ["-m", "sp_lightning.league.evaluator", process.spec_path]
    spec = EvaluatorSpec.read(process.spec_path)
    assert process.spec_path.endswith("evaluations/ckpt-000006-step000004.json")
    assert [g["id"] for g in spec.games] == games and spec.agent == "ckpt-000006"
    assert (spec.gatekeepers, spec.seed, spec.games_per_match) == (["random_bot", "ckpt-000002", "ckpt-000004"], 99_004, 4)

    played = {"random_bot": GatekeeperResult(0.75, 0.5, 1.0, 6), "ckpt-000002": GatekeeperResult(0.5, 0.0, 1.0, 6)}
    EvaluatorResult("ckpt-000006", 4, {g: played for g in games}, seconds=3.0).write(
        process.spec_path.removesuffix(".json") + ".result.json")
    metrics = process.poll()
    assert process.process is None and process.due(6)
    if len(games) == 1:
        assert metrics == {"league/eval/seconds": 3.0, "league/eval/win_rate_vs_random_bot": 0.75,
                           "league/eval/win_rate_vs_best": 0.5}
        assert events[-1] == "ckpt-000006 vs ckpt-000002: win 0.500, payoff +0.000 over 6 games; ratings updated"
    else:
        assert metrics["league/eval/tictactoe_v1/win_rate_vs_best"] == 0.5 and len(metrics) == 5
        assert events[-1] == ("ckpt-000006 vs ckpt-000002 in tictactoe_v1: win 0.500, payoff +0.000 over 6 games; "
                              "ratings updated")


def test_a_failed_tournament_is_said_and_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _Finished)
    events = []
    process = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1, events.append)
    process.start(2, _league(best=None), Players(PolicySettings(), [GameSettings(id="kuhn_poker_v1")],
                                                 SamplingSettings(), {}))
    _Finished.started[-1].code = 1
    assert process.poll() == {} and process.process is None
    assert events[-1].startswith("evaluator failed (exit 1); see ") and events[-1].endswith("-step000002.log")
