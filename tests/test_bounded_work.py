"""Bounded work: games cut off after max_turns actions, prompts longer than the model's context
never sent, both by a stated rule that scores the game 0 and is logged."""

import logging

import pytest

from sp_lightning.episodes import game as game_episode
from sp_lightning.arena import Arena
from sp_lightning.credit import EpisodicRewardCredit
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.rollout.hf import HFRolloutWorker
from sp_lightning.types import LEARNER, PROMPT_TOO_LONG, ModelRequest, parse_policy
from envs import make_bots
from tests.helpers import ScriptedWorker


@pytest.fixture(autouse=True)
def fresh_warnings():
    game_episode._warned.clear()
    yield
    game_episode._warned.clear()


def test_a_game_past_max_turns_is_cut_off_scored_zero_and_still_trains(caplog):
    """First-legal play wins Tic-Tac-Toe for X on move 7; with max_turns 4 every game stops
    after 4 moves, both seats score 0 (not X's win), the 4 moves still become records, the
    metric says why, and one warning names the rule however many games were cut off."""
    game = GameSettings(id="tictactoe_v1", max_turns=4)
    arena = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0))
    episodes_ = [game.episode({"player_0": LEARNER, "player_1": LEARNER}) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="sp_lightning.episodes.game"):
        batch = arena.build_training_batch(arena.play(episodes_, [0, 1, 2]), EpisodicRewardCredit())
    rollouts = batch.rollouts
    assert all(len(r.steps) == 4 for r in rollouts)
    assert all(r.outcome == {"player_0": 0.0, "player_1": 0.0} for r in rollouts)
    assert all(r.metrics["cut_off_turns"] == 1.0 and r.metrics["cut_off_prompt"] == 0.0 for r in rollouts)
    assert len(batch.records) == 12
    assert batch.metrics[f"{game.name}/cut_off_turns"] == 1.0
    warnings = [rec.getMessage() for rec in caplog.records]
    assert len(warnings) == 1 and "max_turns=4" in warnings[0] and game.name in warnings[0]


def test_games_within_max_turns_are_untouched():
    game = GameSettings(id="tictactoe_v1", max_turns=9)
    rollouts = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0)).play(
        [game.episode({"player_0": LEARNER, "player_1": LEARNER})], seeds=[0])
    assert rollouts[0].outcome == {"player_0": 1.0, "player_1": -1.0}
    assert rollouts[0].metrics["cut_off_turns"] == 0.0


def test_max_turns_is_checked_with_its_key():
    """When the run checks its games, by the game's config key (``data.games[i]``)."""
    with pytest.raises(ValueError, match=r"^data.games\[0\].max_turns: expected an int >= 1 or null, got 0"):
        GameSettings(id="tictactoe_v1", max_turns=0).check("data.games[0]")


def test_a_game_that_names_no_max_turns_is_cut_only_past_its_own_bound():
    """Null max_turns: 500, or the game's own bound where that is larger. Ten Diplomacy years
    of random orders take about 600 decisions, and the old fixed default of 500 cut every such
    game (score 0); an explicit max_turns still cuts where it says."""
    assert GameSettings(id="tictactoe_v1").episode({"player_0": LEARNER, "player_1": LEARNER}).max_turns == 500
    for max_turns, cut in ((None, 0.0), (500, 1.0)):
        game = GameSettings(id="diplomacy_v1", env_kwargs={"max_years": 10}, max_turns=max_turns)
        seats = {agent: parse_policy("bot:random") for agent in game.agents}
        rollout = Arena(ScriptedWorker(), SamplingSettings(), bots=make_bots(0)).play([game.episode(seats)], seeds=[0])[0]
        assert rollout.metrics["cut_off_turns"] == cut
        assert len(rollout.steps) > 500 if cut == 0.0 else len(rollout.steps) == 500
    assert game.max_turns == 500 and GameSettings(id="diplomacy_v1", env_kwargs={"max_years": 10}).episode(seats).max_turns == 1700


def test_a_prompt_past_the_context_is_never_sent(tiny_policy):
    """The default limit is the model's context minus the completion budget. In Kuhn Poker the
    second player's prompt is longer than the first's (it shows the first action): with the
    limit at the first prompt's length, the first move is generated, the second prompt is
    refused without a generate call (no tokens counted), and the game is cut off, scored 0."""
    model, tok = tiny_policy
    worker = HFRolloutWorker(model, tok)
    sampling = SamplingSettings(max_new_tokens=4)
    assert worker.prompt_limit(sampling) == model.config.max_position_embeddings - 4

    game = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "random"})
    probe = game.episode({"player_0": LEARNER, "player_1": LEARNER})
    env = probe.env_factory()
    env.reset(seed=0)
    first = probe.template.messages(env.observe(env.agent_selection)["text"], env.agent_selection)
    worker.max_prompt_tokens = len(worker.encode_prompts([first])[0])

    before = worker.generated_tokens
    rollouts = Arena(worker, sampling, bots=make_bots(0)).play([probe], seeds=[0])
    (rollout,) = rollouts
    assert [s.role for s in rollout.steps] == ["player_0"]
    assert rollout.steps[0].completion.completion_ids  # the first move was generated
    assert worker.generated_tokens - before == len(rollout.steps[0].completion.completion_ids)
    assert rollout.metrics["cut_off_prompt"] == 1.0
    assert rollout.outcome == {"player_0": 0.0, "player_1": 0.0}

    long_request = ModelRequest(role="player_0", messages=[{"role": "user", "content": "word " * 300}],
                                policy=LEARNER, legal_actions=[])
    (refused,) = worker.generate([long_request], sampling)
    assert refused.refused == PROMPT_TOO_LONG and refused.completion_ids == [] and refused.text == ""
    with pytest.raises(ValueError, match="rollout.max_prompt_tokens"):
        HFRolloutWorker(model, tok, max_prompt_tokens=0)
