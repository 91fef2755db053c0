"""How fast can the tiny policy learn Tic-Tac-Toe tactics when it is handed the answers?

An upper-bound probe for issue 6's Tic-Tac-Toe bar (0.80 against RandomBot in 20 min of fit on
2 CPU cores): the same tiny model and LoRA, reading the env's own prompt text, trained by
cross-entropy on perfect labels from a teacher that takes a win, else blocks, else prefers center,
corners, edges (0.91 against RandomBot). It prints the greedy accuracy on win / block / opening
positions every 100 steps and, at the end of the time budget, the greedy win rate against a
uniform-random player (1000 games per seat; an illegal pick becomes a random legal move).

    python benchmarks/ttt_imitation_ceiling.py --seconds 600            # hidden 128, 2 layers, LoRA r16
    python benchmarks/ttt_imitation_ceiling.py --seconds 600 --hidden 256
    python benchmarks/ttt_imitation_ceiling.py --seconds 600 --lora_r 0  # every weight trains

Measured 2026-11-21 (1 thread, another job on the second core): after 600 s, 658 steps (168k
labels): win 0.886, block 0.895, against RandomBot 0.787. RL checkpoints of the league config
reach win 0.46 / block 0.40 on the same positions and 0.73-0.76 against RandomBot.
"""
import argparse
import time

import numpy as np
import torch

from envs.tictactoe import LINES, completing_moves
from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_policy
from sp_lightning.rollout.chat import encode_chat

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--lora_r", type=int, default=16, help="0: no LoRA, every weight trains")
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--extra_tokens", default="", help="comma-separated strings made single tokens (e.g. X,O)")
parser.add_argument("--seconds", type=float, default=600)
args = parser.parse_args()
torch.set_num_threads(args.threads)
lora = LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, trainable_tokens=["moves"]) if args.lora_r > 0 else None
settings = PolicySettings(lora=lora, tiny=TinyModelSettings(
    hidden_size=args.hidden, layers=args.layers, heads=args.hidden // 32,
    extra_tokens=[t for t in args.extra_tokens.split(",") if t]))
model, tok = load_policy(settings)
rng = np.random.default_rng(0)
MARK = "XO"
def render(b, me):
    rows = []
    for r in range(3):
        rows.append(" ".join(f"[{i}]" if b[i] is None else MARK[b[i]] for i in range(3*r, 3*r+3)))
    legal = " ".join(f"[{i}]" for i in range(9) if b[i] is None)
    return f"Tic-Tac-Toe. You are {MARK[me]}.\n" + "\n".join(rows) + f"\nLegal moves: {legal}"
def winner(b):
    for l in LINES:
        if b[l[0]] is not None and all(b[i] == b[l[0]] for i in l): return True
    return False
def target(b, me):
    for m in (me, 1-me):
        c = completing_moves(b, m)
        if c: return c, ("win" if m == me else "block")
    for p in [4, 0, 2, 6, 8, 1, 3, 5, 7]:
        if b[p] is None: return [p], "pref"
def sample_positions(n):
    out = []
    while len(out) < n:
        b = [None]*9; t = 0
        while True:
            me = t % 2
            out.append((list(b), me))
            legal = [i for i in range(9) if b[i] is None]
            b[legal[rng.integers(len(legal))]] = me; t += 1
            if winner(b) or t == 9: break
    return out[:n]
move_ids = [tok.convert_tokens_to_ids(f"[{i}]") for i in range(9)]
def batch(pos):
    ids = [encode_chat(tok, [{"role": "user", "content": render(b, me)}]) for b, me in pos]
    L = max(map(len, ids))
    x = torch.full((len(ids), L), tok.pad_token_id); att = torch.zeros_like(x)
    for i, s_ in enumerate(ids): x[i, L-len(s_):] = torch.tensor(s_); att[i, L-len(s_):] = 1
    return x, att
test = sample_positions(2000)
tx, tatt = batch(test); ttargets = [target(b, me) for b, me in test]
def evaluate():
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=tx, attention_mask=tatt).logits[:, -1, :][:, move_ids]
    legal = torch.tensor([[b[i] is None for i in range(9)] for b, _ in test])
    pick = logits.argmax(-1).tolist(); lpick = logits.masked_fill(~legal, -1e9).argmax(-1).tolist()
    acc = {}
    for (c, kind), p, lp, (b, _) in zip(ttargets, pick, lpick, test):
        acc.setdefault(kind, []).append(p in c); acc.setdefault("legal", []).append(b[p] is None)
    model.train()
    return {k: round(float(np.mean(v)), 3) for k, v in acc.items()}
def winrate(games=1000):
    """Greedy (argmax over the whole vocabulary; an illegal pick becomes a random legal move, as
    invalid_move: random) against a uniform-random player, games per seat."""
    g = np.random.default_rng(777)
    wins = 0
    model.eval()
    for seat in (0, 1):
        boards = [[None]*9 for _ in range(games)]; done = [False]*games; t = 0
        while not all(done):
            me = t % 2
            live = [i for i in range(games) if not done[i]]
            if me == seat:
                x, att = batch([(boards[i], me) for i in live])
                with torch.no_grad():
                    ids = model(input_ids=x, attention_mask=att).logits[:, -1, :].argmax(-1).tolist()
            for k, i in enumerate(live):
                b = boards[i]; legal = [c for c in range(9) if b[c] is None]
                c = None
                if me == seat and ids[k] in move_ids and b[move_ids.index(ids[k])] is None:
                    c = move_ids.index(ids[k])
                if c is None: c = legal[g.integers(len(legal))]
                b[c] = me
                if winner(b): done[i] = True; wins += (me == seat)
                elif all(v is not None for v in b): done[i] = True
            t += 1
    model.train()
    return wins / (2 * games)
budget = args.seconds
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params))
opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
t0 = time.time()
for step in range(1, 100000):
    if time.time() - t0 > budget: break
    pos = sample_positions(256)
    x, att = batch(pos)
    y = torch.tensor([move_ids[target(b, me)[0][0]] for b, me in pos])
    logits = model(input_ids=x, attention_mask=att).logits[:, -1, :]
    loss = torch.nn.functional.cross_entropy(logits, y)
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(params, 1.0); opt.step()
    if step % 100 == 0:
        print(step, f"{time.time()-t0:.0f}s", round(loss.item(), 3), evaluate(), flush=True)
print('final', step, f'{time.time()-t0:.0f}s', evaluate(), 'winrate vs random', winrate(), flush=True)
