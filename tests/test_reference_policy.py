"""The KL term's warm-start reference (sp_lightning.reference_policy): the swap of weights a
reference forward makes, the settings' errors, and fits in which the policy a warm start handed
over becomes the reference at the warm start's end, is kept by checkpoints and resumes exactly."""

from __future__ import annotations

import json
import os

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
import pytest
import torch

from sp_lightning import build_from_config, make_trainer
from sp_lightning.collate import MicroBatch
from sp_lightning.errors import UserError
from sp_lightning.model import LoraSettings, PolicySettings, load_policy
from sp_lightning.reference_policy import ReferenceWeights
from tests.helpers import checkpointed_fit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
TICTACTOE = os.path.join(CONFIGS, "tictactoe_tiny.yaml")
WARM = ["--data.warm_start", json.dumps({"teacher": "bot:tictactoe_tactical", "steps": 2, "batch": 64, "size": 500}),
        "--data.episodes_per_batch", "8", "--data.eval.held_out", "[]",
        "--model.loss.kl", json.dumps({"coef": 0.5, "reference": "warm_start"})]


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_a_swapped_in_reference_answers_as_the_copied_policy_and_the_model_is_its_own_again_after():
    model, tokenizer = load_policy(PolicySettings(lora=LoraSettings(r=4, alpha=8)))
    ids = torch.tensor([tokenizer.encode("[0] [4] [8]")])
    trainable = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        for k, p in enumerate(trainable):  # an adapter that changes the logits
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(k)) * 0.1)
    reference = ReferenceWeights()
    reference.capture((n, p) for n, p in model.named_parameters() if p.requires_grad)
    then = _logits(model, ids)
    with torch.no_grad():
        for p in trainable:  # training moves on
            p.add_(0.05)
    now = _logits(model, ids)
    own = [p.detach().clone() for p in trainable]
    assert not torch.allclose(now, then)
    with reference.swapped_into(model):
        assert torch.equal(_logits(model, ids), then)
    assert all(torch.equal(p, q) for p, q in zip(trainable, own)), "bit for bit its own again"
    assert torch.equal(_logits(model, ids), now)
    assert all(p.requires_grad for p in trainable)


def test_a_reference_that_does_not_fit_the_model_is_refused_naming_the_source():
    model, _ = load_policy(PolicySettings(lora=LoraSettings(r=4, alpha=8)))
    other, _ = load_policy(PolicySettings(lora=LoraSettings(r=8, alpha=16)))
    theirs = ReferenceWeights()
    theirs.capture((n, p) for n, p in other.named_parameters() if p.requires_grad)
    with pytest.raises(UserError, match="ckpt_path x.ckpt: its reference_policy .* another config's"):
        ReferenceWeights().load_state_dict(theirs.state_dict(), model.named_parameters(), "ckpt_path x.ckpt")


@pytest.mark.parametrize("flags, message", [
    (["--model.loss.kl", json.dumps({"coef": 0.1, "reference": "warm_start"})],
     r"model.loss.kl.reference: 'warm_start' regularises toward the policy a warm start hands over"),
    (["--model.loss.kl", json.dumps({"coef": 0.1, "reference": "sft"})],
     r"model.loss.kl.reference: expected one of \('base', 'warm_start'\), got 'sft'"),
    (["--model.policy.lora", "null", "--model.loss.kl.coef", "0.1"], r"model.loss: the reference .* base model"),
    ([*WARM, "--model.learners", json.dumps({"main": {"roles": ["*"]}, "exploiter": {}})],
     r"model.learners.exploiter.loss.kl.reference: 'warm_start' holds the learner the warm start warmed \('main'\)"),
])
def test_a_reference_the_run_cannot_have_is_refused_naming_the_key(flags, message):
    with pytest.raises(ValueError, match=message):
        build_from_config("--config", TICTACTOE, *flags)


class _Steps(L.Callback):
    """What each training step logged of the KL term and whether the reference was taken."""

    def __init__(self):
        self.kl, self.ready = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.kl.append(float(trainer.callback_metrics.get("train/kl", float("nan"))))
        self.ready.append(pl_module.reference.ready)


def _fit(root, steps: int, *args: str):
    checkpointed_fit(TICTACTOE, root, steps, *WARM, *args)


@pytest.mark.slow  # fits
def test_the_warm_starts_policy_becomes_the_reference_and_a_resumed_run_keeps_it_exactly(tmp_path):
    """A fit of 2 warm-start steps then 2 of self-play; then the same fit stopped after step 3 and
    resumed from its checkpoint ends with the same reference and weights."""
    module, dm = build_from_config("--config", TICTACTOE, *WARM)
    assert module.warm_start_steps == 2, "linked from data.warm_start.steps"
    steps = _Steps()
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    last = ModelCheckpoint(dirpath=str(straight / "ckpt"), filename="last", every_n_train_steps=1,
                           enable_version_counter=False)
    trainer = make_trainer(max_steps=4, limit_val_batches=0, logger=False, default_root_dir=str(straight),
                           callbacks=[steps, last], enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    assert steps.ready == [False, False, True, True]
    assert steps.kl[2] > 0 and steps.kl[3] > 0, "self-play is held toward the warm start's policy"
    warm = torch.load(straight / "ckpt" / "warm_start.ckpt", weights_only=False)
    reference = module.reference.state_dict()
    trained = {n: p for n, p in module.model.named_parameters() if p.requires_grad}
    assert set(reference) == set(trained) and {f"model.{n}" for n in trained} == set(warm["state_dict"])
    assert all(torch.equal(reference[n], warm["state_dict"][f"model.{n}"]) for n in trained), "what it handed over"
    assert any(not torch.equal(reference[n], p) for n, p in trained.items()), "while self-play went on"
    # the KL term's reference logprobs are the warm start's policy's, not the base model's
    micro = MicroBatch.collated(module.last_batch.records[:8], module.tokenizer.pad_token_id, None, "cpu")
    held = module.reference_logprobs("", micro.tensors)
    handed_over, _ = build_from_config("--config", TICTACTOE, *WARM)
    handed_over.load_policy_weights(straight / "ckpt" / "warm_start.ckpt")
    with torch.no_grad():
        assert torch.allclose(held, handed_over.policy_forward(micro.tensors)[0])
    assert not torch.allclose(held, module.policy_forward.reference(micro.tensors))

    _fit(resumed, 3)  # after the warm start: the checkpoint keeps the reference
    _fit(resumed, 4, "--ckpt_path", str(resumed / "ckpt" / "last.ckpt"))
    ours = torch.load(resumed / "ckpt" / "last.ckpt", weights_only=False)
    theirs = torch.load(straight / "ckpt" / "last.ckpt", weights_only=False)
    assert theirs[ReferenceWeights.CHECKPOINT_KEY].keys() == ours[ReferenceWeights.CHECKPOINT_KEY].keys()
    for key, value in theirs[ReferenceWeights.CHECKPOINT_KEY].items():
        assert torch.equal(ours[ReferenceWeights.CHECKPOINT_KEY][key], value), key
    for key, value in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key
