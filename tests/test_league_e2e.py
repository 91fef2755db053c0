"""League training end to end on the tiny model: the schedule, the background evaluator, the
registry, and a run killed with SIGKILL that resumes with the same league and matchmaker state."""

import json
import os
import time

import pytest
import torch

from sp_lightning.cli import main
from sp_lightning.league.registry import LeagueRegistry
from tests.helpers import ForkedFit

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "configs")
EPISODES = 8


def _overlay(root):
    path = root / "overlay.yaml"
    path.write_text(
        f"trainer:\n  val_check_interval: 100\n  default_root_dir: {root}\n  logger:\n"
        f"    class_path: lightning.pytorch.loggers.TensorBoardLogger\n    init_args: {{save_dir: {root}, name: tb}}\n"
        f"  callbacks:\n"
        f"    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args: {{dirpath: {root / 'ckpt'}, filename: last, every_n_train_steps: 2, enable_version_counter: false}}\n"
        f"model:\n  policy:\n    tiny: {{hidden_size: 64, heads: 2}}\n"
        f"data:\n  episodes_per_batch: {EPISODES}\n  eval: {{games: 4}}\n"
        f"  league:\n    dir: {root / 'league'}\n    schedule: {{recent_every: 2, recent_window: 4, anchor_every: 6}}\n"
        f"    evaluator: {{every: 4, games_per_seat: 4}}\n"
        f"    baselines: [base_model, random_bot, chaos_bot]\n"
    )
    return ["--config", os.path.join(CONFIGS, "tictactoe_league_tiny.yaml"), "--config", str(path)]


def _step(ckpt):
    try:
        return torch.load(ckpt, weights_only=False)["global_step"]
    except Exception:  # not there yet, or being written
        return -1


@pytest.mark.slow
def test_league_run_killed_with_sigkill_resumes_with_the_same_league(tmp_path):
    args = _overlay(tmp_path)
    last = tmp_path / "ckpt" / "last.ckpt"
    proc = ForkedFit([*args, "--trainer.max_steps", "40"], tmp_path)  # a process of its own
    deadline = time.time() + 300
    while _step(last) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.kill()
    ckpt = torch.load(last, weights_only=False)
    killed_at = ckpt["global_step"]
    assert 6 <= killed_at < 40
    callback_state = next(v for k, v in ckpt["callbacks"].items() if k.startswith("LeagueCallback"))
    league_state = callback_state["registry"]
    # a tournament starts every 4 steps and its process takes seconds to start: one was being
    # played when the checkpoint (every 2 steps) was written, its games not in that league
    evaluating = callback_state["evaluator"]
    assert evaluating and evaluating["spec"].endswith(".json")
    evaluated_at = int(evaluating["spec"].removesuffix(".json").rsplit("-step", 1)[1])
    matchmaker = ckpt["SelfPlayDataModule"]["opponents"]["matchmaker"]["bucket_counts"]
    assert sum(matchmaker.values()) == EPISODES * killed_at

    end = killed_at + 4
    main(["fit", *args, "--trainer.max_steps", str(end), "--ckpt_path", str(last)])
    resumed = torch.load(last, weights_only=False)
    assert resumed["global_step"] == end and resumed["SelfPlayDataModule"]["batches_played"] == end
    counts = resumed["SelfPlayDataModule"]["opponents"]["matchmaker"]["bucket_counts"]
    assert sum(counts.values()) == EPISODES * end, "the matchmaker's statistics continued, not restarted"

    final = LeagueRegistry(tmp_path / "league" / "league.json").read()
    replayed = [m for m in final.matches if m.source == "eval" and m.step == evaluated_at]
    before = [m for m in final.matches if m.step is not None and m.step <= killed_at and m not in replayed]
    assert [m.to_dict() for m in before] == [m for m in league_state["matches"]], "the league as checkpointed"
    assert replayed, "the tournament being played at the checkpoint was played again by the resumed run"
    # exactly the checkpoints the schedule names: recent (every 2, last 4 steps), anchors (every 6), elites
    expected = {s for s in range(2, end + 1, 2) if end - s < 4} | {s for s in range(6, end + 1, 6)}
    elites = {a.step for a in final.agents.values() if "elite" in a.tags}
    steps = {a.step for a in final.agents.values() if a.type == "checkpoint"}
    assert steps == expected | elites
    for agent in final.agents.values():
        if agent.type == "checkpoint":
            assert os.path.isfile(os.path.join(agent.adapter_path, "adapter_config.json"))
    assert any(m.source == "eval" for m in final.matches), "the background evaluator recorded its games"
    assert {"base_model", "random_bot", "chaos_bot", "learner"} <= set(final.agents)
    json.loads((tmp_path / "league" / "league.json").read_text())  # valid JSON on disk

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for version in (tmp_path / "tb").iterdir():
        accumulator = EventAccumulator(str(version), size_guidance={"scalars": 0})
        accumulator.Reload()
        tags |= {t for t in accumulator.Tags()["scalars"] if t.startswith("league/eval/win_rate_vs_")}
    assert tags and tags <= {f"league/eval/win_rate_vs_{g}" for g in ("random_bot", "best", "recent")}, tags


def test_baselines_are_the_default_ids_or_any_registered_bot():
    import pytest

    from sp_lightning.league import LeagueSettings
    from sp_lightning.league.settings import baseline_policy

    assert baseline_policy("random_bot") == "bot:random"
    assert baseline_policy("base_model") == "base"
    assert baseline_policy("tictactoe_tactical_bot") == "bot:tictactoe_tactical"
    with pytest.raises(ValueError, match="data.league.baselines: expected ids among .*tictactoe_tactical_bot.*got 'rnadom_bot'"):
        LeagueSettings(dir="unused", baselines=["random_bot", "rnadom_bot"])
