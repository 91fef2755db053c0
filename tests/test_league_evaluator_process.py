"""The background evaluator as the trainer drives it (sp_lightning.league.evaluator_process):
whom the newest checkpoint plays, the spec it writes for every game of the run, and the result
read back as metrics (the process itself replaced by a stand-in that records the specs it is
sent; the real one runs in the league fits of test_league_e2e.py and test_league_several_games.py,
two tournaments in one process in the league notebook's), and the evaluator's own loop
(``evaluator.serve``) with a scripted tournament in place of the games."""

from __future__ import annotations

import logging
import os

import pytest

from sp_lightning.atomic_file import stray_temp_files
from sp_lightning.games import GameSettings
from sp_lightning.league import evaluator, evaluator_process
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


class _Pipe:
    """The stand-in process's standard input: the lines written to it."""

    def __init__(self):
        self.lines, self.closed = [], False

    def write(self, text):
        self.lines += text.splitlines()

    def flush(self):
        pass

    def close(self):
        self.closed = True


class _StandInProcess:
    """Stands in for the evaluator's process: started with ``args``, it records the spec paths it
    is sent; ``code`` set: it has exited with that status."""

    started: list = []

    def __init__(self, args, **kwargs):
        self.args, self.code, self.stdin = args, None, _Pipe()
        _StandInProcess.started.append(self)

    @property
    def returncode(self):
        return self.code

    def poll(self):
        return self.code

    def wait(self, timeout=None):
        self.code = 0 if self.code is None else self.code
        return self.code

    def terminate(self):
        self.code = -15


def _players(games=("kuhn_poker_v1",)):
    return Players(PolicySettings(), [GameSettings(id=g) for g in games], SamplingSettings(), {})


@pytest.mark.parametrize("games", [["kuhn_poker_v1"], ["kuhn_poker_v1", "tictactoe_v1"]])
def test_a_tournament_plays_every_game_and_lands_as_metrics(tmp_path, monkeypatch, games):
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _StandInProcess)
    events = []
    process = EvaluatorProcess(EvaluatorSettings(every=2, games_per_seat=3), str(tmp_path), "league.json", 4,
                               events.append)
    assert process.due(4) and not process.due(3)
    process.start(4, _league(best="ckpt-000002"), _players(games))
    assert not process.due(6), "one tournament at a time"
    child = _StandInProcess.started[-1]
    assert child.args[1:] == ["-m", "sp_lightning.league.evaluator", "--serve", "--parent", str(os.getpid())]
    assert child.stdin.lines == [process.spec_path]
    spec = EvaluatorSpec.read(process.spec_path)
    assert process.spec_path.endswith("evaluations/ckpt-000006-step000004.json")
    assert [g["id"] for g in spec.games] == games and spec.agent == "ckpt-000006"
    assert (spec.gatekeepers, spec.seed, spec.games_per_match) == (["random_bot", "ckpt-000002", "ckpt-000004"], 99_006, 4)
    assert process.poll() == {} and process.running, "no result yet: still playing"
    assert process.in_play == {"ckpt-000006", "random_bot", "ckpt-000002", "ckpt-000004"}  # adapters kept

    played = {"random_bot": GatekeeperResult(0.75, 0.5, 1.0, 6), "ckpt-000002": GatekeeperResult(0.5, 0.0, 1.0, 6)}
    EvaluatorResult("ckpt-000006", 4, {g: played for g in games}, seconds=3.0).write(
        process.spec_path.removesuffix(".json") + ".result.json")
    metrics = process.poll()
    assert not process.running and process.due(6) and process.in_play == set()
    if len(games) == 1:
        assert metrics == {"league/eval/seconds": 3.0, "league/eval/win_rate_vs_random_bot": 0.75,
                           "league/eval/win_rate_vs_best": 0.5}
        assert events[-1] == "ckpt-000006 vs ckpt-000002: win 0.500, payoff +0.000 over 6 games; ratings updated"
    else:
        assert metrics["league/eval/tictactoe_v1/win_rate_vs_best"] == 0.5 and len(metrics) == 5
        assert events[-1] == ("ckpt-000006 vs ckpt-000002 in tictactoe_v1: win 0.500, payoff +0.000 over 6 games; "
                              "ratings updated")

    process.start(6, _league(best="ckpt-000002"), _players(games))  # the next tournament: the same process
    assert _StandInProcess.started[-1] is child and child.stdin.lines[-1].endswith("-step000006.json")
    # its deals follow on from the last one's (seeds 99_006 + i, i < 3 per seat): none played twice
    assert EvaluatorSpec.read(process.spec_path).seed == 99_009
    process.close()
    assert child.stdin.closed and process.process is None


def test_a_failed_tournament_is_said_and_logs_nothing(tmp_path, monkeypatch):
    """A tournament that failed (its ``.failed`` file) leaves the process serving the next one;
    a process that ended is started again at the next tournament."""
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _StandInProcess)
    events, levels = [], []

    def said(text, level=logging.INFO):
        events.append(text)
        levels.append(level)

    process = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1, said)
    process.start(2, _league(best=None), _players())
    child = _StandInProcess.started[-1]
    (tmp_path / "evaluations" / "ckpt-000006-step000002.failed").write_text("ValueError: no such adapter\n")
    assert process.poll() == {} and not process.running
    assert events[-1].startswith("evaluator failed (error); see ") and events[-1].endswith("-step000002.log")
    assert levels[-1] == logging.WARNING and levels[0] == logging.INFO, "a failure is a warning, a start is not"

    process.start(4, _league(best=None), _players())
    assert _StandInProcess.started[-1] is child, "the process serves the next tournament"
    child.code = 1  # it died meanwhile
    assert process.poll(wait=True) == {} and not process.running
    assert events[-1].startswith("evaluator failed (exit 1); see ") and events[-1].endswith("-step000004.log")
    process.start(6, _league(best=None), _players())
    assert _StandInProcess.started[-1] is not child, "a new process for the next tournament"


def test_the_end_of_training_waits_for_a_tournament_at_most_final_wait_then_stops_it(tmp_path, monkeypatch):
    """A tournament that never ends (a hung process) cannot hold the end of a run: after
    ``final_wait`` seconds the process is stopped and a warning says so, naming the setting."""
    import time

    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _StandInProcess)
    events = []
    process = EvaluatorProcess(EvaluatorSettings(every=2, final_wait=0.3), str(tmp_path), "league.json", 1,
                               lambda text, level=logging.INFO: events.append((text, level)))
    process.start(2, _league(best=None), _players())
    child = _StandInProcess.started[-1]
    start = time.monotonic()
    assert process.finish() == {}
    assert 0.3 <= time.monotonic() - start < 5
    assert not process.running and process.process is None and child.code == -15, "stopped"
    text, level = events[-1]
    assert level == logging.WARNING and text.startswith("the tournament of ckpt-000006 still ran after 0.3 s "
                                                        "(evaluator.final_wait): stopped, its games not rated")


def test_a_resumed_run_does_not_read_the_result_its_killed_run_left(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _StandInProcess)
    process = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1, lambda _: None)
    left = tmp_path / "evaluations" / "ckpt-000006-step000002.result.json"
    left.parent.mkdir()
    EvaluatorResult("ckpt-000006", 2, {}).write(str(left))
    process.start(2, _league(best=None), _players())
    assert not left.exists() and process.poll() == {} and process.running


def test_a_tournament_running_at_the_checkpoint_is_played_again_by_the_resumed_run(tmp_path, monkeypatch):
    """The checkpoint's league does not hold the games of a tournament still being played when it
    was saved (the killed run's evaluator may have rated them after): the resumed run plays the
    same spec again, its result (a stale one removed) read with the labels it had."""
    monkeypatch.setattr(evaluator_process.subprocess, "Popen", _StandInProcess)
    events = []
    killed = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1,
                              lambda text, level=logging.INFO: events.append(text))
    assert killed.state_dict() == {}, "nothing running: nothing to play again"
    killed.start(2, _league(best="ckpt-000002"), _players(("kuhn_poker_v1", "tictactoe_v1")))
    state = killed.state_dict()
    spec = tmp_path / "evaluations" / "ckpt-000006-step000002.json"
    EvaluatorResult("ckpt-000006", 2, {}).write(str(spec.with_suffix(".result.json")))  # rated after the checkpoint

    resumed = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1,
                               lambda text, level=logging.INFO: events.append(text))
    resumed.resume(state)
    child = _StandInProcess.started[-1]
    assert child is not _StandInProcess.started[0] and child.stdin.lines == [str(spec)]
    assert resumed.running and resumed.in_play == killed.in_play and not spec.with_suffix(".result.json").exists()
    assert events[-1].startswith("evaluating ckpt-000006 against random_bot, ckpt-000002, ckpt-000004 again")
    result = EvaluatorResult("ckpt-000006", 2, {"kuhn_poker_v1": {"ckpt-000002": GatekeeperResult(0.5, 0.1, 0.0, 8)}})
    result.write(str(spec.with_suffix(".result.json")))
    assert resumed.poll()["league/eval/kuhn_poker_v1/win_rate_vs_best"] == 0.5, "the label it had: best"

    off = EvaluatorProcess(EvaluatorSettings(every=0), str(tmp_path), "league.json", 1, lambda *_: None)
    off.resume(state)
    assert not off.running, "an evaluator switched off on resume plays nothing"
    spec.unlink()
    gone = EvaluatorProcess(EvaluatorSettings(every=2), str(tmp_path), "league.json", 1,
                            lambda text, level=logging.INFO: events.append((text, level)))
    gone.resume(state)
    assert not gone.running and events[-1][1] == logging.WARNING and "is gone" in events[-1][0]


class _ScriptedEvaluator:
    """Stands in for ``evaluator.Evaluator``: a tournament whose agent is ``broken`` raises,
    any other returns an empty result after printing a line."""

    def run(self, spec):
        print(f"playing {spec.agent}")
        if spec.agent == "broken":
            raise ValueError("no adapter in ckpt-broken")
        return EvaluatorResult(spec.agent, spec.step)


def test_an_evaluator_whose_trainer_has_already_ended_exits_at_once():
    """The process ends with its trainer (Linux's parent-death signal, set in the process itself);
    one started by a trainer that ended before it set the signal exits at once, naming it."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-m", "sp_lightning.league.evaluator", "--serve", "--parent", "1"],
                          input="", capture_output=True, text=True, timeout=60)
    assert gone.returncode == 1 and "the trainer (pid 1) ended before its evaluator started" in gone.stderr
    bad = subprocess.run([sys.executable, "-m", "sp_lightning.league.evaluator", "--serve", "--parent", "x"],
                         input="", capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.startswith("usage: ")


def test_the_evaluator_serves_spec_after_spec_and_a_failure_does_not_end_it(tmp_path):
    paths = []
    for agent in ("broken", "ckpt-000004"):
        spec = EvaluatorSpec(policy={}, games=[], sampling={}, registry="league.json", agent=agent, gatekeepers=[],
                             games_per_seat=1, games_per_match=1, seed=0, step=4, threads=1)
        paths.append(str(tmp_path / f"{agent}.json"))
        spec.write(paths[-1])
    evaluator.serve([paths[0] + "\n", "\n", paths[1] + "\n"], _ScriptedEvaluator())
    assert (tmp_path / "broken.failed").read_text() == "ValueError: no adapter in ckpt-broken\n"
    log = (tmp_path / "broken.log").read_text()
    assert log.startswith("playing broken\n") and "Traceback" in log and not (tmp_path / "broken.result.json").exists()
    assert EvaluatorResult.read(str(tmp_path / "ckpt-000004.result.json")) == EvaluatorResult("ckpt-000004", 4)
    assert (tmp_path / "ckpt-000004.log").read_text() == "playing ckpt-000004\n"
    assert not stray_temp_files(tmp_path / "ckpt-000004.result.json") and not stray_temp_files(tmp_path / "broken.failed")


class _RecordingWorker:
    """Stands in for the rollout worker: the adapter calls it gets."""

    def __init__(self):
        self.calls = []

    def forget_adapter(self, name):
        self.calls.append(("forget", name))

    def register_adapter(self, name, path):
        self.calls.append(("register", name))


def test_an_adapter_is_loaded_again_only_when_its_files_change(tmp_path):
    folder = tmp_path / "ckpt-000004"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"1")
    served, worker = evaluator.Evaluator(), _RecordingWorker()
    served._register(worker, "ckpt-000004", str(folder))
    served._register(worker, "ckpt-000004", str(folder))  # the next tournament: already there
    assert worker.calls == [("forget", "ckpt-000004"), ("register", "ckpt-000004")]
    (folder / "adapter_model.safetensors").write_bytes(b"22")  # saved again under the same id
    served._register(worker, "ckpt-000004", str(folder))
    assert worker.calls[2:] == [("forget", "ckpt-000004"), ("register", "ckpt-000004")]


def test_a_gatekeeper_the_league_can_never_hold_is_refused_when_the_config_is_read(tmp_path):
    from sp_lightning.league import LeagueSettings
    from sp_lightning.league.settings import EvaluatorSettings

    def league(gatekeepers, baselines=None):
        return LeagueSettings(dir=str(tmp_path), baselines=baselines, evaluator=EvaluatorSettings(gatekeepers=gatekeepers))

    later_ids = ["ckpt-000100", "br-kuhn_poker_v1-000050", "main_exploiter-000300"]
    assert league(["random_bot", "best", "recent", *later_ids]).evaluator.gatekeepers[3:] == later_ids
    for typo, baselines in (("random", None), ("chaos_bot", ["random_bot"]), ("learner", None)):
        with pytest.raises(ValueError, match=f"data.league.evaluator.gatekeepers: '{typo}' is no id this league can hold"):
            league([typo, "best"], baselines)
    # the default names random_bot only in a league that has it
    assert league(None).evaluator.gatekeepers == ["random_bot", "best", "recent"]
    assert league(None, ["base_model", "diplomacy_planner_bot"]).evaluator.gatekeepers == ["best", "recent"]
