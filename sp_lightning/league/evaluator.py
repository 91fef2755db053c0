"""The background evaluator: a tournament of one league checkpoint against gatekeepers.

It runs as its own process (``python -m sp_lightning.league.evaluator SPEC.json``), started by
the league's callback (``evaluator_process.EvaluatorProcess``) while training goes on. It
rebuilds the base model from the policy settings (deterministic: adapter-only checkpoints depend
on it), loads the checkpoints' adapters from disk as named peft adapters, plays every pairing in
every game of the spec through ``sp_lightning.evaluation.matches.play`` with its own seeds, and
records the games in the league registry (under its file lock, so the trainer's updates and its
own never overwrite each other). The summary goes to ``SPEC.result.json`` for the callback to log.
Spec and summary are ``messages.EvaluatorSpec`` and ``messages.EvaluatorResult``.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import time

from sp_lightning.league.messages import EvaluatorResult, EvaluatorSpec, GatekeeperResult


def die_with_parent() -> None:
    """Linux: end this process when the trainer dies (even by SIGKILL), so that an orphaned
    evaluator never writes into a league that a resumed run has restored."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run(spec: EvaluatorSpec) -> EvaluatorResult:
    """The tournament of ``spec``: the agent against each gatekeeper still in the league, in each
    game (imports here: the trainer imports this module for ``die_with_parent`` alone)."""
    import torch

    from sp_lightning.league.registry import LeagueRegistry
    from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
    from sp_lightning.rollout import HFRolloutWorker, SamplingSettings

    torch.set_num_threads(spec.threads)
    p = dict(spec.policy)
    p["lora"] = LoraSettings(**p["lora"]) if p.get("lora") else None
    p["tiny"] = TinyModelSettings(**p["tiny"])
    p["adapter_path"] = None  # checkpoints are loaded as named adapters beside an untouched one
    model, tokenizer = load_policy(PolicySettings(**p))
    sampling = SamplingSettings(**spec.sampling)
    registry = LeagueRegistry(spec.registry)
    league = registry.read().agents
    worker = HFRolloutWorker(model, tokenizer, max_adapters=len(spec.gatekeepers) + 1)
    present = [a for a in [spec.agent, *spec.gatekeepers] if a in league]  # pruned since: skipped
    for agent_id in present:
        if league[agent_id].adapter_path:
            worker.register_adapter(agent_id, league[agent_id].adapter_path)
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m sp_lightning.league.evaluator SPEC.json")
    run(EvaluatorSpec.read(argv[0])).write(argv[0].removesuffix(".json") + ".result.json")


if __name__ == "__main__":
    main()
