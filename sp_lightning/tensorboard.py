"""TensorBoard you can read: charts grouped by what they are about, and games you can read.

``TensorBoardGames`` (a Lightning callback; ``SelfPlayCLI`` adds one whenever the logger is
TensorBoard and the config names none) does three things:

- at the start of a fit it writes a custom-scalars layout (TensorBoard's "Custom Scalars" tab):
  training (loss terms, entropy, gradient norm, learning rate), rollout (win/draw/invalid rates
  per game, throughput), league (the learner's rating beside the baselines' and the past best, the
  opponent-type mix, win rate per opponent type) and evaluation (validation win rate with its
  interval, legal moves, exploitability). Charts match tags by regular expression, so every game
  and every baseline gets its line without listing them;
- every ``every`` steps it logs one whole game of that step as text ("Text" tab, tag
  ``games/decoded``): who sat where, the outcome and rubric rewards, and for every move the
  prompt the seat saw (decoded, chat tokens included), its answer, the move the game made of it,
  and the move's reward and advantage (learner moves only: the numbers it was trained with);
- under asynchronous collection, every step's histogram of its records' policy lags
  ("Histograms" tab, tag ``rollout/policy_lag``).

``read_scalars`` reads the charts back (a notebook's plots of a run, ratings over steps...).
"""

from __future__ import annotations

import os
import re
from typing import Any

from lightning.pytorch.callbacks import Callback

from sp_lightning.engine import engine_of
from sp_lightning.types import Rollout

LAYOUT: dict[str, dict[str, list[Any]]] = {
    "training": {
        "loss": ["Multiline", [r"train/loss$", r"train/pg_loss$", r"train/kl$"]],
        "entropy and magnet": ["Multiline", [r"train/entropy$", r"train/magnet_kl$"]],
        "gradient norm": ["Multiline", [r"train/grad_norm$"]],
        "learning rate": ["Multiline", [r"train/lr$"]],
        "step seconds": ["Multiline", [r"train/step_seconds$", r"train/update_seconds$", r"rollout/seconds$"]],
    },
    "rollout": {
        "learner win rate in training games": ["Multiline", [r"games/[^/]+/win$"]],
        "draws and losses": ["Multiline", [r"games/[^/]+/draw$", r"games/[^/]+/loss$"]],
        "invalid moves": ["Multiline", [r"games/[^/]+/invalid_move_rate$", r"games/[^/]+/cut_off_.*"]],
        "tokens per second": ["Multiline", [r"rollout/tokens_per_s$", r"train/tokens_per_s$"]],
    },
    "league": {
        "ratings (TrueSkill mu - 3 sigma)": ["Multiline", [r"league/(learner|best|baseline/[^/]+)/rating$"]],
        "Elo": ["Multiline", [r"league/(learner|best|baseline/[^/]+)/elo$"]],
        "opponent-type mix": ["Multiline", [r"league/mix/.*"]],
        "win rate per opponent type": ["Multiline", [r"league/win_rate/.*"]],
        "background evaluation": ["Multiline", [r"league/eval/win_rate.*"]],
    },
    "evaluation": {
        "win rate (95% interval)": ["Margin", [r"val/.*/win_rate$"]],  # filled in per game below
        "legal moves": ["Multiline", [r"val/[^/]+/legal_move_rate$"]],
        "against the other opponents (data.eval.also_against): wins and draws":
            ["Multiline", [r"val/[^/]+/vs/[^/]+/(win|draw)_rate$"]],
        "payoff": ["Multiline", [r"val/[^/]+/payoff$", r"val/[^/]+/payoff_over_opponents$"]],
        "exploitability": ["Multiline", [r".*exploitability.*"]],
    },
}


def custom_scalars_layout(game_names: list[str]) -> dict[str, dict[str, list[Any]]]:
    """``LAYOUT`` with one margin chart (value, low, high) per game's validation win rate:
    TensorBoard's margin charts take exact tags, not patterns."""
    layout = {category: dict(charts) for category, charts in LAYOUT.items()}
    evaluation = layout["evaluation"]
    del evaluation["win rate (95% interval)"]
    for name in game_names:
        tags = [f"val/{name}/win_rate", f"val/{name}/win_rate_ci_low", f"val/{name}/win_rate_ci_high"]
        evaluation[f"{name} win rate (95% interval)"] = ["Margin", tags]
    return layout


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def game_markdown(rollout: Rollout, tokenizer) -> str:
    """One game as markdown: seats, outcome, then every move (prompt, answer, reward, advantage)."""
    seats = ", ".join(f"{role}: {ref.kind}{':' + ref.name if ref.name else ''}" for role, ref in rollout.seats.items())
    outcome = ", ".join(f"{role} {value:+g}" for role, value in rollout.outcome.items())
    rewards = ", ".join(f"{role} {value:+.3f}" for role, value in rollout.rewards.items())
    lines = [f"**{rollout.episode}** · seats: {seats}", "", f"outcome: {outcome} · rubric rewards: {rewards}", ""]
    for turn, step in enumerate(rollout.steps, 1):
        completion = step.completion
        prompt = tokenizer.decode(completion.prompt_ids) if completion.prompt_ids else "(a bot: no prompt)"
        move = step.info.get("parsed_move")
        invalid = " · **invalid**" if step.info.get("invalid_move") else ""
        lines += [
            f"{turn}. **{step.role}** ({completion.policy.kind}) · reward {_number(step.reward)} · "
            f"advantage {_number(step.advantage)}{invalid}",
            "",
            "    " + prompt.replace("\n", "\n    "),  # an indented block: shown as written
            "",
            f"    answer: {completion.text!r} -> move {move!r}",
            "",
        ]
    return "\n".join(lines)


def pick_game(rollouts: list[Rollout]) -> Rollout | None:
    """The first game of the batch in which the learner moved (else the first game)."""
    for rollout in rollouts:
        if any(step.trainable for step in rollout.steps):
            return rollout
    return rollouts[0] if rollouts else None


class TensorBoardGames(Callback):
    """The custom-scalars layout at fit start, and one decoded game every ``every`` steps."""

    def __init__(self, every: int = 50):
        if every < 1:
            raise ValueError(f"TensorBoardGames.every: expected an int >= 1, got {every!r}")
        self.every = every

    @staticmethod
    def _writer(trainer):
        from lightning.pytorch.loggers import TensorBoardLogger

        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.experiment
        return None

    def on_fit_start(self, trainer, pl_module) -> None:
        writer = self._writer(trainer) if trainer.is_global_zero else None
        if writer is not None:
            games = [g.name for g in engine_of(trainer).games]
            writer.add_custom_scalars(custom_scalars_layout(games))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        writer = self._writer(trainer) if trainer.is_global_zero else None
        if writer is None:
            return
        lags = getattr(getattr(pl_module, "last_batch", None), "policy_lags", None)
        if lags:  # asynchronous collection: the batch's policy lags, every step
            import torch

            writer.add_histogram("rollout/policy_lag", torch.tensor(lags, dtype=torch.float32), step)
        if step % self.every and step != 1:  # step 1: a game at once
            return
        rollout = pick_game(getattr(pl_module, "last_rollouts", []))
        if rollout is not None:
            writer.add_text("games/decoded", game_markdown(rollout, pl_module.tokenizer), step)


def read_scalars(logdir: str | os.PathLike[str], pattern: str = ".*") -> dict[str, list[tuple[int, float]]]:
    """Every scalar whose tag matches ``pattern`` (a regular expression, searched), as
    ``tag -> [(step, value), ...]`` sorted by step, from all event files under ``logdir`` (a
    TensorBoardLogger's save_dir or one of its versions). A step written twice (a resumed run
    logs again the steps after its checkpoint) keeps the value written last."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    folders = sorted({root for root, _, files in os.walk(logdir) if any("tfevents" in f for f in files)})
    if not folders:
        raise FileNotFoundError(f"read_scalars: no TensorBoard event files under {logdir}")
    wanted = re.compile(pattern)
    latest: dict[str, dict[int, tuple[float, float]]] = {}  # tag -> step -> (wall time, value)
    for folder in folders:
        events = EventAccumulator(folder, size_guidance={SCALARS: 0})  # 0: keep every point
        events.Reload()
        for tag in events.Tags()[SCALARS]:
            if not wanted.search(tag):
                continue
            points = latest.setdefault(tag, {})
            for event in events.Scalars(tag):
                if event.step not in points or event.wall_time >= points[event.step][0]:
                    points[event.step] = (event.wall_time, event.value)
    return {tag: [(step, value) for step, (_, value) in sorted(points.items())] for tag, points in latest.items()}
