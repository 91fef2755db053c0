"""SelfPlayModule parts: collation and masks, and that a step trains LoRA and only LoRA."""

import torch

from sp_lightning.model import LoraSettings, PolicySettings
from sp_lightning.collate import collate, split_micro_batches
from sp_lightning.module import LossSettings, OptimizerSettings, SelfPlayModule
from sp_lightning.rollout import SamplingSettings
from sp_lightning.types import LEARNER, TrainingRecord
import pytest


def _record(prompt, completion, adv=1.0):
    return TrainingRecord(prompt_ids=prompt, completion_ids=completion, logprobs=[-1.0] * len(completion),
                          advantage=adv, reward=adv, action_mask=[1] * len(completion))


def test_collate_right_aligns_completions_for_logits_to_keep():
    """prompt [5, 6, 7] + completion [8, 9] and prompt [5] + completion [8], left-padded to 5:
    the window K=2 holds each row's last 2 tokens; row 2's single completion token is the last."""
    batch = collate([_record([5, 6, 7], [8, 9]), _record([5], [8])], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [0, 0, 0, 5, 8]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 0, 1]]
    assert batch.targets.tolist() == [[8, 9], [5, 8]]
    assert batch.loss_mask.tolist() == [[1, 1], [0, 1]]
    assert batch.old_logprobs.tolist() == [[-1, -1], [0, -1]]


def test_micro_batches_are_cut_at_the_padded_token_budget_and_the_record_cap():
    """Lengths 4, 4, 6, 2, 10 (prompt + completion) with a 12-token budget: [4, 4] pads to 8
    and adding 6 would pad 3 x 6 = 18; [6, 2] pads to 12; 10 goes alone. A record longer than
    the budget is not dropped: it goes alone. Order is kept and every record is in one chunk."""
    records = [_record([1] * 3, [2]), _record([1] * 2, [2] * 2), _record([1] * 5, [2]), _record([1], [2]),
               _record([1] * 9, [2])]
    sizes = lambda chunks: [len(c) for c in chunks]
    chunks = split_micro_batches(records, max_records=64, max_tokens=12)
    assert sizes(chunks) == [2, 2, 1] and [r for c in chunks for r in c] == records
    assert sizes(split_micro_batches(records, max_records=64, max_tokens=5)) == [1, 1, 1, 1, 1]
    assert sizes(split_micro_batches(records, max_records=2, max_tokens=None)) == [2, 2, 1]
    assert sizes(split_micro_batches(records, max_records=64, max_tokens=None)) == [5]
    # max_train_tokens cuts the sequences before they are padded, so the budget counts it too
    assert sizes(split_micro_batches(records, max_records=64, max_tokens=12, max_train_tokens=4)) == [3, 2]


def test_micro_batch_tokens_must_be_positive():
    with pytest.raises(ValueError, match="model.micro_batch_tokens: expected an int >= 1 or null, got 0"):
        SelfPlayModule(policy=PolicySettings(model="tiny"), micro_batch_tokens=0)


def test_tokens_beyond_max_train_tokens_are_not_trained():
    batch = collate([_record([5, 6, 7], [8, 9, 10])], pad_id=0, max_tokens=4)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8]]
    assert batch.targets.tolist() == [[8]] and batch.loss_mask.tolist() == [[1]]


def test_the_tokens_the_loss_is_averaged_over_are_the_tokens_trained_on():
    """With ``max_train_tokens`` cutting sequences, the count the token-mean loss (and each
    micro-batch's share of the diagnostics) divides by is the tokens kept, not every completion token."""
    from sp_lightning.update import batch_counts

    records = [_record([5, 6, 7], [8, 9, 10]), _record([5], [8, 9]), _record([5, 6, 7, 8, 9], [10])]
    for cut in (None, 4, 2):
        trained = float(collate(records, pad_id=0, max_tokens=cut).loss_mask.sum())
        assert batch_counts({"": records}, cut)[""].tokens == trained, cut


def test_window_logprobs_equal_full_sequence_logprobs(tiny_policy):
    """The logits_to_keep window gives the same logprobs as a full forward on each sequence alone."""
    from sp_lightning.module import SelfPlayModule

    module = SelfPlayModule()
    records = [_record([5, 6, 7, 11], [8, 9]), _record([5, 12], [8])]
    batch = collate(records, module.tokenizer.pad_token_id)
    logprobs, _ = module.policy_forward(batch)[:2]
    for row, r in enumerate(records):
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        full = torch.log_softmax(module.model(input_ids=ids).logits[0, :-1].float(), -1)
        expected = full[-len(r.completion_ids):].gather(-1, ids[0, -len(r.completion_ids):, None])[:, 0]
        torch.testing.assert_close(logprobs[row, -len(r.completion_ids):], expected, atol=1e-5, rtol=1e-5)


def test_one_step_changes_lora_and_leaves_the_base_alone():
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(trainable_tokens=["moves"])),
                            optimizer=OptimizerSettings(lr=1e-2))
    tok = module.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "Legal moves: [4]"}],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    move = tok.convert_tokens_to_ids("[4]")
    records = [_record(list(prompt), [move], adv=1.0),
               _record(list(prompt), [tok.convert_tokens_to_ids("[0]")], adv=-1.0)]
    before = {n: p.detach().clone() for n, p in module.model.named_parameters()}
    opt = torch.optim.SGD([p for p in module.model.parameters() if p.requires_grad], lr=1e-2)  # plain descent: a sure direction
    batch = collate(records, tok.pad_token_id)
    from sp_lightning.loss_terms import PolicyGradient
    from tests.test_losses import policy_gradient_loss

    logprobs, _ = module.policy_forward(batch)[:2]
    loss, _ = policy_gradient_loss(logprobs, batch.old_logprobs, batch.advantages, batch.loss_mask)
    assert isinstance(LossSettings().terms()[0], PolicyGradient)
    loss.backward()
    opt.step()
    changed = {n for n, p in module.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed, "no weight changed"
    assert all("lora_" in n or "trainable_tokens" in n for n in changed), changed
    lora_b = [n for n in changed if "lora_B" in n]
    assert lora_b
    after, _ = module.policy_forward(batch)[:2]
    # the step moved probability from the penalised move towards the favoured one
    assert after[0, -1] - after[1, -1] > logprobs[0, -1] - logprobs[1, -1]


def test_loss_settings_check_the_aggregation():
    with pytest.raises(ValueError, match="loss.aggregation"):
        LossSettings(aggregation="mean")
    with pytest.raises(ValueError, match="loss.max_length"):
        LossSettings(aggregation="constant")


def test_learning_rate_schedule():
    """warm-up 2 steps: factors 0.5, 1.0; then cosine from 1.0 to 0.1 over steps 2..12:
    halfway (step 7) is 0.1 + 0.9 * 0.5 = 0.55, the end is 0.1."""
    opt = OptimizerSettings(warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    assert [opt.lr_factor(s, 12) for s in (0, 1, 2, 7, 12, 20)] == pytest.approx([0.5, 1.0, 1.0, 0.55, 0.1, 0.1])
    assert OptimizerSettings().lr_factor(500, 800) == 1.0
    # a later pass over a batch sits between two steps (update_epochs 2: step 1.5): never above the peak
    assert [opt.lr_factor(s, 12) for s in (0.5, 1.5, 2.5)] == pytest.approx([0.75, 1.0, opt.lr_factor(2.5, 12)])
    assert max(OptimizerSettings(warmup_steps=w).lr_factor(k / 2, 12) for w in (1, 2, 10) for k in range(40)) == 1.0
    with pytest.raises(ValueError, match="optimizer.schedule"):
        OptimizerSettings(schedule="linear")


def test_reference_logprobs_come_from_the_base_model_with_the_adapter_disabled():
    """The KL reference: with LoRA B moved off zero the policy differs from the base, and
    disable_adapter gives back exactly the base model's logprobs."""
    module = SelfPlayModule()
    batch = collate([_record([5, 6, 7, 11], [8, 9])], module.tokenizer.pad_token_id)
    with torch.no_grad():
        base, _ = module.policy_forward(batch)[:2]
        for name, p in module.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
        policy, _ = module.policy_forward(batch)[:2]
        reference, _ = module.policy_forward(batch, disable_adapter=True)[:2]
    assert not torch.allclose(policy, base)
    torch.testing.assert_close(reference, base)


def test_gradient_checkpointing_switch_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the same LoRA init in both
        module = SelfPlayModule(policy=PolicySettings(gradient_checkpointing=checkpointing))
        module.model.train()
        batch = collate([_record([5, 6, 7, 11], [8, 9]), _record([5, 12], [8])], module.tokenizer.pad_token_id)
        logprobs, _ = module.policy_forward(batch)[:2]
        (logprobs * batch.loss_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4)


def test_legal_move_token_ids_need_one_distinct_token_per_move(tiny_policy):
    """The tiny tokenizer holds each move as one token; a move spelled over several tokens (or
    unknown moves) gives None, and the loss then keeps the vocabulary entropy for that row."""
    module = SelfPlayModule()
    tok = module.tokenizer
    assert module.legal_moves.token_ids(["[0]", "[4]"]) == [tok.convert_tokens_to_ids("[0]"), tok.convert_tokens_to_ids("[4]")]
    assert module.legal_moves.token_ids(["[4]"]) == [tok.convert_tokens_to_ids("[4]")]
    assert module.legal_moves.token_ids(["raise the bet", "[4]"]) is None
    assert module.legal_moves.token_ids(["[4]", "[4]"]) is None  # one token for two moves: no choice point
    assert module.legal_moves.token_ids(None) is None and module.legal_moves.token_ids([]) is None


def test_magnet_pulls_mass_from_illegal_tokens_onto_the_legal_moves():
    """Only the magnet term acts (the module's legal-move mask, losses.legal_magnet_kl): 20 Adam
    steps raise the probability of the legal moves [0] and [4] by more than 0.3 at a prompt whose
    sampled answer [7] was illegal."""
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(trainable_tokens=["moves"])))
    tok = module.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "Legal moves: [0] [4]"}],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    record = _record(list(prompt), [tok.convert_tokens_to_ids("[7]")], adv=0.0)
    record.legal_actions = ["[0]", "[4]"]
    legal_ids = module.legal_moves.token_ids(record.legal_actions)
    batch = collate([record], tok.pad_token_id)
    opt = torch.optim.Adam([p for p in module.model.parameters() if p.requires_grad], lr=1e-2)

    def legal_mass():
        with torch.no_grad():
            _, logits = module.policy_forward(batch)[:2]
        return logits[0, -1].softmax(-1)[legal_ids].sum().item()

    before = legal_mass()
    from sp_lightning.losses import legal_magnet_kl

    for _ in range(20):
        _, logits = module.policy_forward(batch)[:2]
        first, legal, known = module.legal_moves.masks([record], batch, logits.shape[-1])
        assert known.tolist() == [True]
        legal_magnet_kl(logits, first, legal).sum().backward()
        opt.step()
        opt.zero_grad()
    assert legal_mass() > before + 0.3, (before, legal_mass())


def test_loss_settings_check_entropy_over():
    from sp_lightning.loss_terms import EntropyBonus

    with pytest.raises(ValueError, match="loss.entropy.over"):
        LossSettings(entropy=EntropyBonus(over="legal"))


@pytest.mark.slow
def test_update_epochs_take_several_optimizer_steps_on_each_batch(tmp_path):
    """update_epochs 2: two training steps are two batches, four optimizer steps (global_step
    counts the batches, the optimizer state its own steps), and the second pass on a batch sees a
    policy that moved since the batch was played (approx KL above 0)."""
    from tests.helpers import fit_batches

    trainer, batches = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 2, "--model.update_epochs", "2",
                                   "--data.episodes_per_batch", "4", "--model.optimizer.lr", "0.01")
    assert trainer.global_step == 2 and len(batches) == 2
    state = next(iter(trainer.optimizers[0].state.values()))
    assert int(state["step"]) == 4
    assert trainer.callback_metrics["train/approx_kl"] > 0
    with pytest.raises(ValueError, match="model.update_epochs: expected an int >= 1"):
        SelfPlayModule(update_epochs=0)


def _corrects(settings: LossSettings, records) -> bool:
    """Whether the surrogate corrects a micro-batch of ``records`` for another engine's logprobs."""
    from sp_lightning.collate import MicroBatch
    from sp_lightning.loss_terms import LossBatch

    micro = MicroBatch(records, None, 0.0)
    return settings.terms()[0].corrects(LossBatch(None, 1.0, 1.0, 0.0, micro.logprobs_from_trainer))


def test_importance_sampling_is_on_exactly_for_records_whose_logprobs_are_not_the_trainers(tmp_path):
    """auto: off for records of the HF worker in float32 (its copy runs the trainer's own forward:
    its completions say so; not in bf16), on for another engine's (vLLM, servers: the flag's default); on / off
    force it; the setting is checked."""
    from sp_lightning.rollout import HFRolloutWorker
    from sp_lightning.types import ModelRequest, TrainingRecord
    from sp_lightning.weight_sync import update_of

    module = SelfPlayModule()
    hf = HFRolloutWorker(module.model, module.tokenizer)
    (completion,) = hf.generate([ModelRequest("p", [{"role": "user", "content": "hi"}], LEARNER)],
                                SamplingSettings(max_new_tokens=2, temperature=0.7))
    assert completion.logprobs_from_trainer and completion.temperature == 0.7
    # a bf16 copy (a GPU run's) decodes with bf16 rounding the trainer's forward does not share
    send = update_of(module.model, 1)
    send.base_dtype = torch.bfloat16
    hf.load_weights(send)
    (completion,) = hf.generate([ModelRequest("p", [{"role": "user", "content": "hi"}], LEARNER)],
                                SamplingSettings(max_new_tokens=2))
    assert not completion.logprobs_from_trainer
    ours = [TrainingRecord([1], [2], [-0.1], 1.0, 1.0, [1], logprobs_from_trainer=True)]
    engine_s = [TrainingRecord([1], [2], [-0.1], 1.0, 1.0, [1])]  # vLLM's and the servers' completions
    assert not _corrects(LossSettings(), ours)
    assert _corrects(LossSettings(), engine_s) and _corrects(LossSettings(), ours + engine_s)
    assert not _corrects(LossSettings(importance_sampling="off"), engine_s)
    assert _corrects(LossSettings(importance_sampling="on"), ours)  # forced on, even for the trainer's own
    with pytest.raises(ValueError, match="loss.importance_sampling"):
        LossSettings(importance_sampling="sometimes")
    with pytest.raises(ValueError, match="loss.tis_cap"):
        LossSettings(tis_cap=0)


def test_a_term_named_in_the_config_joins_the_loss_and_is_logged(tmp_path):
    """model.loss.extra by class_path, as a config names it: the run's terms end with it, and a
    step logs its diagnostic."""
    from tests.helpers import fit_batches

    extra = '[{"class_path": "sp_lightning.loss_terms.ZLoss", "init_args": {"coef": 0.001}}]'
    trainer, _ = fit_batches("configs/tictactoe_tiny.yaml", tmp_path, 1, "--model.loss.extra", extra,
                             "--data.episodes_per_batch", "4")
    assert type(trainer.lightning_module.terms_of[""][-1]).__name__ == "ZLoss"
    assert trainer.logged_metrics["train/z_loss"] > 0


def test_the_logged_learning_rate_and_entropy_coefficient_are_those_the_step_used():
    """train/lr and train/entropy_coef sit beside the loss they produced: read before the step
    moved the optimizer and the schedules on (they showed the next step's values)."""
    import lightning as L

    from sp_lightning import build_from_config, make_trainer

    module, dm = build_from_config("--config", "configs/tictactoe_tiny.yaml", "--model.update_epochs", "1",
                                   "--model.optimizer.warmup_steps", "4", "--data.episodes_per_batch", "4",
                                   "--model.loss.entropy.coef", "{start: 0.1, steps: 2}")
    used, logged = [], []
    step_optimizers = module.step_optimizers

    def spy(counted):
        used.append((module.optimizers().param_groups[0]["lr"], module.loss_of[""].entropy.coef.at(module.global_step)))
        step_optimizers(counted)

    module.step_optimizers = spy

    class Logged(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            metrics = trainer.callback_metrics
            logged.append((float(metrics["train/lr"]), float(metrics["train/entropy_coef"])))

    trainer = make_trainer(max_steps=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           enable_progress_bar=False, callbacks=[Logged()])
    trainer.fit(module, datamodule=dm)
    assert len(used) == len(logged) == 3
    assert [lr for lr, _ in logged] == pytest.approx([lr for lr, _ in used])
    assert [coef for _, coef in logged] == pytest.approx([coef for _, coef in used]) == [0.1, 0.05, 0.005]
    assert len({lr for lr, _ in used}) == 3  # the warm-up moves it every step
