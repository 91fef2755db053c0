"""A checkpoint directory in a game's opponent mix (``opponents: {"checkpoint:<adapter dir>": 1}``)
is a fixed policy to train against: registered with the rollout worker when the engine is built
and served by the directory's name (what an exploiter trains against)."""

import json
import os
import random

from sp_lightning import build_from_config
from sp_lightning.types import PolicyKind, PolicyRef

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KUHN = os.path.join(ROOT, "configs", "kuhn_poker_tiny.yaml")


def test_a_checkpoint_directory_opponent_is_served_and_played(tmp_path):
    module, _ = build_from_config("--config", KUHN)
    module.save_adapter(tmp_path / "target")
    games = [{"id": "kuhn_poker_v1", "env_kwargs": {"invalid_move": "random"},
              "opponents": {f"checkpoint:{tmp_path / 'target'}": 1.0}}]
    module, dm = build_from_config("--config", KUHN, "--data.games", json.dumps(games), "--data.episodes_per_batch", "8")
    engine = dm.build_engine(module)
    target = PolicyRef(PolicyKind.CHECKPOINT, "target")
    assert engine.games[0].mix_opponent(random.Random(0)) == target
    assert engine.worker.adapter_paths["target"] == str(tmp_path / "target")
    engine.start()
    try:
        batch = engine.next_batch()
    finally:
        engine.close()
    assert all(target in rollout.seats.values() for rollout in batch.rollouts)
    assert batch.records and all(r.learner == "" for r in batch.records)
