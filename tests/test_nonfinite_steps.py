"""A NaN loss skips its optimizer step and the run goes on; K in a row stop it with a message.

The fault is injected into the real module: ``NaNLogprobsInjector`` wraps
``PolicyForward.__call__`` (the trainer's forward) so that chosen training batches' logprobs become NaN (and it
notes the adapter weights each batch starts from), inside an ordinary ``sp-lightning fit``.
"""

import logging

import pytest
import torch

from sp_lightning.cli import main
from sp_lightning.policy_forward import PolicyForward

from test_e2e import _args


pytestmark = pytest.mark.slow  # training runs killed and resumed

class NaNLogprobsInjector:
    """Makes the logprobs of the training batches numbered in ``nan_at`` (0-based) NaN."""

    def __init__(self, monkeypatch, nan_at):
        self.nan_at = set(nan_at)
        self.weights_at_batch: list[torch.Tensor] = []
        original = PolicyForward.__call__
        injector = self

        def forward(policy_forward, batch, disable_adapter=False, hidden=False):
            logprobs, logits, final = original(policy_forward, batch, disable_adapter, hidden)
            if disable_adapter:
                return logprobs, logits, final
            batch_index = len(injector.weights_at_batch)
            model = policy_forward.model
            trainable = [p.detach().clone().flatten() for p in model.parameters() if p.requires_grad]
            injector.weights_at_batch.append(torch.cat(trainable))
            if batch_index in injector.nan_at:
                logprobs = logprobs * float("nan")
            return logprobs, logits, final

        monkeypatch.setattr(PolicyForward, "__call__", forward)


def test_a_nan_loss_skips_the_step_and_the_run_continues(tmp_path, monkeypatch, caplog):
    """Batch 1 is NaN: its step changes no weight (batch 2 starts from batch 1's weights) and the
    run still reaches max_steps 3, one batch later; the warning names the step and the batch."""
    injector = NaNLogprobsInjector(monkeypatch, nan_at={1})
    with caplog.at_level(logging.WARNING, logger="sp_lightning.module"):
        main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 3, "--model.micro_batch_size", "512")])
    weights = injector.weights_at_batch
    assert len(weights) == 4, "3 optimizer steps took 4 batches"
    assert not torch.equal(weights[0], weights[1]), "a normal step moves the weights"
    assert torch.equal(weights[1], weights[2]), "the NaN step moved nothing"
    assert not torch.equal(weights[2], weights[3])
    assert any("optimizer step 1 skipped (1 in a row): non-finite loss nan" in r.message for r in caplog.records)
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 3


def test_k_nan_steps_in_a_row_stop_the_run_with_a_message(tmp_path, monkeypatch):
    NaNLogprobsInjector(monkeypatch, nan_at=range(100))
    with pytest.raises(RuntimeError, match=r"2 optimizer steps in a row had a non-finite loss .*max_nonfinite_steps = 2"):
        main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 3, "--model.micro_batch_size", "512",
                            "--model.optimizer.max_nonfinite_steps", "2")])


def test_a_skipped_later_pass_keeps_the_learning_rate_schedule_on_the_training_step(tmp_path, monkeypatch):
    """``update_epochs: 2``: the schedule takes two steps per batch (its k-th at training step
    k / 2). Batch 0's second pass is NaN and nothing steps in it: the schedule still takes that
    batch's two steps, or every later pass would sit half a step behind ``global_step``."""
    from sp_lightning import build_from_config, make_trainer

    injector = NaNLogprobsInjector(monkeypatch, nan_at={1})  # the forwards: batch 0's two passes, then batch 1's
    module, dm = build_from_config("--config", "configs/tictactoe_tiny.yaml", "--model.update_epochs", "2",
                                   "--model.micro_batch_size", "512", "--data.episodes_per_batch", "8")
    trainer = make_trainer(max_steps=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), enable_progress_bar=False)
    trainer.fit(module, datamodule=dm)
    assert len(injector.weights_at_batch) == 4 and module.nonfinite_steps == 1
    assert trainer.global_step == 2 and trainer.lr_scheduler_configs[0].scheduler.last_epoch == 4


def test_the_count_of_nonfinite_steps_in_a_row_survives_a_resume(tmp_path, monkeypatch):
    """Batch 1's second pass (``update_epochs: 2``) is NaN after its first pass stepped: the run
    ends at step 2 with one non-finite step in a row. The checkpoint keeps the count, so a resumed
    run stops after as many more as the unbroken one would (it restarted from 0 before)."""
    from sp_lightning import build_from_config, make_trainer

    def run(max_steps, ckpt_path=None):
        module, dm = build_from_config("--config", "configs/tictactoe_tiny.yaml", "--model.update_epochs", "2",
                                       "--model.micro_batch_size", "512", "--data.episodes_per_batch", "8")
        trainer = make_trainer(max_steps=max_steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                               default_root_dir=str(tmp_path), enable_progress_bar=False)
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
        return module, trainer

    NaNLogprobsInjector(monkeypatch, nan_at={3})  # the forwards: batch 0's two passes, then batch 1's
    module, trainer = run(2)
    assert (module.nonfinite_in_a_row, module.nonfinite_steps) == ({"": 1}, 1)
    trainer.save_checkpoint(tmp_path / "step2.ckpt")
    resumed, _ = run(2, str(tmp_path / "step2.ckpt"))  # already at max_steps: it only loads
    assert (resumed.nonfinite_in_a_row, resumed.nonfinite_steps) == ({"": 1}, 1)
