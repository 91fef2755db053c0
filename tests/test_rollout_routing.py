"""Policy routing in the HF worker: learner, base (adapter off) and saved checkpoints as named
peft adapters, batched per adapter, with an LRU cap on adapters held at once."""

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings, load_policy
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef

PROMPT = [{"role": "user", "content": "Tic-Tac-Toe. You are X.\n[0] [1] [2]\n[3] [4] [5]\n[6] [7] [8]\nLegal moves: [0] [1] [2] [3] [4] [5] [6] [7] [8]"}]
MOVES = [f"[{i}]" for i in range(9)]


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicySettings(lora=LoraSettings(r=8, alpha=16, trainable_tokens=["moves"])))


def _perturb(model, scale):
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * scale)


def _scores(worker, policy_ref):
    return worker.completion_logprobs([ModelRequest("player_0", PROMPT, policy_ref)], [MOVES])[0]


def test_checkpoints_serve_their_saved_weights_beside_the_learner(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok, max_adapters=2)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    saved = {}
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        torch.manual_seed(seed)
        _perturb(model, 0.3)
        model.save_pretrained(tmp_path / name, selected_adapters=["default"])
        saved[name] = _scores(worker, LEARNER)
        worker.register_adapter(name, str(tmp_path / name))
    _perturb(model, 0.3)  # the learner moves on
    learner_now = _scores(worker, LEARNER)
    for name in ("a", "b", "c"):
        torch.testing.assert_close(_scores(worker, PolicyRef("checkpoint", name)), saved[name], atol=1e-5, rtol=0)
    assert len(worker.loaded) == 2 and list(worker.loaded) == ["b", "c"], "LRU: 'a' was unloaded first"
    torch.testing.assert_close(_scores(worker, LEARNER), learner_now)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable, "serving changes nothing that trains"
    with model.disable_adapter():
        base = worker.completion_logprobs([ModelRequest("p", PROMPT, LEARNER)], [MOVES])[0]
    torch.testing.assert_close(_scores(worker, PolicyRef("base")), base)


def test_one_generate_call_per_policy_and_versions(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok)
    model.save_pretrained(tmp_path / "x", selected_adapters=["default"])
    worker.register_adapter("x", str(tmp_path / "x"))
    worker.sync_weights(7)
    calls = []
    original = worker._generate_ids
    worker._generate_ids = lambda prompts, p, s: calls.append(p) or original(prompts, p, s)
    requests = [ModelRequest("p", PROMPT, ref) for ref in (LEARNER, PolicyRef("checkpoint", "x"), LEARNER, PolicyRef("base"))]
    out = worker.generate(requests, SamplingSettings(max_new_tokens=1))
    assert sorted(map(str, calls)) == ["base", "checkpoint:x", "learner"]
    assert [c.policy for c in out] == [r.policy for r in requests]
    assert out[0].policy_version == 7 and out[1].policy_version == 0


def test_unknown_checkpoint_and_bad_directory_are_clear_errors(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok)
    with pytest.raises(ValueError, match="no adapter registered"):
        _scores(worker, PolicyRef("checkpoint", "nope"))
    with pytest.raises(ValueError, match="adapter_config.json"):
        worker.register_adapter("bad", str(tmp_path))
