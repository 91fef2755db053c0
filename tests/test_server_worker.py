"""ServerRolloutWorker without a server: its settings checks, the books of its fleet, and a
server that stays down failing with an error that names its URL (the vLLM servers themselves,
one killed mid-run, are exercised in tests/test_vllm_servers.py)."""

import os
import re

import pytest

from sp_lightning.errors import user_message
from sp_lightning.rollout import RetrySettings, SamplingSettings
from sp_lightning.rollout.base import (
    RolloutFailed,
    TransientRolloutError,
    generate_with_retries,
)
from sp_lightning.rollout.fleet import ServerFleet
from sp_lightning.rollout.server import ServerError, ServerRolloutWorker
from sp_lightning.types import ModelRequest, PolicyRef
from tests.helpers import free_ports, send_weights


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_ports(1)[0]


def test_settings_are_checked(tiny_policy):
    model, tok = tiny_policy
    with pytest.raises(ValueError, match="rollout.base_urls: expected at least one server URL"):
        ServerRolloutWorker(model, tok, base_urls=[], served_model="m")
    with pytest.raises(ValueError, match="must start with http"):
        ServerRolloutWorker(model, tok, base_urls=["localhost:8000/v1"], served_model="m")


def test_its_numbers_are_checked_by_name(tiny_policy):
    model, tok = tiny_policy
    for kwargs, message in (({"max_concurrency": 0}, "rollout.max_concurrency: expected an int >= 1, got 0"),
                            ({"max_retries": -1}, "rollout.max_retries: expected an int >= 0, got -1"),
                            ({"timeout": 0}, "rollout.timeout / probe_every_s: expected > 0 / >= 0 seconds")):
        with pytest.raises(ValueError, match=message):
            ServerRolloutWorker(model, tok, base_urls=["http://127.0.0.1:1/v1"], served_model="m", **kwargs)


def _completion(ids, logprobs, choices=True):
    choice = {"index": 0, "text": "", "finish_reason": "length", "token_ids": ids, "logprobs": {"token_logprobs": logprobs}}
    return {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [choice] if choices else []}


@pytest.mark.parametrize("reply, expected", [
    (lambda path, body: _completion([5], [-0.5], choices=False), "not a completion with token ids and logprobs"),
    (lambda path, body: _completion([5], None), "not a completion with token ids and logprobs"),
    (lambda path, body: _completion([5], [None]), "not a completion with token ids and logprobs"),
    (lambda path, body: "<html>a proxy's page</html>", "not a completion .*a proxy's page"),
    (lambda path, body: _completion([10**9], [-0.5]), r".*expected each in \[0, \d+\) of this model's vocabulary"),
    (lambda path, body: _completion([-1], [-0.5]), r".*expected each in \[0, \d+\) of this model's vocabulary"),
    (lambda path, body: _completion([5] * 9, [-0.5] * 9), r"9 completion token ids \(at most 2 asked for\)"),
    (lambda path, body: _completion([5], [3.0]), "a completion logprob that is not a finite number <= 0"),
    (lambda path, body: _completion([5], [float("nan")]), "a completion logprob that is not a finite number <= 0"),
], ids=["no choices", "no logprobs", "a null logprob", "an HTML page", "an id past the vocabulary", "a negative id",
        "more tokens than asked", "a positive logprob", "a NaN logprob"])
def test_an_answer_the_trainer_could_not_use_is_an_error_naming_the_server(serve, tiny_policy, tmp_path, reply,
                                                                           expected):
    """What a server sends is checked before it reaches the trainer: an id outside the
    vocabulary went on to an IndexError in the embedding (a device-side assert on a GPU)."""
    model, tok = tiny_policy
    server = serve(reply=reply)
    worker = ServerRolloutWorker(model, tok, base_urls=[server.url], served_model="m", adapter_dir=str(tmp_path),
                                 timeout=5, max_retries=0)
    request = ModelRequest("player", [{"role": "user", "content": "hi"}], PolicyRef("base"))
    with pytest.raises(ServerError, match=re.escape(f"server {server.url}: ") + expected) as caught:
        worker.generate([request], SamplingSettings(max_new_tokens=2))
    assert user_message(caught.value) == " ".join(str(caught.value).split())
    worker.close()


def test_a_server_that_stays_down_fails_naming_its_url(tiny_policy, tmp_path):
    model, tok = tiny_policy
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    worker = ServerRolloutWorker(model, tok, base_urls=[url], served_model="m", adapter_dir=str(tmp_path),
                                 timeout=2, max_retries=1)
    request = ModelRequest("player", [{"role": "user", "content": "hi"}], PolicyRef("base"))
    with pytest.raises(TransientRolloutError, match=f"server {url}: no answer after 1 retries"):
        worker.generate([request], SamplingSettings(max_new_tokens=1))
    # through the arena's own retries: the run stops with the URL in the message
    with pytest.raises(RolloutFailed, match=url.replace(".", r"\.")):
        generate_with_retries(worker, [request], SamplingSettings(max_new_tokens=1),
                              RetrySettings(attempts=2, backoff_s=0.01), sleep=lambda s: None)
    worker.close()


def test_loading_the_learner_on_a_server_that_is_down_names_it(tiny_policy, tmp_path):
    model, tok = tiny_policy
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    worker = ServerRolloutWorker(model, tok, base_urls=[url], served_model="m", adapter_dir=str(tmp_path), timeout=2)
    request = ModelRequest("player", [{"role": "user", "content": "hi"}], PolicyRef("learner"))
    with pytest.raises(RuntimeError, match="no weights of learner '' were sent"):
        worker.generate([request], SamplingSettings(max_new_tokens=1))
    send_weights(worker, model, version=3)
    # written for the server to read when the weights are sent, named by version, update, rank and worker
    assert (tmp_path / f"learner-v3-1-r0-{worker._tag}" / "adapter_config.json").is_file()
    with pytest.raises(TransientRolloutError, match=f"server {url}: v1/load_lora_adapter unreachable"):
        worker.generate([request], SamplingSettings(max_new_tokens=1))


def test_close_removes_the_ram_directory_it_made(tiny_policy):
    model, tok = tiny_policy
    worker = ServerRolloutWorker(model, tok, base_urls=["http://127.0.0.1:9/v1"], served_model="m")
    assert os.path.isdir(worker.root)
    worker.close()
    assert not os.path.exists(worker.root)


def test_a_prompt_over_max_prompt_tokens_is_refused_without_asking_the_server(tiny_policy, tmp_path):
    """The server is down: the refused prompt never reached it (or the call would fail)."""
    from sp_lightning.types import PROMPT_TOO_LONG

    model, tok = tiny_policy
    with pytest.raises(ValueError, match="rollout.max_prompt_tokens: expected >= 1 or null, got 0"):
        ServerRolloutWorker(model, tok, base_urls=["http://127.0.0.1:9/v1"], served_model="m", max_prompt_tokens=0)
    worker = ServerRolloutWorker(model, tok, base_urls=[f"http://127.0.0.1:{_closed_port()}/v1"], served_model="m",
                                 adapter_dir=str(tmp_path), max_prompt_tokens=8)
    request = ModelRequest("player", [{"role": "user", "content": "a prompt well over eight tokens " * 4}],
                           PolicyRef("base"))
    (completion,) = worker.generate([request], SamplingSettings(max_new_tokens=1))
    assert completion.refused == PROMPT_TOO_LONG and completion.completion_ids == []
    worker.close()


class _ManualClock:
    """A clock the test moves by hand (the fleet's probe schedule without waiting)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_fleet_rotates_over_servers_in_it_and_probes_those_taken_out():
    clock = _ManualClock()
    fleet = ServerFleet(["a", "b", "c"], first=1, probe_every_s=5, clock=clock)
    assert [fleet.next() for _ in range(4)] == ["b", "c", "a", "b"]  # rank 1 starts on the second
    fleet.loaded("b", "learner-v1")
    fleet.take_out("b", "refused")
    fleet.take_out("b", "refused again")  # once
    assert fleet.live() == ["a", "c"] and fleet.taken_out == 1
    assert {fleet.next() for _ in range(6)} == {"a", "c"}
    assert fleet.next(avoid=["a", "c"]) is None
    assert not fleet.holds("b", "learner-v1") and fleet.holding("learner-v1") == []  # unknown until back
    assert fleet.due_for_probe() == []
    clock.now = 5
    assert fleet.due_for_probe() == ["b"] and fleet.due_for_probe() == []  # not due again at once
    fleet.take_back("b", ["learner-v1"])
    assert fleet.live() == ["a", "b", "c"] and fleet.holding("learner-v1") == ["b"]
    assert fleet.metrics() == {"rollout/servers_live": 3.0, "rollout/servers_taken_out": 1.0,
                               "rollout/servers_taken_back": 1.0}
    with pytest.raises(ValueError, match="rollout.probe_every_s: expected > 0"):
        ServerFleet(["a"], probe_every_s=0)


def test_a_dead_server_among_live_ones_is_taken_out_and_named_when_none_is_left(tiny_policy, tmp_path):
    """Two servers, both down: the first request tries each once, takes both out, and the error
    names both URLs; later calls probe them (still down) and fail the same way, without waiting."""
    model, tok = tiny_policy
    urls = [f"http://127.0.0.1:{port}/v1" for port in free_ports(2)]
    worker = ServerRolloutWorker(model, tok, base_urls=urls, served_model="m", adapter_dir=str(tmp_path),
                                 timeout=2, max_retries=0)
    request = ModelRequest("player", [{"role": "user", "content": "hi"}], PolicyRef("base"))
    for _ in range(2):
        with pytest.raises(TransientRolloutError, match="server left in the rotation of 2") as error:
            worker.generate([request], SamplingSettings(max_new_tokens=1))
        assert all(url in str(error.value) for url in urls)
    assert worker.fleet.live() == [] and worker.fleet.taken_out == 2
    assert worker.health_metrics()["rollout/servers_live"] == 0
    worker.close()


def test_weights_replaced_before_any_generate_are_deleted_and_the_served_ones_after_their_successor(
        tiny_policy, tmp_path, serve):
    """Adapter directories do not pile up on the RAM disk: a version sent and replaced before a
    generate loaded it is deleted at once; the one the servers serve stays until its successor is
    loaded in its place, then goes too; close leaves nothing."""
    model, tok = tiny_policy
    server = serve()
    worker = ServerRolloutWorker(model, tok, base_urls=[server.url], served_model="m", adapter_dir=str(tmp_path))
    request = ModelRequest("player", [{"role": "user", "content": "hi"}], PolicyRef("learner"))
    send_weights(worker, model, version=1)
    send_weights(worker, model, version=2)
    assert sorted(p.name.split("-r0")[0] for p in tmp_path.iterdir()) == ["learner-v2-2"]
    worker.generate([request], SamplingSettings(max_new_tokens=1))  # serves v2
    send_weights(worker, model, version=3)
    send_weights(worker, model, version=4)  # v3 never served: deleted; v2 still served
    assert sorted(p.name.split("-r0")[0] for p in tmp_path.iterdir()) == ["learner-v2-2", "learner-v4-4"]
    worker.generate([request], SamplingSettings(max_new_tokens=1))  # v4 loaded, v2 unloaded and deleted
    assert sorted(p.name.split("-r0")[0] for p in tmp_path.iterdir()) == ["learner-v4-4"]
    unloaded = [b["lora_name"] for b in server.bodies if "lora_name" in b and "lora_path" not in b]
    assert len(unloaded) == 1 and unloaded[0].startswith("learner-v2-2")
    worker.close()
    assert list(tmp_path.iterdir()) == []
