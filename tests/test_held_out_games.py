"""Games apart from training (``data.eval.held_out``): validated and evaluated beside the training
games, each against its own opponent, never trained on, and without a trace in training (the
same run with and without them trains the same weights)."""

import json
import os

import pytest
import torch

from sp_lightning.cli import main
from sp_lightning.cli.evaluate import main as evaluate
from tests.helpers import tensorboard_events

KUHN = os.path.join(os.path.dirname(__file__), "..", "configs", "kuhn_poker_tiny.yaml")
HELD_OUT = json.dumps([{"id": "kuhn_poker_3p_v1", "opponent": "bot:random"}])


def _fit(root, *extra: str) -> dict:
    """Four steps of Kuhn Poker, validation (6 games a game) at steps 2 and 4: the last
    checkpoint's weights."""
    main(["fit", "--config", KUHN, "--trainer.max_steps", "4", "--trainer.val_check_interval", "2",
          "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root),
          "--trainer.callbacks", json.dumps([{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                              "init_args": {"dirpath": str(root / "ckpt"), "filename": "last"}}]),
          "--data.episodes_per_batch", "8", "--data.eval.games", "6", "--model.update_epochs", "1", *extra])
    return torch.load(root / "ckpt" / "last.ckpt", weights_only=False)


@pytest.mark.slow
def test_a_held_out_game_is_validated_against_its_own_opponent_and_leaves_training_as_it_was(tmp_path, capsys):
    with_held_out = _fit(tmp_path / "held_out", "--data.eval.held_out", HELD_OUT)
    out = capsys.readouterr().out
    assert "kuhn_poker_3p_v1 (held out) vs bot:random: 6 games" in out  # 2 per seat of three
    assert "kuhn_poker_v1 vs bot:random" in out
    events = tensorboard_events(tmp_path / "held_out" / "tb")
    tags = set(events.Tags()["scalars"])
    assert {"val/held_out/kuhn_poker_3p_v1/payoff", "val/held_out/kuhn_poker_3p_v1/legal_move_rate",
            "val/kuhn_poker_v1/payoff"} <= tags
    assert len(events.Scalars("val/held_out/kuhn_poker_3p_v1/payoff")) == 2  # steps 2 and 4
    assert not any(tag.startswith("games/kuhn_poker_3p") for tag in tags), "a held-out game was trained on"

    alone = _fit(tmp_path / "alone")
    assert with_held_out["global_step"] == alone["global_step"] == 4
    trained = with_held_out["state_dict"]
    assert trained.keys() == alone["state_dict"].keys()
    assert all(torch.equal(trained[k], alone["state_dict"][k]) for k in trained), \
        "validating a held-out game changed what training did"


@pytest.mark.slow
def test_evaluate_reports_held_out_games_against_their_own_opponent(tmp_path, capsys):
    base = ["--config", KUHN, "--games_per_seat", "3", "--seed", "7",
            "--data.eval.held_out", json.dumps([{"id": "kuhn_poker_3p_v1", "opponent": "bot:chaos"}])]
    report = evaluate(base)
    out = capsys.readouterr().out
    assert set(report) == {"kuhn_poker_v1", "held_out/kuhn_poker_3p_v1"}
    assert report["held_out/kuhn_poker_3p_v1"]["games"] == 9  # 3 per seat of three
    assert "held_out/kuhn_poker_3p_v1: untrained vs bot:chaos" in out
    assert "kuhn_poker_v1: untrained vs bot:random" in out
    assert "held_out/kuhn_poker_3p_v1 vs bot:chaos" in out  # its own opponent, named in the table
    # --opponent stands for data.eval.opponent: a held-out game's own opponent stays
    evaluate([*base, "--opponent", "bot:random"])
    out = capsys.readouterr().out
    assert "held_out/kuhn_poker_3p_v1: untrained vs bot:chaos" in out
    assert "kuhn_poker_v1: untrained vs bot:random" in out
    # a held-out game that names no opponent plays --opponent
    evaluate([*base, "--opponent", "bot:chaos", "--data.eval.held_out", json.dumps([{"id": "kuhn_poker_3p_v1"}])])
    assert "held_out/kuhn_poker_3p_v1: untrained vs bot:chaos" in capsys.readouterr().out
    assert set(evaluate([*base, "--held_out", "false"])) == {"kuhn_poker_v1"}


def test_a_held_out_game_can_be_played_against_an_adapter_directory(tmp_path):
    """``opponent: checkpoint:<adapter dir>``: registered with the worker once, played by name."""
    from sp_lightning import build_from_config

    module, _ = build_from_config("--config", KUHN)
    module.save_adapter(tmp_path / "target")
    held_out = json.dumps([{"id": "kuhn_poker_3p_v1", "opponent": f"checkpoint:{tmp_path / 'target'}", "games": 3}])
    module, dm = build_from_config("--config", KUHN, "--data.eval.held_out", held_out)
    engine = dm.build_engine(module)
    assert engine.worker.adapter_paths["target"] == str(tmp_path / "target")
    engine.start()
    try:
        (game, prefix, opponents, games), = engine.validations()[1:]
        metrics, line = engine.validate(game, prefix, opponents, games)
    finally:
        engine.close()
    assert prefix == "val/held_out/kuhn_poker_3p_v1" and games == 3
    assert f"kuhn_poker_3p_v1 (held out) vs checkpoint:{tmp_path / 'target'}: 3 games" in line
    assert 0.0 <= metrics["val/held_out/kuhn_poker_3p_v1/legal_move_rate"] <= 1.0


def test_validation_against_several_opponents_gives_one_payoff_over_all_of_them_for_a_checkpoint_rule():
    """``also_against``: each opponent's figures under its own name, and their mean payoff once,
    so that a checkpoint rule can read every yardstick; a game against one opponent has none."""
    from sp_lightning import build_from_config

    module, dm = build_from_config("--config", KUHN, "--data.eval.games", "8",
                                   "--data.eval.also_against", '["bot:kuhn_poker_nash"]',
                                   "--data.eval.held_out", HELD_OUT)
    engine = dm.build_engine(module)
    engine.start()
    try:
        (trained, prefix, opponents, games), (held, held_prefix, held_opponents, held_games) = engine.validations()
        metrics, _ = engine.validate(trained, prefix, opponents, games)
        held_metrics, _ = engine.validate(held, held_prefix, held_opponents, held_games)
    finally:
        engine.close()
    both = (metrics["val/kuhn_poker_v1/payoff"], metrics["val/kuhn_poker_v1/vs/kuhn_poker_nash/payoff"])
    assert metrics["val/kuhn_poker_v1/payoff_over_opponents"] == pytest.approx(sum(both) / 2)
    assert not any(key.endswith("payoff_over_opponents") for key in held_metrics)
