"""Bad input gets one clear line: every mistake a user makes every day (a config key or value, a
flag, a missing, corrupt or mismatched checkpoint, a corrupt league file, a missing model
directory) ends the real command (``sp_lightning.cli.main``, in-process) with exit status 2 and
an ``sp-lightning <command>: error: ...`` line on stderr that names the key, flag or file and what
was expected, and no traceback. ``--debug`` or ``SP_LIGHTNING_DEBUG=1`` gives the traceback back;
a bug of ours keeps it always. One case runs the installed command in a process of its own, to
show that nothing else reaches its stderr.

No case trains: each fails before the first step (every fit case also carries flags that would
keep an accidental run to one step of two games). The one real checkpoint, a one-step fit of the
Kuhn Poker config, is made once for the module."""

import os
import subprocess
import sys

import pytest
import torch

from sp_lightning.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TTT = os.path.join(ROOT, "configs", "tictactoe_tiny.yaml")
KUHN = os.path.join(ROOT, "configs", "kuhn_poker_tiny.yaml")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The files the cases name: corrupt ones made here, one real checkpoint of the Kuhn Poker
    config (hidden size 64) to evaluate with the Tic-Tac-Toe config (128)."""
    root = tmp_path_factory.mktemp("bad_input")
    (root / "corrupt.ckpt").write_bytes(b"not a checkpoint")
    (root / "empty.ckpt").write_bytes(b"")
    torch.save({"weights": torch.ones(2)}, root / "no_state.ckpt")
    (root / "bad.yaml").write_text("trainer: [unclosed\n  - x: {\n")
    (root / "bad_key.yaml").write_text("data:\n  episodes_per_bach: 3\n")
    (root / "not_an_adapter").mkdir()
    (root / "league_missing").mkdir()
    (root / "league_corrupt").mkdir()
    (root / "league_corrupt" / "league.json").write_text('{"agents": ')
    (root / "league_list").mkdir()
    (root / "league_list" / "league.json").write_text("[1, 2]")
    overlay = root / "every_step.yaml"
    overlay.write_text("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                       f"      init_args: {{dirpath: {root / 'kuhn'}, filename: last, every_n_train_steps: 1}}\n")
    main(["fit", "--config", KUHN, "--config", str(overlay), "--trainer.max_steps", "1", "--trainer.logger", "false",
          "--trainer.default_root_dir", str(root), "--trainer.val_check_interval", "1000",
          "--data.episodes_per_batch", "2", "--model.update_epochs", "1"])
    assert (root / "kuhn" / "last.ckpt").is_file()
    (root / "both_corrupt").mkdir()  # a last.ckpt and the one before it, both unreadable
    (root / "both_corrupt" / "last.ckpt").write_bytes(b"not a checkpoint")
    (root / "both_corrupt" / "last.ckpt.prev").write_bytes(b"")
    from sp_lightning import build_from_config

    module, _ = build_from_config("--config", KUHN)  # the Kuhn Poker model's adapter (hidden size 64)
    module.save_adapter(str(root / "kuhn_adapter"))
    (root / "a_file").write_text("not a folder")
    (root / "list.yaml").write_text("- a\n- b\n")
    return root


def _fit(*flags):
    """fit of the Tic-Tac-Toe config; the case's flags come last, so they win."""
    return ["fit", "--config", TTT, "--trainer.max_steps", "1", "--trainer.logger", "false",
            "--trainer.callbacks", "[]", "--data.episodes_per_batch", "2", *flags]


def _evaluate(*flags, config=TTT):
    return ["evaluate", "--config", config, "--games_per_seat", "1", *flags]


ZERO_WEIGHTS = '[{"id": "tictactoe_v1", "opponents": {"learner": 0, "bot:random": 0}}]'
NO_SUCH_BOT = '[{"id": "tictactoe_v1", "opponents": {"bot:nobody": 1}}]'

# (command line, with {f} for the files' folder; what the error line must hold)
CASES = [
    # ---- fit: keys and values ----
    (_fit("--data.episodes_per_bach", "3"), ["unrecognized arguments: --data.episodes_per_bach 3"]),
    (_fit("--data.episodes_per_batch", "many"), ["--data.episodes_per_batch: expected an int, got many"]),
    (_fit("--data.episodes_per_batch", "0"), ["--data.episodes_per_batch: expected >= 1, got 0"]),
    (_fit("--model.policy.lora.r", "0"), ["--model.policy.lora.r: expected an int >= 1, got 0"]),
    (_fit("--model.policy.lora.r", "1.5"), ["--model.policy.lora.r: expected an int, got 1.5"]),
    (_fit("--model.policy.lora.rank", "2"), ["model.policy.lora.rank: no such key"]),
    (_fit("--model.loss.entropy.coef", "[1, 2]"),
     ["--model.loss.entropy.coef: expected a float or a Schedule, got [1, 2]"]),
    (_fit("--model.loss.aggregation", "bogus"), ["--model.loss.aggregation: expected one of", "got 'bogus'"]),
    (_fit("--model.optimizer.schedule", "linear"), ["--model.optimizer.schedule: expected", "got 'linear'"]),
    (_fit("--model.optimizer.lr", "fast"), ["--model.optimizer.lr: expected a float, got fast"]),
    (_fit("--model.micro_batch_size", "0"), ["--model.micro_batch_size: expected >= 1, got 0"]),
    (_fit("--data.sampling.temperature", "-1"), ["--data.sampling.temperature: expected >= 0, got -1"]),
    (_fit("--model.policy.dtype", "float8"), ["--model.policy.dtype: expected one of", "got 'float8'"]),
    (_fit("--model.policy.lora.target_modules", "[attn_proj]"), ["model.policy.lora.target_modules", "q_proj"]),
    (_fit("--trainer.max_steps", "abc"), ["--trainer.max_steps: expected an int, got abc"]),
    (_fit("--seed_everything", "abc"), ["--seed_everything: expected a bool or an int, got abc"]),
    (_fit("--data.credit", "sp_lightning.credit.Nope"), ["--data.credit:", "has no attribute 'Nope'"]),
    (_fit("--model.optimizer.lr", "-1"), ["--model.optimizer.lr: expected a number > 0, got -1.0"]),
    (_fit("--model.optimizer.grad_clip", "-1"), ["--model.optimizer.grad_clip: expected a number > 0 or null"]),
    (_fit("--model.optimizer.betas", "[2.0, 0.9]"), ["--model.optimizer.betas: expected two numbers in [0, 1)"]),
    (_fit("--model.loss.magnet.coef", "-1"), ["--model.loss.magnet.coef: expected >= 0, got -1.0"]),
    (_fit("--model.loss.entropy.coef", "-1"), ["--model.loss.entropy.coef: expected >= 0, got -1.0"]),
    (_fit("--model.loss.kl.coef", "-1"), ["--model.loss.kl.coef: expected >= 0 (0: off), got -1.0"]),
    (_fit("--model.policy.tiny.heads", "3"), ["--model.policy.tiny.heads: expected a divisor of hidden_size (128)"]),
    (_fit("--data.seed", "-7"), ["--data.seed: expected an int >= 0, got -7"]),
    (_fit("--data.eval.games", "0"), ["--data.eval.games: expected an int >= 1"]),
    (_fit("--data.eval.invalid_move", "explode"), ["--data.eval.invalid_move: expected one of forfeit"]),
    (_fit("--data.credit.init_args.decay", "2"), ["credit.decay: expected a number in [0, 1], got 2.0"]),
    (_fit("--data.games", '[{"id": "tictactoe_v1", "weight": -1}]'), ["data.games: expected each game's weight >= 0"]),
    (_fit("--data.games", '[{"id": "tictactoe_v1", "max_turns": 0}]'), ["data.games[0].max_turns: expected an int >= 1 or null"]),
    (_fit("--trainer.default_root_dir", "{f}/a_file"), ["trainer.default_root_dir {f}/a_file: a file; expected a folder"]),
    (_fit("--data.episode_log.path", "{f}/a_file/log.txt"),
     ["data.episode_log.path {f}/a_file/log.txt: {f}/a_file is a file"]),
    (_fit("--config", "{f}/list.yaml"), ["--config {f}/list.yaml holds a list: expected a mapping of settings"]),
    (["fit", "--config", os.path.join(ROOT, "configs", "kuhn_poker_two_learners_tiny.yaml"), "--trainer.max_steps", "1",
      "--model.learners", '{"first": {"roles": ["player_7"]}, "second": {"roles": ["player_1"]}}'],
     ["model.learners.first.roles: ['player_7'] are no seats of this run's games"]),
    (["fit", "--config", os.path.join(ROOT, "configs", "tictactoe_league_tiny.yaml"), "--trainer.max_steps", "1",
      "--data.league.dir", "{f}/league_corrupt"], ["data.league.dir {f}/league_corrupt:", "is not valid JSON"]),
    (["fit", "--config", os.path.join(ROOT, "configs", "tictactoe_league_tiny.yaml"), "--trainer.max_steps", "1",
      "--data.league.evaluator.games_per_seat", "0"], ["data.league.evaluator.games_per_seat: expected an int >= 1"]),
    (["fit", "--config", os.path.join(ROOT, "configs", "tictactoe_league_tiny.yaml"), "--trainer.max_steps", "1",
      "--data.league.evaluator.gatekeepers", "[random, best]"],
     ["data.league.evaluator.gatekeepers: 'random' is no id this league can hold", "random_bot, tictactoe_tactical_bot"]),
    # ---- fit: games and opponents ----
    (_fit("--data.games", ZERO_WEIGHTS), ["data.games[0].opponents: expected weights >= 0 with at least one > 0"]),
    (_fit("--data.games", NO_SUCH_BOT), ["data.games[0].opponents: no bot named 'nobody'", "bot:random"]),
    (_fit("--data.eval.opponent", "bot:nobody"), ["data.eval.opponent: no bot named 'nobody'"]),
    (_fit("--data.games", '[{"id": "chess_v9"}]'), ["data.games[0] (chess_v9)", "unknown game 'chess_v9'"]),
    (_fit("--data.games", '[{"id": "tictactoe_v1", "opponents": {"learner:nobody": 1}}]'),
     ["data.games[0].opponents: no learner named 'nobody'"]),
    (_fit("--data.eval.held_out", '[{"id": "chess_v9"}]'), ["data.eval.held_out[0] (chess_v9)", "unknown game"]),
    (_fit("--data.eval.held_out", '[{"id": "connect_four_v1", "opponent": "bot:nobody"}]'),
     ["data.eval.held_out[0].opponent: no bot named 'nobody'"]),
    (_fit("--data.eval.held_out", '[{"id": "connect_four_v1"}, {"id": "connect_four_v1"}]'),
     ["data.eval.held_out: connect_four_v1 listed twice"]),
    (_fit("--data.remote_models", '{"judge": {"model": "m", "base_url": "ftp://x"}}'),
     ["remote model 'm': base_url must start with http:// or https://, got 'ftp://x'"]),
    # ---- fit: files ----
    (_fit("--model.policy.model", "{f}/no_such_model"),
     ["--model.policy.model: directory", "no_such_model' does not exist"]),
    (_fit("--config", "{f}/missing.yaml"), ["--config: File does not exist", "missing.yaml"]),
    (_fit("--config", "{f}/bad.yaml"), ["--config {f}/bad.yaml: Problems parsing config"]),
    (_fit("--config", "{f}/bad_key.yaml"), ["--config {f}/bad_key.yaml: data.episodes_per_bach: no such key"]),
    (_fit("--ckpt_path", "{f}/missing.ckpt"), ["ckpt_path {f}/missing.ckpt: no such file"]),
    (_fit("--ckpt_path", "{f}/kuhn/last.ckpt"),  # the config's model, not the checkpoint's, is the run's
     ["ckpt_path {f}/kuhn/last.ckpt: the checkpoint was made with another config",
      "model.policy.tiny.heads: 2 in the checkpoint, 4"]),
    (_fit("--ckpt_path", "{f}/corrupt.ckpt"), ["ckpt_path {f}/corrupt.ckpt: not a readable checkpoint"]),
    (["validate", *_fit("--ckpt_path", "{f}/corrupt.ckpt")[1:]],
     ["ckpt_path {f}/corrupt.ckpt: not a readable checkpoint"]),
    # ---- evaluate ----
    (_evaluate("--checkpoint", "{f}/missing.ckpt"), ["--checkpoint {f}/missing.ckpt: no such file"]),
    (_evaluate("--checkpoint", "{f}/corrupt.ckpt"), ["--checkpoint {f}/corrupt.ckpt: not a readable checkpoint"]),
    (_evaluate("--checkpoint", "{f}/empty.ckpt"), ["{f}/empty.ckpt: not a readable checkpoint (an empty file)"]),
    (_evaluate("--checkpoint", "{f}/no_state.ckpt"), ["{f}/no_state.ckpt: a torch file without a state_dict"]),
    (_evaluate("--checkpoint", "{f}/kuhn/last.ckpt"),
     ["the checkpoint was made with another config",
      "model.policy.tiny.hidden_size: 64 in the checkpoint, 128 in this config", "pass the --config"]),
    (_evaluate("--checkpoint", "{f}/not_an_adapter"), ["{f}/not_an_adapter: a directory without adapter_config.json"]),
    (_evaluate("--opponent", "bot:nobody"), ["--opponent bot:nobody: no such bot", "bot:random"]),
    (_evaluate("--opponent", "wizard"), ["--opponent 'wizard': expected 'learner'"]),
    (_evaluate("--opponent", "checkpoint:{f}/nowhere"), ["--opponent checkpoint:{f}/nowhere: no directory"]),
    (_evaluate("--opponent", "checkpoint:{f}/not_an_adapter"), ["--opponent {f}/not_an_adapter: a directory without"]),
    (_evaluate("--opponent", "learner:nobody"), ["--opponent learner:nobody: no such learner"]),
    (_evaluate("--games_per_seat", "0"), ["--games_per_seat: expected >= 1, got 0"]),
    (_evaluate("--games_per_seat", "many"), ["--games_per_seat: expected an int, got many"]),
    (_evaluate("--learner", "nobody"), ["--learner nobody: no such learner"]),
    (_evaluate("--player", "bot:nobody"), ["--player bot:nobody: no such bot", "bot:random"]),
    (_evaluate("--player", "learner"), ["--player learner: expected bot:<name> or base"]),
    (_evaluate("--player", "bot:random", "--checkpoint", "{f}/kuhn/last.ckpt"), ["--player bot:random: plays instead",
                                                                                  "drop --checkpoint"]),
    (_evaluate("--output", "{f}/no_dir/out.json"), ["--output {f}/no_dir/out.json: directory", "does not exist"]),
    (_evaluate("--output", "{f}/league_list"), ["--output {f}/league_list: a folder; expected the path of a file"]),
    (_evaluate("--seed", "-1"), ["--seed: expected an int >= 0, got -1"]),
    (_evaluate("--player", "bot:random", "--exploitability", "true"),
     ["--player bot:random: --exploitability scores a model policy's moves"]),
    (_evaluate("--opponent", "checkpoint:{f}/kuhn_adapter"),
     ["--opponent {f}/kuhn_adapter: the adapter does not fit the config's model", "64 in the adapter, 128 here"]),
    (_evaluate("--checkpoint", "", "{f}/missing.ckpt"), ["--checkpoint {f}/missing.ckpt: no such file"]),
    (_evaluate("--checkpoint", "{f}/kuhn_adapter", config=os.path.join(ROOT, "configs", "kuhn_poker_two_learners_tiny.yaml")),
     ["--checkpoint {f}/kuhn_adapter: an adapter directory holds one policy", "pass the run's Lightning .ckpt"]),
    # ---- crossplay, rollout, play ----
    (["crossplay", "--config", TTT, "--league", "{f}/league_missing"], ["--league {f}/league_missing: no league.json"]),
    (["crossplay", "--config", TTT, "--league", "{f}/league_corrupt"], ["--league {f}/league_corrupt:", "not valid JSON"]),
    (["crossplay", "--config", TTT, "--league", "{f}/league_list"], ["--league {f}/league_list:", "a JSON object"]),
    (["crossplay", "--config", TTT, "--checkpoint", "{f}/corrupt.ckpt", "{f}/kuhn/last.ckpt"],
     ["--checkpoint {f}/corrupt.ckpt: not a readable checkpoint"]),
    (["crossplay", "--config", TTT, "--checkpoint", "{f}/kuhn_adapter", "{f}/kuhn_adapter"],
     ["--checkpoint {f}/kuhn_adapter: the adapter does not fit the config's model"]),
    (["crossplay", "--config", TTT, "--checkpoint", "{f}/nowhere.ckpt", "{f}/kuhn/last.ckpt"],
     ["--checkpoint {f}/nowhere.ckpt: no such file or directory"]),
    (["crossplay", "--config", TTT, "--league", "{f}/league_missing", "--games_per_seat", "0"],
     ["--games_per_seat: expected >= 1, got 0"]),
    (["crossplay", "--config", TTT, "--league", "{f}/league_missing", "--resamples", "0"],
     ["--resamples: expected >= 1, got 0"]),
    (["crossplay", "--config", TTT, "--league", "{f}/league_missing", "--output_dir", "{f}/a_file/report"],
     ["--output_dir {f}/a_file/report: {f}/a_file is a file, so nothing can be written under it"]),
    (_fit("--ckpt_path", "{f}/both_corrupt/last.ckpt"),
     ["ckpt_path {f}/both_corrupt/last.ckpt: not a readable checkpoint", "neither is the one before it"]),
    (["rollout", "--config", TTT, "--steps", "0"], ["--steps >= 1"]),
    (["rollout", "--config", TTT, "--steps", "1", "--checkpoint", "{f}/kuhn/last.ckpt"],
     ["the checkpoint was made with another config", "model.policy.tiny.heads: 2 in the checkpoint, 4"]),
    (["play", "--game", "nope_v1"], ["unknown game 'nope_v1'"]),
    (["play", "--config", TTT, "--seat", "5"], ["--seat 5: tictactoe_v1 has seats 0..1"]),
    (["play", "--config", TTT, "--checkpoint", "{f}/corrupt.ckpt"], ["{f}/corrupt.ckpt: not a readable checkpoint"]),
    (["play", "--config", TTT, "--opponent", "wizard"], ["--opponent 'wizard': expected 'learner'"]),
    (["play", "--config", TTT, "--opponent", "remote:nobody"],
     ["--opponent remote:nobody: no remote model named 'nobody' in data.remote_models; it names none"]),
    (_evaluate("--opponent", "remote:nobody"), ["--opponent remote:nobody: no remote model named 'nobody'"]),
    (_fit("--data.games", '[{"id": "tictactoe_v1", "opponents": {"remote:grader": 1.0}}]'),
     ["data.games[0].opponents: no remote model named 'grader' in data.remote_models"]),
    (["play", "--config", TTT, "--opponent", "checkpoint:{f}/nowhere"],
     ["--opponent checkpoint:{f}/nowhere: no directory"]),
    (["play", "--config", TTT, "--opponent", "checkpoint:{f}/kuhn_adapter"],
     ["--opponent {f}/kuhn_adapter: the adapter does not fit"]),
    (["train", "--config", TTT], ["unknown command 'train'"]),
]


def _ids():
    """``07-fit-model.loss.aggregation=bogus``: the command and the case's own last flag."""
    out = []
    for k, (args, _) in enumerate(CASES):
        flag, value = (args[-2], args[-1]) if len(args) > 2 else (args[-1], "")
        value = value.rsplit("/", 1)[-1] if not value.startswith("[") else "[...]"
        out.append(f"{k:02d}-{args[0]}-{flag.lstrip('-')}={value}"[:60])
    return out


@pytest.mark.parametrize(("args", "expected"), CASES, ids=_ids())
def test_a_bad_input_ends_with_one_clear_line(files, capsys, args, expected):
    args = [a.replace("{f}", str(files)) for a in args]
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    command = args[0] if args[0] != "train" else ""
    errors = [line for line in err.splitlines() if line.startswith(f"sp-lightning{' ' + command if command else ''}: ")]
    assert len(errors) == 1, err
    for part in expected:
        assert part.replace("{f}", str(files)) in errors[0], err
    assert len([line for line in err.splitlines() if line.strip()]) <= 4 or command == "", err


def test_the_table_holds_thirty_cases_and_more():
    assert len(CASES) >= 30


def test_debug_and_the_environment_variable_give_the_traceback_back(files, capsys, monkeypatch):
    """The same mistake raises its exception (the traceback) with --debug anywhere on the line,
    or with SP_LIGHTNING_DEBUG=1; the one-line message names both."""
    args = _evaluate("--checkpoint", str(files / "corrupt.ckpt"))
    with pytest.raises(SystemExit):
        main(args)
    assert "--debug or SP_LIGHTNING_DEBUG=1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        main([*args, "--debug"])
    monkeypatch.setenv("SP_LIGHTNING_DEBUG", "1")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        main(args)


def test_a_bug_of_ours_keeps_its_traceback(monkeypatch):
    """Not every exception is the user's: one without a key (here a stand-in for a bug in the
    evaluation) and one from inside a dependency propagate as they are."""
    import random

    import sp_lightning.cli.evaluate as evaluate
    from sp_lightning.errors import user_message

    def broken(args):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(evaluate, "main", broken)
    with pytest.raises(ValueError, match="internal invariant"):
        main(["evaluate", "--config", TTT])
    with pytest.raises(ValueError) as inside:
        random.choices([1, 2], weights=[0, 0])
    assert user_message(inside.value) is None
    with pytest.raises(KeyError) as key_error:
        {}["data.games"]
    assert user_message(key_error.value) is None


def test_the_installed_command_prints_only_the_line(files):
    """Through the installed ``sp-lightning`` (the console script the README's install puts
    beside the interpreter) in a process of its own: exit status 2 and the error's lines alone on
    stderr (no traceback, no warning), however the interpreter ends."""
    command = os.path.join(os.path.dirname(sys.executable), "sp-lightning")
    assert os.path.isfile(command), "pip install -e . installs the sp-lightning command"
    argv = [command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    env.pop("SP_LIGHTNING_DEBUG", None)
    done = subprocess.run([*argv, "fit", "--config", TTT, "--model.micro_batch_size", "0"], cwd=str(files),
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("Seed set to")]
    assert lines[0] == "sp-lightning fit: error: --model.micro_batch_size: expected >= 1, got 0", done.stderr
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr



def test_a_resume_from_a_damaged_checkpoint_loads_the_one_before_it(files, tmp_path, caplog):
    """``fit --ckpt_path last.ckpt`` where last.ckpt was damaged once written: the run resumes
    from ``last.ckpt.prev`` (sp_lightning.checkpoint_io) with a warning, not a refusal."""
    import shutil

    shutil.copy(files / "kuhn" / "last.ckpt", tmp_path / "last.ckpt.prev")  # the step-1 checkpoint
    (tmp_path / "last.ckpt").write_bytes(b"cut short")
    with caplog.at_level("WARNING", logger="sp_lightning.checkpoint_io"):
        main(["fit", "--config", KUHN, "--trainer.max_steps", "2", "--trainer.logger", "false",
              "--trainer.callbacks", "[]", "--trainer.default_root_dir", str(tmp_path),
              "--trainer.val_check_interval", "1000", "--data.episodes_per_batch", "2", "--model.update_epochs", "1",
              "--ckpt_path", str(tmp_path / "last.ckpt")])
    assert "loading the previous one" in caplog.text
