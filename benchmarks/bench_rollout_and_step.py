"""Where the speed comes from, measured against a baseline in the same run (tiny model, CPU).

1. Rollout: 64 Tic-Tac-Toe games (learner vs RandomBot) through the arena, whose pending model
   calls are coalesced into one generate call per turn, against the same games played with one
   generate call per request (the baseline).
2. League rollout: 64 Tic-Tac-Toe games of the learner against 20 past checkpoints (peft
   adapters saved to a temporary directory, all held loaded), with every policy's pending rows
   in one generate call (peft's mixed-adapter batches), against one generate call per policy
   per turn (the baseline).
3. Training step: logprobs of the completion tokens with the LM head only on the completion
   window (``logits_to_keep``), against a full-sequence forward that computes logits at every
   position (the baseline), on the same records.

Prints medians of several repeats and the ratios. Run: python benchmarks/bench_rollout_and_step.py
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time

import torch

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.credit import RAE
from sp_lightning.games import FixedMix, GameSettings
from sp_lightning.losses import gather_logprobs
from sp_lightning.collate import collate
from sp_lightning.module import SelfPlayModule
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.model import LoraSettings, PolicySettings

REPEATS = 5


class OneCallPerPolicy(HFRolloutWorker):
    """Baseline: the same backend, but policies never share a generate call."""

    def _calls(self, policies):
        calls = []
        for policy in dict.fromkeys(policies):
            calls.append([i for i, p in enumerate(policies) if p == policy])
        return calls


class OneAtATime(HFRolloutWorker):
    """Baseline: the same backend, but one generate call per request."""

    def generate(self, requests, sampling):
        completions = []
        for request in requests:
            completions.extend(super().generate([request], sampling))
        return completions


def median_time(fn) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    torch.manual_seed(0)
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(r=16, alpha=32, trainable_tokens=["moves"])))
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"}, opponents={"bot:random": 1.0})
    sampling = SamplingSettings(max_new_tokens=1)
    bots = make_bots(0)

    def play(worker):
        arena = Arena(worker, sampling, bots=bots)
        rng = random.Random(0)
        episodes = [game.episode(FixedMix().seats(game, rng)) for _ in range(64)]
        return arena.build_training_batch(arena.play(episodes, list(range(64))), RAE())

    # each worker serves a copy of the policy of its own, made here, outside the timed games
    coalescing, one_at_a_time = (cls(module.model, module.tokenizer) for cls in (HFRolloutWorker, OneAtATime))
    batched = median_time(lambda: play(coalescing))
    single = median_time(lambda: play(one_at_a_time))
    print(f"rollout, 64 games: coalesced {64 / batched:8.1f} games/s | one call per request "
          f"{64 / single:8.1f} games/s | speed-up x{single / batched:.1f}")

    with tempfile.TemporaryDirectory() as tmp:
        mix = {}
        for index in range(20):
            with torch.no_grad():
                for p in module.model.parameters():
                    if p.requires_grad:
                        p.add_(torch.randn_like(p) * 0.05)
            module.model.save_pretrained(os.path.join(tmp, f"c{index}"), selected_adapters=["default"])
            mix[f"checkpoint:c{index}"] = 1.0
        league_game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"}, opponents=mix)

        def play_league(worker):
            for index in range(20):
                worker.register_adapter(f"c{index}", os.path.join(tmp, f"c{index}"))
            arena = Arena(worker, sampling, bots=bots)
            rng = random.Random(0)
            episodes = [league_game.episode(FixedMix().seats(league_game, rng)) for _ in range(64)]
            return arena.build_training_batch(arena.play(episodes, list(range(64))), RAE())

        def timed(worker_cls):  # each worker loads the checkpoints into its own copy of the policy
            worker = worker_cls(module.model, module.tokenizer, max_adapters=32)
            return median_time(lambda: play_league(worker))

        mixed = timed(HFRolloutWorker)
        per_policy = timed(OneCallPerPolicy)
    print(f"league rollout, 64 games vs 20 checkpoints: one mixed call {64 / mixed:8.1f} games/s | "
          f"one call per policy {64 / per_policy:8.1f} games/s | speed-up x{per_policy / mixed:.1f}")

    records = play(coalescing).records
    batch = collate(records, module.tokenizer.pad_token_id)
    tokens = int(batch.attention_mask.sum())

    def window_step():
        logprobs = module.policy_forward(batch)[0]
        logprobs.sum().backward()

    def full_step():
        logits = module.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                              position_ids=batch.position_ids).logits[:, :-1]
        logprobs = gather_logprobs(logits, batch.input_ids[:, 1:])
        (logprobs[:, -batch.targets.shape[1]:] * batch.loss_mask).sum().backward()

    window = median_time(window_step)
    full = median_time(full_step)
    print(f"train fwd+bwd, {len(records)} records / {tokens} tokens: completion window "
          f"{tokens / window:9.0f} tok/s | full-sequence logits {tokens / full:9.0f} tok/s | "
          f"speed-up x{full / window:.1f}")


if __name__ == "__main__":
    main()
