"""How fast can the tiny policy learn Tic-Tac-Toe tactics when it is handed the answers?

An upper-bound probe for the Tic-Tac-Toe learning bar (0.80 against RandomBot in 20 min of fit on
2 CPU cores). The same tiny model and LoRA as the league config read the prompts the game gives
(positions from real ``tictactoe_v1`` games between RandomBots, through the game's template and
``encode_chat``) and are trained by cross-entropy on perfect labels: a teacher that takes a win,
else blocks, else prefers center, corners, edges (its own win rate against RandomBot is printed
first, on the same games the model is evaluated on at the end: 0.915 [0.902, 0.926]). Every 100 steps it
prints the greedy accuracy on the win / block / opening positions of 400 fresh games (Tic-Tac-Toe
has 4,520 non-terminal positions, so most of them also occur in training: the script prints how
many; this measures what the model has learnt to compute, not generalisation), and at the end the greedy policy is played against RandomBot with the
same function and rules as ``sp-lightning evaluate`` (1000 games per seat, seed 20261121, an
invalid move forfeits), so the number compares with the RL checkpoints' evaluations.

    python benchmarks/ttt_imitation_ceiling.py --steps 650 --threads 2                # hidden 128, 2 layers, LoRA r16
    python benchmarks/ttt_imitation_ceiling.py --steps 650 --threads 2 --hidden 256
    python benchmarks/ttt_imitation_ceiling.py --steps 650 --threads 2 --lora_r 0     # every weight trains

The run stops at ``--steps`` or ``--seconds``, whichever comes first; it prints both, since the
time belongs to this machine (2 cores; say what else ran).

Measured 2026-11-21, ``--steps 650 --threads 2`` alone on this machine: 442 s; fresh-game accuracy
win 0.925, block 0.951, opening 0.989 (every fresh position also occurred in training); greedy
against RandomBot 0.858 [0.841, 0.872] over 2000 games (0.939 as X, 0.776 as O), legal moves 0.997.

How fast each model variant learns from the same labels (2026-11-21): 200 steps
(51,200 labels), ``--threads 1``, two runs side by side on the two cores; fresh-game accuracy at
step 200 (win / block) and greedy win rate against RandomBot over the same 2000 games:

    (shipped prompt and model)                                      0.736 / 0.758   0.719   203 s
    --extra_tokens '[X],[O]' --env_kwargs '{"list_legal_moves": false}'
        (every cell one token, the board at fixed offsets)          0.718 / 0.773   0.702   139 s
    the same, --lr 6e-3                                             0.586 / 0.568   0.418   136 s
    the same, --lora_r 0 (every weight trains)                      0.695 / 0.712   0.658   115 s
    the same, --hidden 256 (8 heads)                                0.783 / 0.804   0.713   300 s
    the same, --layers 4                                            0.805 / 0.841   0.776   263 s

One training seed each, so read these as indications. The second row changes two things at
once (one-token cells and no legal-move list; docs/benchmarks.md, bench_prompt_length.py: the list alone is
x0.78 of the prompt), so its 30% cheaper step is theirs together, and it teaches nothing
faster; a higher rate or every weight training did worse; depth learned more per label at
about twice the cost per label in this seed. Even with
perfect labels, 51k of them reach 0.70-0.78: the RL recipes see ~170k moves in a 600-step run,
each with a far weaker signal than a label.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from envs import RandomBot, make, play
from envs.tictactoe import MOVES, completing_moves, parse_board
from sp_lightning.evaluation.matches import evaluate
from sp_lightning.games import GameSettings
from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
from sp_lightning.rollout import HFRolloutWorker, RolloutWorker, SamplingSettings
from sp_lightning.padding import left_pad
from sp_lightning.rollout.chat import encode_chat
from sp_lightning.types import Completion

PREFERENCE = [4, 0, 2, 6, 8, 1, 3, 5, 7]  # center, corners, edges


def teacher(observation: str) -> tuple[list[int], str]:
    """The cells the teacher accepts (its label is the first) and why: ``win``, ``block`` or
    ``opening`` (the preference order's first free cell)."""
    board, me = parse_board(observation)
    for mark, kind in ((me, "win"), (1 - me, "block")):
        cells = completing_moves(board, mark)
        if cells:
            return cells, kind
    return [next(c for c in PREFERENCE if board[c] is None)], "opening"


def positions(first_seed: int, games: int, env=None) -> list[tuple[str, str]]:
    """(agent, observation text) of every move of ``games`` RandomBot games (of ``env``, default
    a ``tictactoe_v1`` with its default settings)."""
    env, bot, out = env or make("tictactoe_v1"), RandomBot(seed=first_seed), []

    def recorded(agent: str):
        def act(text: str, legal: list[str]) -> str:
            out.append((agent, text))
            return bot.act(text, legal)
        return act

    policies = {agent: recorded(agent) for agent in env.possible_agents}
    for seed in range(first_seed, first_seed + games):
        play(env, policies, seed)
    return out


class TeacherWorker(RolloutWorker):
    """The teacher as the policy ``evaluate`` plays (its ``learner``): each request's answer is
    the teacher's label for the observation in it. No tokens: it only plays, never trains,
    serves no checkpoint and scores nothing."""

    trains = serves_checkpoints = scores_completions = False

    def generate(self, requests, sampling):
        return [Completion(text=MOVES[teacher(r.messages[-1]["content"])[0][0]], policy=r.policy) for r in requests]

    def load_weights(self, update):
        raise NotImplementedError("the teacher plays from its own rules: no weights to load")

    def completion_logprobs(self, requests, completions):
        raise NotImplementedError("the teacher scores nothing")

    def register_adapter(self, name, path):
        raise NotImplementedError("the teacher serves no checkpoint")

    def forget_adapter(self, name):
        pass

    def close(self):
        pass


def final_evaluation(worker: RolloutWorker, env_kwargs: dict | None = None):
    """``worker``'s learner against RandomBot under ``sp-lightning evaluate``'s rules: greedy, 1000
    games per seat on seed 20261121, an invalid move forfeits. The teacher and the trained model
    play the same games."""
    game = GameSettings(id="tictactoe_v1", env_kwargs=dict(env_kwargs or {}))
    return evaluate(worker, game, opponent="bot:random", games_per_seat=1000,
                    sampling=SamplingSettings(max_new_tokens=1, temperature=0.0), seed=20261121,
                    env_overrides={"invalid_move": "forfeit"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lora_r", type=int, default=16, help="0: no LoRA, every weight trains")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=650)
    parser.add_argument("--seconds", type=float, default=1e9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--extra_tokens", default="", help="comma-separated strings made single tokens (e.g. [X],[O])")
    parser.add_argument("--env_kwargs", default="{}",
                        help='the game\'s settings as JSON (e.g. {"list_legal_moves": false})')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    teacher_result = final_evaluation(TeacherWorker())
    print(f"the teacher against RandomBot (seed 20261121): {teacher_result.summary()}; "
          f"per seat {teacher_result.per_seat_win_rate}", flush=True)

    lora = LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, trainable_tokens=["moves"]) if args.lora_r else None
    tiny = TinyModelSettings(hidden_size=args.hidden, layers=args.layers, heads=args.hidden // 32,
                             extra_tokens=[t for t in args.extra_tokens.split(",") if t])
    model, tok = load_policy(PolicySettings(lora=lora, tiny=tiny))
    template = GameSettings(id="tictactoe_v1").prompt_template
    move_ids = [tok.convert_tokens_to_ids(m) for m in MOVES]

    def encode(batch: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and attention mask: the next token is the move."""
        return left_pad([encode_chat(tok, template.messages(text, agent)) for agent, text in batch], tok.pad_token_id)

    env_kwargs = json.loads(args.env_kwargs)
    train = positions(first_seed=0, games=20_000, env=make("tictactoe_v1", **env_kwargs))
    fresh = positions(first_seed=1_000_000, games=400, env=make("tictactoe_v1", **env_kwargs))
    seen = {text for _, text in train}
    test_ids, test_mask = encode(fresh)
    test_labels = [teacher(text) for _, text in fresh]

    def accuracy() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            picks = model(input_ids=test_ids, attention_mask=test_mask).logits[:, -1, :].argmax(-1).tolist()
        model.train()
        right: dict[str, list[bool]] = {}
        for pick, (cells, kind) in zip(picks, test_labels):
            right.setdefault(kind, []).append(pick in move_ids and move_ids.index(pick) in cells)
        return {kind: round(sum(v) / len(v), 3) for kind, v in sorted(right.items())}

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    print(f"trainable parameters {sum(p.numel() for p in params)}; {len(train)} training positions, "
          f"{len(fresh)} of fresh games ({sum(t in seen for _, t in fresh) / len(fresh):.2f} of them also in "
          f"training)", flush=True)
    generator = torch.Generator().manual_seed(0)
    start, step = time.perf_counter(), 0
    while step < args.steps and time.perf_counter() - start < args.seconds:
        step += 1
        batch = [train[i] for i in torch.randint(len(train), (args.batch,), generator=generator).tolist()]
        input_ids, mask = encode(batch)
        labels = torch.tensor([move_ids[teacher(text)[0][0]] for _, text in batch])
        loss = torch.nn.functional.cross_entropy(model(input_ids=input_ids, attention_mask=mask).logits[:, -1, :], labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} {time.perf_counter() - start:.0f}s loss {loss.item():.3f} fresh-game accuracy {accuracy()}", flush=True)
    elapsed = time.perf_counter() - start
    model.eval()
    result = final_evaluation(HFRolloutWorker(model, tok), env_kwargs)
    print(f"final: {step} steps ({step * args.batch} labels) in {elapsed:.0f} s; fresh-game accuracy {accuracy()}")
    print(f"greedy against RandomBot (seed 20261121): {result.summary()}; per seat {result.per_seat_win_rate}")


if __name__ == "__main__":
    main()
