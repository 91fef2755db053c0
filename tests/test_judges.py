"""Judges: model calls that score a rollout, batched with everything else, never trained on."""

import pytest

from sp_lightning.arena import Arena
from sp_lightning.batch import to_records
from sp_lightning.credit import EpisodicRewardCredit
from sp_lightning.episodes import SingleTurnEpisode
from sp_lightning.judges import JUDGE, Judge
from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.rubric import Rubric
from tests.helpers import ScriptedWorker


def judge_worker():
    """An answerer says "four" (token 3), a judge says "yes" (token 9)."""
    return ScriptedWorker(answer=lambda r: "yes" if r.role == JUDGE else "four",
                          completion_ids=lambda r: [9] if r.role == JUDGE else [3])


def _grader(policy="base"):
    return Judge(
        prompt=lambda rollout, extras: [{"role": "user", "content": f"Is {extras['completion']!r} "
                                         f"the answer to {extras['question']!r}? yes or no"}],
        verdict=lambda text, rollout: {"assistant": 1.0 if text.strip().lower().startswith("yes") else 0.0},
        policy=policy,
    )


def _question(rubric, n):
    return SingleTurnEpisode(name="qa", messages=[{"role": "user", "content": f"{n} + 2?"}], rubric=rubric,
                             extras={"question": f"{n} + 2"})


@pytest.mark.parametrize("policy", ["base", "learner"])
def test_judge_calls_batch_together_and_never_become_records(policy):
    """8 questions: one generate call for the 8 answers, one for the 8 verdicts; 8 records, all
    of them answers, even when the learner itself judges."""
    worker = judge_worker()
    arena = Arena(worker, SamplingSettings())
    rubric = Rubric(outcome=[(_grader(policy), 1.0)])
    rollouts = arena.play([_question(rubric, n) for n in range(8)], seeds=list(range(8)))
    assert [len(call) for call in worker.calls] == [8, 8]
    assert {r.role for r in worker.calls[1]} == {JUDGE}
    assert {str(r.policy) for r in worker.calls[1]} == {policy}
    assert all(r.rewards == {"assistant": 1.0} for r in rollouts)
    assert all(r.judgements[0]["text"] == "yes" for r in rollouts)
    EpisodicRewardCredit().assign(rollouts)
    records = to_records(rollouts)
    assert len(records) == 8
    assert all(record.completion_ids == [3] for record in records)  # answers only: a verdict is [9]
    assert all(step.role == "assistant" for r in rollouts for node in r.walk() for step in node.steps)


def test_a_bot_cannot_judge():
    with pytest.raises(ValueError, match="scripted judge is a plain rubric function"):
        _grader(policy="bot:random")


def test_judge_on_the_tiny_model_joins_one_generate_call(tiny_policy):
    """The real Hugging Face backend: 6 answers, then 6 verdicts of the base model, in 2
    generate calls; an unreadable verdict (the untrained model's) scores 0, and no judge text
    trains."""
    from sp_lightning.rollout.hf import HFRolloutWorker

    model, tokenizer = tiny_policy
    arena = Arena(HFRolloutWorker(model, tokenizer), SamplingSettings(max_new_tokens=4))
    rubric = Rubric(outcome=[(_grader("base"), 1.0)])
    rollouts = arena.play([_question(rubric, n) for n in range(6)], seeds=list(range(6)))
    assert arena.last_play.generate_calls == 2
    assert all(r.judgements and r.judgements[0]["policy"] == "base" for r in rollouts)
    assert all(r.rewards["assistant"] in (0.0, 1.0) for r in rollouts)
    for r in rollouts:  # each reward is what the judge's own text said
        assert r.rewards["assistant"] == float(r.judgements[0]["text"].strip().lower().startswith("yes"))
    EpisodicRewardCredit().assign(rollouts)
    assert len(to_records(rollouts)) == 6
