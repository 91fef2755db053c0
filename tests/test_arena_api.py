"""The arena as the engine specification names it: registries, get_batch, concurrency limits,
policy-version tags, build_training_batch, sanity_check_batch, step/run, lifecycle hooks, and a
custom arena that trains through ``fit`` unchanged."""

import io
import random

import pytest

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.credit import EpisodicRewardCredit
from sp_lightning.episodes import Episode, SingleTurnEpisode
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import SamplingSettings, WeightUpdate
from sp_lightning.rubric import Rubric
from sp_lightning.sources import EpisodeRequest
from sp_lightning.stores import ArtifactStore
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef, Role, Rollout, Step
from tests.helpers import ScriptedWorker, fit_batches

TICTACTOE = GameSettings(id="tictactoe_v1")
MIRROR = {"player_0": LEARNER, "player_1": LEARNER}


def _question(text: str = "2+2?") -> SingleTurnEpisode:
    return SingleTurnEpisode(name="question", messages=[{"role": "user", "content": text}],
                             rubric=Rubric(outcome=[(lambda rollout: {"answerer": 1.0}, 1.0)]), role="answerer")


def test_registries_refuse_duplicates_and_get_batch_draws_by_weight():
    arena = Arena(ScriptedWorker(answer="4"), SamplingSettings())
    arena.add_role(Role("judge_free_role"))
    with pytest.raises(ValueError, match="already registered"):
        arena.add_role(Role("judge_free_role"))
    arena.add_episode(_question("a"), weight=3.0, name="often")
    arena.add_episode(_question("b"), weight=1.0, name="rarely")
    assert "answerer" in arena.roles  # an episode's roles are registered with it
    with pytest.raises(ValueError, match="weight > 0"):
        arena.add_episode(_question(), weight=0.0, name="never")
    store = arena.add_store("topics", ArtifactStore(["x"]))
    with pytest.raises(ValueError, match="already registered"):
        arena.add_store("topics", store)

    requests = arena.get_batch(random.Random(0), 4000)
    often = sum(r.episode is arena.episodes["often"][0] for r in requests)
    assert abs(often / 4000 - 0.75) < 0.03
    again = arena.get_batch(random.Random(0), 4000)  # everything random comes from the rng
    assert [(r.episode, r.seed) for r in again] == [(r.episode, r.seed) for r in requests]


def test_get_batch_without_episodes_or_source_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no episode is registered"):
        Arena(ScriptedWorker()).get_batch(random.Random(0), 2)
    with pytest.raises(ValueError, match="no episode is registered"):  # data.arena with nothing to play
        fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 1, "--data.games", "[]",
                    "--data.arena", "sp_lightning.arena.Arena")


def test_a_concurrency_limit_bounds_the_episodes_in_flight_and_keeps_the_results():
    """16 mirror games with at most 4 in flight: never more than 4 at once, smaller generate
    calls, and the same games as with no limit (the scripted answers are deterministic)."""
    requests = [EpisodeRequest(TICTACTOE.episode(MIRROR), seed) for seed in range(16)]
    free = Arena(ScriptedWorker(), SamplingSettings())
    unlimited = free.generate_rollouts(requests)
    assert free.last_play.most_in_flight == 16
    worker = ScriptedWorker()
    limited_arena = Arena(worker, SamplingSettings(), max_concurrent=4)
    limited = limited_arena.generate_rollouts([EpisodeRequest(TICTACTOE.episode(MIRROR), s) for s in range(16)])
    assert limited_arena.last_play.most_in_flight == 4
    assert max(len(call) for call in worker.calls) == 4

    def moves(rollouts):
        return [[s.completion.text for s in r.steps] for r in rollouts]

    assert moves(limited) == moves(unlimited)
    with pytest.raises(ValueError, match="max_concurrent"):
        Arena(worker, max_concurrent=0)


def test_every_learner_request_is_tagged_with_the_workers_policy_version_when_sent():
    worker = ScriptedWorker()
    arena = Arena(worker, SamplingSettings(), bots=make_bots(0))
    seats = {"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}
    tags = {}
    for version in (7, 8):  # the weights change between batches, as after an optimizer step
        worker.load_weights(WeightUpdate({}, version))
        worker.calls = []
        arena.play([TICTACTOE.episode(seats) for _ in range(2)], [0, 1])
        tags[version] = {r.policy_version for call in worker.calls for r in call}
    assert tags == {7: {7}, 8: {8}}


class _ParentWithSilentChild(Episode):
    """One trainable answer, a child question played not trainable, and a step without tokens."""

    name = "parent"
    roles = [Role("asker")]
    rubric = Rubric(outcome=[(lambda rollout: {"asker": 1.0}, 1.0)])

    async def rollout(self, ctx):
        request = ModelRequest(role="asker", messages=[{"role": "user", "content": "ask"}], policy=LEARNER)
        asked = await ctx.generate(request)
        empty = await ctx.generate(ModelRequest(role="asker", messages=[{"role": "user", "content": "empty"}],
                                                policy=LEARNER))
        child = await ctx.run(_question(), seed=1, trainable=False)
        rollout = Rollout(episode=self.name, steps=[Step("asker", asked), Step("asker", empty)],
                          seats={"asker": LEARNER})
        rollout.children.append(child)
        return rollout


def test_build_training_batch_flattens_trees_and_skips_untrainable_and_tokenless_steps():
    worker = ScriptedWorker(answer="q", completion_ids=lambda r: [] if r.messages[-1]["content"] == "empty" else [5])
    arena = Arena(worker, SamplingSettings())
    rollouts = arena.generate_rollouts([EpisodeRequest(_ParentWithSilentChild(), s) for s in range(3)])
    assert all(len(r.children) == 1 and not r.children[0].trainable for r in rollouts)
    batch = arena.build_training_batch(rollouts, EpisodicRewardCredit())
    assert len(batch.records) == 3  # one per parent: not the empty answer, not the child's
    assert all(r.completion_ids == [5] and r.advantage == 1.0 for r in batch.records)
    assert batch.metrics["rollout/records"] == 3.0


def test_sanity_check_batch_prints_records_with_masks_and_advantages(tiny_policy):
    from sp_lightning.rollout import HFRolloutWorker

    model, tokenizer = tiny_policy
    arena = Arena(HFRolloutWorker(model, tokenizer), SamplingSettings(max_new_tokens=1), bots=make_bots(0),
                  credit=EpisodicRewardCredit())
    arena.add_episode(TICTACTOE.episode({"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}))
    batch = arena.step(size=2)
    out = io.StringIO()
    arena.sanity_check_batch(batch, count=2, out=out)
    text = out.getvalue()
    assert f"{len(batch.records)} records from 2 episodes" in text
    assert text.count("--- record") == min(2, len(batch.records))
    assert "Tic-Tac-Toe" in text and "mask:       [1]" in text and "advantage" in text


class CurriculumArena(Arena):
    """A custom arena (named in ``data.arena`` by tests): the learner always opens as X against
    RandomBot, the games' count per batch grows by one each batch, and every hook is recorded."""

    calls: list[str] = []

    def __init__(self, first: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.first = first
        self.sizes: list[int] = []

    def get_batch(self, rng, size):
        count = self.first + self.steps_done
        self.sizes.append(count)
        seats = {"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}
        return [EpisodeRequest(TICTACTOE.episode(seats), rng.randrange(2**31)) for _ in range(count)]

    def observe(self, rollouts):
        super().observe(rollouts)
        CurriculumArena.calls.append(f"observe {len(rollouts)}")

    def on_startup(self):
        CurriculumArena.calls.append("startup")

    def on_shutdown(self):
        CurriculumArena.calls.append("shutdown")
        super().on_shutdown()

    def on_train_start(self):
        CurriculumArena.calls.append("train_start")

    def on_train_end(self):
        CurriculumArena.calls.append("train_end")


def test_step_and_run_drive_a_custom_arena_outside_lightning():
    CurriculumArena.calls = []
    arena = CurriculumArena(first=2, worker=ScriptedWorker(), bots=make_bots(0), credit=EpisodicRewardCredit())
    out = io.StringIO()
    history = arena.run(3, show=1, out=out)
    assert arena.sizes == [2, 3, 4] and arena.steps_done == 3 and len(history) == 3
    assert CurriculumArena.calls == ["startup", "observe 2", "observe 3", "observe 4", "shutdown"]
    text = out.getvalue()
    assert "batch 0: 2 episodes" in text and "batch 2: 4 episodes" in text
    assert "episode tictactoe_v1 (level 0; player_0=learner, player_1=bot:random)" in text


@pytest.mark.slow
def test_a_custom_arena_trains_through_fit_unchanged(tmp_path):
    CurriculumArena.calls = []
    _, batches = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 2, "--model.update_epochs", "1",
                             "--data.arena", f'{{"class_path": "{__name__}.CurriculumArena", '  # this module
                                             '"init_args": {"first": 3}}')
    assert [len(b.rollouts) for b in batches] == [3, 4]
    assert all(r.seats == {"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}
               for b in batches for r in b.rollouts)
    assert all(b.records for b in batches)
    assert CurriculumArena.calls == ["startup", "train_start", "observe 3", "observe 4", "train_end", "shutdown"]


class OwnStepArena(Arena):
    """A custom arena with a ``step`` of its own (it builds the batch from the base class's parts
    and never calls ``finish_batch``)."""

    def step(self, rng=None, size=None, side_episodes=(), side_metrics=None):
        requests = self.get_batch(rng, size or self.episodes_per_batch)
        batch = self.build_training_batch(self.play([r.episode for r in requests], [r.seed for r in requests]))
        self.steps_done += 1
        return batch


@pytest.mark.slow
def test_an_arena_with_its_own_step_still_gets_the_imitation_records(tmp_path):
    """The engine completes a batch through ``Arena.finish_batch`` (before the episode log sees
    it); an arena whose ``step`` does not call it gets the imitation learners' records all the same."""
    import json

    learners = {"main": {"roles": ["*"]}, "student": {"imitate": {"teacher": "bot:random", "size": 40, "batch": 8}}}
    _, batches = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 2, "--model.learners", json.dumps(learners),
                             "--data.episodes_per_batch", "6", "--data.eval.held_out", "[]",
                             "--data.arena", f'{{"class_path": "{__name__}.OwnStepArena"}}')
    for batch in batches:
        student = [r for r in batch.records if r.learner == "student"]
        assert len(student) == 8 and all(r.imitation for r in student)
        assert batch.metrics["imitation/student/new_moves"] > 0

