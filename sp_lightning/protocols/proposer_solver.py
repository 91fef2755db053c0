"""Proposer / solver: a proposer writes a question, solver sub-episodes answer it, and the
proposer is rewarded for questions that are neither too easy nor too hard.

The proposer's reward is ``1 - 2 * |pass_rate - target|`` (target 0.5 by default): +1 when half
the solvers pass, 0 when all pass or all fail; a question it fails to write scores -1. Each
solver is rewarded 1 for a correct answer, 0 otherwise. The solvers of one question form their
own GRPO group (``rollout.group``), so a solver's advantage is relative to its siblings only,
and the proposers of a batch compete with each other (the top level).

The proposer answers a move token ``[d]`` and the question holds ``d + 1`` one-digit numbers
drawn from the episode's seed. Two tasks (``task``):

- ``sum``: "What is 3 + 7 + 5?", answered with a number. The default solver is a scripted one,
  :class:`SumSolverBot`, that slips on each addition with a fixed probability, so longer sums
  are harder and the proposer can learn which length a solver passes half the time.
- ``largest``: "Which is the largest: [3] [7] [5]?", answered with one of the shown tokens
  (``[7]``); the numbers come from a window of five within 0-8, placed at random per question. A tiny model cannot learn to add, but it can learn to pick the largest of the
  tokens it is shown, so this is the task on which a learned solver improves (the two-learner
  recipe, ``configs/proposer_solver_two_learners_tiny.yaml``). Its scripted solver,
  :class:`LargestSolverBot`, slips the same way (one comparison at a time).

With ``solver: learner`` the learning policy also solves (its solver steps train too; with
``model.learners`` a learner of its own can hold the ``solver`` role); with ``solver_trains:
false`` solver steps only inform the proposer's reward (not trainable sub-episodes).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

from sp_lightning.episodes import Episode, EpisodeContext, SingleTurnEpisode
from sp_lightning.rubric import Rubric
from sp_lightning.sources import EpisodeRequest, EpisodeSource
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef, Role, Rollout, Step, parse_policy

PROPOSER, SOLVER = "proposer", "solver"
_MOVE = re.compile(r"\[(\d)\]")
_INTEGER = re.compile(r"-?\d+")


def check_accuracy(accuracy: float) -> float:
    if not 0.0 < accuracy <= 1.0:
        raise ValueError(f"solver_accuracy: expected in (0, 1], got {accuracy}")
    return accuracy


class _SlippingSolver:
    """A scripted solver that gets each step of a question (an addition, a comparison) right with
    probability ``accuracy``: the numbers it reads are those before the question mark."""

    def __init__(self, accuracy: float = 0.85, seed: int | None = None):
        self.accuracy = check_accuracy(accuracy)
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def numbers(observation: str) -> list[int]:
        return [int(n) for n in _INTEGER.findall(observation.split("?")[0])]

    def __call__(self, observation: str, legal_actions: list[str]) -> str:
        return self.act(observation, legal_actions)


class SumSolverBot(_SlippingSolver):
    """A scripted solver of "What is a + b + ...?": adds the numbers left to right and slips
    (counts one too many) on each addition with probability ``1 - accuracy``; slips add up and
    never cancel, so it passes a sum of ``k`` numbers with probability ``accuracy ** (k - 1)``. Registered for the run as ``bot:sum_solver``."""

    def act(self, observation: str, legal_actions: list[str]) -> str:
        numbers = self.numbers(observation)
        if not numbers:
            return "I cannot read a sum here."
        total = numbers[0]
        for n in numbers[1:]:
            total += n + (0 if self.rng.random() < self.accuracy else 1)  # a slip: one too many, never undone
        return str(total)


class LargestSolverBot(_SlippingSolver):
    """A scripted solver of "Which is the largest: [a] [b] ...?": passes a question of ``k``
    numbers with probability ``accuracy ** (k - 1)`` (each comparison right with probability
    ``accuracy``, as :class:`SumSolverBot`'s additions); after a slip it answers one too many.
    Registered for the run as ``bot:largest_solver``."""

    def act(self, observation: str, legal_actions: list[str]) -> str:
        numbers = self.numbers(observation)
        if not numbers:
            return "I cannot read a question here."
        right = all(self.rng.random() < self.accuracy for _ in numbers[1:])
        return f"[{max(numbers) + (0 if right else 1)}]"


TASKS = ("sum", "largest")


def answered_correctly(rollout: Rollout, extras: dict) -> dict[str, float]:
    """The solver's reward: 1 if the last integer of its answer is the sum, else 0."""
    numbers = _INTEGER.findall(extras.get("completion", ""))
    return {SOLVER: float(bool(numbers) and _is_integer(numbers[-1], extras["answer"]))}


def _is_integer(text: str, value: int) -> bool:
    """Whether ``text`` (``-?\\d+``, as a model wrote it) is the integer ``value``, compared as
    digits: ``int()`` refuses text of over 4300 digits, which a model can write."""
    digits = text.lstrip("-").lstrip("0") or "0"
    sign = "-" if text.startswith("-") and digits != "0" else ""
    return sign + digits == str(value)


@dataclass
class ProposerEpisode(Episode):
    """One proposal and the solver sub-episodes that answer it (see the module docstring)."""

    solvers: int
    target: float
    solver_policy: PolicyRef
    solver_trains: bool
    task: str = "sum"
    max_terms: int = 9
    name: str = "proposer_solver"
    instruction: str = ""  # by task, unless given
    rubric: Rubric = field(init=False)

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"data.episodes.task: expected one of {list(TASKS)}, got {self.task!r}")
        self.instruction = self.instruction or {
            "sum": "Propose a sum for the solvers: answer [d] to make them add d + 1 one-digit numbers. "
                   "You score most when half of them get it right.",
            "largest": "Propose a question for the solvers: answer [d] to make them pick the largest of d + 1 "
                       "numbers. You score most when half of them get it right.",
        }[self.task]
        self.rubric = Rubric(outcome=[(self.proposer_reward, 1.0)])
        self.solver_rubric = Rubric(outcome=[(answered_correctly, 1.0)])

    @property
    def roles(self) -> list[Role]:  # type: ignore[override]
        return [Role(PROPOSER), Role(SOLVER, trainable=self.solver_trains)]

    def proposer_reward(self, rollout: Rollout, extras: dict) -> dict[str, float]:
        if extras.get("invalid_question"):
            return {PROPOSER: -1.0}
        return {PROPOSER: 1.0 - 2.0 * abs(extras["pass_rate"] - self.target)}

    def question(self, completion_text: str, seed: int) -> list[int] | None:
        """The numbers the proposal asks the solvers to add, or None when it names no length."""
        moves = [int(d) for d in _MOVE.findall(completion_text) if int(d) < self.max_terms]
        if not moves:
            return None
        rng = random.Random(seed)
        if self.task == "sum":
            return [rng.randint(1, 9) for _ in range(moves[-1] + 1)]
        # largest: numbers 0-8 (tokens the tiny model has), from a window of five placed at random,
        # so that no constant answer passes often (from all of 0-8, answering [8] passes 42%)
        low = rng.randint(0, 4)
        return [rng.randint(low, low + 4) for _ in range(moves[-1] + 1)]

    def question_text(self, numbers: list[int]) -> tuple[str, int]:
        """The question the solvers read, and its answer."""
        if self.task == "sum":
            return f"What is {' + '.join(map(str, numbers))}? Answer with the number.", sum(numbers)
        return f"Which is the largest: {' '.join(f'[{n}]' for n in numbers)}? Answer with it.", max(numbers)

    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        completion = await self.generate(ctx, ModelRequest(PROPOSER, [{"role": "user", "content": self.instruction}],
                                                           LEARNER))
        rollout = Rollout(episode=self.name, steps=[Step(PROPOSER, completion)], seats={PROPOSER: LEARNER})
        numbers = self.question(completion.text, ctx.seed)
        rollout.metrics["invalid_question"] = float(numbers is None)
        if numbers is None:
            return rollout
        rollout.metrics["terms"] = float(len(numbers))
        text, answer = self.question_text(numbers)
        # one stateless episode answered ``solvers`` times (each run gets its own seed)
        solver = SingleTurnEpisode(name="solver", messages=[{"role": "user", "content": text}],
                                   rubric=self.solver_rubric, role=SOLVER, policy=self.solver_policy,
                                   extras={"answer": answer})
        seeds = [ctx.seed * 1000 + i for i in range(self.solvers)]
        children = await ctx.run_many([solver] * self.solvers, seeds, trainable=self.solver_trains)
        for child in children:  # the solvers of one question compete only with each other
            child.group = f"question/{ctx.seed}"
        rollout.children = children
        rollout.metrics["pass_rate"] = sum(c.rewards[SOLVER] for c in children) / len(children)
        return rollout


class ProposerSolver(EpisodeSource):
    """Every episode of a batch is one proposal answered by ``solvers`` solver sub-episodes.

    Args:
        solvers: Solver sub-episodes per question (the pass rate's denominator).
        target: The pass rate the proposer is rewarded for hitting.
        solver: Who solves: the task's scripted solver (``bot:sum_solver``, ``bot:largest_solver``:
            the default, by ``task``) or ``learner``.
        solver_trains: Whether the solvers' steps train (only meaningful for ``learner``).
        solver_accuracy: The scripted solver's chance of getting each addition (comparison) right.
        task: ``sum`` or ``largest`` (see the module docstring).
    """

    def __init__(self, solvers: int = 4, target: float = 0.5, solver: str | None = None,
                 solver_trains: bool = True, solver_accuracy: float = 0.85, task: str = "sum"):
        if solvers < 1:
            raise ValueError(f"data.episodes.solvers: expected >= 1, got {solvers}")
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"data.episodes.target: expected in [0, 1], got {target}")
        check_accuracy(solver_accuracy)  # now, not at setup
        scripted = {f"bot:{name}_solver" for name in TASKS}
        if solver is None:
            solver = f"bot:{task}_solver"
        elif solver in scripted and solver != f"bot:{task}_solver":
            raise ValueError(f"data.episodes.solver: {solver} solves another task than task: {task}; use "
                             f"bot:{task}_solver (the default) or learner")
        self.solver_accuracy = solver_accuracy
        # one episode serves every request: it keeps nothing between rollouts (each reads its seed
        # from ctx), so its rubrics are built once
        self.episode = ProposerEpisode(solvers, target, parse_policy(solver), solver_trains, task)

    def bots(self, seed: int) -> dict:
        return {"sum_solver": SumSolverBot(self.solver_accuracy, seed=seed),
                "largest_solver": LargestSolverBot(self.solver_accuracy, seed=seed)}

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        return [EpisodeRequest(self.episode, rng.randrange(2**31)) for _ in range(size)]
