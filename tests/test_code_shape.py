"""The shape the code keeps, checked so that it cannot rot:
no function in ``sp_lightning/`` over 60 lines or with more than 8 parameters, and a
LightningModule that only trains in at most 400 lines. The constructors whose parameters are a
config block (the module, the DataModule, the arena, the rollout workers: each parameter is a key a
config sets, documented in its docstring for ``--help``) may take more parameters and a longer
docstring; their code stays within 60 lines."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "sp_lightning")
CONFIG_BLOCKS = {"SelfPlayModule", "SelfPlayDataModule", "Arena", "HFRolloutWorker", "VLLMRolloutWorker",
                 "ServerRolloutWorker", "RemoteRolloutWorker"}
"""Classes whose ``__init__`` parameters are a config block."""


def _functions():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                tree = ast.parse(open(path).read())
                for parent in ast.walk(tree):
                    for node in ast.iter_child_nodes(parent):
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            owner = parent.name if isinstance(parent, ast.ClassDef) else ""
                            yield os.path.relpath(path, ROOT), owner, node


def _parameters(node) -> int:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
    return len(names) + bool(args.vararg) + bool(args.kwarg)


def _code_lines(node) -> int:
    """Lines of the function without its docstring."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_no_function_is_over_60_lines_or_8_parameters():
    too_big = []
    for path, owner, node in _functions():
        config_block = node.name == "__init__" and owner in CONFIG_BLOCKS
        lines = _code_lines(node) if config_block else node.end_lineno - node.lineno + 1
        if lines > 60 or (_parameters(node) > 8 and not config_block):
            too_big.append(f"{path}:{node.lineno} {owner + '.' if owner else ''}{node.name}: {lines} lines, "
                           f"{_parameters(node)} parameters")
    assert not too_big, "\n".join(too_big)


def test_the_lightning_module_stays_small():
    with open(os.path.join(PACKAGE, "module.py")) as f:
        assert len(f.read().splitlines()) <= 400
