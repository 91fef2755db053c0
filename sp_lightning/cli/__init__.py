"""The ``sp-lightning`` command: a table of subcommands, each a module of its own with one parser
that owns all of its flags (``sp-lightning <command> --help``).

    sp-lightning fit --config configs/tictactoe_tiny.yaml
    sp-lightning validate --config configs/tictactoe_tiny.yaml --ckpt_path <ckpt> --data.eval.games 400
    sp-lightning evaluate --config configs/kuhn_poker_league_tiny.yaml --checkpoint <ckpt> \\
        --opponent bot:random --games_per_seat 1000 --seed 7 --exploitability true
    sp-lightning crossplay --config configs/tictactoe_league_tiny.yaml \\
        --league runs/tictactoe_league_tiny/league --output_dir crossplay
    sp-lightning play --config configs/tictactoe_tiny.yaml --checkpoint <ckpt>
    sp-lightning rollout --config configs/debate_tiny.yaml --steps 2 --show 1

Starting the command (not importing this package) sets the process's thread defaults
(``sp_lightning.threads``) before torch loads, then imports only the subcommand it runs.

A mistake of the user's (a bad key, value, flag or file: ``sp_lightning.errors``) ends the command
with one line on stderr and exit status 2; ``--debug`` anywhere on the command line (or
``SP_LIGHTNING_DEBUG=1``) shows its traceback instead. Anything else keeps its traceback.
"""

from __future__ import annotations

import importlib
import re
import sys

from sp_lightning.errors import DEBUG_ENV, debug_requested, user_message

COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("sp_lightning.cli.fit", "train a policy by self-play or league play (a config's data and model)"),
    "validate": ("sp_lightning.cli.validate", "the in-training evaluation of a checkpoint, as a Lightning validate"),
    "evaluate": ("sp_lightning.cli.evaluate", "checkpoints against an opponent on fresh seeds, with intervals"),
    "crossplay": ("sp_lightning.cli.crossplay", "a round robin of a league's agents: payoffs and ratings"),
    "play": ("sp_lightning.cli.play", "play a game in the terminal against a policy or a bot"),
    "rollout": ("sp_lightning.cli.rollout", "play and print a config's batches without training"),
}
"""Subcommand -> (module with a ``main(args)``, one line of what it does)."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: sp-lightning <command> [options]   (sp-lightning <command> --help for its options)", "",
             "commands:"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", f"--debug (or {DEBUG_ENV}=1): a traceback with an error in what was given, not just its line"]
    return "\n".join(lines)


def main(args: list[str] | None = None) -> None:
    argv = sys.argv[1:] if args is None else list(args)
    debug = debug_requested(argv)
    argv = [arg for arg in argv if arg != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    if argv[0] not in COMMANDS:
        print(f"sp-lightning: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        raise SystemExit(2)
    from sp_lightning.threads import configure_torch_threads, set_wait_policy

    set_wait_policy()  # before the subcommand loads torch's OpenMP runtime
    if _asks_for_help(argv[1:]):  # each field's docstring in its help (parsing them costs time: only then)
        from jsonargparse import set_parsing_settings

        set_parsing_settings(docstring_parse_attribute_docstrings=True)
    command = importlib.import_module(COMMANDS[argv[0]][0])
    configure_torch_threads()
    try:
        command.main(argv[1:])
    except Exception as error:
        message = None if debug else user_message(error)
        if message is None:
            raise  # a bug (or --debug): its traceback
        _refuse(argv, message)


def _asks_for_help(args: list[str]) -> bool:
    """``--help``, ``-h`` or a block's ``--<key>.help`` among the arguments."""
    return any(arg in ("-h", "--help") or arg.partition("=")[0].endswith(".help") for arg in args)


def _refuse(argv: list[str], message: str) -> None:
    """A user's mistake: its line, where to read more, exit status 2 (as a parser's own refusal)."""
    prog = f"sp-lightning {argv[0]}"
    if message.startswith("Problems parsing config"):  # a YAML error, which jsonargparse does not place
        message = f"{_unreadable_config(argv)}: {message}"
    elif message.startswith("Unexpected config"):  # valid YAML that is not a mapping (a list, nothing)
        message = f"{_config_not_a_mapping(argv)}: expected a mapping of settings (trainer:, model:, data:)"
    unknown = re.search(r"does not accept option '([^']+)'", message)
    if unknown:  # a key of a config file: which file
        message = f"{_config_holding(argv, unknown.group(1))}{unknown.group(1)}: no such key"
    head = message.partition(":")[0]
    if any(arg == f"--{head}" or arg.startswith(f"--{head}=") for arg in argv):  # named as the user typed it
        message = f"--{message}"
    print(f"{prog}: error: {message}", file=sys.stderr)
    print(f"({prog} --help lists every option; --debug or {DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
    raise SystemExit(2)


def _configs(argv: list[str]) -> list[str]:
    return [path for flag, path in zip(argv, argv[1:]) if flag in ("--config", "-c")]


def _config_holding(argv: list[str], key: str) -> str:
    """``--config <file>: `` of the last config on the command line that sets ``key`` (dotted),
    or nothing."""
    import yaml

    for path in reversed(_configs(argv)):
        try:
            with open(path) as f:
                node = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return f"--config {path}: "
    return ""


def _config_not_a_mapping(argv: list[str]) -> str:
    """``--config <file> holds <what>`` of the first config on the command line that is not a mapping."""
    import yaml

    for path in _configs(argv):
        try:
            with open(path) as f:
                node = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(node, dict):
            return f"--config {path} holds {'nothing' if node is None else 'a ' + type(node).__name__}"
    return "--config"


def _unreadable_config(argv: list[str]) -> str:
    """``--config <file>`` of the first config on the command line that is not valid YAML."""
    import yaml

    for path in _configs(argv):
        try:
            with open(path) as f:
                yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            return f"--config {path}"
    return "--config"
