"""``sp-lightning crossplay``: a round robin among a league's agents (its baselines and kept
checkpoints) and any checkpoints named, in the config's two-seat game: the payoff matrix,
Bradley-Terry and Elo ratings with bootstrap intervals, written as JSON, two PNGs and
TensorBoard events under ``--output_dir`` (see sp_lightning.evaluation.crossplay_report)."""

from __future__ import annotations

import os
import sys
import tempfile

from sp_lightning.cli.common import fail, parse_command
from sp_lightning.errors import UserError, check_writable

PROG = "sp-lightning crossplay"


def add_flags(parser) -> None:
    parser.add_argument("--league", type=str | None, default=None,
                        help="league directory (holding league.json) whose agents play")
    parser.add_argument("--checkpoint", nargs="*", default=[],
                        help="further players: Lightning .ckpt files (one player per learner of a run with "
                             "several: <file>-<learner>) or peft adapter dirs")
    parser.add_argument("--max_checkpoints", type=int, default=8,
                        help="the league's kept checkpoints, thinned evenly over training steps to at most this many")
    parser.add_argument("--no_baselines", action="store_true", help="leave the league's baseline bots out")
    parser.add_argument("--games_per_seat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261121, help="seed of deals, bots, sampling and the bootstrap")
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples of the ratings")
    parser.add_argument("--output_dir", default="crossplay")


def main(args: list[str]) -> dict:
    from sp_lightning.evaluation.crossplay_ratings import rate
    from sp_lightning.evaluation.crossplay_report import write_report

    ours, module, datamodule = parse_command(PROG, __doc__, add_flags, args)
    check_flags(ours)
    engine = datamodule.build_engine(module)
    if len(engine.games) != 1:
        fail(PROG, f"expected a config with one game, got {[g.name for g in engine.games]}")
    engine.start()
    try:
        table, served = _play_round_robin(ours, module, engine)
    finally:
        engine.close()
    ratings = rate(table, resamples=ours.resamples, seed=ours.seed)
    meta = {"game": engine.games[0].name, "games_per_seat": ours.games_per_seat, "seed": ours.seed,
            "league": ours.league, "policies": {k: str(v) for k, v in served.items()}}
    paths = write_report(table, ratings, ours.output_dir, meta)
    print("row's mean payoff against column:")
    print(table.table())
    print(ratings.table())
    print("written: " + ", ".join(paths.values()))
    return {"table": table, "ratings": ratings, "paths": paths}


def check_flags(ours) -> None:
    """Refuse, before any game, flags that cannot work (a round robin takes minutes: a report
    that cannot be written would otherwise fail after the last game)."""
    for flag in ("games_per_seat", "resamples"):
        if getattr(ours, flag) < 1:
            raise UserError(f"--{flag}: expected >= 1, got {getattr(ours, flag)}")
    if ours.seed < 0:
        raise UserError(f"--seed: expected an int >= 0, got {ours.seed}")
    if ours.max_checkpoints < 0:
        raise UserError(f"--max_checkpoints: expected >= 0, got {ours.max_checkpoints}")
    check_writable(ours.output_dir, "--output_dir", folder=True)
    for path in ours.checkpoint:
        if not os.path.exists(path):
            raise UserError(f"--checkpoint {path}: no such file or directory; expected a Lightning .ckpt or a "
                            f"peft adapter directory")


def _play_round_robin(ours, module, engine):
    """The cross-play table of the league's agents and the named checkpoints, and who played."""
    from sp_lightning.evaluation.crossplay import cross_play
    from sp_lightning.evaluation.matches import serve_policy

    game, worker = engine.games[0], engine.worker
    policies = league_players(ours.league, ours.max_checkpoints, not ours.no_baselines) if ours.league else {}
    from_league = set(policies)
    with tempfile.TemporaryDirectory() as scratch:
        for path in ours.checkpoint:
            label = unique_label(path, policies)
            if os.path.isdir(path):
                policies[label] = f"checkpoint:{path}"
                continue
            # a Lightning .ckpt: its adapter, saved where the worker can load it; one player per
            # learner of a run with several (model.learners), named <label>-<learner>
            module.load_policy_weights(path)
            for learner in module.learners.names:
                name = f"{label}-{learner}" if learner else label
                module.save_adapter(os.path.join(scratch, name), learner)
                policies[name] = f"checkpoint:{os.path.join(scratch, name)}"
        if len(policies) < 2:
            fail(PROG, f"expected at least 2 players (--league, --checkpoint), got {list(policies)}")
        # adapters registered by their unique labels: two directories may share a name
        served = {label: serve_policy(worker, spec, name=label, fits=module.model,
                                      key="--league" if label in from_league else "--checkpoint")
                  for label, spec in policies.items()}
        print(f"cross-play of {len(served)} agents in {game.name}, {ours.games_per_seat} games per seat and pair")
        table = cross_play(worker, game, served, games_per_seat=ours.games_per_seat, sampling=engine.eval_sampling(),
                           seed=ours.seed, env_overrides=engine.eval.env_overrides())
    return table, served


def unique_label(path: str, taken) -> str:
    """A player's label: the file or directory name without extension (``last`` for
    ``run/checkpoints/last.ckpt``), prefixed with its parent directories' names until no other
    player has it (``runB-checkpoints-last``), or numbered as a last resort."""
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    parts[-1] = os.path.splitext(parts[-1])[0]
    for depth in range(1, len(parts) + 1):
        label = "-".join(p for p in parts[-depth:] if p)
        if label and label not in taken:
            return label
    k = 2
    while f"{parts[-1]}-{k}" in taken:
        k += 1
    return f"{parts[-1]}-{k}"


def league_players(league_dir: str, max_checkpoints: int, baselines: bool = True) -> dict[str, str]:
    """Label -> policy spec of a league's baselines and kept checkpoints (at most
    ``max_checkpoints``, spread evenly over their training steps, the last one always in)."""
    from sp_lightning.league.registry import LeagueRegistry

    path = os.path.join(league_dir, "league.json")
    if not os.path.isfile(path):
        raise UserError(f"--league {league_dir}: no league.json there; expected a run's league directory "
                        f"(its data.league.dir, e.g. runs/<run>/league)")
    try:
        agents = LeagueRegistry(path).agents()
    except ValueError as error:  # not JSON, or not a league's
        raise UserError(f"--league {league_dir}: {error}") from error
    players = {a.id: a.policy for a in agents if baselines and a.type == "baseline"}
    adapters, missing = {}, []  # where each kept checkpoint's adapter is now (the league directory may have moved)
    for a in agents:
        if a.type == "checkpoint":
            here = os.path.join(league_dir, "adapters", a.id)
            # the folder named first: a copied league is played from its copy, not its original
            found = [p for p in (here, a.adapter_path) if p and os.path.isdir(p)]
            if found:
                adapters[a.id] = found[0]
            else:
                missing.append(a.id)
    if missing:  # said, not left out in silence: the table would lack them without a word
        print(f"{PROG}: warning: --league {league_dir}: no adapter folder for {', '.join(missing)} (neither "
              f"{os.path.join(league_dir, 'adapters', '<id>')} nor the path league.json records); they do not play",
              file=sys.stderr)
    kept = sorted((a for a in agents if a.id in adapters), key=lambda a: a.step or 0)
    if max_checkpoints < len(kept):
        if max_checkpoints <= 1:
            picks = {len(kept) - 1} if max_checkpoints == 1 else set()
        else:
            picks = {round(k * (len(kept) - 1) / (max_checkpoints - 1)) for k in range(max_checkpoints)}
        kept = [a for k, a in enumerate(kept) if k in picks]
    players.update({a.id: f"checkpoint:{adapters[a.id]}" for a in kept})
    return players
