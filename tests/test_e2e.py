"""End to end on the tiny model: `sp-lightning fit` for a few steps, checkpoints, resume, evaluate."""

import os

import pytest
import torch

from sp_lightning.cli import main

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "configs")


def _args(config, root, steps, *extra):
    """A short run: a few steps of 8 episodes, validation (4 games) and checkpoints every 2 steps.

    A second --config replaces the config's callbacks so that checkpoints land in ``root``."""
    overlay = root / "overlay.yaml"
    monitor = "val/tictactoe_v1/win_rate" if "tictactoe" in config else "val/kuhn_poker_v1/payoff"
    overlay.write_text(
        "trainer:\n  callbacks:\n"
        f"    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {root / 'ckpt'}, monitor: {monitor}, mode: max, filename: best,"
        f" enable_version_counter: false}}\n"
        f"    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {root / 'ckpt'}, filename: last, enable_version_counter: false}}\n"
    )
    return [
        "--config", os.path.join(CONFIGS, config),
        "--config", str(overlay),
        "--trainer.max_steps", str(steps),
        "--trainer.val_check_interval", "2",
        "--trainer.default_root_dir", str(root),
        "--trainer.logger.init_args.save_dir", str(root),
        "--data.episodes_per_batch", "8",
        "--data.eval.games", "4",
        "--model.update_epochs", "1",  # one optimizer step per batch: these tests count both
        *extra,
    ]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["tictactoe_tiny.yaml", "kuhn_poker_tiny.yaml"])
def test_fit_trains_the_adapter_saves_resumes_and_reports_progress_and_games(tmp_path, config, capsys):
    main(["fit", *_args(config, tmp_path, 4)])  # checkpoints are written at each validation
    # not a terminal: plain progress lines (sp_lightning.progress), no redrawn bar
    out = capsys.readouterr().out
    assert "step 4/4  win " in out and "rollout tok/s" in out
    assert "step 2 validation  val win " in out and "legal " in out
    # TensorBoard (sp_lightning.tensorboard): the chart layout, and a decoded game of step 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((tmp_path / "tb").glob("version_*"))), size_guidance={"tensors": 0})
    events.Reload()
    assert {"custom_scalars__config__", "games/decoded/text_summary"} <= set(events.Tags()["tensors"])
    game = events.Tensors("games/decoded/text_summary")[0]
    assert game.step == 1 and "(learner) · reward" in game.tensor_proto.string_val[0].decode()
    last = tmp_path / "ckpt" / "last.ckpt"
    assert last.exists() and (tmp_path / "ckpt" / "best.ckpt").exists()
    ckpt = torch.load(last, weights_only=False)
    assert ckpt["global_step"] == 4
    keys = list(ckpt["state_dict"])
    assert keys and all("lora_" in k or "trainable_tokens" in k for k in keys), "only the adapter is saved"
    assert any(v.abs().sum() > 0 for k, v in ckpt["state_dict"].items() if "lora_B" in k), "LoRA B moved from 0"
    baselines = ckpt["SelfPlayDataModule"]["credit"]["baselines"]
    assert baselines, "the RAE baselines are saved with the run"

    # a killed run resumes from its last checkpoint: step count and credit state carry on
    main(["fit", *_args(config, tmp_path, 6), "--ckpt_path", str(last)])
    resumed = torch.load(last, weights_only=False)
    assert resumed["global_step"] == 6
    assert resumed["SelfPlayDataModule"]["batches_played"] == 6
    # saved through sp_lightning.checkpoint_io: the checkpoint it replaced is kept beside it
    assert torch.load(str(last) + ".prev", weights_only=False)["global_step"] < 6


@pytest.mark.slow
def test_validate_evaluates_a_checkpoint_in_both_seats(tmp_path, capsys):
    main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 2)])
    main(["validate", *_args("tictactoe_tiny.yaml", tmp_path, 2), "--data.eval.games", "10",
          "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    out = capsys.readouterr().out
    assert "tictactoe_v1 vs bot:random: 10 games" in out
    assert "val/tictactoe_v1/win_rate_ci_low" in out


@pytest.mark.slow
def test_validate_plays_every_game_with_the_checkpoint_weights(tmp_path, monkeypatch):
    """Every validation game, the first one included, is played by a worker holding the
    checkpoint's adapter: the loop must not draw a game before the weight path has sent it."""
    from sp_lightning.engine import Engine

    main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 2)])
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    saved_b = sum(float(v.abs().sum()) for k, v in saved.items() if "lora_B" in k)
    assert saved_b > 0
    seen = []
    validate = Engine.validate

    def recording_validate(self, game, prefix, opponents=None, games=None):
        seen.append(sum(float(p.abs().sum()) for n, p in self.worker.model.named_parameters() if "lora_B" in n))
        return validate(self, game, prefix, opponents, games)

    monkeypatch.setattr(Engine, "validate", recording_validate)
    main(["validate", *_args("tictactoe_tiny.yaml", tmp_path, 2), "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    assert seen and all(abs(b - saved_b) < 1e-4 * saved_b for b in seen), (seen, saved_b)


@pytest.mark.slow
def test_textarena_games_train_a_few_steps_on_the_tiny_model(tmp_path):
    """Three TextArena games through the adapter: the tiny tokenizer learns their text, two
    optimizer steps run on all three, and each is evaluated (ChaosBot: SimpleNegotiation is free
    text, with no legal-move list for RandomBot)."""
    pytest.importorskip("textarena")
    games = ["textarena:KuhnPoker-v0", "textarena:TicTacToe-v0", "textarena:SimpleNegotiation-v0"]
    entries = "\n".join(
        f'    - {{id: "{g}", opponents: {{learner: 1.0}}, reward: {{outcome: payoff, invalid_move_penalty: 1.0}}}}'
        for g in games
    )
    overlay = tmp_path / "textarena.yaml"
    overlay.write_text(
        f"trainer:\n  max_steps: 2\n  val_check_interval: 2\n  default_root_dir: {tmp_path}\n  logger: false\n"
        f"  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {tmp_path / 'ckpt'}, filename: last, enable_version_counter: false}}\n"
        f"model:\n  update_epochs: 1\n  policy:\n    tiny: {{games: {games}}}\n"
        f"data:\n  games:\n{entries}\n  episodes_per_batch: 6\n  sampling: {{max_new_tokens: 8}}\n"
        f'  eval: {{games: 4, invalid_move: null, opponent: "bot:chaos", also_against: []}}\n'
    )
    main(["fit", "--config", os.path.join(CONFIGS, "tictactoe_tiny.yaml"), "--config", str(overlay)])
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 2
    assert any(v.abs().sum() > 0 for k, v in ckpt["state_dict"].items() if "lora_B" in k)
