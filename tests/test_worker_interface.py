"""The rollout-worker interface is written down (``RolloutWorker``) and every backend implements
all of it: each states every capability itself, and what it cannot do it refuses with an error
naming the config key."""

import pytest

from sp_lightning.data import SelfPlayDataModule
from sp_lightning.engine import EvalSettings, check_capabilities
from sp_lightning.games import GameSettings
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.model import PolicySettings, load_policy
from sp_lightning.rollout import HFRolloutWorker, VLLMRolloutWorker
from sp_lightning.rollout.base import RolloutWorker
from sp_lightning.rollout.remote import RemoteRolloutWorker
from sp_lightning.rollout.server import ServerRolloutWorker
from sp_lightning.types import LEARNER, ModelRequest

CAPABILITIES = ("trains", "supports_async", "serves_checkpoints", "scores_completions", "max_adapters")


@pytest.fixture(scope="module")
def backends(tiny_policy, tmp_path_factory):
    model, tokenizer = tiny_policy
    root = tmp_path_factory.mktemp("adapters")
    return {
        "hf": HFRolloutWorker(model, tokenizer),
        "vllm": VLLMRolloutWorker(model, tokenizer, adapter_dir=str(root)),  # the engine never starts here
        "server": ServerRolloutWorker(model, tokenizer, base_urls=["http://127.0.0.1:9/v1"], served_model="m",
                                      adapter_dir=str(root)),
        "remote": RemoteRolloutWorker(base_url="http://127.0.0.1:9/v1", served_model="m"),
    }


def test_every_backend_states_every_capability_itself(backends):
    for name, worker in backends.items():
        assert isinstance(worker, RolloutWorker)
        for capability in CAPABILITIES:
            stated = capability in vars(type(worker)) or capability in vars(worker)
            assert stated, f"{name}: {capability} is RolloutWorker's default, not stated by the backend"
        assert isinstance(worker.trains, bool) and isinstance(worker.supports_async, bool)
    assert RolloutWorker.__abstractmethods__ == {"generate", "load_weights", "completion_logprobs",
                                                  "register_adapter", "forget_adapter", "close"}


def test_what_a_backend_cannot_do_is_refused_naming_the_key(backends, tiny_policy):
    request = ModelRequest("player_0", [{"role": "user", "content": "hi"}], LEARNER)
    remote, server = backends["remote"], backends["server"]
    assert not remote.serves_checkpoints and not remote.scores_completions and not remote.trains
    with pytest.raises(ValueError, match=r"^data.rollout: RemoteRolloutWorker cannot send adapter directory"):
        remote.register_adapter("c", "/some/dir")
    with pytest.raises(ValueError, match=r"^data.rollout: RemoteRolloutWorker cannot score"):
        remote.completion_logprobs([request], [["[4]"]])
    remote.forget_adapter("c")  # nothing to release: not an error
    with pytest.raises(ValueError, match=r"^data.rollout: RemoteRolloutWorker cannot take a trainer's weights"):
        remote.load_weights(None)
    assert not server.scores_completions
    with pytest.raises(ValueError, match=r"^data.eval.exploitability / data.league.exploitability_every: "
                                         r"ServerRolloutWorker cannot score"):
        server.completion_logprobs([request], [["[4]"]])
    plain_model, tokenizer = load_policy(PolicySettings(lora=None))
    plain = HFRolloutWorker(plain_model, tokenizer)
    assert not plain.serves_checkpoints and backends["hf"].serves_checkpoints
    with pytest.raises(ValueError, match=r"^model.policy.lora: HFRolloutWorker cannot serve checkpoint 'c'"):
        plain.register_adapter("c", "/some/dir")


def test_the_engine_refuses_a_run_that_asks_a_backend_for_what_it_cannot_do(backends):
    game = GameSettings(id="kuhn_poker_v1")
    settings = SelfPlayDataModule(games=[game], eval=EvalSettings(exploitability=True)).settings
    with pytest.raises(ValueError, match=r"data.eval.exploitability: data.rollout ServerRolloutWorker cannot"):
        check_capabilities(backends["server"], settings, fit=False)
    check_capabilities(backends["hf"], settings, fit=True)  # HF scores its moves
    with pytest.raises(ValueError, match=r"data.rollout: RemoteRolloutWorker answers with text only"):
        check_capabilities(backends["remote"], SelfPlayDataModule(games=[game]).settings, fit=True)
    league = SelfPlayDataModule(games=[game], league=LeagueSettings(dir="unused")).settings
    with pytest.raises(ValueError, match=r"data.league: the league plays past checkpoints"):
        check_capabilities(backends["remote"], league, fit=False)
