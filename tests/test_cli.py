"""The ``sp-lightning`` command: a table of subcommands, each with one parser that owns all of its
flags, so a typo is reported by the parser of the command it was meant for."""

import importlib

import pytest

from sp_lightning.cli import COMMANDS, main

TINY = "configs/kuhn_poker_tiny.yaml"


def test_help_lists_every_subcommand_with_a_line_each(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for name, (module, summary) in COMMANDS.items():
        assert f"  {name}" in out and summary in out
        assert callable(importlib.import_module(module).main), f"{module} has no main(args)"
    assert set(COMMANDS) == {"fit", "validate", "evaluate", "crossplay", "play", "rollout"}


def test_a_blocks_help_says_what_each_field_does(capsys):
    """``--<block>.help`` prints each field's docstring beside its type and default (parsed only
    when help is asked for: the setting is jsonargparse's, for the whole process, so put back)."""
    from jsonargparse import set_parsing_settings

    try:
        with pytest.raises(SystemExit) as exit_:
            main(["fit", "--model.loss.help"])
        assert exit_.value.code == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "The ratio is clipped below at 1 - clip_low. (type: float, default: 0.2)" in out
    finally:
        set_parsing_settings(docstring_parse_attribute_docstrings=False)


def test_an_unknown_command_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", TINY])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'train'" in err and "evaluate" in err and "crossplay" in err


@pytest.mark.parametrize("command, typo", [
    ("evaluate", "--games_per_seet"),       # the command's own flag
    ("evaluate", "--data.eval.gamez"),      # a config key, through the same parser
    ("evaluate", "--games_per_sea"),        # a prefix of a flag is not the flag
    ("crossplay", "--max_checkpoint"),
    ("rollout", "--step"),
    ("fit", "--trainer.max_step"),
    ("validate", "--data.eval.gamez"),
])
def test_a_typo_is_reported_by_the_parser_that_owns_the_flag(capsys, command, typo):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--config", TINY, typo, "2"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sp-lightning {command}: error: ")  # the command's own parser, in one line
    assert "Traceback" not in err and len(err.splitlines()) <= 2
    wrong_key = typo.lstrip("-")
    assert f"unrecognized arguments: {typo} 2" in err or f"{wrong_key}: " in err, err
