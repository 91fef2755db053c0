"""Prompt templates: what a model is asked for a move, and how its answer becomes an action.

A template does one job from both ends, so the two ends cannot drift apart:

- ``messages(observation, role)`` builds the chat: the role's system prompt (if any), then one
  user turn holding the observation and an instruction on the answer format;
- ``parse(completion_text)`` reads the answer back into a :class:`ParseResult`:
  ``action_text`` is what goes to the env, which then applies its own ``parse_move`` (the LAST
  ``[...]`` token, see ``envs.base``); None there is an invalid move, never a crash.
  ``well_formed`` says whether the answer followed the template's format (the format reward);
  ``reason`` is a short note on why, for logs and tests;
- ``answer(move)`` writes a move as the shortest well-formed answer, which ``parse`` reads back
  to it: a bot's bare move where a model learns to imitate it.

Each template states its one parse rule in its class docstring. A parser never raises, on any
str or on anything else (a non-str gives ``action_text=None``).

Templates by name (``TEMPLATES``, ``make_template``):
- ``"plain"``: the observation, then "Answer with your move in brackets, e.g. [move]."
- ``"reasoning"``: think inside ``<think>...</think>``, then answer ``\\boxed{[move]}`` (the
  zero-shot style of Qwen3 and DeepSeek-R1 prompts). It needs room to think: raise
  ``sampling.max_new_tokens`` well above the one token a move takes on the tiny model.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sp_lightning.types import Step

THINK_OPEN, THINK_CLOSE, BOX_OPEN = "<think>", "</think>", "\\boxed{"
_BRACE = re.compile(r"\\boxed\{|\{|\}")


@dataclass(frozen=True)
class ParseResult:
    """What a template made of one completion."""

    action_text: str | None
    """Handed to the env, which applies its own ``parse_move``; None is an invalid move."""
    well_formed: bool
    """Whether the answer followed the template's format (read by ``format_reward``)."""
    reason: str
    """"ok", or a short note on what was missing."""


def _has_move(text: str) -> bool:
    from envs.base import parse_move  # lazy, like every envs import in sp_lightning

    return parse_move(text) is not None


class PromptTemplate(ABC):
    """The chat a model sees for a move, and how its answer is read back.

    ``system_prompt`` is one prompt for every role, a mapping ``role -> prompt`` (roles missing
    from it get none), or None. ``instruction`` follows the observation in the user turn; an
    empty one leaves the observation alone.
    """

    def __init__(self, system_prompt: str | Mapping[str, str] | None = None, instruction: str = ""):
        self.system_prompt = system_prompt
        self.instruction = instruction

    def system_prompt_for(self, role: str) -> str | None:
        if isinstance(self.system_prompt, Mapping):
            return self.system_prompt.get(role)
        return self.system_prompt

    def messages(self, observation: str, role: str) -> list[dict[str, str]]:
        """[system prompt of ``role``,] user turn: the observation, a blank line, the instruction."""
        system = self.system_prompt_for(role)
        messages = [{"role": "system", "content": system}] if system else []
        content = f"{observation}\n\n{self.instruction}" if self.instruction else observation
        messages.append({"role": "user", "content": content})
        return messages

    @abstractmethod
    def parse(self, completion_text: str) -> ParseResult:
        """The action for the env and whether the answer was well formed; never raises."""

    def answer(self, move: str) -> str:
        """The shortest well-formed answer that plays ``move`` (a move token, ``[4]``): how a bot's
        bare move is written where a model learns from it (imitating a bot, ``imitation``), so
        that :meth:`parse` reads it back to the move. Here the move itself; a template whose
        format wraps the move says how."""
        return move

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(system_prompt={self.system_prompt!r}, instruction={self.instruction!r})"


class PlainTemplate(PromptTemplate):
    """The observation (the contract's text ends with its legal moves), then an optional
    instruction; the answer is the move in brackets. No instruction by default, so the prompt is
    the observation itself; set one with ``template_args: {instruction: ...}`` in a game config.

    Parse rule: the whole completion goes to the env unchanged (so the env's rule decides the
    move: the LAST ``[...]`` token); it is well formed iff it holds a ``[...]`` move token.
    """

    def __init__(self, system_prompt: str | Mapping[str, str] | None = None, instruction: str = ""):
        super().__init__(system_prompt, instruction)

    def parse(self, completion_text: str) -> ParseResult:
        if not isinstance(completion_text, str):
            return ParseResult(None, False, f"not a string: {type(completion_text).__name__}")
        if _has_move(completion_text):
            return ParseResult(completion_text, True, "ok")
        return ParseResult(completion_text, False, "no [move] token")


class ReasoningTemplate(PromptTemplate):
    """Think step by step inside ``<think>...</think>``, then answer ``\\boxed{[move]}``.

    Parse rule: the answer is the text after the LAST ``</think>`` (the whole text if there is
    none), cut at the first ``<think>`` in it (a thinking block left open runs to the end); the
    action is the content of the last complete ``\\boxed{...}`` in the answer (braces inside
    balanced, unclosed boxes ignored), handed to the env as is, so ``\\boxed{4}`` without
    brackets is an invalid move. Nothing inside the thinking ever becomes the action; no box in
    the answer gives ``action_text=None``. Well formed iff the box holds a ``[...]`` move token
    and, with ``require_think`` (the default), a ``</think>`` precedes it. The opening
    ``<think>`` is not required, since some chat templates (Qwen3 thinking models) put it in
    the prompt; set ``require_think=False`` where thinking is switched off in the chat template.
    """

    def __init__(
        self,
        system_prompt: str | Mapping[str, str] | None = (
            "You are playing a turn-based text game. Reason about the position, then choose "
            "one of the legal moves."
        ),
        instruction: str = (
            "Think step by step inside <think>...</think>. Then give your final move, one of the "
            "legal moves with its brackets, as \\boxed{[move]}."
        ),
        require_think: bool = True,
    ):
        super().__init__(system_prompt, instruction)
        self.require_think = require_think

    def parse(self, completion_text: str) -> ParseResult:
        if not isinstance(completion_text, str):
            return ParseResult(None, False, f"not a string: {type(completion_text).__name__}")
        _, closed, after = completion_text.rpartition(THINK_CLOSE)
        answer, opened, _ = after.partition(THINK_OPEN)
        boxed = last_boxed(answer)
        if boxed is None:
            if opened:
                return ParseResult(None, False, "<think> never closed: no answer after the thinking")
            return ParseResult(None, False, "no \\boxed{...} answer")
        if not _has_move(boxed):
            return ParseResult(boxed, False, "no [move] token in the \\boxed{...} answer")
        if self.require_think and not closed:
            return ParseResult(boxed, False, "no </think> before the answer")
        return ParseResult(boxed, True, "ok")

    def answer(self, move: str) -> str:
        """An empty thinking block, then the boxed move (a bot has no reasoning to imitate)."""
        return f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n{BOX_OPEN}{move}}}"


def last_boxed(text: str) -> str | None:
    """Content of the complete ``\\boxed{...}`` that opens last, braces inside balanced; or None.

    One pass over the braces: ``"\\boxed{[1]} \\boxed{[2]"`` -> ``"[1]"`` (the second never
    closes); ``"\\boxed{\\text{[2]}}"`` -> ``"\\text{[2]}"``.
    """
    opens: list[int | None] = []  # per open brace: where its box's content starts, or None
    best: tuple[int, int] | None = None
    for match in _BRACE.finditer(text):
        token = match.group()
        if token == "}":
            start = opens.pop() if opens else None
            if start is not None and (best is None or start > best[0]):
                best = (start, match.start())
        else:
            opens.append(match.end() if token == BOX_OPEN else None)
    return None if best is None else text[best[0]:best[1]]


TEMPLATES: dict[str, type[PromptTemplate]] = {"plain": PlainTemplate, "reasoning": ReasoningTemplate}


def make_template(name_or_instance: str | PromptTemplate, **kwargs: Any) -> PromptTemplate:
    """A template from a name in ``TEMPLATES``, a class path ``"pkg.module.Class"`` (a
    PromptTemplate subclass) or an instance (returned as is); kwargs go to the constructor."""
    if isinstance(name_or_instance, PromptTemplate):
        if kwargs:
            raise ValueError(f"make_template: got a template instance and kwargs {sorted(kwargs)}; "
                             "pass a template name to build one with kwargs")
        return name_or_instance
    name = name_or_instance
    known = ", ".join(sorted(TEMPLATES))
    if name in TEMPLATES:
        return TEMPLATES[name](**kwargs)
    module_name, _, class_name = str(name).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name) if module_name else None
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"template {name!r}: cannot load it ({exc}); known names: {known}") from exc
    if not (isinstance(cls, type) and issubclass(cls, PromptTemplate)):
        raise ValueError(f"template {name!r}: expected one of {known} or a class path "
                         "'pkg.module.Class' of a PromptTemplate subclass")
    return cls(**kwargs)


def format_reward(step: Step) -> float:
    """+1 on a move whose answer followed the template's format (``step.info["well_formed"]``),
    0 otherwise. Pairs with ``rubric.invalid_move``: an answer the template could not read
    reaches the env as None, which the env marks invalid, so that penalty applies unchanged."""
    return 1.0 if step.info.get("well_formed") else 0.0
