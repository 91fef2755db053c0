"""How exploitable is the point the Kuhn Poker league recipe's regularisers pull towards?

The recipe's loss adds, at every move, an entropy bonus over the legal moves (``loss.entropy.coef``,
annealed to its ``floor``) and the magnet KL(uniform || policy) (``loss.magnet.coef``).
Their fixed point in self-play is not a Nash equilibrium but a regularised one, and no amount of
training brings the last iterate closer to Nash than it. This computes that point exactly, on
the tabular game: one softmax per information state, ascended together in both seats on the
exact conditional action values (OpenSpiel's ``TreeWalkCalculator``) of
``sum_a pi(a) Q(s, a) + entropy * H(pi(s)) - magnet * KL(uniform || pi(s))``, then prints its
exact exploitability. With both at 0.05 (the shipped recipe) it is 0.031.

    python benchmarks/kuhn_fixed_point.py                       # the shipped 0.05 / 0.05
    python benchmarks/kuhn_fixed_point.py --pairs 0.05,0 0,0.05 0.02,0.02

Weights below ~0.02 need more steps than the default to settle (the unregularised game cycles).
"""

from __future__ import annotations

import argparse

import numpy as np


def fixed_point_exploitability(entropy: float, magnet: float, steps: int = 20000, lr: float = 0.5) -> float:
    import pyspiel
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import action_value, exploitability

    game = pyspiel.load_game("kuhn_poker")
    policy = policy_lib.TabularPolicy(game)
    values = action_value.TreeWalkCalculator(game)
    logits = np.zeros_like(policy.action_probability_array)  # (info states, 2): pass/bet
    for _ in range(steps):
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        policy.action_probability_array[:] = probs
        stats = values([policy, policy], policy)
        q = np.array(stats.sum_cfr_reach_by_action_value) / np.maximum(
            np.array(stats.counterfactual_reach_probs), 1e-12)[:, None]  # conditional Q(s, a)
        value = (probs * q).sum(1, keepdims=True)
        entropy_gradient = -probs * (np.log(probs) - (probs * np.log(probs)).sum(1, keepdims=True))
        magnet_gradient = 1.0 / probs.shape[1] - probs  # of -KL(uniform || softmax) in the logits
        logits += lr * (probs * (q - value) + entropy * entropy_gradient + magnet * magnet_gradient)
    return float(exploitability.exploitability(game, policy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=["0.05,0.05"], help="entropy,magnet weights")
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    for pair in args.pairs:
        entropy, magnet = (float(x) for x in pair.split(","))
        print(f"entropy {entropy:g}, magnet {magnet:g}: exploitability of the fixed point "
              f"{fixed_point_exploitability(entropy, magnet, args.steps):.4f}", flush=True)


if __name__ == "__main__":
    main()
