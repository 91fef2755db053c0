"""``sp-lightning evaluate``: the config's model and games, one or several checkpoints, an
opponent, seeds of your choice. Prints a table with 95% intervals and returns (and with
``--output`` writes as JSON) the figures: ``{game: metrics}`` for one checkpoint,
``{checkpoint: {game: metrics}}`` for several.

A checkpoint is a Lightning ``.ckpt`` or a peft adapter directory (none: the untrained policy);
the opponent is ``bot:<name>``, ``base``, ``checkpoint:<adapter dir>`` or ``remote:<name>`` of
``data.remote_models``. The games are played as validation plays them (``data.eval``:
invalid-move rule, temperature), on the seeds given here: the training games against the
opponent, then the held-out games (``data.eval.held_out``, reported as ``held_out/<game>``),
each against its own opponent (``--opponent`` where it names none).
"""

from __future__ import annotations

import json
import os

from sp_lightning.cli.common import parse_command
from sp_lightning.errors import UserError, check_writable


def add_flags(parser) -> None:
    parser.add_argument("--checkpoint", nargs="+", default=[None],
                        help="Lightning .ckpt or peft adapter dir of the policy, or several (each evaluated in "
                             "turn on the same games); none, or \"\" among them: the untrained policy")
    parser.add_argument("--opponent", type=str | None, default=None,
                        help="bot:<name> | base | checkpoint:<adapter dir> | remote:<name of data.remote_models> "
                             "(default: the config's data.eval.opponent)")
    parser.add_argument("--learner", type=str | None, default=None,
                        help="with several learners (model.learners): the one evaluated, in every seat (default: "
                             "each seat's own learner)")
    parser.add_argument("--player", type=str | None, default=None,
                        help="bot:<name> | base: play it in the evaluated seats instead of the policy (a "
                             "yardstick's own figures on the same games and seats); not with --checkpoint or --learner")
    parser.add_argument("--held_out", type=bool, default=True,
                        help="also play the config's held-out games (data.eval.held_out), each against its own "
                             "opponent, reported as held_out/<game>")
    parser.add_argument("--games_per_seat", type=int, default=500)
    parser.add_argument("--seed", type=int, default=20261121, help="seed of deals, bots and sampling")
    parser.add_argument("--exclude_opponent_forfeits", type=bool, default=False,
                        help="leave games the opponent lost by its own invalid move out of the figures (they are "
                             "still counted, as opponent_forfeit_rate)")
    parser.add_argument("--exploitability", type=bool, default=False)
    parser.add_argument("--output", type=str | None, default=None, help="write the results as JSON to this file")


def main(args: list[str]) -> dict:
    ours, module, datamodule = parse_command("sp-lightning evaluate", __doc__, add_flags, args)
    check_flags(ours)
    engine = datamodule.build_engine(module)
    check_players(ours, engine, module.model)
    check_checkpoints(ours.checkpoint, module)
    engine.start()
    try:
        reports, rows, opponent = _evaluate_all(ours, module, datamodule)
    finally:
        engine.close()
    print(results_table(rows, f"vs {opponent}, {ours.games_per_seat} games per seat, seed {ours.seed}"))
    out = next(iter(reports.values())) if len(reports) == 1 else reports
    if ours.output:
        with open(ours.output, "w") as f:
            json.dump(_nan_as_null(out), f, indent=2)  # JSON has no NaN: a figure of no game is null
    return out


def check_flags(ours) -> None:
    """Refuse, before the model is served, flags that cannot work (an evaluation can take
    minutes: an --output directory that does not exist would otherwise fail at its end)."""
    if ours.games_per_seat < 1:
        raise UserError(f"--games_per_seat: expected >= 1, got {ours.games_per_seat}")
    if ours.seed < 0:
        raise UserError(f"--seed: expected an int >= 0, got {ours.seed}")
    folder = os.path.dirname(os.path.abspath(ours.output)) if ours.output else None
    if folder and not os.path.isdir(folder):
        raise UserError(f"--output {ours.output}: directory {folder} does not exist; create it or write elsewhere")
    if ours.output:
        check_writable(ours.output, "--output")


def check_checkpoints(paths: list[str | None], module) -> None:
    """Every --checkpoint read and checked against the config's model before any is played:
    a bad one named last would otherwise end the command after the others' games, their figures
    lost (--output is written at the end). Each file is read again when its turn comes."""
    for path in paths:
        if path:  # "" or none: the untrained policy
            module.check_policy_weights(path, "--checkpoint")


def check_players(ours, engine, model) -> None:
    """Refuse an --opponent or --learner the run cannot seat: a bot it does not have, an adapter
    directory that is not one or does not fit ``model``, a learner the config does not name."""
    from sp_lightning.checkpoints import check_adapter_opponent
    from sp_lightning.engine import check_remote
    from sp_lightning.types import PolicyKind, parse_policy

    names = [name for name in engine.learners.names if name]
    if ours.opponent:
        policy = parse_policy(ours.opponent, "--opponent")
        if policy.kind is PolicyKind.LEARNER and policy.name and policy.name not in names:
            raise UserError(f"--opponent {ours.opponent}: no such learner; expected one of "
                            f"{', '.join('learner:' + name for name in names) or 'learner (the config has one)'}")
        _check_bot(engine, policy, f"--opponent {ours.opponent}")
        check_remote(policy, engine.remotes, f"--opponent {ours.opponent}")
        if policy.kind is PolicyKind.CHECKPOINT:
            check_adapter_opponent(policy.name, "--opponent", model)
    if ours.player:
        player = parse_policy(ours.player, "--player")
        if player.kind not in (PolicyKind.BOT, PolicyKind.BASE):
            raise UserError(f"--player {ours.player}: expected bot:<name> or base (a checkpoint is evaluated with "
                            f"--checkpoint)")
        _check_bot(engine, player, f"--player {ours.player}")
        if ours.checkpoint != [None] or ours.learner:
            raise UserError(f"--player {ours.player}: plays instead of the policy; drop "
                            f"{'--checkpoint' if ours.checkpoint != [None] else '--learner'}")
        if ours.exploitability and player.kind is PolicyKind.BOT:
            raise UserError(f"--player {ours.player}: --exploitability scores a model policy's moves, and a bot "
                            f"has none to score; drop --exploitability, or evaluate --player base")
    if ours.learner and ours.learner not in names:
        have = f"model.learners names {', '.join(names)}" if names else "the config has one learner: drop --learner"
        raise UserError(f"--learner {ours.learner}: no such learner; {have}")


def _check_bot(engine, policy, flag: str) -> None:
    """A ``bot:<name>`` the run has, or the error that lists the ones it has."""
    from sp_lightning.types import PolicyKind

    if policy.kind is PolicyKind.BOT and not engine.has_bot(policy.name):
        raise UserError(f"{flag}: no such bot; expected one of {', '.join('bot:' + n for n in engine.bot_names())}")


def _evaluate_all(ours, module, datamodule):
    """Every checkpoint against the opponent in every game: the reports, the table's rows, and
    the opponent as served."""
    from sp_lightning.evaluation.matches import Match, Serving, play
    from sp_lightning.evaluation.strategy import exploitability_metrics
    from sp_lightning.types import parse_policy

    engine = datamodule.engine
    worker = engine.worker
    plan, opponent = _plan(ours, engine)
    reports, rows = {}, []
    tested = parse_policy(f"learner:{ours.learner}" if ours.learner else "learner", "--learner")
    if ours.learner:
        engine.learners.resolve(tested, "")  # a name the run has, or the error that lists them
    if ours.player:
        tested = parse_policy(ours.player, "--player")
    sampling, env_overrides = engine.eval_sampling(), engine.eval.env_overrides()
    untrained = {name: p.detach().clone() for name, p in module.named_parameters() if p.requires_grad}
    loaded = False
    for checkpoint in ours.checkpoint:
        if checkpoint:
            module.load_policy_weights(checkpoint)
            datamodule.send_weights(module)
            loaded = True
        elif loaded:  # the untrained policy ("") after a checkpoint: its own weights back
            module.load_state_dict(untrained, strict=False)
            datamodule.send_weights(module)
            loaded = False
        label = ours.player or checkpoint or "untrained"
        report = reports[label] = {}
        for game, name, against in plan:
            match = Match(game, tested, against, ours.games_per_seat, ours.seed, env_overrides)
            result, _ = play(worker, match, Serving(sampling, engine.remotes, engine.learners,
                                                    ours.exclude_opponent_forfeits))
            entry = {**result.as_metrics(name), "games": result.games}
            print(f"{name}: {label} vs {against}, seed {ours.seed}: {result.summary()}")
            rows.append((label, name if against == opponent else f"{name} vs {against}", result))
            if ours.exploitability:
                whole = tested if ours.learner or ours.player else engine.learners.whole()
                if whole is None:
                    raise ValueError("--exploitability: each seat has its own learner here; name the one to "
                                     "read with --learner")
                exploit_metrics, exploit = exploitability_metrics(worker, game, name, whole)
                entry.update(exploit_metrics)
                if exploit is not None:
                    print(f"{name}: exploitability {exploit.exploitability:.4f} (legal mass "
                          f"{exploit.legal_mass_mean:.3f}, min {exploit.legal_mass_min:.3f})")
            report[name] = entry
    return reports, rows, opponent


def _plan(ours, engine) -> tuple[list, str]:
    """``(game, name, opponent)`` for each game evaluated, and the opponent as served: the training
    games against ``--opponent`` (which stands for ``data.eval.opponent``), then (unless
    ``--held_out false``) each held-out game, named ``held_out/<game>``, against its own opponent,
    or ``--opponent`` where it names none. The engine serves each opponent (``Engine.served``)."""
    spec = ours.opponent or engine.eval.opponent
    opponent = engine.served(spec)
    plan = [(game, game.name, opponent) for game in engine.games]
    if ours.held_out:
        plan += [(held.game, f"held_out/{held.game.name}", engine.served(held.opponent_or(spec)))
                 for held in engine.eval.held_out]
    return plan, opponent


def _nan_as_null(value):
    if isinstance(value, dict):
        return {k: _nan_as_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_as_null(v) for v in value]
    return None if isinstance(value, float) and value != value else value


def results_table(rows: list, caption: str) -> str:
    """``(policy, game, EvalResult)`` rows as an aligned text table with 95% intervals."""
    header = ["policy", "game", "games", "win [95% CI]", "draw", "loss", "payoff [95% CI]", "legal", "opp. forfeits"]
    lines = [header]
    for label, game, r in rows:
        lines.append([label, game, str(r.games), f"{r.win_rate:.3f} [{r.win_ci[0]:.3f}, {r.win_ci[1]:.3f}]",
                      f"{r.draw_rate:.3f}", f"{r.loss_rate:.3f}",
                      f"{r.payoff_mean:+.3f} [{r.payoff_ci[0]:+.3f}, {r.payoff_ci[1]:+.3f}]",
                      f"{r.legal_move_rate:.3f}", f"{r.opponent_forfeit_rate:.3f}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    return "\n".join([caption, text[0], "-" * len(text[0]), *text[1:]])
