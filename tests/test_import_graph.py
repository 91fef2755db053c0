"""The packages have no import cycle and importing them has no side effects.

Every import counts, those inside functions too: a function-level import is the usual way to
hide a cycle, and the cycle is still there for whoever reads the code. An import of
``a.b.c`` (or ``from a.b import c``) is an edge to the module it names; a package's own
``__init__`` is a node of its own.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("sp_lightning", "envs")


def module_files() -> dict[str, str]:
    """Dotted module name -> file, for every module of the packages."""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def imports_of(module: str, path: str, known: set[str]) -> set[str]:
    """The package modules ``module`` imports, anywhere in its file."""
    tree = ast.parse(open(path).read(), path)
    is_package = path.endswith("__init__.py")
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                parts = module.split(".")
                anchor = parts if is_package else parts[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            # the longest known prefix: ``from a.b import c`` is a.b.c if that is a module, else a.b
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.add(name)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_cycle_anywhere_in_the_packages():
    files = module_files()
    known = set(files)
    graph = {module: imports_of(module, path, known) for module, path in files.items()}
    assert graph["sp_lightning.arena"], "the import graph is empty: the parser found no edge"
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_training_side_never_imports_the_playing_side():
    """Data flows one way: the module gets records and sends weights; nothing it imports, however
    indirectly, is the engine, the DataModule, the arena or a rollout backend (only the
    ``rollout.base`` types of what crosses)."""
    files = module_files()
    known = set(files)
    graph = {module: imports_of(module, path, known) for module, path in files.items()}
    reached, todo = set(), ["sp_lightning.module"]
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    playing = {"sp_lightning.engine", "sp_lightning.data", "sp_lightning.arena", "sp_lightning.scheduler",
               "sp_lightning.league.callbacks", "sp_lightning.rollout"} | {m for m in known if m.startswith("sp_lightning.rollout.")
                                                   and m != "sp_lightning.rollout.base"}
    assert "sp_lightning.update" in reached  # the walk is not empty
    assert not reached & playing, sorted(reached & playing)


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module cycle and a three-module one are reported."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_importing_the_packages_changes_no_environment_variable_and_no_warning_filter():
    """``import sp_lightning`` (and every public module the CLI and notebooks import) leaves the
    process as it found it: thread settings belong to the ``sp-lightning`` command's start."""
    probe = (
        "import os, warnings, sys\n"
        # the libraries' own filters first: only what our modules add is counted
        "import numpy, torch, lightning, transformers, peft, gymnasium, pettingzoo, jsonargparse\n"
        "before_env, before_filters = dict(os.environ), list(warnings.filters)\n"
        "import sp_lightning, sp_lightning.cli, sp_lightning.data, sp_lightning.module, sp_lightning.engine\n"
        "import envs\n"
        "changed = {k for k in set(os.environ) | set(before_env) if os.environ.get(k) != before_env.get(k)}\n"
        "print(sorted(changed)); print(len(warnings.filters) - len(before_filters))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    changed, filters = done.stdout.split("\n")[:2]
    assert changed == "[]", f"importing set environment variables: {changed}"
    assert filters == "0", f"importing added {filters} warning filters"
