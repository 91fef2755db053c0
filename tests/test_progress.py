"""The progress view of a fit: which numbers it shows, and plain lines where output is a log."""

import io

import pytest
import torch

from sp_lightning.progress import ProgressLines, SelfPlayProgressBar, default_progress_bar, progress_summary


def test_summary_shows_win_rates_throughput_and_league_state():
    metrics = {
        "games/tictactoe_v1/win": torch.tensor(0.5), "games/kuhn_poker_v1/win": torch.tensor(0.7),
        "games/tictactoe_v1/win_rate_extra/x": torch.tensor(9.0),  # deeper keys are not per-game means
        "val/tictactoe_v1/win_rate": torch.tensor(0.8125), "val/tictactoe_v1/win_rate_ci_low": torch.tensor(0.1),
        "val/tictactoe_v1/legal_move_rate": 0.99,
        "rollout/tokens_per_s": torch.tensor(1234.4), "train/tokens_per_s": 20000.0,
        "league/learner/rating": torch.tensor(27.345),
        "league/mix/mirror": 0.3, "league/mix/peer": 0.4, "league/mix/exploitable": 0.2, "league/mix/baseline": 0.1,
        "train/loss": torch.tensor(0.01),  # not shown: says little in self-play
    }
    assert progress_summary(metrics) == {
        "win": "0.60", "val win": "0.812", "legal": "0.990", "rollout tok/s": "1,234", "train tok/s": "20,000",
        "learner": "27.3", "mix": "m0.30 p0.40 e0.20 b0.10",
    }


def test_summary_leaves_out_what_was_not_logged_yet():
    assert progress_summary({}) == {}
    assert progress_summary({"train/tokens_per_s": 5.0}) == {"train tok/s": "5"}


class _FakeTrainer:
    """The few trainer attributes a progress bar reads (a scripted stand-in, not a fit)."""

    def __init__(self, step, metrics, max_steps=100):
        self.global_step, self.callback_metrics, self.max_steps, self.sanity_checking = step, metrics, max_steps, False


def test_progress_lines_print_every_n_steps_and_each_validation():
    """A step's line waits until every callback has logged that step (a league callback runs
    after the bar): it is written when the next batch, a validation or the end comes."""
    stream = io.StringIO()
    lines = ProgressLines(every=10, stream=stream)
    metrics = {"games/g/win": 0.25, "val/g/win_rate": 0.5, "val/g/legal_move_rate": 1.0}
    for step in range(1, 21):
        lines.on_train_batch_start(_FakeTrainer(step, metrics), None, None, step)
        lines.on_train_batch_end(_FakeTrainer(step, metrics), None, None, None, step)
        metrics["league/learner/rating"] = float(step)  # logged by a callback after the bar's hook
    lines.on_validation_start(_FakeTrainer(20, metrics), None)
    lines.on_validation_end(_FakeTrainer(20, metrics), None)
    lines.on_train_end(_FakeTrainer(20, metrics), None)  # nothing due any more
    lines.disable()
    lines.on_train_batch_end(_FakeTrainer(30, metrics), None, None, None, 30)
    lines.on_train_end(_FakeTrainer(30, metrics), None)
    assert stream.getvalue().splitlines() == [
        "step 10/100  win 0.25  learner 10.0", "step 20/100  win 0.25  learner 20.0",
        "step 20 validation  val win 0.500  legal 1.000",
    ]
    with pytest.raises(ValueError, match="every"):
        ProgressLines(every=0)


def test_default_bar_is_rich_in_a_terminal_and_lines_elsewhere(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert type(default_progress_bar()) is ProgressLines

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdout", Terminal())
    bar = default_progress_bar()
    assert type(bar) is SelfPlayProgressBar
    assert bar.get_metrics(_FakeTrainer(1, {"league/learner/rating": 25.0}), None) == {"learner": "25.0"}
