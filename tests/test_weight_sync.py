"""The weight path (sp_lightning.weight_sync): what an update holds, how the HF worker's own copy
takes it, and when a fit sends it."""

import pytest
import torch

from sp_lightning.module import SelfPlayModule
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import ModelRequest, PolicyRef
from sp_lightning.weight_sync import WeightSync, update_of

LEARNER = PolicyRef("learner")
PROMPT = [ModelRequest("p", [{"role": "user", "content": "Your move."}], LEARNER)]


def _step(model, scale: float = 0.05, seed: int = 0) -> None:
    """Stands in for an optimizer step: every trainable weight moves."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * scale)


def _logprobs(worker) -> list[float]:
    return worker.completion_logprobs(PROMPT, [["[0]", "[4]", "[8]"]])[0]


def test_an_update_holds_the_trainable_tensors_only_with_their_place():
    module = SelfPlayModule()
    update = update_of(module.model, 7)
    (tensors,) = update.tensors.values()
    trainable = {n for n, p in module.model.named_parameters() if p.requires_grad}
    assert tensors and all("lora_" in name or "trainable_tokens" in name for name in tensors)
    assert len(tensors) == len(trainable)
    assert update.version == 7 and update.device == torch.device("cpu") and update.base_dtype == torch.float32
    assert update.nbytes == sum(t.numel() * t.element_size() for t in tensors.values())


def test_the_worker_serves_its_own_copy_until_the_weights_are_sent():
    """An optimizer step on the trainer's model changes nothing the worker serves; the send
    does, and then the worker's logprobs are the trainer's model's."""
    module = SelfPlayModule()
    worker = HFRolloutWorker(module.model, module.tokenizer)
    before = _logprobs(worker)
    _step(module.model, 0.3)
    assert _logprobs(worker) == before
    worker.load_weights(update_of(module.model, 1))
    after = _logprobs(worker)
    assert worker.policy_version == 1 and max(abs(a - b) for a, b in zip(before, after)) > 1e-3
    trainer_side = HFRolloutWorker(module.model, module.tokenizer)  # a fresh copy of the trained model
    torch.testing.assert_close(torch.tensor(after), torch.tensor(_logprobs(trainer_side)), rtol=0, atol=1e-5)


def test_the_first_update_places_the_copy_like_the_trainers_model():
    """Lightning's precision may cast the trainer's frozen weights after the worker was built:
    the first update says how (``base_dtype``), and the copy follows; the adapter keeps the
    dtype of the tensors sent."""
    module = SelfPlayModule()
    worker = HFRolloutWorker(module.model, module.tokenizer)
    update = update_of(module.model, 1)
    update.base_dtype = torch.bfloat16
    worker.load_weights(update)
    frozen = {p.dtype for p in worker.model.parameters() if not p.requires_grad}
    sent = {n: t.dtype for tensors in update.tensors.values() for n, t in tensors.items()}
    assert frozen == {torch.bfloat16}
    assert set(sent.values()) == {torch.float32}
    completion = worker.generate(PROMPT, SamplingSettings(max_new_tokens=2))[0]
    assert completion.completion_ids and not completion.logprobs_from_trainer


def test_an_update_for_another_model_is_refused_naming_the_weight():
    module = SelfPlayModule()
    worker = HFRolloutWorker(module.model, module.tokenizer)
    update = update_of(module.model, 1)
    tensors = update.tensors[next(iter(update.tensors))]
    tensors["base_model.model.not_a_layer.lora_A.default.weight"] = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="has no weight 'base_model.model.not_a_layer"):
        worker.load_weights(update)


class NotTrainingWorkerDouble:
    """A worker that does not train (a remote model under evaluation): refuses any weights."""

    trains = False

    def load_weights(self, update):
        raise AssertionError("sent weights to a worker that does not train")


def test_a_worker_that_does_not_train_is_sent_nothing():
    sync = WeightSync(lambda: NotTrainingWorkerDouble())
    assert sync.send(SelfPlayModule(), 3) is None


@pytest.mark.slow
def test_a_fit_sends_after_every_step_and_logs_what_each_send_cost(tmp_path):
    """Three steps: the worker ends on the last step's weights, stamped with its number, and each
    step logged the send's milliseconds and bytes."""
    from tests.helpers import fit_batches

    trainer, _ = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 3, "--data.episodes_per_batch", "4")
    module, worker = trainer.lightning_module, trainer.datamodule.engine.worker
    assert worker.policy_version == trainer.global_step == 3
    for name, tensor in update_of(module.model, 3).tensors[""].items():
        torch.testing.assert_close(worker._targets[""][name], tensor, rtol=0, atol=0, msg=name)
    logged = trainer.logged_metrics
    assert logged["rollout/weight_sync_bytes"] == float(update_of(module.model, 3).nbytes)
    assert logged["rollout/weight_sync_ms"] > 0


@pytest.mark.slow
def test_a_fit_sends_once_per_step_and_validation_inside_it_sends_nothing_new(tmp_path, monkeypatch):
    """Two steps with a validation after the second: one send when training starts, one after each
    step, none for the validation (it follows the step whose weights were just sent); a validate
    of the checkpoint afterwards sends once, the checkpoint's weights (its Trainer counts from 0)."""
    from sp_lightning.cli import main
    from tests.test_e2e import _args

    versions = []
    load_weights = HFRolloutWorker.load_weights

    def counting_load_weights(self, update):
        versions.append(update.version)
        return load_weights(self, update)

    monkeypatch.setattr(HFRolloutWorker, "load_weights", counting_load_weights)
    main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 2)])
    assert versions == [0, 1, 2]
    main(["validate", *_args("tictactoe_tiny.yaml", tmp_path, 2), "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    assert versions == [0, 1, 2, 0]
