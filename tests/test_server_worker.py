"""ServerRolloutWorker without a server: its settings checks, and a server that stays down
failing with an error that names its URL (the vLLM servers themselves are exercised in
tests/test_vllm_worker.py)."""

import os

import pytest

from sp_lightning.rollout import RetrySettings, SamplingSettings
from sp_lightning.rollout.base import RolloutFailed, TransientRolloutError, generate_with_retries
from sp_lightning.rollout.server import ServerRolloutWorker
from sp_lightning.types import ModelRequest, PolicyRef
from tests.helpers import free_ports


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    return free_ports(1)[0]


def test_settings_are_checked(tiny_policy):
    model, tok = tiny_policy
    with pytest.raises(ValueError, match="rollout.base_urls: expected at least one server URL"):
        ServerRolloutWorker(model, tok, base_urls=[], served_model="m")
    with pytest.raises(ValueError, match="must start with http"):
        ServerRolloutWorker(model, tok, base_urls=["localhost:8000/v1"], served_model="m")


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
    with pytest.raises(TransientRolloutError, match=f"server {url}: v1/load_lora_adapter unreachable"):
        worker.generate([request], SamplingSettings(max_new_tokens=1))
    assert (tmp_path / f"learner-v0-{worker._tag}" / "adapter_config.json").is_file()  # for the server to read


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
