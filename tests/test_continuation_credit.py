"""Per-decision credit from branched continuations (``credit.ContinuationCredit``, VinePPO for
games): hand-computed returns and advantages, and real games played by a real arena in which
every trainable decision is copied and played on by the same seats."""

import pytest

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.credit import CONTINUATIONS, RAE, ContinuationCredit, continuation_return
from sp_lightning.games import GameSettings
from sp_lightning.rollout import SamplingSettings
from sp_lightning.types import LEARNER, Completion, PolicyRef, Rollout, Step
from tests.helpers import ScriptedWorker

RANDOM = PolicyRef("bot", "random")


def _step(role, reward=0.0, continuations=None, trainable=True):
    completion = Completion("[0]", prompt_ids=[1], completion_ids=[5] if trainable else [],
                            logprobs=[-0.1] if trainable else [], policy=LEARNER if trainable else RANDOM)
    info = {} if continuations is None else {CONTINUATIONS: continuations}
    return Step(role, completion, reward=reward, info=info)


def test_a_continuation_return_discounts_by_the_roles_own_moves():
    """Role x moves three times, penalties -3, 0, -2, outcome +1, discount 0.5. From the decision
    (its first move is the decision's: counted as a move, its penalty left to the real move):
    0.5*0 + 0.25*(-2) + 0.25*1 = -0.25. From after it (all three moves are later ones):
    0.5*(-3) + 0.25*0 + 0.125*(-2) + 0.125*1 = -1.625. The other role's steps do not count."""
    rollout = Rollout("g", steps=[_step("x", -3.0), _step("o", -9.0), _step("x", 0.0), _step("x", -2.0)],
                      rewards={"x": 1.0, "o": -1.0})
    assert continuation_return(rollout, "x", 0.5) == pytest.approx(-0.25)
    assert continuation_return(rollout, "x", 0.5, from_decision=False) == pytest.approx(-1.625)
    assert continuation_return(Rollout("g", rewards={"x": 1.0}), "x", 0.5) == 1.0  # cut off at once: the outcome


def test_q_minus_v_from_the_recorded_continuations():
    """Three decisions of x: (1) penalty -3, continuations before [0, 1], after [1, 1]:
    A = -3 + 1 - 0.5 = -2.5; (2) before [1, -1], after None (the move ended the game, outcome
    +1): A = 0 + 1 - 0 = 1; (3) no continuations: RAE's advantage, R - b = 1 - 0 = 1."""
    rollout = Rollout("g", steps=[
        _step("x", -3.0, {"before": [0.0, 1.0], "after": [1.0, 1.0]}),
        _step("x", 0.0, {"before": [1.0, -1.0], "after": None}),
        _step("x", 0.0)], rewards={"x": 1.0}, seats={"x": LEARNER})
    credit = ContinuationCredit(continuations=2)
    advantages = credit.compute([rollout])
    assert advantages == {("0", 0): pytest.approx(-2.5), ("0", 1): pytest.approx(1.0), ("0", 2): pytest.approx(1.0)}
    assert credit.last_stats["branched_fraction"] == pytest.approx(2 / 3)
    assert credit.branching.after and credit.branching.continuations == 2


def test_td_chains_the_next_decisions_value():
    """td, discount 0.5: x decides three times. (1) V = mean[0, 2] = 1, next decision's V =
    mean[2, 4] = 3: A = 0 + 0.5*3 - 1 = 0.5. (2) V = 3, the next decision has no continuations:
    its real return from there, its penalty -1 plus the outcome +1 with no own move between
    (0.5**0) = 0, discounted: A = 0 + 0.5*0 - 3 = -3. (3) no continuations: RAE's advantage."""
    rollout = Rollout("g", steps=[
        _step("x", 0.0, {"before": [0.0, 2.0], "after": None}),
        _step("x", 0.0, {"before": [2.0, 4.0], "after": None}),
        _step("x", -1.0)], rewards={"x": 1.0}, seats={"x": LEARNER})
    credit = ContinuationCredit(continuations=2, estimator="td", discount=0.5)
    advantages = credit.compute([rollout])
    assert not credit.branching.after
    assert advantages[("0", 0)] == pytest.approx(0.5)
    assert advantages[("0", 1)] == pytest.approx(-3.0)
    rae = RAE(discount=0.5).compute([rollout])
    assert advantages[("0", 2)] == pytest.approx(rae[("0", 2)])


def test_settings_are_checked_naming_the_key():
    with pytest.raises(ValueError, match="credit.continuations"):
        ContinuationCredit(continuations=0)
    with pytest.raises(ValueError, match="credit.decisions"):
        ContinuationCredit(decisions=0.0)
    with pytest.raises(ValueError, match="credit.estimator"):
        ContinuationCredit(estimator="mc")


def _played(game_id, seats, credit, episodes=2, **kwargs):
    worker = ScriptedWorker()  # the first legal move, always: a deterministic policy
    game = GameSettings(id=game_id, **kwargs)
    arena = Arena(worker, SamplingSettings(max_new_tokens=1), bots=make_bots(0), credit=credit)
    rollouts = arena.play([game.episode(seats) for _ in range(episodes)], list(range(episodes)))
    return worker, arena, rollouts


def test_a_deterministic_game_copied_at_every_decision_gives_the_game_itself():
    """Mirror Tic-Tac-Toe, first legal move every time, no chance: every continuation replays
    the rest of the real game, so every value is the real return (X wins: +1, O: -1) and every
    advantage is 0; each decision of both seats got K before and K after (none after the
    winning move); the continuations ran in the batch's generate calls."""
    credit = ContinuationCredit(continuations=3)
    worker, arena, rollouts = _played("tictactoe_v1", {"player_0": LEARNER, "player_1": LEARNER}, credit)
    plain_worker, _, _ = _played("tictactoe_v1", {"player_0": LEARNER, "player_1": LEARNER}, RAE())
    batch = arena.build_training_batch(rollouts, credit)
    for rollout in rollouts:
        assert len(rollout.steps) == 7 and rollout.outcome == {"player_0": 1.0, "player_1": -1.0}
        for index, step in enumerate(rollout.steps):
            values = step.info[CONTINUATIONS]
            expected = rollout.outcome[step.role]
            assert values["before"] == [expected] * 3
            assert values["after"] == (None if index == 6 else [expected] * 3)
            assert step.advantage == 0.0
    assert len(batch.records) == 14  # the real games' moves only: continuations never train
    # every continuation's model calls joined the calls of everything in flight: rows grew tenfold,
    # calls only by the depth of the continuations (a decision's copies play the rest of the game
    # before the real game goes on: 7 moves, and 7 + 6 + ... + 1 rounds of copies)
    rows, calls = sum(len(c) for c in worker.calls), len(worker.calls)
    assert rows > 10 * sum(len(c) for c in plain_worker.calls)
    assert calls <= 7 + sum(range(1, 8)) and rows / calls > 2 * 3  # two games' copies in each call


@pytest.mark.parametrize("game_id, seats", [
    ("tictactoe_v1", {"player_0": RANDOM, "player_1": LEARNER}),  # a bot in the other seat
    ("kuhn_poker_v1", {"player_0": LEARNER, "player_1": PolicyRef("checkpoint", "old")}),  # a checkpoint
    ("kuhn_poker_3p_v1", {"player_0": RANDOM, "player_1": LEARNER, "player_2": LEARNER}),  # three players
    ("liars_dice_v1", {"player_0": LEARNER, "player_1": RANDOM}),  # chance in every copy: dice
])
def test_only_the_learners_decisions_are_copied_whoever_holds_the_other_seats(game_id, seats):
    credit = ContinuationCredit(continuations=2)
    _, arena, rollouts = _played(game_id, seats, credit, episodes=3, env_kwargs={"invalid_move": "random"})
    arena.build_training_batch(rollouts, credit)
    for rollout in rollouts:
        for step in rollout.steps:
            learner = seats[step.role] == LEARNER
            assert (CONTINUATIONS in step.info) == learner
            if learner:
                assert len(step.info[CONTINUATIONS]["before"]) == 2 and step.advantage is not None
    assert credit.last_stats["branched_fraction"] == 1.0


def test_a_share_of_the_decisions_is_copied_and_the_rest_get_rae():
    credit = ContinuationCredit(continuations=1, decisions=0.5)
    _, arena, rollouts = _played("tictactoe_v1", {"player_0": LEARNER, "player_1": LEARNER}, credit, episodes=8)
    arena.build_training_batch(rollouts, credit)
    share = credit.last_stats["branched_fraction"]
    assert 0.2 < share < 0.8  # 56 decisions, each a coin flip from the episode's own stream
    assert all(s.advantage is not None for r in rollouts for s in r.steps)


def test_evaluation_and_side_games_never_branch():
    """Episodes played as not trainable (evaluation, online evaluation) make no copies."""
    credit = ContinuationCredit(continuations=2)
    worker = ScriptedWorker()
    game = GameSettings(id="tictactoe_v1")
    arena = Arena(worker, SamplingSettings(max_new_tokens=1), bots=make_bots(0), credit=credit)
    (rollout,) = arena.play([game.episode({"player_0": LEARNER, "player_1": LEARNER})], [0], trainable=[False])
    assert not any(CONTINUATIONS in step.info for step in rollout.steps)
    assert sum(len(c) for c in worker.calls) == len(rollout.steps)
