"""Online evaluation: games against a fixed opponent played inside each training batch, in the
same arena run as the training games, logged per game, never trained on."""

import pytest

from sp_lightning.data import SelfPlayDataModule
from sp_lightning.engine import Engine, EvalSettings
from sp_lightning.evaluation.online import OnlineEvaluation
from sp_lightning.games import GameSettings
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import LEARNER
from tests.helpers import fit_batches


def test_online_games_share_the_batch_run_and_give_no_records(tiny_policy):
    """Through the engine, as fit plays a batch: the evaluation games ride in the batch's own
    generate calls, give no records, never reach credit, and their figures join the batch's."""
    model, tok = tiny_policy
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"},
                        opponents={"bot:random": 1.0})
    worker = HFRolloutWorker(model, tok)
    calls = []
    generate = worker.generate
    worker.generate = lambda requests, sampling: (calls.append(len(requests)), generate(requests, sampling))[1]

    def engine(online_games: int) -> Engine:
        settings = SelfPlayDataModule(games=[game], episodes_per_batch=8, seed=1,
                                      sampling=SamplingSettings(max_new_tokens=1),
                                      eval=EvalSettings(online_games=online_games, seed=3),
                                      rollout=lambda model, tokenizer: worker).settings
        return Engine(settings, model, tok)

    engine(0).next_batch()  # the batch alone
    plain_calls, calls[:] = list(calls), []
    batch = engine(6).next_batch()  # the same training games again, now with evaluation games beside them
    # the batch holds the 8 training games only, and a record for each learner move of theirs
    # (their moves may differ from the plain run's: the evaluation games drew from the same RNGs)
    learner_moves = sum(1 for r in batch.rollouts for step in r.steps if step.completion.policy == LEARNER)
    assert len(batch.rollouts) == 8 and len(batch.records) == learner_moves > 0
    assert len(batch.side_rollouts) == 6 and not any(s.trainable for r in batch.side_rollouts for s in r.steps)
    assert batch.metrics["online_eval/tictactoe_v1/games"] == 6
    rates = [batch.metrics[f"online_eval/tictactoe_v1/{k}_rate"] for k in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0) and all(0 <= r <= 1 for r in rates)
    assert "online_eval/tictactoe_v1/payoff_ci_low" in batch.metrics
    # the evaluation games' moves rode in the same generate calls (no call of their own): a
    # Tic-Tac-Toe game holds at most 5 learner moves, so calls of their own would exceed 5 when
    # the training games end sooner (their moves may differ from the plain run's, see above)
    assert len(calls) <= max(len(plain_calls), 5) and sum(calls) > sum(plain_calls)


def test_online_games_are_drawn_per_batch_from_their_own_stream():
    game = GameSettings(id="kuhn_poker_v1")
    online = OnlineEvaluation([game], "bot:random", games_per_batch=5, seed=9)
    first, again, second = online.matches(0)[0], online.matches(0)[0], online.matches(1)[0]
    assert len(first.episodes) == 4 and first.seeds == again.seeds and first.seeds != second.seeds
    assert sorted(set(first.tested_seats)) == sorted(game.agents)  # the learner in every seat
    with pytest.raises(ValueError, match="data.eval.online_games: expected an int >= 1 here"):
        OnlineEvaluation([game], "bot:random", games_per_batch=0, seed=0)


@pytest.mark.slow
def test_fit_logs_online_evaluation_per_game(tmp_path):
    trainer, batches = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 2, "--data.episodes_per_batch", "4",
                                   "--data.eval.online_games", "4")
    assert all(b.metrics["online_eval/tictactoe_v1/games"] == 4 for b in batches)
    assert all(len(b.rollouts) == 4 for b in batches)
    key = "online_eval/tictactoe_v1/win_rate"
    assert float(trainer.callback_metrics[key]) == pytest.approx(batches[-1].metrics[key])
    with pytest.raises(ValueError, match="data.eval.online_games: expected an int >= 0, got -1"):
        fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 1, "--data.eval.online_games", "-1")
