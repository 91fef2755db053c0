"""FSDP2 pieces that need no second process: which layers are sharded, what the rollout backend
does before the trainer's model is sharded, and the shipped overlays. The sharded fits themselves
(gradient equal to one process, filler passes, league and exact resume) are in
tests/test_distributed.py."""

import glob
import os

import pytest
import torch

from sp_lightning import build_from_config, sharding
from sp_lightning.cli import main
from sp_lightning.rollout import HFRolloutWorker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KUHN = os.path.join(ROOT, "configs", "kuhn_poker_tiny.yaml")


@pytest.fixture(scope="module")
def module():
    module, _ = build_from_config("--config", KUHN)
    return module


def test_the_decoder_layers_are_the_units_sharded(module):
    layers = sharding.decoder_layers(module.model)
    assert len(layers) == module.model.config.num_hidden_layers
    assert all(type(layer).__name__.endswith("DecoderLayer") for layer in layers)


def test_a_model_without_decoder_layers_is_refused_by_key():
    with pytest.raises(ValueError, match=r"trainer\.strategy: cannot shard Linear"):
        sharding.decoder_layers(torch.nn.Linear(2, 2))


def test_the_worker_copy_taken_before_sharding_follows_only_the_weights_sent(module):
    """The HF worker copies the whole model when it is built (the DataModule's setup, before the
    module's configure_model shards it): the sharded trainer never generates, and the copy takes
    the trained weights only through the weight path."""
    from tests.helpers import send_weights

    worker = HFRolloutWorker(module.model, module.tokenizer)
    copy = worker.model
    assert copy is not module.model
    trained = {n: p for n, p in module.model.named_parameters() if p.requires_grad}
    name, param = next(iter(trained.items()))
    with torch.no_grad():
        param.add_(1.0)  # an optimizer step on the trainer's model
    try:
        assert not torch.equal(dict(copy.named_parameters())[name], param)
        send_weights(worker, module.model, version=1)
        assert worker.model is copy, "the copy taken before sharding is kept, never re-copied from the trainer"
        assert torch.equal(dict(copy.named_parameters())[name], param)
    finally:
        with torch.no_grad():
            param.sub_(1.0)


OVERLAYS = sorted(glob.glob(os.path.join(ROOT, "configs", "overlays", "fsdp2_*.yaml")))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=[os.path.basename(o) for o in OVERLAYS])
def test_the_fsdp2_overlays_parse_on_their_base_configs(overlay, capsys):
    base = "tictactoe_qwen3_1p7b_vllm_gpu.yaml" if overlay.endswith("gpu.yaml") else "kuhn_poker_league_tiny.yaml"
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", os.path.join(ROOT, "configs", base), "--config", overlay, "--print_config"])
    assert done.value.code in (0, None)
    assert "ModelParallelStrategy" in capsys.readouterr().out
