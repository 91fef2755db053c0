"""Proposer / solver: nested solver episodes, their grouping, and a proposer that learns."""

import os
import random

import pytest

from sp_lightning.arena import Arena
from sp_lightning.batch import to_records
from sp_lightning.credit import GRPO
from sp_lightning.protocols.proposer_solver import (
    PROPOSER, SOLVER, LargestSolverBot, ProposerEpisode, ProposerSolver, SumSolverBot, answered_correctly,
)
from sp_lightning.types import LEARNER, PolicyRef
from sp_lightning.rollout.base import SamplingSettings
from tests.helpers import ScriptedWorker, fit_batches

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "proposer_solver_tiny.yaml")


def proposals_worker(proposals):
    """Proposers answer the scripted proposals in turn; a solver answers the right sum when its
    question is the 2-number one, else 0."""
    proposals = list(proposals)

    def answer(r):
        if r.role == PROPOSER:
            return proposals.pop(0)
        numbers = [int(n) for n in r.messages[-1]["content"].split("?")[0].split() if n.isdigit()]
        return str(sum(numbers)) if len(numbers) == 2 else "0"

    return ScriptedWorker(answer=answer, completion_ids=[2])


def _play(source, proposals, seeds):
    worker = proposals_worker(proposals)
    arena = Arena(worker, SamplingSettings(), bots=source.bots(0))
    requests = source.get_batch(random.Random(0), len(proposals))
    rollouts = arena.play([r.episode for r in requests], seeds)
    return worker, rollouts


def test_proposer_advantages_are_against_the_batch_and_solver_advantages_against_siblings():
    """Target pass rate 1.0. Proposals [1] (a 2-number sum: every scripted answer is right,
    reward 1), [2] (3 numbers: every answer wrong, pass rate 0, reward -1), no move (-1) and [1]
    (1): GRPO over the 4 proposers has mean 0 and std 1, so the advantages are 1, -1, -1, 1. The
    solvers of one question got equal rewards, so each sibling group's advantages are 0, whatever
    the other questions' solvers got."""
    source = ProposerSolver(solvers=3, target=1.0, solver="learner")
    worker, rollouts = _play(source, ["[1]", "[2]", "nothing", "[1]"], seeds=[1, 2, 3, 4])
    assert [len(c) for c in worker.calls] == [4, 9]  # the 9 solver calls of 3 questions batch together
    assert [r.rewards[PROPOSER] for r in rollouts] == [1.0, -1.0, -1.0, 1.0]
    credit = GRPO()
    credit.assign(rollouts)
    records = to_records(rollouts)
    assert len(records) == 4 + 9  # 4 proposals, 3 answered questions x 3 solvers
    assert [r.steps[0].advantage for r in rollouts] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    groups = {child.group for r in rollouts for child in r.children}
    assert len(groups) == 3
    for r in rollouts:
        assert all(child.steps[0].advantage == 0.0 for child in r.children)
        assert all(child.steps[0].role == SOLVER for child in r.children)


def test_solver_advantages_use_only_their_siblings_rewards():
    """One question whose solvers disagree (rewards set to 1, 0, 1 by hand, as a grader could
    have scored them): its sibling advantages are (r - 2/3) / std, independent of the 2-number
    question whose solvers all pass."""
    import numpy as np

    source = ProposerSolver(solvers=3, target=0.5, solver="learner")
    worker, rollouts = _play(source, ["[1]", "[2]"], seeds=[5, 6])
    question = rollouts[1]
    for child, reward in zip(question.children, [1.0, 0.0, 1.0]):  # as if a grader had said so
        child.rewards = {SOLVER: reward}
    GRPO().assign(rollouts)
    rewards = np.array([1.0, 0.0, 1.0])
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
    assert [c.steps[0].advantage for c in question.children] == pytest.approx(expected.tolist())
    assert all(c.steps[0].advantage == 0.0 for c in rollouts[0].children)


def test_scripted_solver_passes_longer_sums_less_often():
    bot = SumSolverBot(accuracy=0.8, seed=0)
    def pass_rate(k):
        question = "What is " + " + ".join(["3"] * k) + "? Answer with the number."
        return sum(bot.act(question, []) == str(3 * k) for _ in range(4000)) / 4000
    assert pass_rate(1) == 1.0
    assert pass_rate(3) == pytest.approx(0.8 ** 2, abs=0.03)
    assert pass_rate(6) == pytest.approx(0.8 ** 5, abs=0.03)
    with pytest.raises(ValueError, match="solver_accuracy"):
        ProposerSolver(solver_accuracy=0.0)


def test_largest_task_asks_for_the_largest_shown_token_and_its_bot_slips_alike():
    episode = ProposerEpisode(4, 0.5, LEARNER, True, task="largest")
    numbers = episode.question("[4]", seed=7)
    assert len(numbers) == 5 and all(0 <= n <= 8 for n in numbers)
    text, answer = episode.question_text(numbers)
    assert text == f"Which is the largest: {' '.join(f'[{n}]' for n in numbers)}? Answer with it."
    assert answer == max(numbers)
    assert "largest of d + 1" in episode.instruction
    bot = LargestSolverBot(accuracy=0.8, seed=0)
    def pass_rate(k):
        question = episode.question_text([2] * (k - 1) + [6])[0]
        return sum(bot.act(question, []) == "[6]" for _ in range(4000)) / 4000
    assert pass_rate(1) == 1.0
    assert pass_rate(3) == pytest.approx(0.8 ** 2, abs=0.03)
    assert pass_rate(6) == pytest.approx(0.8 ** 5, abs=0.03)
    with pytest.raises(ValueError, match="data.episodes.task: expected one of"):
        ProposerSolver(task="product")


def test_largest_task_rewards_the_solver_that_names_the_largest():
    """Played through the arena with scripted answers: a solver answering the largest shown token
    scores 1, another token 0; the scripted bot solver is registered as bot:largest_solver."""
    source = ProposerSolver(solvers=2, target=0.5, solver="learner", task="largest")
    assert "largest_solver" in source.bots(0)

    def answer(r):
        if r.role == PROPOSER:
            return "[2]"
        shown = [int(n) for n in r.messages[-1]["content"].split("?")[0].replace("[", " ").replace("]", " ").split()
                 if n.isdigit()]
        return f"[{max(shown)}]" if r.messages[-1]["content"].count("[") == 3 else "[9]"

    arena = Arena(ScriptedWorker(answer=answer, completion_ids=[2]), SamplingSettings(), bots=source.bots(0))
    (rollout,) = arena.play([source.episode], [5])
    assert rollout.metrics["terms"] == 3.0
    assert [c.rewards[SOLVER] for c in rollout.children] == [1.0, 1.0]
    assert rollout.rewards[PROPOSER] == 0.0  # every solver passed: 1 - 2|1 - 0.5|


def test_the_default_solver_is_the_tasks_own_and_another_tasks_is_refused():
    assert ProposerSolver(task="largest").episode.solver_policy == PolicyRef("bot", "largest_solver")
    assert ProposerSolver().episode.solver_policy == PolicyRef("bot", "sum_solver")
    with pytest.raises(ValueError, match=r"data.episodes.solver: bot:sum_solver solves another task than task: largest"):
        ProposerSolver(task="largest", solver="bot:sum_solver")


@pytest.mark.parametrize(("answer", "reward"), [
    ("7", 1.0), ("007", 1.0), ("-7", 0.0), ("it is 6, no, 7", 1.0), ("0", 0.0), ("9" * 5000, 0.0), ("", 0.0),
])
def test_the_solver_reward_reads_any_integer_a_model_writes(answer, reward):
    """Digits compared as written: a model's answer of 5000 digits (int() refuses over 4300) is
    a wrong answer, not a crash."""
    assert answered_correctly(None, {"completion": answer, "answer": 7}) == {SOLVER: reward}
    assert answered_correctly(None, {"completion": "-0", "answer": 0}) == {SOLVER: 1.0}


def _fit(tmp_path, steps, *overrides):
    return fit_batches(CONFIG, tmp_path, steps, "--data.episodes_per_batch", "8", *overrides)[1]


@pytest.mark.slow
@pytest.mark.parametrize("solver_trains", [True, False])
def test_fit_batches_hold_exactly_the_expected_records(tmp_path, solver_trains):
    """Through fit on the tiny model, learner solvers: every proposal is a record; each answered
    question adds its 4 solvers' records when solvers train, none when they only inform."""
    # 8-token proposals: the untrained model then names a length in some of them
    batches = _fit(tmp_path, 2, "--data.episodes.init_args.solver", "learner",
                   "--data.episodes.init_args.solver_trains", str(solver_trains).lower(),
                   "--data.episodes_per_batch", "16", "--data.sampling.max_new_tokens", "8")
    assert len(batches) == 2
    assert sum(1 for b in batches for r in b.rollouts if r.children) >= 2
    for batch in batches:
        answered = [r for r in batch.rollouts if r.children]
        expected = len(batch.rollouts) + (4 * len(answered) if solver_trains else 0)
        assert len(batch.records) == expected
        steps = [s for r in batch.rollouts for node in r.walk() for s in node.steps if s.trainable]
        assert sorted(rec.advantage for rec in batch.records) == sorted(s.advantage for s in steps)


@pytest.mark.slow
def test_the_proposer_learns_to_ask_questions_some_solvers_fail(tmp_path):
    """60 steps of the shipped config (64 proposals each): the untrained proposer names no
    length (reward about -1); by the last 10 steps it asks questions that some solvers fail
    (pass rate about 0.73 on seed 0). The full 150-step run brings the pass rate to about the
    0.5 target (README)."""
    batches = _fit(tmp_path, 60, "--data.episodes_per_batch", "64")
    reward = [b.metrics["proposer_solver/reward/proposer"] for b in batches]
    pass_rate = [b.metrics["proposer_solver/pass_rate"] for b in batches[-10:]]
    assert reward[0] < -0.5
    assert sum(reward[-10:]) / 10 > 0.2, reward
    assert 0.1 < sum(pass_rate) / 10 < 0.9, pass_rate
