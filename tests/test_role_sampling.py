"""Roles and policies with their own sampling (sp_lightning.sampling): how a request's settings
are resolved, that each backend samples every request with its own (the Hugging Face worker one
call per distinct settings; servers and remote models per request; vLLM in
tests/test_vllm_worker.py), and that training divides each record's logits by its own temperature.

``ScriptedOpenAIServer`` (tests/helpers.py) is a test double of a server only: a real HTTP server
on loopback answering scripted tokens, so that the real ServerRolloutWorker and RemoteModel can be
checked for the settings they send."""

import pytest
import torch

from sp_lightning.arena import Arena
from sp_lightning.collate import collate
from sp_lightning.credit import EpisodicRewardCredit
from sp_lightning.episodes import Episode
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.rubric import Rubric
from sp_lightning.sampling import SamplingPlan, checked_overrides
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef, Role, Rollout, Step

PLAN = SamplingPlan(SamplingSettings(max_new_tokens=4, temperature=1.0),
                    by_role={"terse": {"max_new_tokens": 1, "temperature": 0.0}, "judge": {"temperature": 0.0}},
                    by_policy={"base": {"temperature": 0.5}, "checkpoint:c1": {"max_new_tokens": 2}})


def _request(role: str, policy=LEARNER) -> ModelRequest:
    return ModelRequest(role, [{"role": "user", "content": f"Tic-Tac-Toe. Legal moves: [0] [4] ({role})"}], policy)


def test_a_requests_settings_are_the_runs_then_its_roles_then_its_policys():
    assert PLAN.for_request(_request("player")) == SamplingSettings(max_new_tokens=4, temperature=1.0)
    assert PLAN.for_request(_request("terse")) == SamplingSettings(max_new_tokens=1, temperature=0.0)
    # the policy's own wins where both set a key; its exact spec before its kind
    assert PLAN.for_request(_request("judge", PolicyRef("base"))).temperature == 0.5
    assert PLAN.for_request(_request("player", PolicyRef("checkpoint", "c1"))).max_new_tokens == 2
    assert PLAN.for_request(_request("player", PolicyRef("checkpoint", "c2"))).max_new_tokens == 4
    greedy = PLAN.at_temperature(0.0)  # evaluation: every request at the evaluation temperature...
    assert {greedy.for_request(_request("player", p)).temperature for p in (LEARNER, PolicyRef("checkpoint", "c1"))} == {0.0}
    assert greedy.for_request(_request("terse")).max_new_tokens == 1 and PLAN.at_temperature(None) is PLAN
    hot = PLAN.at_temperature(0.8)  # ...but a role's or policy's own temperature: a judge stays at 0
    assert hot.for_request(_request("player")).temperature == 0.8
    assert hot.for_request(_request("judge")).temperature == 0.0
    assert hot.for_request(_request("player", PolicyRef("base"))).temperature == 0.5
    assert SamplingPlan.of(SamplingSettings(max_new_tokens=3)).for_request(_request("x")).max_new_tokens == 3


def test_a_bad_override_names_its_key():
    with pytest.raises(ValueError, match=r"data.sampling_by_role.judge.temprature: not a setting of SamplingSettings"):
        checked_overrides({"judge": {"temprature": 0}}, "data.sampling_by_role")
    with pytest.raises(ValueError, match=r"data.sampling_by_policy.base: .*top_p"):
        checked_overrides({"base": {"top_p": 2.0}}, "data.sampling_by_policy")
    with pytest.raises(ValueError, match=r"data.sampling_by_role.judge: sampling.top_k: expected an int >= 0 .*got -1"):
        checked_overrides({"judge": {"top_k": -1}}, "data.sampling_by_role")  # the HF sampler's topk(-1) crashed mid-run
    with pytest.raises(ValueError, match=r"data.sampling_by_role.judge: expected a mapping"):
        checked_overrides({"judge": 0.0}, "data.sampling_by_role")


class _TwoRoles(Episode):
    """One answer by the learner in role ``terse`` and one in role ``player``, both trained."""

    name = "two_roles"
    roles = [Role("terse"), Role("player")]
    rubric = Rubric(outcome=[(lambda rollout: {"terse": 1.0, "player": 1.0}, 1.0)])

    async def rollout(self, ctx):
        steps = []
        for role in ("terse", "player"):
            completion = await ctx.generate(_request(role))
            steps.append(Step(role=role, completion=completion))
        return Rollout(episode=self.name, steps=steps, seats={"terse": LEARNER, "player": LEARNER})


def test_the_hf_worker_samples_each_role_with_its_own_settings_and_training_divides_by_them(tiny_policy):
    """Two roles in one flush of the arena: the HF worker answers them in one call per settings,
    the terse role greedily in one token, the other sampled in up to four; the trainer's logprobs
    of every record, its logits divided by the record's own temperature, are the sampler's."""
    from sp_lightning.module import SelfPlayModule

    module = SelfPlayModule()
    worker = HFRolloutWorker(module.model, module.tokenizer)
    calls = []
    original = worker._generate_ids
    worker._generate_ids = lambda prompts, policies, sampling: calls.append(sampling) or original(prompts, policies,
                                                                                                     sampling)
    plan = SamplingPlan(SamplingSettings(max_new_tokens=4, temperature=0.7),
                        by_role={"terse": {"max_new_tokens": 1, "temperature": 0.0}})
    arena = Arena(worker, plan, credit=EpisodicRewardCredit())
    rollouts = arena.play([_TwoRoles() for _ in range(6)], list(range(6)))
    assert sorted(calls, key=lambda s: s.temperature) == [SamplingSettings(max_new_tokens=1, temperature=0.0),
                                                          SamplingSettings(max_new_tokens=4, temperature=0.7)]
    terse = [r.steps[0].completion for r in rollouts]
    player = [r.steps[1].completion for r in rollouts]
    assert all(len(c.completion_ids) == 1 and c.temperature == 0.0 for c in terse)
    assert len({tuple(c.completion_ids) for c in terse}) == 1  # greedy: the same answer to the same prompt
    assert all(1 <= len(c.completion_ids) <= 4 and c.temperature == 0.7 for c in player)
    records = arena.build_training_batch(rollouts).records
    assert sorted({r.temperature for r in records}) == [0.0, 0.7]
    batch = collate(records, module.tokenizer.pad_token_id)
    logprobs, _, _ = module.policy_forward(batch)
    torch.testing.assert_close(logprobs * batch.loss_mask, batch.old_logprobs * batch.loss_mask, atol=1e-5, rtol=0)


def test_servers_and_remote_models_are_sent_each_requests_own_settings(tiny_policy, serve, tmp_path):
    from sp_lightning.rollout.remote import RemoteRolloutWorker
    from sp_lightning.rollout.server import ServerRolloutWorker

    model, tokenizer = tiny_policy
    server = serve()
    requests = [_request("terse", PolicyRef("checkpoint", "c9")), _request("player", PolicyRef("base"))]
    for request in requests:
        request.sampling = PLAN.for_request(request)
    fleet = ServerRolloutWorker(model, tokenizer, base_urls=[server.url], served_model="m", adapter_dir=str(tmp_path))
    model.save_pretrained(tmp_path / "c9")
    fleet.register_adapter("c9", str(tmp_path / "c9"))
    out = fleet.generate(requests, SamplingSettings())
    assert [len(c.completion_ids) for c in out] == [1, 4] and [c.temperature for c in out] == [0.0, 0.5]
    sent = [b for b in server.bodies if "prompt" in b]
    assert sorted((b["max_tokens"], b["temperature"]) for b in sent) == [(1, 0.0), (4, 0.5)]
    remote = RemoteRolloutWorker(base_url=server.url, served_model="m", base_model="m")  # checkpoint:c9 by name
    remote.generate(requests, SamplingSettings())
    chat = [b for b in server.bodies if "messages" in b]
    assert sorted((b["max_tokens"], b["temperature"]) for b in chat) == [(1, 0.0), (4, 0.5)]
