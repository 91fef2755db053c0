"""How close do the arena's rollouts come to raw batched ``model.generate``? (suite row 2)

Tic-Tac-Toe games of the learner against RandomBot, one-token moves (the shipped configs), on
the Hugging Face backend and the tiny model of ``configs/tictactoe_league_tiny.yaml``, at 1, 8,
64 and 256 concurrent games. For each concurrency:

- **arena**: ``Arena.play`` of the games, everything included (envs, prompts, encoding,
  generate, logprobs, completions, scoring);
- **raw generate** (the limit): the very prompts the arena sent, in the very batches it sent
  them (recorded by the worker during the arena's run), already tokenized and padded, through
  ``model.generate`` alone with the same sampling settings. Twice: on the peft model as it
  trains (unmerged LoRA layers: the first baseline), and on the worker's merged copy (the
  model the default arena generates with);
- **raw sampler**: the same batches through the worker's own sampler alone
  (``sp_lightning.rollout.sampler.sample``, which the arena calls in place of ``generate``: the
  same tokens from the same random state, without ``generate``'s set-up per call) on the merged
  copy.

Shares are raw seconds / arena seconds (1.0: the arena adds nothing to generation), each the
median of the per-repeat ratios (arena and raw interleaved in each repeat, so a noisy
neighbour hits both). Against raw unmerged generate the share includes the merge's gain (it
can pass 1); against raw merged generate it is what a game costs beside ``generate`` of the model
it plays (the issue's yardstick: it can pass 1 too, now that the arena samples without
``generate``); against the raw sampler it is the arena's own overhead alone (envs, prompts,
encoding, completions, scoring). Turns/s counts model calls (one per learner move), tokens/s the
generated tokens (one per turn here).

As in training, the learner's weights change before every play (an optimizer step's worth of
noise, in place, then sent to the worker through ``load_weights``, outside the arena's time as in
a fit): the worker must bring its merged copy up to date inside the arena's time,
while raw merged generate replays on the copy as it was then (``--fixed_weights``: no change,
the copy built once).

The arena runs twice: with the worker's defaults (``merge_learner: null``, which merges for a
model this small: learner-only calls served by a copy with the LoRA adapter merged into the
weights), and with ``merge_learner: false`` (every call through the unmerged peft layers, the
default before the merge existed). Raw replays the default run's batches; the unmerged run
plays the same games on the same seeds (its moves can differ where the two paths' logprobs,
equal within 1e-4, tip a draw).

    python benchmarks/bench_rollout_share.py                # 2 threads, 3 repeats
    python benchmarks/bench_rollout_share.py --concurrency 64 --repeats 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.games import FixedMix, GameSettings
from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.padding import left_pad
from sp_lightning.rollout.sampler import sample
from sp_lightning.weight_sync import update_of


class CallRecordingWorker(HFRolloutWorker):
    """The real worker, which also keeps the prompt ids of every generate call it makes (the
    rows of one ``_generate_ids`` call), so that raw generate can replay the same batches."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[list[list[int]]] = []

    def _generate_ids(self, prompts, policies, sampling):
        self.calls.append([list(p) for p in prompts])
        return super()._generate_ids(prompts, policies, sampling)


def tiny_policy():
    """The model and tokenizer of the shipped Tic-Tac-Toe league config (hidden 128, 4 heads, 2
    layers, LoRA r16 with trainable move-token rows), untrained."""
    return load_policy(PolicySettings(tiny=TinyModelSettings(hidden_size=128, heads=4),
                                      lora=LoraSettings(r=16, alpha=32, trainable_tokens=["moves"])))


def games_for(concurrency: int, fixed_weights: bool) -> int:
    """A training batch (every game at once, one weight change per batch), or with fixed weights
    enough games that every lane plays a few (the lanes refill as games end)."""
    return max(32, 2 * concurrency) if fixed_weights else concurrency


SAMPLING = SamplingSettings(max_new_tokens=1, temperature=1.0)
GAME = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"}, opponents={"bot:random": 1.0})


def take_a_step(model, seed: int) -> None:
    """Change every trainable weight in place, as an optimizer step does (small noise)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * 1e-3)


def play_games(worker, games: int, concurrency: int, seed: int) -> float:
    """Seconds of ``Arena.play`` of ``games`` games (learner against RandomBot, seats and bots
    drawn from ``seed``), ``concurrency`` at once."""
    arena = Arena(worker, SAMPLING, bots=make_bots(seed))
    rng = random.Random(seed)
    episodes = [GAME.episode(FixedMix().seats(GAME, rng)) for _ in range(games)]
    start = time.perf_counter()
    arena.play(episodes, list(range(games)), max_concurrent=concurrency)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fixed_weights", action="store_true",
                        help="no weight change between plays (the merged copy is built once per worker)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tokenizer = tiny_policy()
    model.train()  # as in fit: the worker switches to eval mode for its calls
    print(f"torch threads {args.threads}; medians of {args.repeats} repeats (arena and raw interleaved)")
    print(f"{'games at once':>13} {'games':>6} {'calls':>6} | {'raw unmerged':>12} {'raw merged':>10} "
          f"{'raw sampler':>11} | {'default':>7} {'share':>5} {'vs merged':>9} {'vs sampler':>10} | "
          f"{'unmerged':>8} {'share':>5}   (turns/s)")
    med = statistics.median
    for concurrency in args.concurrency:
        games = games_for(concurrency, args.fixed_weights)
        rows = []  # per repeat: turns, then seconds of default, unmerged, raw unmerged, raw merged
        worker = CallRecordingWorker(model, tokenizer, max_batch_size=256)
        play_games(worker, 8, 8, 999)  # the merged copy exists: each repeat then refreshes it
        for repeat in range(args.repeats):
            if not args.fixed_weights:
                take_a_step(model, repeat)
            unmerged = play_games(CallRecordingWorker(model, tokenizer, max_batch_size=256, merge_learner=False),
                                  games, concurrency, repeat)
            worker.calls = []
            if not args.fixed_weights:
                take_a_step(model, 1000 + repeat)
                worker.load_weights(update_of(model, repeat + 1))  # the weight path, after a step
            default = play_games(worker, games, concurrency, repeat)
            raw = raw_generate_seconds(model, tokenizer, worker.calls)
            raw_merged = raw_generate_seconds(worker._merged_learner(), tokenizer, worker.calls)
            raw_sampler = raw_sampler_seconds(worker._merged_learner(), tokenizer, worker.calls)
            turns = sum(len(c) for c in worker.calls)  # one token per turn: turns/s == tokens/s
            rows.append((turns, default, unmerged, raw, raw_merged, len(worker.calls), raw_sampler))

        def rate(k: int) -> float:
            return med(r[0] / r[k] for r in rows)

        def share(raw_k: int, arena_k: int) -> float:
            return med(r[raw_k] / r[arena_k] for r in rows)

        print(f"{concurrency:>13} {games:>6} {rows[-1][5]:>6} | {rate(3):>12.0f} {rate(4):>10.0f} {rate(6):>11.0f} | "
              f"{rate(1):>7.0f} {share(3, 1):>5.2f} {share(4, 1):>9.2f} {share(6, 1):>10.2f} | "
              f"{rate(2):>8.0f} {share(3, 2):>5.2f}")


def raw_generate_seconds(model, tokenizer, calls: list[list[list[int]]],
                         sampling: SamplingSettings = SAMPLING) -> float:
    """Seconds of ``model.generate`` alone over ``calls`` (tensors built before the clock starts)."""
    tensors = [left_pad(prompts, tokenizer.pad_token_id) for prompts in calls]
    was_training = model.training
    model.eval()
    try:
        start = time.perf_counter()
        with torch.no_grad():
            for input_ids, attention_mask in tensors:
                model.generate(input_ids=input_ids, attention_mask=attention_mask,
                               max_new_tokens=sampling.max_new_tokens, do_sample=True,
                               temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                               pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        return time.perf_counter() - start
    finally:
        model.train(was_training)


def raw_sampler_seconds(model, tokenizer, calls: list[list[list[int]]], sampling: SamplingSettings = SAMPLING) -> float:
    """Seconds of the worker's sampler alone over ``calls`` (tensors built before the clock starts)."""
    tensors = [left_pad(prompts, tokenizer.pad_token_id) for prompts in calls]
    was_training = model.training
    model.eval()
    try:
        start = time.perf_counter()
        for input_ids, attention_mask in tensors:
            sample(model, input_ids, attention_mask, sampling, tokenizer.eos_token_id, tokenizer.pad_token_id)
        return time.perf_counter() - start
    finally:
        model.train(was_training)


if __name__ == "__main__":
    main()
