"""The arena: concurrent episodes, coalesced model calls, bots, nested episodes, records."""

import pytest

from sp_lightning.arena import Arena
from sp_lightning.batch import to_records
from sp_lightning.credit import EpisodicRewardCredit
from sp_lightning.episodes import Episode
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.rubric import Rubric
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef, Rollout, Step
from envs import make_bots
from tests.helpers import ScriptedWorker


def test_mirror_games_coalesce_into_one_call_per_turn():
    """32 Tic-Tac-Toe games where both seats take the first legal move all last 7 moves
    (X wins on the diagonal 0-4-8... with first-legal play: X 0, O 1, X 2, O 3, X 4, O 5, X 6),
    so the 32 pending requests of each turn go out together: 7 calls of 32 requests."""
    game = GameSettings(id="tictactoe_v1")
    worker = ScriptedWorker()
    arena = Arena(worker, SamplingSettings(), bots=make_bots(0))
    episodes = [game.episode({"player_0": LEARNER, "player_1": LEARNER}) for _ in range(32)]
    rollouts = arena.play(episodes, seeds=list(range(32)))
    assert [len(c) for c in worker.calls] == [32] * 7
    assert all(r.outcome == {"player_0": 1.0, "player_1": -1.0} for r in rollouts)
    assert all(len(r.steps) == 7 for r in rollouts)


def test_bot_seats_need_no_model_and_games_of_different_length_still_batch():
    game = GameSettings(id="tictactoe_v1")
    worker = ScriptedWorker()
    arena = Arena(worker, SamplingSettings(), bots=make_bots(0))
    episodes = [game.episode({"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}) for _ in range(16)]
    rollouts = arena.play(episodes, seeds=list(range(16)))
    assert all(req.policy == LEARNER for call in worker.calls for req in call)
    assert len(worker.calls) <= 5  # X moves at most 5 times: one call per X turn
    assert sum(len(c) for c in worker.calls) == sum(len(r.steps_of("player_0")) for r in rollouts)
    bot_steps = [s for r in rollouts for s in r.steps_of("player_1")]
    assert bot_steps and not any(s.trainable for s in bot_steps)


def test_malformed_model_output_is_an_invalid_move_not_a_crash():
    game = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "forfeit"})
    arena = Arena(ScriptedWorker(answer="\x00 drop table; [[[ ]"), SamplingSettings(), bots=make_bots(0))
    rollouts = arena.play([game.episode({"player_0": LEARNER, "player_1": LEARNER})], seeds=[0])
    (step,) = rollouts[0].steps
    assert step.info["invalid_move"] is True
    assert rollouts[0].outcome["player_0"] < 0


class _Parent(Episode):
    """A proposer whose reward is the mean outcome of two nested games played concurrently."""

    name = "parent"
    roles = []
    rubric = Rubric()

    def __init__(self, game, children_train=True):
        self.game = game
        self.children_train = children_train

    async def rollout(self, ctx):
        completion = await ctx.generate(ModelRequest("proposer", [{"role": "user", "content": "go"}], LEARNER, ["[x]"]))
        children = await ctx.run_many(
            [self.game.episode({"player_0": LEARNER, "player_1": LEARNER}) for _ in range(2)], [1, 2],
            trainable=self.children_train,
        )
        # the children come back scored by their own rubric (the game's payoff)
        mean_x = sum(child.rewards["player_0"] for child in children) / len(children)
        return Rollout(episode="parent", steps=[Step("proposer", completion)],
                       seats={"proposer": LEARNER}, outcome={"proposer": mean_x}, children=children)


def test_nested_episodes_share_batches_and_become_records():
    game = GameSettings(id="tictactoe_v1")
    worker = ScriptedWorker()
    arena = Arena(worker, SamplingSettings(), bots=make_bots(0))
    rollouts = arena.play([_Parent(game), _Parent(game)], seeds=[0, 1])
    # 2 proposer calls together, then 4 child games x 7 moves, coalesced into 7 calls of 4
    assert [len(c) for c in worker.calls] == [2] + [4] * 7
    assert all(child.level == 1 for r in rollouts for child in r.children)
    assert all(r.rewards == {"proposer": 1.0} for r in rollouts)  # X wins both first-legal games
    EpisodicRewardCredit().assign(rollouts)
    records = to_records(rollouts)
    assert len(records) == 2 * (1 + 2 * 7)


def test_children_requested_not_trainable_inform_the_parent_and_never_train():
    game = GameSettings(id="tictactoe_v1")
    worker = ScriptedWorker()
    arena = Arena(worker, SamplingSettings(), bots=make_bots(0))
    rollouts = arena.play([_Parent(game, children_train=False)], seeds=[0])
    assert [len(c) for c in worker.calls] == [1] + [2] * 7  # the children still batch
    assert rollouts[0].rewards == {"proposer": 1.0}  # and still inform the parent's reward
    assert all(not child.trainable for child in rollouts[0].children)
    EpisodicRewardCredit().assign(rollouts)
    assert len(to_records(rollouts)) == 1  # the proposer's step only
    assert all(step.advantage is None for child in rollouts[0].children for step in child.steps)


class _Chain(Episode):
    """An episode that plays one sub-episode of its own kind until ``depth`` is 0."""

    name = "chain"
    roles = []
    rubric = Rubric(outcome=[(lambda rollout: {"r": 0.0}, 1.0)])

    def __init__(self, depth):
        self.depth = depth

    async def rollout(self, ctx):
        children = [await ctx.run(_Chain(self.depth - 1), seed=0)] if self.depth else []
        return Rollout(episode="chain", seats={"r": LEARNER}, children=children)


def test_run_many_with_a_seed_missing_is_an_error_not_a_hang():
    """Three sub-episodes and two seeds: the scheduler counted three children and started two,
    and waited for the third for ever."""
    game = GameSettings(id="tictactoe_v1")

    class ShortOfSeeds(Episode):
        name, roles, rubric = "short", [], Rubric(outcome=[(lambda rollout: {"r": 0.0}, 1.0)])

        async def rollout(self, ctx):
            episodes = [game.episode({"player_0": LEARNER, "player_1": LEARNER}) for _ in range(3)]
            return Rollout(episode="short", seats={"r": LEARNER}, children=await ctx.run_many(episodes, [1, 2]))

    with pytest.raises(ValueError, match="run_many: 3 episodes and 2 seeds; expected one seed per episode"):
        Arena(ScriptedWorker(), SamplingSettings()).play([ShortOfSeeds()], seeds=[0])


def test_level_is_the_depth_in_the_hierarchy():
    arena = Arena(ScriptedWorker(), SamplingSettings())
    (top,) = arena.play([_Chain(3)], seeds=[0])
    assert [node.level for node in top.walk()] == [0, 1, 2, 3]


def test_unknown_bot_is_a_clear_error():
    game = GameSettings(id="tictactoe_v1", opponents={"bot:nobody": 1.0})
    arena = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0))
    with pytest.raises(ValueError, match="nobody"):
        arena.play([game.episode({"player_0": LEARNER, "player_1": PolicyRef("bot", "nobody")})], [0])


def test_bad_opponent_spec_names_the_key():
    with pytest.raises(ValueError, match="opponent 'robot'"):
        GameSettings(id="tictactoe_v1", opponents={"robot": 1.0})


def test_play_works_inside_a_running_event_loop():
    """A Jupyter kernel runs an event loop; the arena then plays on a worker thread."""
    import asyncio

    game = GameSettings(id="tictactoe_v1")
    arena = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0))

    async def inside_a_loop():
        return arena.play([game.episode({"player_0": LEARNER, "player_1": LEARNER})], [0])

    (rollout,) = asyncio.run(inside_a_loop())
    assert len(rollout.steps) == 7


def test_ctrl_c_during_play_stops_it_with_nothing_logged_after(caplog):
    """KeyboardInterrupt raised in a game (Ctrl-C reaches the loop's thread) propagates, and the
    task that held it is read: asyncio logged it again, with the whole stack, when the task was
    collected ("Task exception was never retrieved")."""
    import gc
    import logging

    class CtrlC(Episode):
        name, roles, rubric = "ctrl_c", [], Rubric(outcome=[(lambda rollout: {"r": 0.0}, 1.0)])

        async def rollout(self, ctx):
            raise KeyboardInterrupt

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(KeyboardInterrupt):
            Arena(ScriptedWorker(), SamplingSettings()).play([CtrlC(), CtrlC()], seeds=[0, 1])
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
