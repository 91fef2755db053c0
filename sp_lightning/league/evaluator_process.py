"""The background evaluator as the trainer sees it: when a tournament starts, whom the newest
checkpoint plays, the spec it is given, the process, and its result read back as metrics.

The tournaments run in a process of their own (``python -m sp_lightning.league.evaluator
--serve``, ``evaluator.py``), started at the run's first tournament and kept until training ends:
each tournament is the path of its spec written to that process's standard input. It reads the
adapters from disk and records its games in the registry under the registry's lock. Its files
live in ``<league dir>/evaluations/``: ``<agent>-step<step>.json`` (the
:class:`~sp_lightning.league.messages.EvaluatorSpec`), ``.log`` (the tournament's output),
``.result.json`` (the ``EvaluatorResult``) or ``.failed`` (its error), and ``evaluator.log``
(the process's own output). Only the lead starts one, and one tournament at a time.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sp_lightning.games import GameSettings
from sp_lightning.league import metrics as league_metrics
from sp_lightning.league.messages import EvaluatorResult, EvaluatorSpec
from sp_lightning.league.registry import AgentRecord, LeagueState
from sp_lightning.league.settings import EvaluatorSettings
from sp_lightning.model import PolicySettings
from sp_lightning.rollout import SamplingSettings


@dataclass
class Players:
    """What a tournament plays with, from the run: the policy settings (the evaluator rebuilds
    the base model from them), the games, the evaluation sampling and env overrides."""

    policy: PolicySettings
    games: list[GameSettings]
    sampling: SamplingSettings
    env_overrides: dict


def game_spec(game: GameSettings) -> dict:
    """A game's settings as plain data, for the evaluator to rebuild its ``GameSettings``."""
    return {"id": game.id, "env_kwargs": game.env_kwargs, "system_prompt": game.system_prompt,
            "template": game.template, "template_args": game.template_args, "reward": asdict(game.reward)}


def gatekeepers(state: LeagueState, labels: list[str]) -> tuple[AgentRecord | None, dict[str, str]]:
    """The newest checkpoint, and its gatekeepers: id -> the label it was asked for by
    (``evaluator.gatekeepers``: league ids, ``best`` the best-rated checkpoint, ``recent`` the
    previous one). The newest itself, absent ids and repeats are left out."""
    checkpoints = sorted((a for a in state.agents.values() if a.type == "checkpoint"), key=lambda a: a.step)
    if not checkpoints:
        return None, {}
    newest = checkpoints[-1]
    chosen: dict[str, str] = {}
    for label in labels:
        name = label
        if label == "best":
            name = state.metadata.get("best_agent")
        elif label == "recent":
            name = checkpoints[-2].id if len(checkpoints) > 1 else None
        if name and name != newest.id and name not in chosen and name in state.agents:
            chosen[name] = label
    return newest, chosen


class EvaluatorProcess:
    """At most one background tournament at a time, all of a run's in one process; ``event``
    says when one starts, fails (with ``logging.WARNING`` as its second argument) or lands."""

    def __init__(self, settings: EvaluatorSettings, league_dir: str, registry_path: str, games_per_match: int,
                 event: Callable[..., None]):
        self.settings = settings
        self.folder = os.path.join(league_dir, "evaluations")
        self.registry_path = registry_path
        self.games_per_match = games_per_match
        self.event = event
        self.process: subprocess.Popen | None = None  # the evaluator's process, from the first tournament
        self.spec_path: str | None = None  # the running tournament's spec (None: none running)
        self.labels: dict[str, str] = {}  # gatekeeper id -> its label (its chart) in the running tournament
        self.agent: str | None = None  # the running tournament's evaluated checkpoint
        self.several = False  # whether the running tournament plays several games

    @property
    def running(self) -> bool:
        """Whether a tournament is being played."""
        return self.spec_path is not None

    @property
    def in_play(self) -> set[str]:
        """The agents of the running tournament (none when none runs): their adapters are read
        when they first play, so they must stay on disk until it ends."""
        return {self.agent, *self.labels} if self.running else set()

    def due(self, step: int) -> bool:
        """Whether a tournament starts at ``step`` (every ``evaluator.every`` steps, none running)."""
        return bool(self.settings.every) and step % self.settings.every == 0 and not self.running

    def start(self, step: int, state: LeagueState, players: Players) -> None:
        """The newest checkpoint of ``state`` against its gatekeepers, in every game of
        ``players``, handed to the evaluator's process (started now if none is running;
        nothing to play: nothing starts)."""
        newest, labels = gatekeepers(state, self.settings.labels)
        if newest is None or not labels:
            return
        s = self.settings
        spec = EvaluatorSpec(policy=asdict(players.policy), games=[game_spec(g) for g in players.games],
                             sampling=asdict(players.sampling), registry=self.registry_path, agent=newest.id,
                             gatekeepers=list(labels), games_per_seat=s.games_per_seat,
                             games_per_match=self.games_per_match, seed=self._seed(step), step=step,
                             threads=s.threads, env_overrides=players.env_overrides or {})
        os.makedirs(self.folder, exist_ok=True)
        spec_path = os.path.join(self.folder, f"{newest.id}-step{step:06d}.json")
        spec.write(spec_path)
        self._play(spec_path, newest.id, labels, len(players.games) > 1)
        self.event(f"step {step}: evaluating {newest.id} against {', '.join(labels)}")

    def _seed(self, step: int) -> int:
        """The seed of the tournament at ``step``: the k-th tournament plays deals ``k *
        games_per_seat`` on from the first's, so no two play a deal twice."""
        return self.settings.seed + step // self.settings.every * self.settings.games_per_seat

    def _play(self, spec_path: str, agent: str, labels: dict[str, str], several: bool) -> None:
        """The tournament of ``spec_path`` sent to the process, and followed from now on."""
        for stale in (".result.json", ".failed"):  # a resumed run plays this step's tournament again
            if os.path.exists(self._file(spec_path, stale)):
                os.remove(self._file(spec_path, stale))
        self._send(spec_path)
        self.spec_path, self.agent, self.labels, self.several = spec_path, agent, labels, several

    # ---- a resumed run ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The tournament being played (nothing when none is), for the run's checkpoint: its
        games were not in the league the checkpoint saved, so a run resumed from it plays it again."""
        if not self.running:
            return {}
        return {"spec": os.path.basename(self.spec_path), "agent": self.agent, "labels": dict(self.labels),
                "several": self.several}

    def resume(self, state: dict[str, Any]) -> None:
        """The tournament a checkpoint's :meth:`state_dict` says was being played, played again
        (the same spec: the same games); none where the evaluator is now off."""
        if not state or not self.settings.every:
            return
        spec_path = os.path.join(self.folder, state["spec"])
        if not os.path.exists(spec_path):
            self.event(f"the tournament of {state['agent']} running at the checkpoint is not played again: "
                       f"{spec_path} is gone", logging.WARNING)
            return
        self._play(spec_path, state["agent"], dict(state["labels"]), bool(state["several"]))
        self.event(f"evaluating {state['agent']} against {', '.join(state['labels'])} again: its tournament "
                   f"was being played at the checkpoint")

    def _send(self, spec_path: str) -> None:
        """The spec's path to the evaluator's process, started first if there is none or it has
        ended (also if it ends while the path is written)."""
        for attempt in range(2):
            if self.process is None or self.process.poll() is not None:
                with open(os.path.join(self.folder, "evaluator.log"), "a") as output:  # the child holds its own handle
                    self.process = subprocess.Popen([sys.executable, "-m", "sp_lightning.league.evaluator", "--serve",
                                                     "--parent", str(os.getpid())],  # it ends with this process
                                                    stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
                                                    text=True)
            try:
                self.process.stdin.write(spec_path + "\n")
                self.process.stdin.flush()
                return
            except OSError:  # it ended meanwhile (a broken pipe): once more with a new one
                if attempt:
                    raise
                self.process.kill()
                self.process.wait()
                self.process = None

    def poll(self, wait: bool = False, timeout: float | None = None) -> dict[str, float]:
        """A finished tournament's metrics (its games are in the registry by then); nothing
        while it runs, unless ``wait``: then until it ends, or for at most ``timeout`` seconds,
        after which it is stopped (a hung or slow tournament cannot hold the end of a run)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running:
            spec = self.spec_path
            ended = self.process.poll() is not None  # first: a result it wrote before it ended is read
            if os.path.exists(self._file(spec, ".result.json")):
                self.spec_path = None
                return self._metrics(EvaluatorResult.read(self._file(spec, ".result.json")))
            if ended or os.path.exists(self._file(spec, ".failed")):
                self.spec_path = None
                why = f"exit {self.process.returncode}" if ended else "error"
                self.event(f"evaluator failed ({why}); see {self._file(spec, '.log')}", logging.WARNING)
                return {}
            if not wait:
                return {}
            if deadline is not None and time.monotonic() > deadline:
                self.event(f"the tournament of {self.agent} still ran after {timeout:g} s (evaluator.final_wait): "
                           f"stopped, its games not rated; see {self._file(spec, '.log')}", logging.WARNING)
                self.stop()
                return {}
            time.sleep(0.05)
        return {}

    def finish(self) -> dict[str, float]:
        """Training is over: the running tournament's metrics, waited for at most
        ``final_wait`` seconds (said, so that a run that has not ended yet says why), then the
        process ends (:meth:`close`)."""
        if self.running:
            self.event(f"waiting for the tournament of {self.agent} (at most {self.settings.final_wait:g} s)")
        metrics = self.poll(wait=True, timeout=self.settings.final_wait)
        self.close()
        return metrics

    def close(self) -> None:
        """The evaluator's process ends after its tournament (:meth:`finish` waits for that
        tournament's result first)."""
        if self.process is not None:
            self.process.stdin.close()  # no more specs: it exits
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def stop(self) -> None:
        """Training failed: the evaluator's process (if any) is ended, its tournament with it."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
            self.process = None
        self.spec_path = None

    def _metrics(self, result: EvaluatorResult) -> dict[str, float]:
        for game, per_gatekeeper in result.results.items():
            where = f" in {game}" if self.several else ""
            for gatekeeper, r in per_gatekeeper.items():
                self.event(f"{result.agent} vs {gatekeeper}{where}: win {r.win_rate:.3f}, "
                           f"payoff {r.payoff:+.3f} over {r.games} games; ratings updated")
        return league_metrics.evaluation(result, self.labels, self.several)

    @staticmethod
    def _file(spec_path: str, suffix: str) -> str:
        return spec_path.removesuffix(".json") + suffix
