"""The background evaluator: a tournament of one league checkpoint against gatekeepers.

It runs as its own process (``python -m sp_lightning.league.evaluator SPEC.json``), started by
the :class:`~sp_lightning.league.callbacks.LeagueCallback` while training goes on. It rebuilds
the base model from the policy settings (deterministic: adapter-only checkpoints depend on it),
loads the checkpoints' adapters from disk as named peft adapters, plays every pairing through
``sp_lightning.evaluation.matches.play`` with its own seeds, and records the games in the league
registry (under its file lock, so the trainer's updates and its own never overwrite each other).
A summary goes to ``SPEC.result.json`` for the callback to log.
"""

from __future__ import annotations

import ctypes
import json
import signal
import sys
import time
from dataclasses import asdict


def spec_for(policy, game, sampling, registry_path: str, agent: str, gatekeepers: list[str],
             games_per_seat: int, seed: int, step: int, threads: int, env_overrides: dict | None = None,
             games_per_match: int = 1) -> dict:
    """The evaluator's job description, as plain JSON data."""
    return {
        "policy": asdict(policy),
        "game": {"id": game.id, "env_kwargs": game.env_kwargs, "system_prompt": game.system_prompt,
                 "template": game.template, "template_args": game.template_args, "reward": asdict(game.reward)},
        "sampling": asdict(sampling),
        "registry": registry_path,
        "agent": agent,
        "gatekeepers": gatekeepers,
        "games_per_seat": games_per_seat,
        "games_per_match": games_per_match,
        "seed": seed,
        "step": step,
        "threads": threads,
        "env_overrides": env_overrides or {},
    }


def die_with_parent() -> None:
    """Linux: end this process when the trainer dies (even by SIGKILL), so that an orphaned
    evaluator never writes into a league that a resumed run has restored."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run(spec: dict) -> dict:
    import torch

    from sp_lightning.evaluation.matches import play
    from sp_lightning.games import GameSettings, parse_policy
    from sp_lightning.league.ratings import pool_matches
    from sp_lightning.league.registry import LeagueRegistry
    from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
    from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
    from sp_lightning.rubric import RewardSettings

    torch.set_num_threads(spec["threads"])
    p = dict(spec["policy"])
    p["lora"] = LoraSettings(**p["lora"]) if p.get("lora") else None
    p["tiny"] = TinyModelSettings(**p["tiny"])
    p["adapter_path"] = None  # checkpoints are loaded as named adapters beside an untouched one
    model, tokenizer = load_policy(PolicySettings(**p))
    game_spec = dict(spec["game"])
    game_spec["reward"] = RewardSettings(**game_spec["reward"])
    game = GameSettings(**game_spec)
    sampling = SamplingSettings(**spec["sampling"])
    registry = LeagueRegistry(spec["registry"])
    league = registry.read().agents
    worker = HFRolloutWorker(model, tokenizer, max_adapters=len(spec["gatekeepers"]) + 1)
    present = [a for a in [spec["agent"], *spec["gatekeepers"]] if a in league]  # pruned since: skipped
    for agent_id in present:
        if league[agent_id].adapter_path:
            worker.register_adapter(agent_id, league[agent_id].adapter_path)
    if spec["agent"] not in league:
        return {"agent": spec["agent"], "step": spec["step"], "results": {}, "seconds": 0.0}
    agent = league[spec["agent"]]
    summary = {"agent": agent.id, "step": spec["step"], "results": {}, "seconds": 0.0}
    start = time.perf_counter()
    for gatekeeper_id in [g for g in spec["gatekeepers"] if g in present]:
        gatekeeper = league[gatekeeper_id]
        result, games = play(worker, game, policy=parse_policy(agent.policy),
                             opponent=parse_policy(gatekeeper.policy),
                             games_per_seat=spec["games_per_seat"], sampling=sampling, seed=spec["seed"],
                             env_overrides=spec["env_overrides"])
        matches = []
        for seat, rollout in games:
            other = next(a for a in rollout.seats if a != seat)
            matches.append(([agent.id, gatekeeper_id], [rollout.outcome[seat], rollout.outcome[other]]))
        try:
            registry.record_matches(pool_matches(matches, spec["games_per_match"]),
                                    step=spec["step"], source="eval")
        except ValueError as err:  # the league moved on (e.g. the checkpoint was pruned): keep going
            print(f"evaluator: not recorded: {err}", file=sys.stderr)
        summary["results"][gatekeeper_id] = {"win_rate": result.win_rate, "payoff": result.payoff_mean,
                                             "legal_move_rate": result.legal_move_rate, "games": result.games}
    summary["seconds"] = time.perf_counter() - start
    return summary


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m sp_lightning.league.evaluator SPEC.json")
    with open(argv[0]) as f:
        spec = json.load(f)
    summary = run(spec)
    with open(argv[0].removesuffix(".json") + ".result.json", "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main()
