"""The league's messages (sp_lightning.league.messages): what ranks and the evaluator process
exchange survives the trip, field for field."""

from __future__ import annotations

import pickle
import socket

import pytest
import torch

from sp_lightning import distributed
from sp_lightning.league.messages import (
    BestResponse, EvaluatorResult, EvaluatorSpec, GatekeeperResult, Promotion, RankReport, Reset, StartNews,
    StepNews, league_view,
)
from sp_lightning.league.registry import AgentRecord, LeagueRegistry


@pytest.fixture
def one_rank_group():
    """A real process group of one rank (gloo): the collectives pickle their objects as they
    do between ranks, where without a group they only hand them back."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def _league(tmp_path):
    registry = LeagueRegistry(tmp_path / "league.json")
    registry.add_agent(AgentRecord("random_bot", "baseline", "bot:random"))
    registry.add_agent(AgentRecord("learner", "learner", "learner", step=0))
    registry.add_agent(AgentRecord("ckpt-000002", "checkpoint", "checkpoint:ckpt-000002",
                                   adapter_path=str(tmp_path / "adapters" / "ckpt-000002"), step=2, tags=["recent"]))
    registry.record_matches([(["learner", "random_bot"], [1.0, -1.0])], step=2)
    return registry.read()


def test_the_messages_cross_the_collectives_whole(tmp_path, one_rank_group):
    assert distributed.world_size() == 1 and torch.distributed.is_initialized()
    state = _league(tmp_path)
    report = RankReport(matches=[(["learner", "random_bot"], [1.0, -1.0])], buckets=["baseline"],
                        results=[("baseline", 1.0)], exploiter_results=[("hunter", -1.0, -2.0)])
    response = BestResponse("br-000002", "kuhn_poker_v1", 2, {"0": ["[fold]"], "2b": ["[call]"]})
    news = StepNews(league=league_view(state), promoted=[Promotion("ckpt-000004", "", "/lead/adapters/ckpt-000004")],
                    pruned=["ckpt-000002"], metrics={"league/mix/baseline": 1.0}, resets=[Reset("hunter", 7)],
                    best_responses=[response])
    start = StartNews(league=league_view(state), adapters={"ckpt-000002": {"adapter_config.json": b"{}"}},
                      best_responses=[response])

    (gathered,) = distributed.gather(report)
    assert gathered == report and gathered is not report  # pickled, not handed back
    for message in (news, start):  # the source rank keeps its own object; the others unpickle it
        assert distributed.broadcast(message) == message
        assert pickle.loads(pickle.dumps(message)) == message


def test_the_league_view_leaves_the_history_on_the_lead(tmp_path):
    state = _league(tmp_path)
    view = league_view(state)
    assert state.matches and view.matches == []
    assert view.agents == state.agents and view.metadata == state.metadata
    view.metadata["best_agent"] = "someone else"  # the view's own metadata
    assert state.metadata["best_agent"] != "someone else"


def test_rank_reports_merge_in_rank_order():
    zero = RankReport(matches=[(["learner", "a"], [1.0, 0.0])], buckets=["peer"], results=[("checkpoint", 1.0)])
    one = RankReport(matches=[(["learner", "b"], [0.0, 1.0])], buckets=["baseline"], results=[("baseline", -1.0)],
                     exploiter_results=[("hunter", 1.0, 2.0)])
    merged = RankReport.merged([zero, one])
    assert merged.matches == zero.matches + one.matches and merged.buckets == ["peer", "baseline"]
    assert merged.results == [("checkpoint", 1.0), ("baseline", -1.0)] and merged.exploiter_results == [("hunter", 1.0, 2.0)]


def test_the_evaluator_spec_and_result_round_trip_through_their_files(tmp_path):
    spec = EvaluatorSpec(policy={"model": "tiny", "lora": {"r": 4}}, games=[{"id": "kuhn_poker_v1"}, {"id": "tictactoe_v1"}],
                         sampling={"temperature": 1.0}, registry="league.json", agent="ckpt-000004",
                         gatekeepers=["random_bot", "ckpt-000002"], games_per_seat=3, games_per_match=1, seed=99_004,
                         step=4, threads=1, env_overrides={"invalid_move": "random"})
    spec.write(str(tmp_path / "spec.json"))
    assert EvaluatorSpec.read(str(tmp_path / "spec.json")) == spec
    result = EvaluatorResult("ckpt-000004", 4, seconds=1.5, results={
        "kuhn_poker_v1": {"random_bot": GatekeeperResult(0.75, 0.5, 1.0, 8)},
        "tictactoe_v1": {"random_bot": GatekeeperResult(0.5, 0.0, 0.9, 8), "ckpt-000002": GatekeeperResult(0.25, -0.5, 1.0, 8)}})
    result.write(str(tmp_path / "result.json"))
    assert EvaluatorResult.read(str(tmp_path / "result.json")) == result
    assert BestResponse.from_table("br-000002", {"game": "kuhn_poker_v1", "step": 2, "exploitability": 0.1,
                                                 "moves": {"0": ["[fold]"]}}) == BestResponse(
        "br-000002", "kuhn_poker_v1", 2, {"0": ["[fold]"]})
