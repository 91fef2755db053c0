"""Which errors are the user's, and the one line a command prints for them.

A user's mistake (a config key or value, a flag, a file that is missing, corrupt or made with
another config) ends ``sp-lightning`` with one short message on stderr that names the key, flag
or file, what was found and what was expected, and exit status 2; anything else is a bug of ours
(or of a dependency) and keeps its traceback. ``--debug`` (or ``SP_LIGHTNING_DEBUG=1``) shows the
traceback of a user's mistake too.

What counts as the user's (:func:`user_message`):

1. :class:`UserError`, raised where we check what the user gave (a checkpoint file, a model
   directory, a flag's value).
2. A parse error of the command's parser (``argparse.ArgumentError``: jsonargparse raises it for
   an unknown key, a value of the wrong type, a missing or unreadable config file), its
   indented tree of union alternatives reduced to the key and what it expects
   (:func:`summarise_parse_error`).
3. A ``ValueError`` raised by this project's own code whose message starts with the setting it
   is about (``model.micro_batch_size: expected >= 1, got 0``), also where jsonargparse wraps it
   while building the config's objects. That is the form every config check here already takes
   (the style guide's "cross-field checks raise with the flag's name"), so the hundreds of checks
   written in it are user errors without each being rewritten; a ``ValueError`` without a key, or
   one raised inside a dependency (``random.choices`` given zero weights), is not: it means a
   check of ours is missing, and its traceback says where.
"""

from __future__ import annotations

import argparse
import os
import re
import traceback

DEBUG_ENV = "SP_LIGHTNING_DEBUG"
"""Set to 1 (like ``--debug``) to see the traceback behind a user error."""

_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package) + os.sep
              for package in ("sp_lightning", "envs"))
KEY_HEAD = re.compile(r"^(--[\w.-]+|[A-Za-z_]\w*(\[[^\]]*\])?(\.\w+(\[[^\]]*\])?)+)(?=[:\s(])")
"""A message that starts with a setting: ``--flag``, ``data.games[0].opponents``, ``loss.tis_cap``."""


class UserError(ValueError):
    """A mistake in what the user gave (config, flag, file), with a message that names it, says
    what was found and what was expected. A ``ValueError``, so code that catches those (and
    tests that expect them) keeps working; the command line prints its message alone."""


class ServiceError(UserError, RuntimeError):
    """A service outside this process (a model server, a remote API) stayed down or answered what
    it should not. Not a bug of ours: the message names the URL and what went wrong, and the
    command line prints it alone, as for a bad config (a ``RuntimeError`` too, for callers that
    catch those)."""


def debug_requested(argv: list[str]) -> bool:
    """Whether the user asked for tracebacks: ``--debug`` on the command line or ``SP_LIGHTNING_DEBUG``
    set to anything but empty or 0."""
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def _raised_by_us(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(_OURS)


def keyed_error(error: BaseException) -> ValueError | None:
    """The user's error in ``error`` or its causes (rules 1 and 3 of the module docstring), or None."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, UserError):
            return error
        if type(error) is ValueError and KEY_HEAD.match(str(error)) and _raised_by_us(error):
            return error
        error, seen = error.__cause__, seen + 1
    return None


def user_message(error: BaseException) -> str | None:
    """The one line to print for ``error`` if the user caused it, None if it is a bug."""
    if isinstance(error, argparse.ArgumentError):
        return summarise_parse_error(str(error))
    keyed = keyed_error(error)
    return None if keyed is None else " ".join(str(keyed).split())


_STRUCTURE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
              "Problem with given class_path", "Expected a <class 'NoneType'>", "Subclass types expect one of",
              "a class path (str)", "a dict with", "a dict without", "Given value:", "Expected a path but")


def _expectation(text: str) -> tuple[str | None, str | None]:
    """``Expected a <class 'int'>. Got value: 1.5`` -> ``("an int", "1.5")``; ``(None, None)`` for
    a message that is not an expectation."""
    got = None
    if ". Got value: " in text:
        text, got = text.split(". Got value: ", 1)
    match = re.fullmatch(r"Expected an? <class '(?:[\w.]+\.)?(\w+)'>", text)
    if match:
        name = match.group(1)
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}", got
    if text.startswith("Not a valid subclass of "):
        return f"a {text.removeprefix('Not a valid subclass of ')}", got
    return None, None


def _given(text: str) -> str:
    nested = re.fullmatch(r"NestedArg\(key='[^']*', val=(.*)\)", text)
    value = nested.group(1) if nested else text
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] == "'" else value


_UNKNOWN = re.compile(r"Option '([^']+)' is not accepted")


def summarise_parse_error(message: str) -> str:
    """jsonargparse's message (an indented tree: ``Parser key "model.policy":`` then each union
    alternative's error, nested) as one line: the deepest key it names, joined to its parents
    (``model.policy.lora.r``), and what was expected there and got."""
    keys: list[tuple[int, str]] = []
    found: dict[str, list[str]] = {}
    given: dict[str, str] = {}
    for line in message.splitlines():
        text = line.strip().lstrip("- ").strip()
        if not text:
            continue
        indent = len(line) - len(line.lstrip(" -"))
        while keys and keys[-1][0] >= indent:
            keys.pop()
        key = re.match(r'Parser key "([^"]+)":\s*(.*)$', text)
        if key:
            keys.append((indent, key.group(1)))
            text = key.group(2)
        path = ".".join(k for _, k in keys)
        if text.startswith("Given value: "):
            given.setdefault(path, _given(text.removeprefix("Given value: ")))
        if text and not text.startswith(_STRUCTURE):
            found.setdefault(path, []).append(text)
    if not found:
        return " ".join(message.split())
    path = max(found, key=lambda p: (p.count(".") + bool(p), len(p)))
    unknown = next((m for m in map(_UNKNOWN.fullmatch, found[path]) if m), None)
    if unknown:  # a key the settings class does not have
        return f"{path}.{unknown.group(1)}: no such key"
    specific, expected, got = [], [], given.get(path)
    for text in found[path]:
        expectation, value = _expectation(text)
        if expectation is None:
            specific.append(text)
        else:
            expected.append(expectation)
            got = got or value
    parts = list(dict.fromkeys(specific))
    if expected:
        parts.append("expected " + " or ".join(dict.fromkeys(expected)))
    if got is not None and not any("got" in part for part in parts):
        parts.append(f"got {got}")
    return f"{path}: {', '.join(parts)}" if path else ", ".join(parts)


def qualify(message: str, keys) -> str:
    """``message`` whose head names a setting by its tail (``loss.aggregation: ...``, as a class
    used in several places writes it) with the config's full key (``model.loss.aggregation``),
    where exactly one key of ``keys`` ends so."""
    head = KEY_HEAD.match(message)
    if head is None or head.group(1).startswith(("--", "model.", "data.", "trainer.")):
        return message
    tail = re.sub(r"\[[^\]]*\]", "", head.group(1))
    matches = {k for k in keys if k == tail or k.endswith("." + tail)}
    if len(matches) != 1 or "[" in head.group(1):
        return message
    return matches.pop() + message[len(head.group(1)):]


def check_writable(path: str, key: str, folder: bool = False) -> None:
    """Refuse, before a run starts, a path the run could not write at its end: a file where a
    folder is wanted or the reverse, a parent that is a file, or a place this user cannot write
    in. Missing folders are fine (they are made)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path):
        if folder and not os.path.isdir(path):
            raise UserError(f"{key} {path}: a file; expected a folder (made if missing)")
        if not folder and os.path.isdir(path):
            raise UserError(f"{key} {path}: a folder; expected the path of a file to write")
    ancestor = path if folder and os.path.isdir(path) else os.path.dirname(path)
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UserError(f"{key} {path}: {ancestor} is a file, so nothing can be written under it; expected a "
                        f"path under a folder")
    if not os.access(ancestor, os.W_OK):
        raise UserError(f"{key} {path}: {ancestor} is not writable by this user; expected a path this user can "
                        f"write")


def check_int(value, key: str, least: int, nullable: bool = False) -> None:
    """Refuse a setting that is not an int of at least ``least`` (a bool is no int here, though
    Python says it is; ``nullable``: None is fine too), naming ``key``."""
    if nullable and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{key}: expected an int >= {least}{' or null' if nullable else ''}, got {value!r}")
