"""The background evaluator: tournaments of league checkpoints against gatekeepers.

It runs as its own process, started by the league's callback
(``evaluator_process.EvaluatorProcess``) at a run's first tournament and kept for the run:
``python -m sp_lightning.league.evaluator --serve --parent PID`` reads the path of one spec per line
on its standard input and plays them one after another, while training goes on. What tournaments share
stays loaded between them: the imports, the base model (rebuilt from the policy settings,
deterministic: adapter-only checkpoints depend on it) and the checkpoints' adapters (named peft
adapters, loaded again when their files change). A process per tournament paid all of that each
time: on the tiny model 10.7 CPU s a tournament against 2.8 now (docs/benchmarks.md), on a real
model the base model's weights read again.

Each tournament plays every pairing in every game of its spec through
``sp_lightning.evaluation.matches.play`` with its own seeds (so a tournament's games depend on its
spec alone, not on those played before it in the process) and records the games in the league
registry (under its file lock, so the trainer's updates and its own never overwrite each other).
Its output goes to ``SPEC.log``, its summary to ``SPEC.result.json`` (written whole, then renamed
into place: the trainer polls for it), or, if it failed, its error to ``SPEC.failed``.
``python -m sp_lightning.league.evaluator SPEC.json`` plays one spec and exits. Spec and summary
are ``messages.EvaluatorSpec`` and ``messages.EvaluatorResult``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import traceback

from sp_lightning.atomic_file import atomic_write
from sp_lightning.league.messages import EvaluatorResult, EvaluatorSpec, GatekeeperResult


def die_with_parent(parent: int | None = None) -> None:
    """Linux: end this process when the trainer dies (even by SIGKILL), so that an orphaned
    evaluator never writes into a league that a resumed run has restored. Called first thing in
    the evaluator's own process (not as ``Popen``'s ``preexec_fn``: between fork and exec, a child
    of a trainer with threads must not load a library); ``parent``, the trainer's pid: a trainer
    that died before this ran ends it now."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if parent is not None and os.getppid() != parent:
        raise SystemExit(f"the trainer (pid {parent}) ended before its evaluator started")


class Evaluator:
    """Plays tournaments one after another, keeping what they share (see the module docstring)."""

    def __init__(self):
        self._policy: str | None = None  # the policy settings the worker was built from (as JSON)
        self._worker = None
        self._adapters: dict[str, tuple] = {}  # agent id -> (adapter path, its files' stamp) as registered

    def run(self, spec: EvaluatorSpec) -> EvaluatorResult:
        """The tournament of ``spec``: the agent against each gatekeeper still in the league, in
        each game (imports here: the trainer's side imports only the messages)."""
        import torch

        from sp_lightning.league.registry import LeagueRegistry
        from sp_lightning.rollout import SamplingSettings

        print(f"evaluator process {os.getpid()}: {spec.agent} against {', '.join(spec.gatekeepers)}", flush=True)
        torch.set_num_threads(spec.threads)
        worker = self._worker_for(spec)
        sampling = SamplingSettings(**spec.sampling)
        registry = LeagueRegistry(spec.registry)
        league = registry.read().agents
        present = [a for a in [spec.agent, *spec.gatekeepers] if a in league]  # pruned since: skipped
        for agent_id in present:
            if league[agent_id].adapter_path:
                self._register(worker, agent_id, league[agent_id].adapter_path)
        result = EvaluatorResult(agent=spec.agent, step=spec.step)
        if spec.agent not in league:
            return result
        start = time.perf_counter()
        for data in spec.games:
            game = _game(data)
            result.results[game.name] = {
                gatekeeper: _play(worker, registry, spec, game, sampling, (league[spec.agent], league[gatekeeper]))
                for gatekeeper in spec.gatekeepers if gatekeeper in present}
        result.seconds = time.perf_counter() - start
        return result

    def _worker_for(self, spec: EvaluatorSpec):
        """The worker serving the base model of ``spec.policy``: the one already built when the
        settings are the same (they are, within a run)."""
        from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
        from sp_lightning.rollout import HFRolloutWorker

        key = json.dumps(spec.policy, sort_keys=True)
        if self._worker is None or key != self._policy:
            p = dict(spec.policy)
            p["lora"] = LoraSettings(**p["lora"]) if p.get("lora") else None
            p["tiny"] = TinyModelSettings(**p["tiny"])
            p["adapter_path"] = None  # checkpoints are loaded as named adapters beside an untouched one
            model, tokenizer = load_policy(PolicySettings(**p))
            # room for later tournaments' gatekeepers too (a first one may have fewer): an adapter
            # that does not fit is loaded from disk again at every call
            self._worker = HFRolloutWorker(model, tokenizer, max_adapters=max(8, len(spec.gatekeepers) + 1))
            self._policy, self._adapters = key, {}
        return self._worker

    def _register(self, worker, agent_id: str, path: str) -> None:
        """``agent_id``'s adapter served from ``path``; one registered before whose files have
        changed since (an id saved again) is dropped first, so stale weights are never served."""
        stamp = (path, _stamp(path))
        if self._adapters.get(agent_id) == stamp:
            return
        worker.forget_adapter(agent_id)
        worker.register_adapter(agent_id, path)
        self._adapters[agent_id] = stamp


def _stamp(folder: str) -> tuple:
    """The adapter folder's files with their sizes and modification times."""
    try:
        return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder)))
    except OSError:  # missing: register_adapter says so
        return ()


def run(spec: EvaluatorSpec) -> EvaluatorResult:
    """One tournament in a fresh ``Evaluator``."""
    return Evaluator().run(spec)


def _game(data: dict):
    """A game's settings rebuilt from the spec's plain data."""
    from sp_lightning.games import GameSettings
    from sp_lightning.rubric import RewardSettings

    return GameSettings(**{**data, "reward": RewardSettings(**data["reward"])})


def _play(worker, registry, spec: EvaluatorSpec, game, sampling, pairing) -> GatekeeperResult:
    """The agent against one gatekeeper (``pairing``: their records) in ``game``, its games
    recorded in the registry as rated matches."""
    from sp_lightning.evaluation.matches import Match, Serving, play
    from sp_lightning.games import parse_policy
    from sp_lightning.league.ratings import pool_matches

    agent, gatekeeper = pairing
    match = Match(game, parse_policy(agent.policy), parse_policy(gatekeeper.policy), spec.games_per_seat, spec.seed,
                  spec.env_overrides)
    result, games = play(worker, match, Serving(sampling))
    matches = []
    for seat, rollout in games:
        other = next(a for a in rollout.seats if a != seat)
        matches.append(([agent.id, gatekeeper.id], [rollout.outcome[seat], rollout.outcome[other]]))
    try:
        registry.record_matches(pool_matches(matches, spec.games_per_match), step=spec.step, source="eval")
    except ValueError as err:  # the league moved on (e.g. the checkpoint was pruned): keep going
        print(f"evaluator: not recorded: {err}", file=sys.stderr)
    return GatekeeperResult(win_rate=result.win_rate, payoff=result.payoff_mean,
                            legal_move_rate=result.legal_move_rate, games=result.games)


def serve(paths, evaluator: Evaluator | None = None) -> None:
    """Each spec path of ``paths`` (lines; blank ones skipped) played in turn, until they end:
    its output to ``SPEC.log``, then ``SPEC.result.json`` or ``SPEC.failed`` (see the module
    docstring). A failed tournament does not end the process; the next one is played."""
    evaluator = evaluator or Evaluator()
    for line in paths:
        spec_path = line.strip()
        if not spec_path:
            continue
        stem = spec_path.removesuffix(".json")
        with open(stem + ".log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                result = evaluator.run(EvaluatorSpec.read(spec_path))
            except Exception as err:  # noqa: BLE001 (any failure is reported; the next one is served)
                traceback.print_exc()
                with atomic_write(stem + ".failed", "w", durable=False) as failed:
                    failed.write(f"{type(err).__name__}: {err}\n")
                continue
        result.write(stem + ".result.json")


USAGE = "usage: python -m sp_lightning.league.evaluator SPEC.json | --serve [--parent PID] (spec paths on stdin)"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        parent = argv[1:]  # [] or ["--parent", PID]
        if parent and not (len(parent) == 2 and parent[0] == "--parent" and parent[1].isdigit()):
            raise SystemExit(USAGE)
        die_with_parent(int(parent[1]) if parent else None)
        serve(sys.stdin)
        return
    if len(argv) != 1 or argv[0].startswith("-"):
        raise SystemExit(USAGE)
    run(EvaluatorSpec.read(argv[0])).write(argv[0].removesuffix(".json") + ".result.json")


if __name__ == "__main__":
    main()
