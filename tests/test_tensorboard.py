"""Readable TensorBoard: the chart layout, and one decoded game as text."""

import re

import pytest

from sp_lightning.model import PolicySettings, load_base
from sp_lightning.tensorboard import LAYOUT, TensorBoardGames, custom_scalars_layout, game_markdown, pick_game
from sp_lightning.types import Completion, PolicyRef, Rollout, Step


def _rollout(tokenizer, learner_moves=True):
    prompt = tokenizer.encode("Tic-Tac-Toe. You are X.\n[0] [1] [2]")
    learner = PolicyRef("learner") if learner_moves else PolicyRef("bot", "random")
    steps = [
        Step("player_0", Completion("[4]", prompt_ids=prompt if learner_moves else [], completion_ids=[5] if learner_moves else [],
                                    policy=learner), reward=0.0, info={"parsed_move": "[4]", "invalid_move": False},
             advantage=0.25 if learner_moves else None),
        Step("player_1", Completion("[0]", policy=PolicyRef("bot", "random")), info={"parsed_move": "[0]"}),
        Step("player_0", Completion("oops", prompt_ids=prompt, completion_ids=[6], policy=learner), reward=-3.0,
             info={"parsed_move": None, "invalid_move": True}, advantage=-3.5),
    ]
    return Rollout("tictactoe_v1", steps=steps, seats={"player_0": learner, "player_1": PolicyRef("bot", "random")},
                   outcome={"player_0": 1.0, "player_1": -1.0}, rewards={"player_0": 1.0, "player_1": -1.0})


def test_a_game_reads_as_seats_outcome_and_every_move_with_its_numbers():
    _, tokenizer = load_base(PolicySettings())
    text = game_markdown(_rollout(tokenizer), tokenizer)
    assert text.startswith("**tictactoe_v1** · seats: player_0: learner, player_1: bot:random")
    assert "outcome: player_0 +1, player_1 -1" in text
    assert "1. **player_0** (learner) · reward +0.000 · advantage +0.250" in text
    assert "    Tic-Tac-Toe. You are X." in text  # the prompt, decoded and indented
    assert "2. **player_1** (bot) · reward +0.000 · advantage -" in text and "(a bot: no prompt)" in text
    assert "advantage -3.500 · **invalid**" in text and "answer: 'oops' -> move None" in text


def test_the_game_shown_is_one_the_learner_played():
    _, tokenizer = load_base(PolicySettings())
    bots_only, played = _rollout(tokenizer, learner_moves=False), _rollout(tokenizer)
    bots_only.steps = bots_only.steps[:2]
    assert pick_game([bots_only, played]) is played
    assert pick_game([bots_only]) is bots_only and pick_game([]) is None


def test_layout_groups_every_chart_and_gives_each_game_a_win_rate_margin():
    layout = custom_scalars_layout(["tictactoe_v1", "kuhn_poker_v1"])
    assert set(layout) == {"training", "rollout", "league", "evaluation"}
    margin = layout["evaluation"]["kuhn_poker_v1 win rate (95% interval)"]
    assert margin == ["Margin", ["val/kuhn_poker_v1/win_rate", "val/kuhn_poker_v1/win_rate_ci_low",
                                 "val/kuhn_poker_v1/win_rate_ci_high"]]
    assert "win rate (95% interval)" in LAYOUT["evaluation"]  # the module constant is not mutated
    league = layout["league"]["ratings (TrueSkill mu - 3 sigma)"][1][0]
    for tag in ("league/learner/rating", "league/best/rating", "league/baseline/random_bot/rating"):
        assert re.fullmatch(league, tag)
    assert not re.fullmatch(league, "league/learner/mu")
    with pytest.raises(ValueError, match="every"):
        TensorBoardGames(every=0)


def test_read_scalars_reads_every_version_and_keeps_the_last_write_of_a_step(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from sp_lightning.tensorboard import read_scalars

    first = SummaryWriter(tmp_path / "tb" / "version_0")
    for step in range(5):
        first.add_scalar("league/learner/mu", 25.0 + step, step)
        first.add_scalar("train/loss", 1.0, step)
    first.close()
    resumed = SummaryWriter(tmp_path / "tb" / "version_1")  # a resume from step 3 writes 3 and 4 again
    for step in (3, 4, 5):
        resumed.add_scalar("league/learner/mu", 100.0 + step, step)
    resumed.close()
    scalars = read_scalars(tmp_path / "tb", r"^league/")
    assert list(scalars) == ["league/learner/mu"]
    assert scalars["league/learner/mu"] == [(0, 25.0), (1, 26.0), (2, 27.0), (3, 103.0), (4, 104.0), (5, 105.0)]
    with pytest.raises(FileNotFoundError, match="no TensorBoard event files"):
        read_scalars(tmp_path / "empty")
