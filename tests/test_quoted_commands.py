"""Every quoted command runs: each ``sp-lightning ...`` command line in the README, ``docs/``
(pages and the SLURM scripts), the configs' header comments and the notebooks (markdown and
code cells) is parsed by its subcommand's own parser, and the repository files it names exist, so
that none can drift from the commands again.

Parse only, nothing is built or run: ``fit`` and ``validate`` stop after LightningCLI has parsed
the whole command (config files included), the other commands after their one parser has.
Placeholders are read as such: ``runs/...`` paths are what a fit writes; ``<ckpt>``-style
values and ``...`` stand for a value of the user's (a command whose ``--config`` is a placeholder
is a template, and only its flags are checked); ``[--flag value]`` is an optional part, parsed
with the rest; ``$VAR`` in a SLURM script is its default or a number."""

import glob
import json
import os
import re
import shlex
import warnings

import pytest

from sp_lightning.cli import COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_PATH = re.compile(r"^(configs|docs|benchmarks|notebooks|envs|sp_lightning|tests)/")
"""A value that names a file shipped in the repository (it must exist, as must every --config)."""
PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|\*args")


# ---- extraction ---------------------------------------------------------------------------------
def _joined(lines):
    """``(line number, line)`` with backslash-continued lines joined onto the first."""
    out, start, buffer = [], None, ""
    for number, line in lines:
        stripped = line.rstrip()
        if start is None:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        out.append((start, buffer + stripped))
        start, buffer = None, ""
    if buffer:
        out.append((start, buffer))
    return out


def _commands_in_code(lines):
    """The ``sp-lightning`` commands in lines of shell: a command of a line (its first, or one
    after ``&&``, ``;`` or ``|``) that is ``sp-lightning``, after any ``VAR=value``, ``srun`` or
    prompt before it. Prose in a code block (a file tree's comments) is not a command."""
    found = []
    for number, line in _joined(lines):
        for part in re.split(r"\s(?:&&|;|\|)\s", line):
            part = re.sub(r"^\s*(?:\$\s+|!)?(?:\w+=\S*\s+)*(?:srun\s+)?", "", part)
            if re.match(r"sp-lightning(\s|$)", part):
                found.append((number, part.strip()))
    return found


def _commands_in_spans(text, first_line=1):
    """The ``sp-lightning`` commands quoted inline (`` `sp-lightning ...` ``), a span possibly
    wrapped over lines."""
    found = []
    for match in re.finditer(r"`([^`]+)`", text):
        span = re.sub(r"^(?:\w+=\S*\s+)*", "", " ".join(match.group(1).split()))
        if re.match(r"sp-lightning(\s|$)", span):
            found.append((first_line + text.count("\n", 0, match.start()), span))
    return found


def _markdown(text, first_line=1):
    """Commands in fenced code blocks and in inline code spans of a markdown text."""
    found, prose, block = [], [], None
    for number, line in enumerate(text.splitlines(), first_line):
        if line.lstrip().startswith("```"):
            if block is None:
                block = []
            else:
                found += _commands_in_code(block)
                block = None
            prose.append("")
            continue
        if block is not None:
            block.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    return found + _commands_in_spans("\n".join(prose), first_line)


def _yaml_header(text):
    comments = [(n, line.lstrip()[1:].strip()) for n, line in enumerate(text.splitlines(), 1)
                if line.lstrip().startswith("#")]
    return _commands_in_code(comments)


def _shell_script(text):
    text = re.sub(r'"?\$\{\w+\[@\]\}"?', "", text)  # an array of optional flags: none
    text = re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", lambda m: m.group(2) if m.group(2) is not None else "1", text)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if not line.lstrip().startswith("#")]
    return _commands_in_code(lines)


def _notebook(text):
    found = []
    for cell in json.loads(text)["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            found += _markdown(source)
        else:  # code: a shell escape, or a command quoted in a comment or a string
            found += _commands_in_code([(n, line.lstrip()[1:]) for n, line in enumerate(source.splitlines(), 1)
                                        if line.lstrip().startswith("!")])
            found += _commands_in_spans(source)
    return found


SOURCES = {
    "README.md": _markdown, "docs/*.md": _markdown, "docs/slurm/*.sbatch": _shell_script,
    "configs/*.yaml": _yaml_header, "configs/**/*.yaml": _yaml_header, "notebooks/*.ipynb": _notebook,
}


def quoted_commands():
    """``(where, command)`` of every quoted command, ``where`` as ``file:line`` (a notebook:
    its file), each distinct pair once."""
    out = {}
    for pattern, extract in SOURCES.items():
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            rel = os.path.relpath(path, ROOT)
            with open(path) as f:
                for line, command in extract(f.read()):
                    out.setdefault((f"{rel}:{line}" if not rel.endswith(".ipynb") else rel, command), None)
    return list(out)


COMMAND_LINES = quoted_commands()


# ---- checking -------------------------------------------------------------------------------------
def tokens_of(command: str) -> list[str]:
    """The command's words: a ``[--flag value]`` optional part kept, a trailing comment dropped."""
    command = re.sub(r"\[(--[^\[\]]+)\]", r"\1", command)
    return shlex.split(command, comments=True)


def arguments(tokens: list[str]) -> list[str] | None:
    """The subcommand's arguments with each placeholder replaced by a value, or None for a
    template (its ``--config`` is a placeholder)."""
    args = []
    for k, token in enumerate(tokens):
        if PLACEHOLDER.search(token):
            if k and tokens[k - 1] in ("--config", "-c"):
                return None
            token = PLACEHOLDER.sub("x", token)
        args.append(token)
    return args


class _Parsed(Exception):
    """Raised where a command has parsed and would start building."""


PARSED: dict[tuple[str, ...], BaseException | None] = {}
"""The outcome of each command line parsed in this process: the same command quoted in several
places (the README's first command, say, in five) is parsed once, about 0.4 s a ``fit``."""


def parse_once(subcommand: str, args: list[str]) -> None:
    """:func:`parse`, or the outcome of the same command parsed before (its error raised again)."""
    key = (subcommand, *args)
    if key not in PARSED:
        try:
            parse(subcommand, args)
            PARSED[key] = None
        except (Exception, SystemExit) as error:  # an assertion too: the same command fails alike
            PARSED[key] = error
    if PARSED[key] is not None:
        raise PARSED[key]


def parse(subcommand: str, args: list[str]) -> None:
    """``args`` through ``subcommand``'s own parser; raises its ``argparse.ArgumentError`` if it
    refuses them."""
    import importlib

    from sp_lightning.cli.common import parse_command
    from sp_lightning.cli.fit import PARSER_KWARGS, SelfPlayCLI

    def parsed(*_):
        raise _Parsed

    class ParseOnly(SelfPlayCLI):
        before_instantiate_classes = parsed

    try:
        if subcommand in ("fit", "validate"):
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # as sp-lightning does
            ParseOnly(args=[subcommand, *args], seed_everything_default=0,
                      parser_kwargs={**PARSER_KWARGS, "prog": "sp-lightning", subcommand: PARSER_KWARGS})
        else:
            module = importlib.import_module(COMMANDS[subcommand][0])
            parse_command(f"sp-lightning {subcommand}", "", module.add_flags, args, prepare=parsed)
    except _Parsed:
        return
    except SystemExit as done:  # --help and --print_config print and exit 0
        assert done.code in (0, None), f"exit status {done.code}"
        return
    raise AssertionError("the command parsed but was not stopped before building")


def test_the_quoted_commands_are_found():
    """The extraction sees what it should: the README's first command, a config header's
    continued evaluate line, the docs' fenced blocks and a notebook's inline span."""
    commands = {command for _, command in COMMAND_LINES}
    wheres = {where.split(":")[0] for where, _ in COMMAND_LINES}
    assert "sp-lightning fit --config configs/tictactoe_tiny.yaml" in commands
    assert any(c.startswith("sp-lightning evaluate --config configs/tictactoe_tiny.yaml --checkpoint runs/")
               and "--games_per_seat 1000" in c for c in commands)
    assert {"README.md", "docs/evaluation.md", "configs/kuhn_poker_tiny.yaml",
            "notebooks/play_against_a_checkpoint.ipynb", "docs/slurm/fit_cpu.sbatch"} <= wheres
    assert len(COMMAND_LINES) >= 60


@pytest.mark.parametrize(("where", "command"), COMMAND_LINES, ids=[w for w, _ in COMMAND_LINES])
def test_a_quoted_command_is_accepted_by_its_parser(where, command, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # commands are quoted from the repository's root
    tokens = tokens_of(command)
    if len(tokens) == 1 or tokens[1] in ("--help", "-h"):
        return  # the command named, or its list of subcommands
    subcommand = tokens[1]
    if subcommand.endswith(":") or PLACEHOLDER.search(subcommand):
        return  # a line of its output (an error message quoted in the docs), or `sp-lightning *args`
    assert subcommand in COMMANDS, f"{where}: no subcommand {subcommand!r} ({', '.join(COMMANDS)})"
    args = arguments(tokens[2:])
    for flag, value in zip(tokens[2:], tokens[3:]):
        shipped = REPO_PATH.search(value) or (flag in ("--config", "-c") and not value.startswith("runs/"))
        if flag.startswith("-") and shipped and not PLACEHOLDER.search(value):
            assert os.path.exists(os.path.join(ROOT, value)), f"{where}: {flag} {value}: no such file in the repository"
    if args is None:
        return  # a template: `--config <file>`
    parse_once(subcommand, args)


# ---- the class paths the docs and configs name ---------------------------------------------------
CLASS_PATH = re.compile(r"""class_path\\?["']?\s*:\s*\\?["']?([A-Za-z_][\w.]*)""")
EXAMPLE_MODULES = ("my_pkg.",)
"""A user's own module in an example (``my_pkg.MyArena``): not ours to import."""


def quoted_class_paths():
    """``(file, class path)`` of every ``class_path`` in the README, docs, configs, notebooks and
    benchmark configs, each once."""
    found = {}
    for pattern in ("README.md", "docs/*.md", "configs/**/*.yaml", "notebooks/*.ipynb", "benchmarks/**/*.py",
                    "benchmarks/**/*.yaml"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path) as f:
                for name in CLASS_PATH.findall(f.read()):
                    if not name.startswith(EXAMPLE_MODULES):
                        found.setdefault(name, os.path.relpath(path, ROOT))
    return sorted((where, name) for name, where in found.items())


CLASS_PATHS = quoted_class_paths()


def test_the_class_paths_are_found():
    names = {name for _, name in CLASS_PATHS}
    assert {"sp_lightning.rollout.ServerRolloutWorker", "sp_lightning.credit.RAE",
            "lightning.pytorch.callbacks.ModelCheckpoint"} <= names


@pytest.mark.parametrize(("where", "name"), CLASS_PATHS, ids=[f"{w}:{n}" for w, n in CLASS_PATHS])
def test_a_quoted_class_path_names_a_class_that_imports(where, name, monkeypatch):
    """``class_path`` resolves as jsonargparse resolves it: the module, then the attribute (a
    benchmark's own classes from its folder, which the benchmark puts on the path)."""
    import importlib

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    module, _, attribute = name.rpartition(".")
    assert hasattr(importlib.import_module(module), attribute), f"{where}: {name}"
