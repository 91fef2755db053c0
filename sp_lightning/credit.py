"""Credit assignment: turn finished rollouts into one advantage per trainable step.

A credit assigner's ``compute(rollouts)`` returns the engine specification's mapping
``{(rollout_id, step_index): advantage}`` over every trainable step of the batch (the learner
played it with real tokens, in an episode that trains), nested sub-rollouts included; and
``assign(rollouts)`` is ``apply_credit(rollouts, compute(rollouts))``, which sets
``step.advantage`` on those steps (every other step keeps ``advantage=None``). A rollout's id is
its path in the batch's result tree: ``"3"`` for the fourth top-level rollout, ``"3.0"`` for its
first child (:func:`rollout_ids`). Every assigner, ``to_records`` and ``apply_credit`` walk the
trainable steps through one function, :func:`trainable_steps`. Each assigner leaves
``last_stats`` (advantage mean and std, group or baseline counts) for logging.

A step's return is :func:`step_return`: the role's episode reward from the rubric plus the
step's own immediate reward (an invalid-move penalty lands only on the move that broke a rule).

Assigners:

- :class:`GRPO`: group-relative, ``(return - group mean) / group std`` (Shao et al. 2024);
  ``normalize=False`` gives Dr. GRPO (Liu et al. 2025).
- :class:`RAE`: role-conditioned advantage estimation with a per-(episode, role) moving-average
  baseline (SPIRAL, Liu et al. 2025), for self-play where a role's reward is not symmetric;
  ``by_opponent=True`` also splits it by who sat in the other seats (league play).
- :class:`ContinuationCredit`: per-decision credit from branched continuations (VinePPO,
  Kazemnejad et al. 2024, for games with several seats): at each trainable decision the game is
  copied and played on ``continuations`` times by the same seats' policies, and the decision's
  advantage is the Monte Carlo Q of the move minus the V of the position.
- :class:`GAE`: per-decision credit from a learned value of each position (generalised advantage
  estimation, Schulman et al. 2016; the value head of PPO's actor-critic): the trainer computes
  ``V`` of every decision's prompt with a value head on the policy's own last hidden state, and
  the advantage is GAE(discount, lambda) along each role's decisions in a rollout.
- :class:`EpisodicRewardCredit`: the return itself, no baseline (REINFORCE).
- :class:`Constant`: one fixed weight for every trainable step (behaviour cloning of the
  policy's own games, e.g. after filtering them).

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
   league the learner meets opponents of very different strength: one shared baseline makes every
   game against a strong bot a "bad" game and every game against RandomBot a "good" one, noise
   that hides which moves won. A baseline per opponent type removes that variance.
6. ``RAE(discount=g)`` lets the role's episode reward reach a step as ``g**k * R``, ``k`` being
   how many moves the role made after it in that rollout (the step's own reward is not
   discounted). With ``g = 1`` (SPIRAL) winning now and winning three moves later are the same
   to every move; with ``g < 1`` the move that wins at once earns more than one that lets the
   game go on, and a move that puts off a loss (a block) earns more than one that loses at
   once: the incentive a player against a weak opponent otherwise hardly feels.
7. ``ContinuationCredit`` departs from VinePPO (single-agent, deterministic steps) where games
   need it: the other seats move between two of the learner's decisions, so Q of a move is
   estimated by continuations from the position right after it (the opponents' replies are
   averaged, not taken from the one game played), and V by continuations from the position
   before it; hidden information and future chance are the real game's as of the copy (each
   copy draws new chance from its own seed), which keeps Q - V an unbiased advantage of the
   move. A return counts the role's own later step rewards too (penalties), each discounted by
   the role's moves between the decision and it; the move's own step reward is added to its
   advantage as it is and kept out of V (an unbiased choice of baseline that leaves an invalid
   move's penalty on that move in full, so legality is learnt as fast as with outcome credit).
8. ``GAE``'s advantages are not known when the batch is built: the values come from the model
   being trained, so ``compute`` gives each step its return (REINFORCE) and the trainer's value
   pass replaces it with :meth:`GAE.advantages` of the records once it has their values (the records carry
   their trajectory and position, :class:`~sp_lightning.types.TrainingRecord`). A trajectory is
   one role's trainable decisions in one rollout; the other seats' moves between two of them are
   part of the environment, so ``V`` of the next decision is the value after the opponents'
   replies, as in single-agent GAE with the opponents folded into the dynamics.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from sp_lightning.types import PolicyKind, Rollout, Step

log = logging.getLogger(__name__)


StepKey = tuple[str, int]
"""``(rollout_id, step_index)``: one step of one rollout of a batch's result tree."""


def rollout_ids(rollouts: list[Rollout]) -> Iterator[tuple[str, Rollout]]:
    """``(id, rollout)`` for every rollout of the batch and its sub-rollouts, depth first; the id
    is the rollout's path: ``"2"`` is the third top-level rollout, ``"2.1"`` its second child."""

    def walk(prefix: str, rollout: Rollout) -> Iterator[tuple[str, Rollout]]:
        yield prefix, rollout
        for index, child in enumerate(rollout.children):
            yield from walk(f"{prefix}.{index}", child)

    for index, top in enumerate(rollouts):
        yield from walk(str(index), top)


def trainable_steps(rollouts: list[Rollout]) -> Iterator[tuple[StepKey, Rollout, Step]]:
    """Every trainable step of the batch, nested rollouts included, in order, with its key and
    its rollout: the one walker that credit assigners, ``apply_credit`` and ``to_records`` share."""
    for rollout_id, rollout in rollout_ids(rollouts):
        for index, step in enumerate(rollout.steps):
            if step.trainable:
                yield (rollout_id, index), rollout, step


def apply_credit(rollouts: list[Rollout], advantages: dict[StepKey, float]) -> None:
    """Set ``step.advantage`` from ``compute``'s mapping; every trainable step must have one."""
    for key, _, step in trainable_steps(rollouts):
        if key not in advantages:
            raise KeyError(f"credit: no advantage for trainable step {key} (role {step.role!r})")
        step.advantage = float(advantages[key])


class CreditAssigner:
    """Subclass and implement ``compute``; ``assign`` applies it to the rollouts in place. An
    assigner that learns across batches (baselines) checkpoints them through ``state_dict``.

    An estimator that learns values (``learns_values``: :class:`GAE`) has a second half that runs
    with the trainer: it makes the value heads the trainer optimises (:meth:`value_heads`), turns
    the values the trainer's forward reads through them into advantages and value targets
    (:meth:`advantages`), and gives the loss its value term (:meth:`value_term`). The trainer only
    runs the forward passes they need."""

    learns_values = False

    last_stats: dict[str, float] = {}
    """The last batch's statistics for logging; ``compute`` assigns a new dict (never mutate this one)."""
    branching: Branching | None = None
    """What game episodes must play for this assigner at each trainable decision (None: nothing)."""

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        """``{(rollout_id, step_index): advantage}`` for every trainable step of the batch."""
        raise NotImplementedError

    def assign(self, rollouts: list[Rollout]) -> None:
        apply_credit(rollouts, self.compute(rollouts))

    def value_heads(self, learners: list[str], hidden_size: int):
        """The value heads the trainer optimises with the policy (one per learner), or None."""
        return None

    def advantages(self, records: list, values: list[float]) -> tuple[list[float], list[float]]:
        """``(advantages, value targets)`` of ``records`` given each one's value."""
        raise NotImplementedError(f"{type(self).__name__} learns no values")

    def value_term(self, heads):
        """The value loss term over ``heads`` (``sp_lightning.loss_terms`` interface)."""
        raise NotImplementedError(f"{type(self).__name__} learns no values")

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue (none for a stateless assigner)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s content."""


def step_return(rollout: Rollout, step: Step, discount: float = 1.0) -> float:
    """The role's episode reward from the rubric (times ``discount``) plus the step's own
    immediate reward."""
    if step.role not in rollout.rewards:
        raise KeyError(
            f"rollout {rollout.episode!r} has no reward for role {step.role!r} "
            f"(rewards: {rollout.rewards}); the rubric must score every role with trainable steps"
        )
    return discount * float(rollout.rewards[step.role]) + float(step.reward)


def moves_after(rollout: Rollout) -> list[int]:
    """For each step of ``rollout``, how many moves its role makes after it in that rollout."""
    later = Counter(step.role for step in rollout.steps)
    counts = []
    for step in rollout.steps:
        later[step.role] -= 1
        counts.append(later[step.role])
    return counts


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std; ``(0.0, 0.0)`` for no values."""
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _advantage_stats(advantages: list[float]) -> dict[str, float]:
    mean, std = _mean_std(advantages)
    return {"advantage_mean": mean, "advantage_std": std, "num_steps": float(len(advantages))}


class GRPO(CreditAssigner):
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
            raise ValueError(f"credit.group_by: expected entries among {self.FIELDS}, got {tuple(group_by)}")
        self.normalize = normalize
        self.positive_only = positive_only
        self.eps = eps
        self.group_by = tuple(group_by)
        self.last_stats: dict[str, float] = {}
        self._warned = False

    def group_key(self, rollout: Rollout, step: Step) -> tuple:
        """Steps with equal keys compete with each other: never two learners' (a league's
        exploiter and the main agent in one role). Override to group differently."""
        fields = {"episode": rollout.episode, "role": step.role}
        return (*(fields[f] for f in self.group_by), rollout.group, rollout.level, learner_of(rollout, step.role))

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        groups: dict[tuple, list[tuple[StepKey, float]]] = defaultdict(list)
        for key, rollout, step in trainable_steps(rollouts):
            groups[self.group_key(rollout, step)].append((key, step_return(rollout, step)))

        advantages: dict[StepKey, float] = {}
        alone = sum(len({key[0] for key, _ in members}) == 1 for members in groups.values())
        if groups and alone == len(groups) and len(groups) > 1 and not self._warned:
            self._warned = True  # once a run: a league that rotates its learner over many seats
            log.warning("data.credit: every GRPO group of this batch holds one game (group_by %s), so the "
                        "outcome gives no advantage: only differences inside a game (a step's own reward) "
                        "train. Play more games per batch, drop 'role' from group_by for symmetric seats, or "
                        "use sp_lightning.credit.RAE (a moving baseline per role)", list(self.group_by))
        for members in groups.values():
            mean, std = _mean_std([ret for _, ret in members])
            for key, ret in members:
                adv = 0.0 if len(members) == 1 else ret - mean
                if self.normalize:  # a group of equal returns (std 0) has advantages 0, even with eps 0
                    adv = adv / (std + self.eps) if std + self.eps > 0 else 0.0
                if self.positive_only:
                    adv = max(adv, 0.0)
                advantages[key] = adv
        self.last_stats = {**_advantage_stats(list(advantages.values())), "num_groups": float(len(groups)),
                           "single_game_groups": alone / len(groups) if groups else 0.0}
        return advantages


class RAE(CreditAssigner):
    """Role-conditioned advantage estimation (SPIRAL): ``A = R - b[episode, role]``.

    ``b`` is an exponential moving average of the role's episode reward, one per
    (episode name, role), starting at 0. Rollouts are processed in order; each trainable step's
    advantage uses the baseline before this rollout's update, then, once per rollout and role
    with a trainable step, ``b <- decay * b + (1 - decay) * rollout.rewards[role]``.

    Args:
        decay: The moving average's decay.
        by_opponent: Key the baseline by (episode, role, opponents) instead, where opponents
            names who held the other seats (see :func:`opponents_of`); the role's key then reads
            ``"<role> vs <opponents>"`` in the state dict (``"<role> (<learner>) vs ..."`` for a
            named learner's seat: see :meth:`baseline_key`).
        discount: The episode reward reaches a step as ``discount**k * R``, ``k`` the role's
            later moves in the rollout (1: undiscounted, as in SPIRAL). The baseline still
            tracks the undiscounted episode reward.
    """

    def __init__(
        self,
        decay: float = 0.95,
        by_opponent: bool = False,
        discount: float = 1.0,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"credit.decay: expected a number in [0, 1], got {decay}")
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"credit.discount: expected a number in (0, 1], got {discount}")
        self.decay = decay
        self.by_opponent = by_opponent
        self.discount = discount
        self.baselines: dict[tuple[str, str], float] = {}
        self.last_stats: dict[str, float] = {}

    def baseline_key(self, rollout: Rollout, role: str) -> tuple[str, str]:
        """``(episode, role)``; a named learner's seat reads ``<role> (<learner>)`` (two learners
        in one role, a league's exploiter and the main agent, keep baselines of their own), and
        with ``by_opponent`` `` vs <opponents>`` follows."""
        learner = learner_of(rollout, role)
        seat = f"{role} ({learner})" if learner else role
        if not self.by_opponent:
            return (rollout.episode, seat)
        return (rollout.episode, f"{seat} vs {opponents_of(rollout, role)}")

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        advantages: dict[StepKey, float] = {}
        # the walker yields each rollout's trainable steps together, rollouts in tree order
        for _, items in groupby(trainable_steps(rollouts), key=lambda item: item[0][0]):
            items = list(items)
            rollout = items[0][1]
            later = moves_after(rollout)
            by_role: dict[str, list[tuple[StepKey, Step, float]]] = {}
            for key, _, step in items:
                ret = step_return(rollout, step, self.discount ** later[key[1]])
                by_role.setdefault(step.role, []).append((key, step, ret))
            for role, steps in by_role.items():
                key = self.baseline_key(rollout, role)
                old = self.baselines.get(key, 0.0)
                advantages.update((step_key, ret - old) for step_key, _, ret in steps)
                self.baselines[key] = self.decay * old + (1.0 - self.decay) * float(rollout.rewards[role])
        self.last_stats = {
            **_advantage_stats(list(advantages.values())),
            "num_baselines": float(len(self.baselines)),
        }
        return advantages

    def state_dict(self) -> dict[str, Any]:
        """Baselines as ``{"baselines": {episode: {role: value}}}`` (plain, picklable, a copy)."""
        nested: dict[str, dict[str, float]] = {}
        for (episode, role), value in self.baselines.items():
            nested.setdefault(episode, {})[role] = value
        return {"baselines": nested}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore baselines saved by :meth:`state_dict`; ``decay`` stays the constructor's."""
        self.baselines = {
            (episode, role): float(value)
            for episode, roles in state["baselines"].items()
            for role, value in roles.items()
        }


def learner_of(rollout: Rollout, role: str) -> str:
    """The named learner (``model.learners``) that held ``role``'s seat, "" for the one unnamed
    learner or a seat without one."""
    policy = rollout.seats.get(role)
    if policy is None or policy.kind is not PolicyKind.LEARNER:
        return ""
    return policy.name or ""


def opponents_of(rollout: Rollout, role: str) -> str:
    """Who held the seats other than ``role``'s, as one key: each policy by its name except past
    checkpoints, which share ``checkpoint``; sorted and comma-joined (``learner`` in mirror
    self-play); ``none`` for a rollout without seats (a single-role episode)."""
    names = sorted(
        "checkpoint" if policy.kind is PolicyKind.CHECKPOINT else str(policy)
        for seat, policy in rollout.seats.items()
        if seat != role
    )
    return ",".join(names) or "none"


@dataclass(frozen=True)
class Branching:
    """What a credit assigner asks of a game episode at each trainable decision: ``continuations``
    copies of the game played on from the position before the move (for V) and, with
    ``after``, as many from the position after it (for Q); ``decisions`` is the share of
    trainable decisions that get them (drawn per decision from the episode's own stream).
    ``GameEpisode`` reads it from its context (``ctx.branching``)."""

    continuations: int
    decisions: float = 1.0
    after: bool = True
    discount: float = 1.0
    """Of the returns the continuations report (:func:`continuation_return`)."""


def continuation_return(rollout: Rollout, role: str, discount: float = 1.0, from_decision: bool = True) -> float:
    """What a continuation gave ``role`` after its decision: every later move's step reward and
    the outcome (``rollout.rewards[role]``), each discounted by ``discount`` per own move between
    the decision and it. With ``from_decision`` the continuation's first move is the decision's
    own move (played from the position before it): it counts as a move, its step reward does not
    (the real move's own reward is added to its advantage as it is, never averaged into V, so an
    invalid move's penalty lands on that move in full). From the position after the decision
    (``from_decision=False``) every own move of the continuation is a later one."""
    steps = rollout.steps_of(role)
    later = steps[1:] if from_decision else steps
    value = 0.0
    for k, step in enumerate(later, start=1):
        value += discount ** k * float(step.reward)
    return value + discount ** len(later) * float(rollout.rewards.get(role, 0.0))


class ContinuationCredit(CreditAssigner):
    """Per-decision credit from branched continuations (VinePPO for games with several seats).

    At each trainable decision of a game (the learner to move, in an episode that trains) the
    episode copies the game (``env.snapshot``) and plays ``continuations`` continuations from the
    position before the move and as many from the position after it, with the same seats'
    policies, as non-trainable sub-episodes whose model calls share the generate calls of
    everything in flight. Then, with ``G`` a continuation's return after the decision
    (:func:`continuation_return`: later step rewards and the outcome):

    - ``estimator="q_minus_v"``: ``A = r + mean G(after) - mean G(before)``, ``r`` the move's own
      step reward (an invalid move's penalty, in full: it is no part of V); a move that ends the
      game uses the game's own outcome for Q;
    - ``estimator="td"``: continuations before each move only (half the cost):
      ``A = r + discount * (r' + V(the role's next decision)) - V(before)``, ``r'`` the next
      move's own reward, the real game's return where the next decision had no continuations.

    Decisions without continuations (``decisions`` < 1, or an episode that cannot branch) get
    RAE's advantage (``R - b[episode, role]``, with ``decay`` and ``discount``).

    Args:
        continuations: K, the continuations per position.
        discount: Per own move, on later step rewards and the outcome (1: undiscounted).
        decisions: The share of trainable decisions that get continuations.
        estimator: ``q_minus_v`` or ``td``.
        decay: The fallback RAE baseline's decay.
    """

    ESTIMATORS = ("q_minus_v", "td")

    def __init__(self, continuations: int = 4, discount: float = 1.0, decisions: float = 1.0,
                 estimator: str = "q_minus_v", decay: float = 0.95) -> None:
        if not isinstance(continuations, int) or continuations < 1:
            raise ValueError(f"credit.continuations: expected an int >= 1, got {continuations!r}")
        if not 0.0 < decisions <= 1.0:
            raise ValueError(f"credit.decisions: expected a share in (0, 1], got {decisions!r}")
        if estimator not in self.ESTIMATORS:
            raise ValueError(f"credit.estimator: expected one of {self.ESTIMATORS}, got {estimator!r}")
        self.fallback = RAE(decay=decay, discount=discount)
        self.discount = discount
        self.estimator = estimator
        self.branching = Branching(continuations, decisions, after=estimator == "q_minus_v", discount=discount)
        self.last_stats: dict[str, float] = {}

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        advantages = self.fallback.compute(rollouts)  # every trainable step; replaced where branched
        branched, spreads = 0, []
        for _, items in groupby(trainable_steps(rollouts), key=lambda item: item[0][0]):
            items = list(items)
            rollout = items[0][1]
            for position, (key, _, step) in enumerate(items):
                values = step.info.get(CONTINUATIONS)
                if values is None:
                    continue
                before = values["before"]
                v = sum(before) / len(before)
                if self.estimator == "q_minus_v":
                    after = values["after"]
                    q = (sum(after) / len(after) if after else float(rollout.rewards[step.role]))
                else:
                    q = self._next_value(rollout, items[position + 1:], step.role)
                advantages[key] = float(step.reward) + q - v
                branched += 1
                spreads.append(_mean_std(before)[1])
        self.last_stats = {**_advantage_stats(list(advantages.values())),
                           "branched_fraction": branched / max(len(advantages), 1),
                           "continuation_return_std": sum(spreads) / max(len(spreads), 1)}
        return advantages

    def _next_value(self, rollout: Rollout, later: list, role: str) -> float:
        """td's target after a decision: the outcome if the role never moves again, else the
        discounted next move's own reward plus what followed it (its continuations' mean, or the
        real game's return from there when it had none)."""
        following = [step for _, _, step in later if step.role == role]
        if not following:
            return float(rollout.rewards[role])
        next_step = following[0]
        values = next_step.info.get(CONTINUATIONS)
        if values is not None:
            after = sum(values["before"]) / len(values["before"])
        else:
            steps = rollout.steps_of(role)
            start = next(i for i, step in enumerate(steps) if step is next_step)
            after = continuation_return(Rollout(rollout.episode, steps=steps[start:], rewards=rollout.rewards),
                                        role, self.discount)
        return self.discount * (float(next_step.reward) + after)

    def state_dict(self) -> dict[str, Any]:
        return self.fallback.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fallback.load_state_dict(state)


CONTINUATIONS = "continuations"
"""``step.info`` key of a branched decision: ``{"before": [G, ...], "after": [G, ...] or None}``."""


def gae(rewards: list[float], values: list[float], discount: float, lam: float) -> list[float]:
    """Generalised advantage estimates of one trajectory: ``A_t = sum_k (discount * lam)**k d_(t+k)``
    with ``d_t = r_t + discount * V_(t+1) - V_t`` and ``V_T = 0`` after the last decision. ``lam = 1``
    gives the Monte Carlo return minus ``V_t``; ``lam = 0`` the one-step TD error."""
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        following = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + discount * following - values[t]
        running = delta + discount * lam * running
        advantages[t] = running
    return advantages


class GAE(CreditAssigner):
    """Per-decision credit from a learned value head: generalised advantage estimation.

    The trainer (``SelfPlayModule``) gives the policy a value head, a linear map of the model's
    last hidden state at the end of each decision's prompt (its features are those that choose
    the move), computes ``V`` of every record of the batch before the update, and sets each
    record's advantage to its own step reward (an invalid move's penalty) plus :func:`gae` along
    its trajectory (one role's decisions in one rollout) of the role's episode reward, which
    comes at the last decision. The value head is trained in the same optimizer step by
    ``value_coef * 0.5 * (V - target)**2`` toward the lambda-return of the episode reward,
    ``target = gae + V``. A step's own reward stays on that step, as in RAE and
    ContinuationCredit: V is the value of the outcome, and a penalty is never credited to the
    moves before it (they did not break the rule).

    Against outcome credit (RAE) this removes what the position already said about the outcome
    (the card dealt, the board inherited) and, with ``lam < 1``, what later moves did, at the cost
    of a value pass over the batch (a forward without gradients) and the bias of a value still
    being learnt. Compare with ContinuationCredit, which estimates the same per-decision
    advantage without bias from K copies of the game per decision, at K times the play.

    Args:
        discount: Per own decision (1: undiscounted).
        lam: GAE's lambda (1: return minus V; 0: one-step TD).
        value_coef: Weight of the value loss in the learner's loss.
        train_trunk: The value loss also trains the adapter (the trunk the policy and value share,
            as in PPO's shared actor-critic); false trains the head alone on the policy's features.
        normalize: Whiten the batch's advantages (mean 0, std 1 over each learner's records on
            each rank).
    """

    learns_values = True
    """The trainer runs the value pass and the value term (see ``CreditAssigner``)."""

    def __init__(self, discount: float = 1.0, lam: float = 0.95, value_coef: float = 0.5, train_trunk: bool = True,
                 normalize: bool = False) -> None:
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"credit.discount: expected a number in (0, 1], got {discount!r}")
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"credit.lam: expected a number in [0, 1], got {lam!r}")
        if not (math.isfinite(value_coef) and value_coef > 0):
            raise ValueError(f"credit.value_coef: expected a number > 0, got {value_coef!r}")
        self.discount, self.lam, self.value_coef = float(discount), float(lam), float(value_coef)
        self.train_trunk, self.normalize = bool(train_trunk), bool(normalize)
        self.last_stats: dict[str, float] = {}

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        """Each step's return (its discounted outcome and own reward): the advantage until the
        trainer replaces it with :meth:`advantages`."""
        advantages = {}
        for _, items in groupby(trainable_steps(rollouts), key=lambda item: item[0][0]):
            items = list(items)
            later = moves_after(items[0][1])
            for key, rollout, step in items:
                advantages[key] = step_return(rollout, step, self.discount ** later[key[1]])
        self.last_stats = _advantage_stats(list(advantages.values()))
        return advantages

    def value_heads(self, learners: list[str], hidden_size: int):
        """A linear value head per learner on the policy's last hidden state, zero at the start."""
        from sp_lightning.value_head import ValueHeads

        return ValueHeads(learners, hidden_size)

    def value_term(self, heads):
        """``value_coef * 0.5 * (V - target)**2`` through ``heads`` (``value_head.ValueLoss``)."""
        from sp_lightning.value_head import ValueLoss

        return ValueLoss(heads, self.value_coef, self.train_trunk)

    def advantages(self, records: list, values: list[float]) -> tuple[list[float], list[float]]:
        """``(advantages, value targets)`` of ``records`` (``TrainingRecord``) given ``values``, V
        of each record's prompt, both in the records' order. Records of one trajectory are taken
        in their ``turn`` order; a record without a trajectory is a trajectory of its own."""
        chains: dict[str, list[int]] = defaultdict(list)
        for index, record in enumerate(records):
            chains[record.trajectory or f"#{index}"].append(index)
        estimates = [0.0] * len(records)
        for indices in chains.values():
            indices.sort(key=lambda i: records[i].turn)
            rewards = [0.0] * len(indices)
            last = records[indices[-1]]
            rewards[-1] = float(last.reward) - float(last.step_reward)  # the role's episode reward
            for i, estimate in zip(indices, gae(rewards, [values[i] for i in indices], self.discount, self.lam)):
                estimates[i] = estimate
        targets = [e + v for e, v in zip(estimates, values)]
        advantages = [float(r.step_reward) + e for r, e in zip(records, estimates)]
        if self.normalize and len(advantages) > 1:
            mean, std = _mean_std(advantages)
            advantages = [(a - mean) / (std + 1e-8) for a in advantages]
        return advantages, targets


def value_diagnostics(values: list[float], targets: list[float], advantages: list[float]) -> dict[str, float]:
    """A learned value's figures for a batch (credit that learns values): its mean, the explained
    variance of the targets (1 - Var(target - V) / Var(target): 1 a perfect value, 0 no better than
    a constant), and the advantages' mean and std."""
    _, residual = _mean_std([t - v for t, v in zip(targets, values)])
    _, spread = _mean_std(targets)
    advantage_mean, advantage_std = _mean_std(advantages)
    return {"value_mean": _mean_std(values)[0],
            "value_explained_variance": 1.0 - residual ** 2 / spread ** 2 if spread > 0 else 0.0,
            "value_advantage_mean": advantage_mean,
            "value_advantage_std": advantage_std}


class EpisodicRewardCredit(CreditAssigner):
    """The return itself as the advantage, no baseline (REINFORCE): the role's episode reward
    plus the step's own reward."""

    def __init__(self) -> None:
        self.last_stats: dict[str, float] = {}

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        advantages = {key: step_return(rollout, step) for key, rollout, step in trainable_steps(rollouts)}
        self.last_stats = _advantage_stats(list(advantages.values()))
        return advantages


class Constant(CreditAssigner):
    """The same weight ``value`` for every trainable step, whatever the rewards: behaviour
    cloning of the policy's own completions (after a source has filtered the episodes, say)."""

    def __init__(self, value: float = 1.0) -> None:
        if not math.isfinite(value):
            raise ValueError(f"credit.value: expected a finite number, got {value!r}")
        self.value = float(value)
        self.last_stats: dict[str, float] = {}

    def compute(self, rollouts: list[Rollout]) -> dict[StepKey, float]:
        advantages = {key: self.value for key, _, _ in trainable_steps(rollouts)}
        self.last_stats = _advantage_stats(list(advantages.values()))
        return advantages
