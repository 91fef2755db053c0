"""``sp-lightning play``: a person plays a game in the terminal against a policy or a bot.

    sp-lightning play --config configs/tictactoe_tiny.yaml \\
        --checkpoint runs/tictactoe_tiny/checkpoints/best.ckpt          # against the checkpoint
    sp-lightning play --game kuhn_poker_v1 --opponent bot:random --seat 1

The person sees exactly what a model in their seat is shown: their own observation (their card,
never the other's) and nothing of the other seats' texts beyond what the game itself reports.
They type a move as free text; as for a model, the move is the last ``[...]`` token, so ``4`` is
read as ``[4]`` for convenience when the game lists its moves. A move that is not legal is
refused and asked again (it never reaches the env, so the person never forfeits by a typo).
End of input (Ctrl-D) or ``quit`` leaves the game.

The other seats are served as in training and evaluation: ``learner`` (the config's policy, with
``--checkpoint`` loaded), ``base`` (the adapter disabled), ``checkpoint:<adapter dir>``, or
``bot:<name>``; model answers are read by the game's prompt template, so a malformed answer is an
invalid move handled by the env's ``invalid_move`` policy, as in training.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from envs import parse_move, play
from envs.bots import BOTS, make_bots
from sp_lightning.games import GameSettings, parse_policy
from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.types import ModelRequest, PolicyRef

QUIT = ("quit", "exit", "resign")


class PlayerQuit(Exception):
    """The person left the game (end of input, or ``quit``)."""


class HumanPlayer:
    """A policy (``envs.play`` style) that shows the observation and reads a move.

    ``read(prompt) -> str`` and ``write(text)`` default to ``input`` and ``print``; tests and
    notebooks pass their own.
    """

    def __init__(self, read: Callable[[str], str] = input, write: Callable[[str], None] = print):
        self.read = read
        self.write = write

    def __call__(self, observation: str, legal_actions: list[str]) -> str:
        self.write("\n" + observation)
        while True:
            try:
                text = self.read("your move> ").strip()
            except EOFError:
                raise PlayerQuit from None
            if text.lower() in QUIT:
                raise PlayerQuit
            if not legal_actions:  # a free-text game: the game judges the text
                return text
            move = parse_move(text) or parse_move(f"[{text}]")
            if move in legal_actions:
                return move
            self.write(f"{text!r} is not a legal move; legal: {' '.join(legal_actions)}")


class ModelPlayer:
    """A policy served by a rollout worker, prompted and read as the arena does it."""

    def __init__(self, worker: RolloutWorker, game: GameSettings, policy: PolicyRef,
                 sampling: SamplingSettings, role: str):
        self.worker, self.game, self.policy, self.sampling, self.role = worker, game, policy, sampling, role

    def __call__(self, observation: str, legal_actions: list[str]) -> str | None:
        template = self.game.prompt_template
        request = ModelRequest(self.role, template.messages(observation, self.role), self.policy, legal_actions)
        completion = self.worker.generate([request], self.sampling)[0]
        return template.parse(completion.text).action_text  # None: an invalid move


def play_main(args: list[str], read: Callable[[str], str] = input,
              write: Callable[[str], None] = print) -> dict[str, float] | None:
    """``sp-lightning play``: returns each seat's total reward, or None if the person quit."""
    import argparse

    from sp_lightning.cli import SelfPlayCLI, load_checkpoint
    from sp_lightning.data import SelfPlayDataModule
    from sp_lightning.module import SelfPlayModule

    parser = argparse.ArgumentParser(prog="sp-lightning play", description=__doc__.split("\n")[0])
    parser.add_argument("--game", help="game id (one of the config's games; default: its first). "
                        "Without --config, any registered game id")
    parser.add_argument("--opponent", default="learner",
                        help="learner | base | checkpoint:<adapter dir> | bot:<name> (default: learner)")
    parser.add_argument("--checkpoint", help="Lightning .ckpt or peft adapter dir loaded as the learner")
    parser.add_argument("--seat", type=int, default=0, help="your seat, 0-based (default 0: you move first)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the deal and of the opponents")
    parser.add_argument("--temperature", type=float, default=None,
                        help="opponent sampling temperature (default: the config's eval temperature)")
    ours, rest = parser.parse_known_args(args)
    for name in ("lightning.pytorch", "lightning.fabric"):  # no accelerator banners in a game
        logging.getLogger(name).setLevel(logging.WARNING)
    if not any(a == "--config" or a.startswith("--config=") for a in rest):
        if not ours.game:
            parser.error("give --config or --game")
        rest = [*rest, f"--data.games=[{{\"id\": \"{ours.game}\"}}]"]
    spec = parse_policy(ours.opponent)
    if spec.kind == "bot" and spec.name not in BOTS:
        parser.error(f"--opponent {ours.opponent}: no such bot; known: {', '.join(sorted(BOTS))}")
    cli = SelfPlayCLI(SelfPlayModule, SelfPlayDataModule, args=rest, run=False, seed_everything_default=0,
                      save_config_callback=None)
    module, dm = cli.model, cli.datamodule
    game = _pick_game(dm.games, ours.game, parser)
    env = game.make_env()
    seats = env.possible_agents
    if not 0 <= ours.seat < len(seats):
        parser.error(f"--seat {ours.seat}: {game.name} has seats 0..{len(seats) - 1}")
    human = seats[ours.seat]
    sampling = dm.eval_sampling()
    if ours.temperature is not None:
        import dataclasses

        sampling = dataclasses.replace(sampling, temperature=ours.temperature)
    policies: dict[str, Any] = {human: HumanPlayer(read, write)}
    if spec.kind == "bot":  # seeded as the arena seeds its bots
        bot = make_bots(ours.seed)[spec.name]
        policies.update({agent: bot.act for agent in seats if agent != human})
    else:
        if ours.checkpoint:
            load_checkpoint(module, ours.checkpoint)
        worker = dm.rollout_factory(module.model, module.tokenizer)
        if spec.kind == "checkpoint":  # an adapter directory, served under its name
            name = os.path.basename(os.path.normpath(spec.name))
            worker.register_adapter(name, spec.name)
            spec = PolicyRef("checkpoint", name)
        for agent in seats:
            if agent != human:
                policies[agent] = ModelPlayer(worker, game, spec, sampling, agent)
    write(f"{game.name}: you are {human} (seat {ours.seat}) against {ours.opponent}. "
          "Type a move, e.g. [4] (or 4); quit to leave.")
    try:
        totals = play(env, policies, seed=ours.seed)
    except PlayerQuit:
        write("\nYou left the game.")
        return None
    write("\n" + env.observe(human)["text"])
    write("Result: " + ", ".join(f"{a} {r:+g}" for a, r in totals.items()))
    return totals


def _pick_game(games: list[GameSettings], wanted: str | None, parser) -> GameSettings:
    if wanted is None:
        return games[0]
    for game in games:
        if wanted in (game.id, game.name):
            return game
    parser.error(f"--game {wanted}: not among the config's games ({', '.join(g.name for g in games)})")
    raise AssertionError  # parser.error exits
