"""Credit assignment: turn finished rollouts into one advantage per trainable step.

A credit assigner has ``assign(rollouts) -> None``: it walks every rollout and its nested
sub-rollouts (``rollout.walk()``) and sets ``step.advantage`` on each step whose ``trainable`` is
True (the learner played it and produced tokens); other steps keep ``advantage=None``. Each
assigner leaves ``last_stats`` (advantage mean and std, group or baseline counts) for logging.

A step's return is :func:`step_return`: the role's episode reward from the rubric plus the
step's own immediate reward (an invalid-move penalty lands only on the move that broke a rule).

Assigners:

- :class:`GRPO`: group-relative, ``(return - group mean) / group std`` (Shao et al. 2024);
  ``normalize=False`` gives Dr. GRPO (Liu et al. 2025).
- :class:`RAE`: role-conditioned advantage estimation with a per-(episode, role) moving-average
  baseline (SPIRAL, Liu et al. 2025), for self-play where a role's reward is not symmetric;
  ``by_opponent=True`` also splits it by who sat in the other seats (league play).
- :class:`Constant`: the return itself, no baseline (REINFORCE).

Where this departs from the papers:

1. Groups and baselines hold steps, not completions: in a multi-turn episode every trainable
   step of a role is one member, so an episode where a role moved five times weighs five times
   in its group's mean and std. GRPO has one completion per prompt.
2. GRPO's key also splits by ``rollout.group`` (which rollouts were sampled to compete) and
   ``rollout.level`` (hierarchy depth), so a sub-episode never shares a baseline with its parent.
3. ``GRPO(positive_only=True)`` clamps negative advantages to 0: only better-than-group steps
   are reinforced, nothing is pushed down (a filtered-imitation variant, not in GRPO).
4. RAE updates its baseline once per rollout per role, with the role's episode reward (not the
   step return), and only for roles that have a trainable step in that rollout, so a seat held
   by a bot or a frozen checkpoint never moves the learner's baseline. The advantage uses the
   baseline from before the update, as in SPIRAL.
5. ``RAE(by_opponent=True)`` keys the baseline by the opponents too (bots and the base model by
   name, every past checkpoint as one ``checkpoint``, the learner itself as ``learner``). In a
   league the hero meets opponents of very different strength: one shared baseline makes every
   game against a strong bot a "bad" game and every game against RandomBot a "good" one, noise
   that hides which moves won. A baseline per opponent type removes that variance.
6. ``RAE(discount=g)`` lets the role's episode reward reach a step as ``g**k * R``, ``k`` being
   how many moves the role made after it in that rollout (the step's own reward is not
   discounted). With ``g = 1`` (SPIRAL) winning now and winning three moves later are the same
   to every move; with ``g < 1`` the move that wins at once earns more than one that lets the
   game go on, and a move that puts off a loss (a block) earns more than one that loses at
   once: the incentive a player against a weak opponent otherwise hardly feels.
7. ``RAE(by_state=True)`` subtracts a baseline per exact state (the step's prompt tokens, under
   the same episode and role key) once that state has been seen ``state_min_visits`` times,
   and the role's baseline before that: a tabular critic. In a small game (Tic-Tac-Toe has
   4,520 positions, Kuhn Poker 12 information states) most steps land on a state seen before,
   and a move is then judged against what usually follows that position, not against the
   role's average game: the variance of where the game stood goes away, which the role baseline
   cannot remove. In a large game states rarely repeat and it falls back to plain RAE; the table
   is capped at ``max_states`` (least recently used dropped).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterator
from typing import Any, Protocol

from .types import Rollout, Step


class CreditAssigner(Protocol):
    last_stats: dict[str, float]

    def assign(self, rollouts: list[Rollout]) -> None: ...


def step_return(rollout: Rollout, step: Step, discount: float = 1.0) -> float:
    """The role's episode reward from the rubric (times ``discount``) plus the step's own
    immediate reward."""
    if step.role not in rollout.rewards:
        raise KeyError(
            f"rollout {rollout.episode!r} has no reward for role {step.role!r} "
            f"(rewards: {rollout.rewards}); the rubric must score every role with trainable steps"
        )
    return discount * float(rollout.rewards[step.role]) + float(step.reward)


def trainable_steps(rollouts: list[Rollout]) -> Iterator[tuple[Rollout, Step]]:
    """Every ``(rollout, step)`` with a trainable step, nested rollouts included, in order."""
    for top in rollouts:
        for rollout in top.walk():
            for step in rollout.steps:
                if step.trainable:
                    yield rollout, step


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std; ``(0.0, 0.0)`` for no values."""
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _advantage_stats(advantages: list[float]) -> dict[str, float]:
    mean, std = _mean_std(advantages)
    return {"advantage_mean": mean, "advantage_std": std, "num_steps": float(len(advantages))}


class GRPO:
    """Group-relative advantages: ``A = (R - mean_g R) / (std_g R + eps)``.

    Args:
        normalize: divide by the group's population std (GRPO); False keeps only the mean
            subtraction (Dr. GRPO).
        positive_only: clamp advantages below 0 to 0, so only better-than-group steps are trained
            on and nothing is pushed down.
        eps: added to the std.
        group_by: which of ``"episode"`` (the rollout's name) and ``"role"`` (the step's role)
            split groups. ``rollout.group`` and ``rollout.level`` always split them. Drop
            ``"role"`` to pool the roles of a symmetric game into one group.

    A group of one step gets advantage 0.
    """

    FIELDS = ("episode", "role")

    def __init__(
        self,
        normalize: bool = True,
        positive_only: bool = False,
        eps: float = 1e-6,
        group_by: tuple[str, ...] = ("episode", "role"),
    ) -> None:
        unknown = [f for f in group_by if f not in self.FIELDS]
        if unknown:
            raise ValueError(f"group_by entries must be in {self.FIELDS}, got {tuple(group_by)}")
        self.normalize = normalize
        self.positive_only = positive_only
        self.eps = eps
        self.group_by = tuple(group_by)
        self.last_stats: dict[str, float] = {}

    def group_key(self, rollout: Rollout, step: Step) -> tuple:
        """Steps with equal keys compete with each other. Override to group differently."""
        fields = {"episode": rollout.episode, "role": step.role}
        return (*(fields[f] for f in self.group_by), rollout.group, rollout.level)

    def assign(self, rollouts: list[Rollout]) -> None:
        groups: dict[tuple, list[tuple[Step, float]]] = defaultdict(list)
        for rollout, step in trainable_steps(rollouts):
            groups[self.group_key(rollout, step)].append((step, step_return(rollout, step)))

        advantages = []
        for members in groups.values():
            mean, std = _mean_std([ret for _, ret in members])
            for step, ret in members:
                adv = 0.0 if len(members) == 1 else ret - mean
                if self.normalize:
                    adv /= std + self.eps
                if self.positive_only:
                    adv = max(adv, 0.0)
                step.advantage = adv
                advantages.append(adv)
        self.last_stats = {**_advantage_stats(advantages), "num_groups": float(len(groups))}


class RAE:
    """Role-conditioned advantage estimation (SPIRAL): ``A = R - b[episode, role]``.

    ``b`` is an exponential moving average of the role's episode reward, one per
    (episode name, role), starting at 0. Rollouts are processed in order; each trainable step's
    advantage uses the baseline before this rollout's update, then, once per rollout and role
    with a trainable step, ``b <- decay * b + (1 - decay) * rollout.rewards[role]``.

    Args:
        decay: The moving average's decay.
        by_opponent: Key the baseline by (episode, role, opponents) instead, where opponents
            names who held the other seats (see :func:`opponents_of`); the role's key then reads
            ``"<role> vs <opponents>"`` in the state dict.
        discount: The episode reward reaches a step as ``discount**k * R``, ``k`` the role's
            later moves in the rollout (1: undiscounted, as in SPIRAL). The baseline still
            tracks the undiscounted episode reward.
        by_state: Subtract a per-state baseline (the mean return that followed the same prompt,
            for the same episode and role key) once the state has ``state_min_visits`` visits.
        state_min_visits: Visits before a state's own baseline replaces the role's.
        max_states: States kept; the least recently seen is dropped beyond it.
        state_lambda: With ``by_state``, the return a move is judged by is a lambda-return:
            1 is the move's own episode return (Monte Carlo); below 1 it leans on the table's
            value of the role's next state (``discount * V(next)``), which removes the noise of
            what happened after that state (the opponent's replies, one's own later moves) at
            the price of trusting the table. Unseen next states fall back to the return.

    A state's baseline is the running mean of the episode returns seen from it (the step's own
    reward, e.g. an invalid-move penalty, stays out of it and lands on the move) while it has fewer
    than ``1 / (1 - decay)`` visits, then a moving average with weight ``1 - decay``, so it follows
    the policy as it changes.
    """

    def __init__(
        self,
        decay: float = 0.95,
        by_opponent: bool = False,
        discount: float = 1.0,
        by_state: bool = False,
        state_min_visits: int = 4,
        max_states: int = 200_000,
        state_lambda: float = 1.0,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"discount must be in (0, 1], got {discount}")
        if not 0.0 <= state_lambda <= 1.0:
            raise ValueError(f"state_lambda must be in [0, 1], got {state_lambda}")
        if state_min_visits < 1 or max_states < 1:
            raise ValueError(
                f"state_min_visits and max_states must be >= 1, got {state_min_visits}, {max_states}"
            )
        self.decay = decay
        self.by_opponent = by_opponent
        self.discount = discount
        self.by_state = by_state
        self.state_min_visits = state_min_visits
        self.max_states = max_states
        self.state_lambda = state_lambda
        self.baselines: dict[tuple[str, str], float] = {}
        # (episode, role key, prompt digest) -> [baseline, visits], least recently seen first
        self.state_values: OrderedDict[tuple[str, str, str], list[float]] = OrderedDict()
        self.last_stats: dict[str, float] = {}

    def baseline_key(self, rollout: Rollout, role: str) -> tuple[str, str]:
        if not self.by_opponent:
            return (rollout.episode, role)
        return (rollout.episode, f"{role} vs {opponents_of(rollout, role)}")

    def assign(self, rollouts: list[Rollout]) -> None:
        advantages: list[float] = []
        from_state = 0  # steps judged against their state's baseline
        for top in rollouts:
            for rollout in top.walk():
                later = Counter(step.role for step in rollout.steps)  # the role's moves from here on
                by_role: dict[str, list[tuple[Step, float]]] = {}
                for step in rollout.steps:
                    later[step.role] -= 1
                    if step.trainable:
                        ret = step_return(rollout, step, self.discount ** later[step.role])
                        by_role.setdefault(step.role, []).append((step, ret))
                for role, steps in by_role.items():
                    key = self.baseline_key(rollout, role)
                    from_state += self._assign_role(key, steps)
                    advantages.extend(step.advantage for step, _ in steps)
                    old = self.baselines.get(key, 0.0)
                    reward = float(rollout.rewards[role])
                    self.baselines[key] = self.decay * old + (1.0 - self.decay) * reward
        self.last_stats = {
            **_advantage_stats(advantages),
            "num_baselines": float(len(self.baselines)),
        }
        if self.by_state:
            self.last_stats["num_states"] = float(len(self.state_values))
            self.last_stats["state_baseline_fraction"] = from_state / max(1, len(advantages))

    def _assign_role(self, key: tuple[str, str], steps: list[tuple[Step, float]]) -> int:
        """Set the advantages of one role's trainable steps in one rollout (in order, each with
        its step return); returns how many were judged against their own state's baseline."""
        role_baseline = self.baselines.get(key, 0.0)
        if not self.by_state:
            for step, ret in steps:
                step.advantage = ret - role_baseline
            return 0
        # the state table learns the episode reward as it reaches a step; the step's own reward
        # (an invalid-move penalty) stays out of it and lands on the move alone
        episode_parts = [ret - step.reward for step, ret in steps]
        states = [self._state_key(key, step) for step, _ in steps]
        values = [self._state_value(state) for state in states]  # before this rollout's visit
        # lambda-return from the back: the last move's is its episode part; an earlier move's
        # mixes the table's value of the role's next state with the next move's lambda-return
        target = episode_parts[-1]
        for index in range(len(steps) - 1, -1, -1):
            step = steps[index][0]
            if index < len(steps) - 1 and values[index + 1] is not None:
                blend = (1.0 - self.state_lambda) * values[index + 1] + self.state_lambda * target
                target = self.discount * blend
            else:
                target = episode_parts[index]
            baseline = values[index] if values[index] is not None else role_baseline
            step.advantage = step.reward + target - baseline
        for state, episode_part in zip(states, episode_parts):
            self._visit_state(state, episode_part)
        return sum(v is not None for v in values)

    @staticmethod
    def _state_key(key: tuple[str, str], step: Step) -> tuple[str, str, str]:
        digest = hashlib.blake2b(
            b",".join(str(t).encode() for t in step.completion.prompt_ids), digest_size=12
        ).hexdigest()
        return (*key, digest)

    def _state_value(self, state: tuple[str, str, str]) -> float | None:
        entry = self.state_values.get(state)
        return entry[0] if entry is not None and entry[1] >= self.state_min_visits else None

    def _visit_state(self, state: tuple[str, str, str], episode_part: float) -> None:
        """Fold one visit's return into the state's baseline; the state becomes the most
        recently seen, and the least recently seen go beyond ``max_states``."""
        entry = self.state_values.pop(state, None) or [0.0, 0.0]
        entry[1] += 1
        entry[0] += max(1.0 / entry[1], 1.0 - self.decay) * (episode_part - entry[0])
        self.state_values[state] = entry
        while len(self.state_values) > self.max_states:
            self.state_values.popitem(last=False)

    def state_dict(self) -> dict[str, Any]:
        """Baselines as ``{"baselines": {episode: {role: value}}}`` (plain, picklable, a copy),
        and with ``by_state`` the state table as ``"states": [[episode, role, digest, value,
        visits], ...]``, least recently seen first."""
        nested: dict[str, dict[str, float]] = {}
        for (episode, role), value in self.baselines.items():
            nested.setdefault(episode, {})[role] = value
        state: dict[str, Any] = {"baselines": nested}
        if self.state_values:
            state["states"] = [[*key, value, visits] for key, (value, visits) in self.state_values.items()]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore baselines saved by :meth:`state_dict`; ``decay`` stays the constructor's."""
        self.baselines = {
            (episode, role): float(value)
            for episode, roles in state["baselines"].items()
            for role, value in roles.items()
        }
        self.state_values = OrderedDict(
            ((episode, role, digest), [float(value), float(visits)])
            for episode, role, digest, value, visits in state.get("states", [])
        )


def opponents_of(rollout: Rollout, role: str) -> str:
    """Who held the seats other than ``role``'s, as one key: each policy by its name except past
    checkpoints, which share ``checkpoint``; sorted and comma-joined (``learner`` in mirror
    self-play); ``none`` for a rollout without seats (a single-role episode)."""
    names = sorted(
        "checkpoint" if policy.kind == "checkpoint" else str(policy)
        for seat, policy in rollout.seats.items()
        if seat != role
    )
    return ",".join(names) or "none"


class Constant:
    """The return itself as the advantage, no baseline (REINFORCE)."""

    def __init__(self) -> None:
        self.last_stats: dict[str, float] = {}

    def assign(self, rollouts: list[Rollout]) -> None:
        advantages = []
        for rollout, step in trainable_steps(rollouts):
            step.advantage = step_return(rollout, step)
            advantages.append(step.advantage)
        self.last_stats = _advantage_stats(advantages)
