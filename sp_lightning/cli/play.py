"""``sp-lightning play``: a person plays a game in the terminal against a policy or a bot.

    sp-lightning play --config configs/tictactoe_tiny.yaml \\
        --checkpoint runs/tictactoe_tiny/checkpoints/best.ckpt          # against the checkpoint
    sp-lightning play --game kuhn_poker_v1 --opponent bot:random --seat 1

``--config`` (repeatable) and any fit option (``--model...``, ``--data...``) choose the model
and the games, as for fit: give the config a checkpoint was trained with. Without ``--config``:
the default tiny model and ``--game``. What the person sees and how moves are read:
``sp_lightning.play``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from envs import play
from sp_lightning.cli.common import fail, parse_command
from sp_lightning.engine import check_remote
from sp_lightning.errors import UserError
from sp_lightning.play import HumanPlayer, PlayerQuit, announced, format_result, opponent_players, require_bot
from sp_lightning.types import PolicyKind, parse_policy

PROG = "sp-lightning play"


def add_flags(parser) -> None:
    parser.add_argument("--game", type=str | None, default=None,
                        help="game id (one of the config's games; default: its first). Without --config, any "
                             "registered game id")
    parser.add_argument("--opponent", default="learner",
                        help="learner | base | checkpoint:<adapter dir> | bot:<name> | remote:<name of "
                             "data.remote_models> (default: learner)")
    parser.add_argument("--checkpoint", type=str | None, default=None,
                        help="Lightning .ckpt or peft adapter dir loaded as the learner")
    parser.add_argument("--seat", type=int, default=0, help="your seat, 0-based (default 0: you move first)")
    parser.add_argument("--seed", type=int | None, default=None, help="seed of the deal and of the opponents")


def main(args: list[str], read: Callable[[str], str] = input,
         write: Callable[[str], None] = print) -> dict[str, float] | None:
    """Returns each seat's total reward, or None if the person quit."""
    for name in ("lightning.pytorch", "lightning.fabric"):  # no accelerator banners in a game
        logging.getLogger(name).setLevel(logging.WARNING)
    ours, module, datamodule = parse_command(PROG, __doc__, add_flags, list(args), prepare=_game_without_config)
    if ours.seed is not None and ours.seed < 0:
        raise UserError(f"--seed: expected an int >= 0, got {ours.seed}")
    spec = parse_policy(ours.opponent, "--opponent")
    try:
        require_bot(spec, "--opponent")
    except ValueError as exc:
        fail(PROG, str(exc))
    if spec.kind is PolicyKind.CHECKPOINT:  # before the game starts, not after the person's first move
        from sp_lightning.checkpoints import check_adapter_opponent

        check_adapter_opponent(spec.name, "--opponent", module.model)
    engine = datamodule.build_engine(module)
    check_remote(spec, engine.remotes, f"--opponent {ours.opponent}")  # before the game starts
    engine.start()
    try:
        return _play_one_game(ours, module, datamodule, spec, read, write)
    finally:
        engine.close()


def _play_one_game(ours, module, datamodule, spec, read, write) -> dict[str, float] | None:
    engine = datamodule.engine
    game = _pick_game(engine.games, ours.game)
    env = game.make_env()
    seats = env.possible_agents
    if not 0 <= ours.seat < len(seats):
        fail(PROG, f"--seat {ours.seat}: {game.name} has seats 0..{len(seats) - 1}")
    human = seats[ours.seat]
    worker = None
    if spec.kind not in (PolicyKind.BOT, PolicyKind.REMOTE):
        if ours.checkpoint:
            try:  # a file that is not a checkpoint of this config: the message says which and why
                module.load_policy_weights(ours.checkpoint)
            except UserError as exc:
                fail(PROG, str(exc))
            datamodule.send_weights(module)
        worker = engine.worker
    policies: dict[str, Any] = {human: HumanPlayer(read, write)}
    for agent, player in opponent_players(game, human, ours.opponent, worker, engine.eval_sampling(),
                                          ours.seed, engine.remotes).items():
        policies[agent] = announced(player, agent, write)
    against = ours.opponent
    if spec.kind is PolicyKind.LEARNER:
        against = ours.checkpoint or "the untrained policy (no --checkpoint: expect invalid moves)"
    example = (game.info.moves[0] if game.info is not None and game.info.moves else "[4]")
    write(f"{game.name}: you are {human} (seat {ours.seat}) against {against}. "
          f"Type a move, e.g. {example} (or {example.strip('[]')}); quit to leave.")
    try:
        totals = play(env, policies, seed=ours.seed)
    except PlayerQuit:
        write("\nYou left the game.")
        return None
    write("\n" + env.observe(human)["text"])
    write(format_result(totals))
    return totals


def _game_without_config(config, parser) -> None:
    """Without a config's games, ``--game`` is the one game (with every default)."""
    if config["data"]["games"]:
        return
    if not config["game"]:
        fail(PROG, "give --config or --game")
    config["data"]["games"] = parser.parse_object({"data": {"games": [{"id": config["game"]}]}},
                                                  defaults=False)["data"]["games"]


def _pick_game(games, wanted: str | None):
    if wanted is None:
        return games[0]
    for game in games:
        if wanted in (game.id, game.name):
            return game
    fail(PROG, f"--game {wanted}: not among the config's games "
                     f"({', '.join(g.name for g in games)})")
