"""Rollout faults: a backend that fails transiently is retried with backoff; one that keeps
failing stops the run with a message, and no episode in flight loses or repeats a move."""

import pytest
import torch

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.games import GameSettings
from sp_lightning.rollout import HFRolloutWorker, RetrySettings, RolloutFailed, SamplingSettings, TransientRolloutError
from sp_lightning.rollout.base import generate_with_retries
from sp_lightning.types import LEARNER, PolicyRef


class FaultInjectingWorker(HFRolloutWorker):
    """Test double: the real HF backend, with the given exceptions raised by its first calls
    (before any generation, as a dropped connection would), then real generation."""

    def __init__(self, model, tokenizer, faults):
        super().__init__(model, tokenizer)
        self.faults = list(faults)
        self.calls = 0

    def generate(self, requests, sampling):
        self.calls += 1
        if self.faults:
            raise self.faults.pop(0)
        return super().generate(requests, sampling)


def _play(worker, retry, games=6, seed=0):
    torch.manual_seed(seed)
    game = GameSettings(id="tictactoe_v1")
    arena = Arena(worker, SamplingSettings(max_new_tokens=1), bots=make_bots(0), retry=retry)
    episodes = [game.episode({"player_0": LEARNER, "player_1": PolicyRef("bot", "random")}) for _ in range(games)]
    return arena, arena.play(episodes, seeds=list(range(games)))


def _moves(rollouts):
    return [[(s.role, s.completion.text) for s in r.steps] for r in rollouts]


def test_transient_faults_are_retried_and_every_move_is_played_once(tiny_policy):
    model, tokenizer = tiny_policy
    clean_arena, clean = _play(HFRolloutWorker(model, tokenizer), RetrySettings(backoff_s=0))
    faults = [ConnectionError("connection reset"), TimeoutError("no answer in 30 s"), TransientRolloutError("engine restarting")]
    worker = FaultInjectingWorker(model, tokenizer, faults)
    arena, rollouts = _play(worker, RetrySettings(attempts=4, backoff_s=0))
    assert _moves(rollouts) == _moves(clean), "the same games, move for move, as without faults"
    assert arena.last_play.retries == 3
    assert worker.calls == clean_arena.last_play.generate_calls + 3


def test_a_backend_that_keeps_failing_stops_the_batch_with_a_message(tiny_policy):
    model, tokenizer = tiny_policy
    worker = FaultInjectingWorker(model, tokenizer, [ConnectionError("refused")] * 5)
    with pytest.raises(RolloutFailed, match=r"FaultInjectingWorker failed 3 time\(s\).*ConnectionError: refused.*not counted.*--ckpt_path"):
        _play(worker, RetrySettings(attempts=3, backoff_s=0))
    assert worker.calls == 3


def test_other_errors_are_not_retried(tiny_policy):
    model, tokenizer = tiny_policy
    worker = FaultInjectingWorker(model, tokenizer, [ValueError("prompt too long")])
    with pytest.raises(ValueError, match="prompt too long"):
        _play(worker, RetrySettings(attempts=4, backoff_s=0))
    assert worker.calls == 1


def test_backoff_doubles_up_to_its_cap():
    class AlwaysDown(HFRolloutWorker):
        def __init__(self):
            pass

        def generate(self, requests, sampling):
            raise ConnectionError("down")

    waits = []
    retry = RetrySettings(attempts=6, backoff_s=1.0, max_backoff_s=5.0)
    with pytest.raises(RolloutFailed):
        generate_with_retries(AlwaysDown(), [], SamplingSettings(), retry, sleep=waits.append)
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_a_backend_that_drops_a_completion_is_an_error():
    class Short(HFRolloutWorker):
        def __init__(self):
            pass

        def generate(self, requests, sampling):
            return []

    with pytest.raises(RuntimeError, match="0 completions for 2 requests"):
        generate_with_retries(Short(), [object(), object()], SamplingSettings(), RetrySettings())


@pytest.mark.parametrize("bad", [{"attempts": 0}, {"backoff_s": -1.0}])
def test_retry_settings_are_checked(bad):
    with pytest.raises(ValueError, match="retry."):
        RetrySettings(**bad)
