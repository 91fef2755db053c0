"""Flags that pin a shipped config to the recipe an older documented figure was measured with.

``configs/kuhn_poker_league_tiny.yaml`` changed on 2026-11-27 (GAE credit, no training games
against the baselines). The figures measured on its earlier recipe (the two-rank comparison, the
best-response league, the exploiter check) stay reproducible with these flags after the config:
outcome credit (RAE) and the baselines' share of the training games back.
"""

import json

KUHN_LEAGUE_RAE = [
    "--data.credit", json.dumps({"class_path": "sp_lightning.credit.RAE", "init_args": {"decay": 0.95}}),
    "--data.league.matchmaking.bucket_weights",
    json.dumps({"mirror": 0.3, "peer": 0.4, "exploitable": 0.2, "baseline": 0.1, "best_response": 0.2}),
]
