"""The rollout-share fixes, measured one by one against what they replaced.

benchmarks/bench_rollout_share.py measures the arena's share of raw generate as a whole; on this
noisy 2-core machine its 64-game share moves by +-0.05 from run to run, more than either fix
below. So each fix is measured here on its own, old way against new way in the same run, on
the very work of one ``Arena.play`` of 128 Tic-Tac-Toe games at 64 at once (its prompts and its
envs), and set against that play's time:

1. **batched prompt encoding**: the worker encodes every pending prompt of a generate call in
   one ``apply_chat_template`` call (``rollout.chat.encode_chats``) instead of one call per
   request (``encode_chat``), same ids;
2. **spaces built on first use**: a text env builds its gymnasium ``Text`` spaces when they are
   first read, not in ``__init__`` (the arena never reads them); "before" reads them right
   after construction, as ``__init__`` used to build them.

The merged learner copy (``merge_learner``, benchmarks/bench_rollout_share.py's "unmerged"
column) is the third fix and is measured there. Medians of ``--repeats``.

    python benchmarks/bench_rollout_fixes.py     # ~20 s
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_rollout_share import CallRecordingWorker, games_for, play_games, tiny_policy

from envs import make
from sp_lightning.rollout import HFRolloutWorker
from sp_lightning.rollout.chat import encode_chat, encode_chats

CONCURRENCY = 64
GAMES = games_for(CONCURRENCY)  # bench_rollout_share.py's 64-game row: the same play


class MessageRecordingWorker(CallRecordingWorker):
    """The real worker, which also keeps the messages of each generate call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.messages: list[list[list[dict]]] = []

    def generate(self, requests, sampling):
        self.messages.append([r.messages for r in requests])
        return super().generate(requests, sampling)


def seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tokenizer = tiny_policy()
    model.train()
    recorder = MessageRecordingWorker(model, tokenizer, max_batch_size=256)
    play_games(recorder, GAMES, CONCURRENCY, seed=0)  # the play's prompts, recorded once
    calls = recorder.messages
    worker = HFRolloutWorker(model, tokenizer, max_batch_size=256)  # timed without the recording
    play_seconds = statistics.median(play_games(worker, GAMES, CONCURRENCY, seed=0) for _ in range(args.repeats))
    specials = worker.prompts.specials

    def per_request():
        for call in calls:
            [encode_chat(tokenizer, messages, specials) for messages in call]

    def batched():
        for call in calls:
            encode_chats(tokenizer, call, specials)

    def envs_eager():
        for _ in range(GAMES):
            env = make("tictactoe_v1")
            env.observation_spaces, env.action_spaces  # what __init__ used to build

    def envs_lazy():
        for _ in range(GAMES):
            make("tictactoe_v1")

    requests = sum(len(c) for c in calls)
    print(f"one Arena.play: {GAMES} games, {CONCURRENCY} at once, {len(calls)} generate calls, {requests} "
          f"prompts: {play_seconds * 1e3:.0f} ms (median of {args.repeats}, fixes in)")
    print(f"{'fix':<34}{'before ms':>10}{'after ms':>10}{'speed-up':>10}{'saved, % of play':>18}")
    for name, before, after in (("1 batched prompt encoding", per_request, batched),
                                ("2 spaces built on first use", envs_eager, envs_lazy)):
        b, a = seconds(before, args.repeats), seconds(after, args.repeats)
        saved = (b - a) / (play_seconds + b - a)  # of the play as it was before the fix
        print(f"{name:<34}{b * 1e3:>10.1f}{a * 1e3:>10.1f}{b / a:>9.2f}x{100 * saved:>17.1f}%")


if __name__ == "__main__":
    main()
