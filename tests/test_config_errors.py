"""Bad configs fail before training, naming the key and what was expected.

Each case runs `sp-lightning fit` in-process on the shipped Tic-Tac-Toe config with one mistake;
the run must stop before its first optimizer step: a checkpoint is written after every step into
the test's directory, and none may be there."""

import os

import pytest

from sp_lightning.cli import main

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "tictactoe_tiny.yaml")


def _fit(tmp_path, *overrides):
    overlay = tmp_path / "every_step.yaml"  # replaces the config's callbacks (they save under runs/)
    overlay.write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {tmp_path / 'ckpt'}, every_n_train_steps: 1, save_top_k: -1}}\n")
    main(["fit", "--config", CONFIG, "--config", str(overlay), "--trainer.default_root_dir", str(tmp_path),
          "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.max_steps", "1",
          "--trainer.val_check_interval", "1000", "--data.episodes_per_batch", "2", *overrides])


def _nothing_trained(tmp_path):
    return not any(name.endswith(".ckpt") for _, _, files in os.walk(tmp_path) for name in files)


@pytest.mark.parametrize(("overrides", "named"), [
    (["--data.episodes_per_bach", "3"], "episodes_per_bach"),  # unknown key
    (["--data.episodes_per_batch", "many"], "episodes_per_batch"),  # wrong type
    (["--model.loss.entropy.coef", "[1, 2]"], "entropy.coef"),
    (["--model.policy.lora.r", "1.5"], "lora.r"),
])
def test_parse_errors_name_the_key(tmp_path, capsys, overrides, named):
    with pytest.raises(SystemExit) as exit_info:
        _fit(tmp_path, *overrides)
    assert exit_info.value.code != 0
    assert named in capsys.readouterr().err
    assert _nothing_trained(tmp_path)


@pytest.mark.parametrize(("overrides", "named", "expected"), [
    # a LoRA target that matches no module of the model
    (["--model.policy.lora.target_modules", "[attn_proj]"], "policy.lora.target_modules", "q_proj"),
    # the tiny tokenizer was built without this game's moves: no move fits in one token
    (["--model.policy.tiny.games", "[kuhn_poker_v1]"], "data.sampling.max_new_tokens", "model.policy.tiny.games"),
    # more seats than the game has
    (["--data.games", '[{"id": "textarena:TicTacToe-v0", "env_kwargs": {"num_players": 3}}]'],
     "env_kwargs", "number of players"),
    (["--data.games", '[{"id": "tictactoe_v1", "env_kwargs": {"players": 3}}]'], "env_kwargs", "players"),
    (["--data.games", '[{"id": "tictactoe_v1", "opponents": {"bot:nobody": 1}}]'], "nobody", "random"),
])
def test_impossible_combinations_fail_before_the_first_step(tmp_path, capsys, overrides, named, expected):
    if "textarena" in " ".join(overrides):
        pytest.importorskip("textarena")
    with pytest.raises(SystemExit) as exit_info:
        _fit(tmp_path, *overrides)
    assert exit_info.value.code == 2  # a user's mistake: its line, no traceback (tests/test_bad_input.py)
    err = capsys.readouterr().err
    assert named in err and expected in err, err
    assert _nothing_trained(tmp_path)


def test_the_check_sees_a_step_that_was_taken(tmp_path):
    """The same run without a mistake leaves a checkpoint, so the cases above could fail."""
    _fit(tmp_path)
    assert not _nothing_trained(tmp_path)


def test_a_setting_that_another_overrides_is_an_error_naming_both_keys():
    """A league chooses every opponent: data.opponents or a game's own mix beside it would be
    silently ignored, and so would data.opponents beside an episode source."""
    from sp_lightning.data import SelfPlayDataModule
    from sp_lightning.games import FixedMix, GameSettings
    from sp_lightning.league.settings import LeagueSettings
    from sp_lightning.protocols.proposer_solver import ProposerSolver

    game = GameSettings(id="tictactoe_v1")
    league = LeagueSettings(dir="unused")
    with pytest.raises(ValueError, match=r"^data.opponents and data.league: "):
        SelfPlayDataModule(games=[game], league=league, opponents=FixedMix())
    mixed = GameSettings(id="tictactoe_v1", opponents={"bot:random": 1.0})
    with pytest.raises(ValueError, match=r"^data.games\[1\].opponents and data.league: "):
        SelfPlayDataModule(games=[game, mixed], league=league)
    with pytest.raises(ValueError, match=r"^data.opponents and data.episodes: "):
        SelfPlayDataModule(episodes=ProposerSolver(), opponents=FixedMix())
    with pytest.raises(ValueError, match=r"^data.league and data.episodes: "):
        SelfPlayDataModule(games=[game], episodes=ProposerSolver(), league=league)
    with pytest.raises(ValueError, match=r"^data.games\[0\].opponents and data.episodes: "):
        SelfPlayDataModule(games=[mixed], episodes=ProposerSolver())
    from sp_lightning.league.sampler import LeagueSampler

    with pytest.raises(ValueError, match=r"^data.opponents: a LeagueSampler needs its league"):
        SelfPlayDataModule(games=[game], opponents=LeagueSampler())
    assert SelfPlayDataModule(games=[game], league=league).callbacks()  # the league's callback, installed


def test_reading_a_game_builds_no_env_until_the_run_checks_it(monkeypatch):
    """Parsing a config is free of side effects: a GameSettings builds and deals its env only
    when the run's engine checks it (or a caller asks for its seats)."""
    import envs
    from sp_lightning.games import GameSettings

    built = []
    make = envs.make
    monkeypatch.setattr(envs, "make", lambda *a, **k: built.append(a) or make(*a, **k))
    game = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "random"})
    assert built == []
    game.check("data.games[0]")
    assert len(built) == 1 and game.agents == ["player_0", "player_1"] and len(built) == 1  # checked once
    bad = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "sometimes"})
    with pytest.raises(ValueError, match=r"^data.games\[3\] \(kuhn_poker_v1\) with env_kwargs"):
        bad.check("data.games[3]")


def test_a_seat_whose_own_sampling_cannot_hold_a_move_is_refused_naming_that_key(tiny_policy):
    """The moves must fit the fewest tokens any seat may write: the run's max_new_tokens, a
    seat's role's own, or a policy's own (the key that sets the limit is the one named)."""
    from sp_lightning.engine import check_moves_fit
    from sp_lightning.games import GameSettings
    from sp_lightning.rollout import SamplingSettings
    from sp_lightning.sampling import SamplingPlan

    _, tokenizer = tiny_policy
    games = [GameSettings(id="tictactoe_v1"), GameSettings(id="liars_dice_v1")]  # [1x1]: 5 tokens here
    check_moves_fit(games, tokenizer, SamplingPlan(SamplingSettings(max_new_tokens=8)))
    with pytest.raises(ValueError, match=r"^data.sampling.max_new_tokens: 4 token\(s\) cannot hold move"):
        check_moves_fit(games, tokenizer, SamplingPlan(SamplingSettings(max_new_tokens=4)))
    terse_seat = SamplingPlan(SamplingSettings(max_new_tokens=8), by_role={"player_1": {"max_new_tokens": 3}})
    with pytest.raises(ValueError, match=r"^data.sampling_by_role.player_1.max_new_tokens: 3 token\(s\) .*liars_dice"):
        check_moves_fit(games, tokenizer, terse_seat)
    terse_checkpoints = SamplingPlan(SamplingSettings(max_new_tokens=8), by_policy={"checkpoint": {"max_new_tokens": 2}})
    with pytest.raises(ValueError, match=r"^data.sampling_by_policy.checkpoint.max_new_tokens: 2 token"):
        check_moves_fit(games, tokenizer, terse_checkpoints)
    judges = SamplingPlan(SamplingSettings(max_new_tokens=8), by_role={"judge": {"max_new_tokens": 1}})
    check_moves_fit(games, tokenizer, judges)  # no seat of these games is a judge
