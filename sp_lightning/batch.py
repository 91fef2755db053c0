"""What a played batch is: its training records, the rollouts they came from, and its metrics;
and the ways to read one (a summary line, an episode as text, a record decoded).

The arena builds a :class:`Batch` from the finished rollouts (``Arena.build_training_batch``):
credit sets each trainable step's advantage, then :func:`to_records` flattens every trainable
step of every level into a :class:`~sp_lightning.types.TrainingRecord`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sp_lightning.credit import step_return, trainable_steps
from sp_lightning.types import Rollout, TrainingRecord


@dataclass
class Batch:
    """What the arena hands to training: records, the rollouts they came from, and metrics."""

    records: list[TrainingRecord]
    rollouts: list[Rollout]
    metrics: dict[str, float] = field(default_factory=dict)
    side_rollouts: list[Rollout] = field(default_factory=list)
    """Episodes played in the same run as the batch's own (their model calls shared its generate
    calls) that give no records and that the source never sees: the online evaluation's games."""
    policy_lags: list[int] | None = None
    """Each record's policy lag when it reached the trainer (asynchronous collection sets it,
    dropped records included; the TensorBoard callback draws its histogram)."""
    index: int | None = None
    """Its place in the run's stream of training batches (0 first; a resumed run continues the
    count), set by the engine that played it: what "the first N batches" of a warm start counts."""


def to_records(rollouts: Sequence[Rollout]) -> list[TrainingRecord]:
    """Every trainable step (of any nesting level) with an advantage becomes one record."""
    records = []
    turns: Counter[str] = Counter()
    for (rollout_id, _), rollout, step in trainable_steps(list(rollouts)):
        if step.advantage is None:
            continue
        c = step.completion
        trajectory = f"{rollout_id}/{step.role}"
        records.append(
            TrainingRecord(
                prompt_ids=c.prompt_ids,
                completion_ids=c.completion_ids,
                logprobs=c.logprobs,
                advantage=float(step.advantage),
                reward=step_return(rollout, step),
                action_mask=[1] * len(c.completion_ids),
                policy_version=c.policy_version,
                legal_actions=step.info.get("legal_actions") or None,
                learner=c.policy.name,
                trajectory=trajectory,
                turn=turns[trajectory],
                step_reward=float(step.reward),
                temperature=c.temperature,
                logprobs_from_trainer=c.logprobs_from_trainer,
                invalid_move=bool(step.info.get("invalid_move")),
            )
        )
        turns[trajectory] += 1
    return records


def rollout_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Per episode name: the mean of every number among the extras, and the mean reward per role."""
    sums: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        for key, value in rollout.extras.items():
            if isinstance(value, (int, float)):  # numbers are logged; other extras are for the rubric
                sums[f"{rollout.episode}/{key}"].append(float(value))
        for role, reward in rollout.rewards.items():
            if rollout.seats.get(role) is not None and rollout.seats[role].is_learner:
                sums[f"{rollout.episode}/reward/{role}"].append(reward)
    return {key: sum(values) / len(values) for key, values in sums.items()}


def record_means(records: Sequence[TrainingRecord]) -> tuple[float, float]:
    """The mean reward and mean advantage of ``records`` (0 for none)."""
    count = max(len(records), 1)
    return sum(r.reward for r in records) / count, sum(r.advantage for r in records) / count


def batch_summary(batch: Batch) -> str:
    """One line: episodes, records, mean reward and advantage, and the per-episode metrics."""
    records = batch.records
    reward, advantage = record_means(records)
    shown = {k: v for k, v in batch.metrics.items() if not k.startswith(("rollout/", "credit/"))}
    parts = [f"{len(batch.rollouts)} episodes", f"{len(records)} records",
             f"reward {reward:+.3f}", f"advantage {advantage:+.3f}"]
    parts += [f"{k} {v:.3g}" for k, v in sorted(shown.items())]
    return ", ".join(parts)


def describe_rollout(rollout: Rollout, max_chars: int = 160, indent: str = "") -> str:
    """A finished episode as text: who sat where, every step's answer, the rewards, and its
    children below it."""
    seats = ", ".join(f"{role}={policy}" for role, policy in rollout.seats.items()) or "no seats"
    rewards = ", ".join(f"{role} {reward:+.3f}" for role, reward in rollout.rewards.items())
    lines = [f"{indent}episode {rollout.episode} (level {rollout.level}{'' if rollout.trainable else ', not trainable'}"
             f"; {seats}): rewards {rewards or 'none'}"]
    for step in rollout.steps:
        text = step.completion.text
        text = text if len(text) <= max_chars else text[:max_chars] + "..."
        flags = " (invalid)" if step.info.get("invalid_move") else ""
        lines.append(f"{indent}  {step.role} [{step.completion.policy}]: {text!r}{flags}")
    for verdict in rollout.judgements:
        lines.append(f"{indent}  judge {verdict.get('judge', '')} [{verdict.get('policy', '')}]: "
                     f"{str(verdict.get('text', ''))[:max_chars]!r}")
    lines += [describe_rollout(child, max_chars, indent + "    ") for child in rollout.children]
    return "\n".join(lines)


def decoded_record(record: TrainingRecord, tokenizer=None) -> dict:
    """A record as text (ids where there is no tokenizer), with its mask, reward and advantage, the
    learner it trains, the moves the game allowed, whether the game refused it and whether it is
    a teacher's move imitated: what a log of records read as a teacher (``imitation.LoggedMoves``)
    needs (it takes neither a refused move nor one that was itself imitated)."""
    def text(ids):
        return tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids))

    return {"prompt": text(record.prompt_ids), "completion": text(record.completion_ids),
            "action_mask": list(record.action_mask), "reward": record.reward,
            "advantage": record.advantage, "policy_version": record.policy_version, "learner": record.learner,
            "legal_actions": record.legal_actions, "invalid_move": record.invalid_move, "imitation": record.imitation}
