"""The ``sp-lightning`` command: LightningCLI over SelfPlayModule and SelfPlayDataModule.

    sp-lightning fit --config configs/tictactoe_tiny.yaml
    sp-lightning validate --config configs/tictactoe_tiny.yaml --ckpt_path <ckpt> --data.eval.games 400

    sp-lightning evaluate --config configs/kuhn_poker_league_tiny.yaml --checkpoint <ckpt> \
        --opponent bot:random --games_per_seat 1000 --seed 7 --exploitability true
    sp-lightning play --config configs/tictactoe_tiny.yaml --checkpoint <ckpt>   # you against it
    sp-lightning rollout --config configs/debate_tiny.yaml --steps 2 --show 1      # no training
    sp-lightning crossplay --config configs/tictactoe_league_tiny.yaml \
        --league runs/tictactoe_league_tiny/league --output_dir crossplay   # ratings and plots

``validate`` is the in-training evaluation: the policy against the evaluation opponent
(RandomBot by default) over ``data.eval.games`` games per game, split evenly over the seats, with
95% intervals. ``evaluate`` runs the same evaluation (``sp_lightning.evaluation``) outside the
Trainer, on seeds of your choice: a checkpoint (a Lightning ``.ckpt`` or a peft adapter
directory; none is the untrained policy) against an opponent (``bot:<name>``, ``base`` or
``checkpoint:<adapter dir>`` or ``remote:<name>`` of ``data.remote_models``), with
exploitability where the game has it. Without ``--checkpoint`` it evaluates the untrained policy.
``rollout`` plays the config's batches (any backend, remote servers included) and prints them,
credited, without training.
"""

from __future__ import annotations

import warnings

from lightning.pytorch.cli import LightningCLI

from sp_lightning.data import SelfPlayDataModule
from sp_lightning.module import SelfPlayModule

# Lightning flags training_step(dataloader_iter) as experimental; we rely on it to stay on-policy.
warnings.filterwarnings("ignore", message=".*Found `dataloader_iter` argument.*")
warnings.filterwarnings("ignore", message=".*You are using the `dataloader_iter` step flavor.*")
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
warnings.filterwarnings("ignore", message=".*Your `IterableDataset` has `__len__` defined.*")
# A checkpoint every N steps holds the weights after that step's update: what a resume needs.
warnings.filterwarnings("ignore", message=".*Using ModelCheckpoint with manual optimization.*")


def default_precision() -> str:
    """bf16 autocast where the hardware has it (a CUDA GPU with bf16), full precision elsewhere."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


class SelfPlayCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({f"trainer.{key}": value for key, value in trainer_defaults().items()})

    def instantiate_trainer(self, **kwargs):
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return finish_trainer(super().instantiate_trainer(**with_default_progress_bar(config)))


def trainer_defaults() -> dict:
    """The Trainer settings ``sp-lightning fit`` uses where a config is silent: one optimizer step
    per batch of games, validation every 50 steps (not per epoch: the stream has none), no sanity
    validation, every step logged."""
    return {
        "precision": default_precision(),
        "max_steps": 100,
        "check_val_every_n_epoch": None,
        "val_check_interval": 50,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "accelerator": "auto",
        "devices": 1,
    }


def make_trainer(**kwargs):
    """A ``lightning.Trainer`` as ``sp-lightning fit`` builds it, for notebooks and scripts:
    :func:`trainer_defaults` under ``kwargs``, then :func:`finish_trainer`."""
    import lightning as L

    return finish_trainer(L.Trainer(**with_default_progress_bar({**trainer_defaults(), **kwargs})))


def finish_trainer(trainer):
    """Checkpoint files a kill cannot corrupt (sp_lightning.checkpoint_io) unless the trainer
    has its own checkpoint IO, and readable TensorBoard (sp_lightning.tensorboard)."""
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    from sp_lightning.checkpoint_io import AtomicCheckpointIO

    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
    add_tensorboard_games(trainer)
    return trainer


def with_default_progress_bar(trainer_kwargs: dict) -> dict:
    """``trainer_kwargs`` with ``progress.default_progress_bar()`` among the callbacks, unless they
    hold a progress bar of their own or the bar is switched off: Lightning adds its default bar
    only when the callbacks have none, so one given here takes its place and one the config
    chose stays."""
    from lightning.pytorch.callbacks import ProgressBar

    from sp_lightning.progress import default_progress_bar

    callbacks = trainer_kwargs.get("callbacks") or []
    callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if trainer_kwargs.get("enable_progress_bar", True) is False or any(isinstance(c, ProgressBar) for c in callbacks):
        return trainer_kwargs
    return {**trainer_kwargs, "callbacks": [*callbacks, default_progress_bar()]}


def add_tensorboard_games(trainer) -> None:
    """With a TensorBoard logger, the chart layout and decoded games (sp_lightning.tensorboard),
    unless the config added its own ``TensorBoardGames``."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from sp_lightning.tensorboard import TensorBoardGames

    has_tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers)
    if has_tensorboard and not any(isinstance(c, TensorBoardGames) for c in trainer.callbacks):
        trainer.callbacks.append(TensorBoardGames())


def load_checkpoint(module: SelfPlayModule, path: str) -> None:
    """Load a policy into ``module``: a Lightning ``.ckpt`` (its trainable weights) or a peft
    adapter directory. Weights that do not fit the config's model raise, naming them."""
    import os

    import torch

    if os.path.isdir(path):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(module.model, load_file(os.path.join(path, "adapter_model.safetensors")))
        return
    state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    params = dict(module.named_parameters())
    missing = [k for k in state if k not in params]
    if missing:
        raise ValueError(f"--checkpoint {path}: weights {missing[:3]} do not fit the config's model")
    module.load_state_dict(state, strict=False)


def build_from_config(*args: str) -> tuple[SelfPlayModule, SelfPlayDataModule]:
    """The module and datamodule a config describes, without a Trainer or a run: ``args`` are
    ``fit``'s (``"--config", "a.yaml", "--data.eval.games", "400"``), the seed is set as ``fit``
    sets it. For scripts and notebooks that evaluate or play: ``dm.rollout_factory(module.model,
    module.tokenizer)`` then serves the policy."""
    with warnings.catch_warnings():  # the caller's own command line is not for LightningCLI
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = SelfPlayCLI(SelfPlayModule, SelfPlayDataModule, args=list(args), run=False, seed_everything_default=0,
                          save_config_callback=None)
    return cli.model, cli.datamodule


def evaluate_main(args: list[str]) -> dict:
    """``sp-lightning evaluate``: the config's model and games, one or several checkpoints, an
    opponent, seeds. Prints a table and returns (and with ``--output`` writes as JSON) the
    figures: ``{game: metrics}`` for one checkpoint, ``{checkpoint: {game: metrics}}`` for several."""
    import argparse
    import json

    from sp_lightning.evaluation.matches import evaluate, serve_policy
    from sp_lightning.evaluation.strategy import exploitability_metrics

    parser = argparse.ArgumentParser(prog="sp-lightning evaluate", description=evaluate_main.__doc__)
    parser.add_argument("--checkpoint", nargs="+", default=[None],
                        help="Lightning .ckpt or peft adapter dir of the policy, or several (each "
                             "evaluated in turn on the same games); none: the untrained policy")
    parser.add_argument("--opponent", default=None, help="bot:<name> | base | checkpoint:<adapter dir> | "
                        "remote:<name of data.remote_models> (default: the config's data.eval.opponent)")
    parser.add_argument("--games_per_seat", type=int, default=500)
    parser.add_argument("--seed", type=int, default=20261121, help="seed of deals, bots and sampling")
    parser.add_argument("--exclude_opponent_forfeits", type=_flag, default=False,
                        help="leave games the opponent lost by its own invalid move out of the figures "
                             "(they are still counted, as opponent_forfeit_rate)")
    parser.add_argument("--exploitability", type=_flag, default=False)
    parser.add_argument("--output", help="write the results as JSON to this file")
    ours, rest = parser.parse_known_args(args)
    module, dm = build_from_config(*rest)
    worker = dm.rollout_factory(module.model, module.tokenizer)
    opponent = serve_policy(worker, ours.opponent or dm.eval.opponent)  # an adapter directory: by its name
    reports, rows = {}, []
    sampling, env_overrides = dm.eval_sampling(), dm.eval_env_overrides()
    for checkpoint in ours.checkpoint:
        if checkpoint:
            load_checkpoint(module, checkpoint)
        label = checkpoint or "untrained"
        report = reports[label] = {}
        for game in dm.games:
            result = evaluate(worker, game, opponent=opponent, games_per_seat=ours.games_per_seat,
                              sampling=sampling, seed=ours.seed, env_overrides=env_overrides,
                              remotes=dm.remote_models, exclude_opponent_forfeits=ours.exclude_opponent_forfeits)
            entry = {**result.as_metrics(game.name), "games": result.games}
            print(f"{game.name}: {label} vs {opponent}, seed {ours.seed}: {result.summary()}")
            rows.append((label, game.name, result))
            if ours.exploitability:
                exploit_metrics, exploit = exploitability_metrics(worker, game, game.name)
                entry.update(exploit_metrics)
                if exploit is not None:
                    print(f"{game.name}: exploitability {exploit.exploitability:.4f} (legal mass "
                          f"{exploit.legal_mass_mean:.3f}, min {exploit.legal_mass_min:.3f})")
            report[game.name] = entry
    print(results_table(rows, f"vs {opponent}, {ours.games_per_seat} games per seat, seed {ours.seed}"))
    out = next(iter(reports.values())) if len(reports) == 1 else reports
    if ours.output:
        with open(ours.output, "w") as f:
            json.dump(out, f, indent=2)
    return out


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true", "yes")


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


def crossplay_main(args: list[str]) -> dict:
    """``sp-lightning crossplay``: a round robin among a league's agents (its baselines and kept
    checkpoints) and any checkpoints named, in the config's two-seat game: the payoff matrix,
    Bradley-Terry and Elo ratings with bootstrap intervals, written as JSON, two PNGs and
    TensorBoard events under ``--output_dir`` (see sp_lightning.evaluation.crossplay_report)."""
    import argparse
    import os
    import tempfile

    from sp_lightning.evaluation.crossplay import cross_play
    from sp_lightning.evaluation.crossplay_ratings import rate
    from sp_lightning.evaluation.crossplay_report import write_report
    from sp_lightning.evaluation.matches import serve_policy

    parser = argparse.ArgumentParser(prog="sp-lightning crossplay", description=crossplay_main.__doc__)
    parser.add_argument("--league", help="league directory (holding league.json) whose agents play")
    parser.add_argument("--checkpoint", nargs="*", default=[],
                        help="further players: Lightning .ckpt files or peft adapter dirs")
    parser.add_argument("--max_checkpoints", type=int, default=8,
                        help="the league's kept checkpoints, thinned evenly over training steps to at most this many")
    parser.add_argument("--no_baselines", action="store_true", help="leave the league's baseline bots out")
    parser.add_argument("--games_per_seat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261121, help="seed of deals, bots, sampling and the bootstrap")
    parser.add_argument("--resamples", type=int, default=200, help="bootstrap resamples of the ratings")
    parser.add_argument("--output_dir", default="crossplay")
    ours, rest = parser.parse_known_args(args)
    module, dm = build_from_config(*rest)
    if len(dm.games) != 1:
        parser.error(f"expected a config with one game, got {[g.name for g in dm.games]}")
    game = dm.games[0]
    worker = dm.rollout_factory(module.model, module.tokenizer)
    policies = league_players(ours.league, ours.max_checkpoints, not ours.no_baselines) if ours.league else {}
    with tempfile.TemporaryDirectory() as scratch:
        for path in ours.checkpoint:
            label = unique_label(path, policies)
            if not os.path.isdir(path):  # a Lightning .ckpt: its adapter, saved where the worker can load it
                load_checkpoint(module, path)
                module.save_adapter(os.path.join(scratch, label))
                path = os.path.join(scratch, label)
            policies[label] = f"checkpoint:{path}"
        if len(policies) < 2:
            parser.error(f"expected at least 2 players (--league, --checkpoint), got {list(policies)}")
        # adapters registered by their unique labels: two directories may share a name
        served = {label: serve_policy(worker, spec, name=label) for label, spec in policies.items()}
        print(f"cross-play of {len(served)} agents in {game.name}, {ours.games_per_seat} games per seat and pair")
        table = cross_play(worker, game, served, games_per_seat=ours.games_per_seat, sampling=dm.eval_sampling(),
                           seed=ours.seed, env_overrides=dm.eval_env_overrides())
    ratings = rate(table, resamples=ours.resamples, seed=ours.seed)
    meta = {"game": game.name, "games_per_seat": ours.games_per_seat, "seed": ours.seed,
            "league": ours.league, "policies": {k: str(v) for k, v in served.items()}}
    paths = write_report(table, ratings, ours.output_dir, meta)
    print("row's mean payoff against column:")
    print(table.table())
    print(ratings.table())
    print("written: " + ", ".join(paths.values()))
    return {"table": table, "ratings": ratings, "paths": paths}


def unique_label(path: str, taken) -> str:
    """A player's label: the file or directory name without extension (``last`` for
    ``run/checkpoints/last.ckpt``), prefixed with its parent directories' names until no other
    player has it (``runB-checkpoints-last``), or numbered as a last resort."""
    import os

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


def league_players(league_dir: str, max_checkpoints: int, baselines: bool) -> dict[str, str]:
    """Label -> policy spec of a league's baselines and kept checkpoints (at most
    ``max_checkpoints``, spread evenly over their training steps, the last one always in)."""
    import os

    from sp_lightning.league.registry import LeagueRegistry

    path = os.path.join(league_dir, "league.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--league {league_dir}: no league.json there")
    agents = LeagueRegistry(path).agents()
    players = {a.id: a.policy for a in agents if baselines and a.type == "baseline"}
    adapters = {}  # where each kept checkpoint's adapter is now (the league directory may have moved)
    for a in agents:
        if a.type == "checkpoint":
            here = os.path.join(league_dir, "adapters", a.id)
            found = [p for p in (a.adapter_path, here) if p and os.path.isdir(p)]
            if found:
                adapters[a.id] = found[0]
    kept = sorted((a for a in agents if a.id in adapters), key=lambda a: a.step or 0)
    if max_checkpoints < len(kept):
        if max_checkpoints <= 1:
            picks = {len(kept) - 1} if max_checkpoints == 1 else set()
        else:
            picks = {round(k * (len(kept) - 1) / (max_checkpoints - 1)) for k in range(max_checkpoints)}
        kept = [a for k, a in enumerate(kept) if k in picks]
    players.update({a.id: f"checkpoint:{adapters[a.id]}" for a in kept})
    return players


def rollout_main(args: list[str]) -> list[dict[str, float]]:
    """``sp-lightning rollout``: the config's batches played by its arena and backend (a remote
    server included, ``data.rollout`` or ``remote:`` seats), credited and printed, without
    training; the episode log (``data.episode_log``) records them as in ``fit``."""
    import argparse

    parser = argparse.ArgumentParser(prog="sp-lightning rollout", description=rollout_main.__doc__)
    parser.add_argument("--steps", type=int, default=3, help="batches to play")
    parser.add_argument("--show", type=int, default=2, help="episodes and records of each batch to print")
    parser.add_argument("--checkpoint", help="Lightning .ckpt or peft adapter dir of the policy; none: untrained")
    ours, rest = parser.parse_known_args(args)
    if ours.steps < 1 or ours.show < 0:
        parser.error(f"expected --steps >= 1 and --show >= 0, got {ours.steps} and {ours.show}")
    module, dm = build_from_config(*rest)
    if ours.checkpoint:
        load_checkpoint(module, ours.checkpoint)
    arena = dm.build_arena(module)
    return arena.run(ours.steps, show=ours.show)


def main(args=None) -> None:
    import sys

    from sp_lightning.threads import configure_torch_threads

    configure_torch_threads()
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["evaluate"]:
        evaluate_main(argv[1:])
        return
    if argv[:1] == ["rollout"]:
        rollout_main(argv[1:])
        return
    if argv[:1] == ["crossplay"]:
        crossplay_main(argv[1:])
        return
    if argv[:1] == ["play"]:
        from sp_lightning.play import play_main

        play_main(argv[1:])
        return
    SelfPlayCLI(
        SelfPlayModule,
        SelfPlayDataModule,
        args=args,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )


if __name__ == "__main__":
    main()
