"""How close do the arena's rollouts come to raw batched ``model.generate``? (issue 9, benchmark 2)

Tic-Tac-Toe games of the learner against RandomBot, one-token moves (the shipped configs), on
the Hugging Face backend and the tiny model of ``configs/tictactoe_league_tiny.yaml``, at 1, 8,
64 and 256 concurrent games. For each concurrency:

- **arena**: ``Arena.play`` of the games, everything included (envs, prompts, encoding,
  generate, logprobs, completions, scoring);
- **raw generate** (the limit): the very prompts the arena sent, in the very batches it sent
  them (recorded by the worker during the arena's run), already tokenized and padded, through
  ``model.generate`` alone with the same sampling settings.

Our share is raw seconds / arena seconds (1.0: the arena adds nothing to generation). Turns/s
counts model calls (one per learner move), tokens/s the generated tokens (one per turn here).
Medians of ``--repeats`` runs, arena and raw interleaved, so the ratio holds on a noisy machine.

The arena runs twice: with the worker's defaults (``merge_learner: null``, which merges for a
model this small: learner-only calls served by a copy with the LoRA adapter merged into the
weights), and with ``merge_learner: false`` (every call through the unmerged peft layers, the
default before the merge existed). Raw generate runs the peft model as it is trained
(unmerged), so a share above 1 is the merge's gain. Raw replays the default run's batches; the
unmerged run plays the same games on the same seeds (its moves can differ where the two paths'
logprobs, equal within 1e-4, tip a draw).

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
from sp_lightning.rollout.hf import left_pad


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


def games_for(concurrency: int) -> int:
    """Enough games that every lane plays a few (the lanes refill as games end)."""
    return max(32, 2 * concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tokenizer = tiny_policy()
    model.train()  # as in fit: the worker switches to eval mode for its calls
    sampling = SamplingSettings(max_new_tokens=1, temperature=1.0)
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"}, opponents={"bot:random": 1.0})
    print(f"torch threads {args.threads}; medians of {args.repeats} repeats (arena and raw interleaved)")
    print(f"{'games at once':>13} {'games':>6} {'calls':>6} | {'raw turns/s':>11} | {'default: turns/s':>16} "
          f"{'share':>5} | {'unmerged: turns/s':>17} {'share':>5}")
    for concurrency in args.concurrency:
        games = games_for(concurrency)
        times: dict[str, list[float]] = {"unmerged": [], "default": [], "raw": []}
        for repeat in range(args.repeats):
            for kind in ("unmerged", "default"):
                merge = None if kind == "default" else False
                worker = CallRecordingWorker(model, tokenizer, max_batch_size=256, merge_learner=merge)
                arena = Arena(worker, sampling, bots=make_bots(repeat))
                rng = random.Random(repeat)
                episodes = [game.episode(FixedMix().seats(game, rng)) for _ in range(games)]
                start = time.perf_counter()
                arena.play(episodes, list(range(games)), max_concurrent=concurrency)
                times[kind].append(time.perf_counter() - start)
            times["raw"].append(raw_generate_seconds(model, tokenizer, worker.calls, sampling))
        turns = sum(len(c) for c in worker.calls)  # the default run's; one token per turn: turns/s == tokens/s
        raw, default, unmerged = (statistics.median(times[k]) for k in ("raw", "default", "unmerged"))
        print(f"{concurrency:>13} {games:>6} {len(worker.calls):>6} | {turns / raw:>11.0f} | {turns / default:>16.0f} "
              f"{raw / default:>5.2f} | {turns / unmerged:>17.0f} {raw / unmerged:>5.2f}")


def raw_generate_seconds(model, tokenizer, calls: list[list[list[int]]], sampling: SamplingSettings) -> float:
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


if __name__ == "__main__":
    main()
