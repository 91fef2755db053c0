"""Shared-prompt training forward: the same logprobs and gradients as the plain forward, at a
fraction of the tokens, and the plain layout wherever sharing does not pay or apply."""

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings
from sp_lightning.collate import collate
from sp_lightning.module import SelfPlayModule
from sp_lightning.shared_prompts import collate_shared, group_by_prompt
from sp_lightning.types import TrainingRecord


def _record(prompt, completion, adv=1.0):
    return TrainingRecord(prompt_ids=list(prompt), completion_ids=list(completion),
                          logprobs=[-1.0] * len(completion), advantage=adv, reward=adv,
                          action_mask=[1] * len(completion))


def _grpo_records(tokenizer, groups=3, per_group=4):
    """``groups`` chat prompts of different lengths, ``per_group`` completions of 0-3 tokens
    each (an empty one included: an answer cut before its first token trains nothing), plus a
    prompt of its own (a group of one)."""
    moves = [tokenizer.convert_tokens_to_ids(f"[{k}]") for k in range(9)]
    records = []
    for g in range(groups):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Board " + "x" * (3 * g) + f" {g}"}],
                                               add_generation_prompt=True, tokenize=True, return_dict=False)
        for k in range(per_group):
            completion = moves[(g + k) % 9 : (g + k) % 9 + k % 4]
            records.append(_record(prompt, completion, adv=1.0 if k % 2 else -1.0))
    lone = tokenizer.apply_chat_template([{"role": "user", "content": "alone"}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
    records.append(_record(lone, moves[:2]))
    return records


@pytest.mark.parametrize("trainable_tokens", [None, ["moves"]])
def test_shared_forward_gives_the_plain_logprobs_and_gradients(trainable_tokens):
    """Distinct prompts computed once, completions per row: the window logprobs and every
    LoRA gradient (and trainable token rows') match the plain forward's within float rounding."""
    torch.manual_seed(0)
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(trainable_tokens=trainable_tokens)))
    module.model.train()
    with torch.no_grad():  # a trained-looking adapter, so that the LoRA path is not a no-op
        for name, p in module.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    records = _grpo_records(module.tokenizer)
    pad = module.tokenizer.pad_token_id
    plain, shared = collate(records, pad), collate(records, pad, share_prompts=True)
    assert plain.shared is None and shared.shared is not None
    assert shared.shared.input_ids.shape[0] == 4  # three groups and the lone prompt
    for name in ("loss_mask", "old_logprobs", "advantages"):
        assert torch.equal(getattr(plain, name), getattr(shared, name)), name
    trained_columns = plain.loss_mask.bool()  # elsewhere the layouts differ (prompt vs padding)
    assert torch.equal(plain.targets[trained_columns], shared.targets[trained_columns])
    trained = [p for p in module.model.parameters() if p.requires_grad]
    results = []
    for batch in (plain, shared):
        logprobs, _ = module.policy_forward(batch)[:2]
        grads = torch.autograd.grad((logprobs * batch.loss_mask * batch.advantages[:, None]).sum(), trained)
        results.append((logprobs * batch.loss_mask, grads))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    assert any(g.abs().sum() > 0 for g in results[0][1])
    for plain_grad, shared_grad in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(shared_grad, plain_grad, atol=1e-5, rtol=1e-4)


def test_shared_layout_positions_continue_each_prompt():
    """Prompts [5, 6, 7] (x2) and [5, 9]: the prompt pass holds [5, 6] and [5] left-padded; each
    suffix is the prompt's last token then the completion, positions continuing the prompt."""
    records = [_record([5, 6, 7], [8, 9]), _record([5, 6, 7], [8]), _record([5, 9], [4])] * 2
    suffix_ids, suffix_mask, positions, shared = collate_shared(records, pad_id=0)
    assert shared.input_ids.tolist() == [[5, 6], [0, 5]]
    assert shared.position_ids.tolist() == [[0, 1], [0, 0]]
    assert shared.row_prompt.tolist() == [0, 0, 1] * 2
    assert suffix_ids[:3].tolist() == [[7, 8, 9], [0, 7, 8], [0, 9, 4]]
    assert suffix_mask[:3].tolist() == [[1, 1, 1], [0, 1, 1], [0, 1, 1]]
    assert positions[:3].tolist() == [[2, 3, 4], [2, 2, 3], [1, 1, 2]]


def test_sharing_is_skipped_where_it_does_not_pay_or_apply():
    distinct = [_record([5, 6, k], [8]) for k in range(10, 16)]
    assert collate_shared(distinct, pad_id=0) is None  # every prompt its own: no saving
    one_token = [_record([5], [8])] * 6
    assert collate_shared(one_token, pad_id=0) is None  # nothing before the last prompt token
    same = [_record(list(range(1, 30)), [8])] * 6
    assert collate_shared(same, pad_id=0) is not None
    empty = [_record(list(range(1, 30)), [])] * 6  # answers cut before their first token
    assert collate_shared(empty, pad_id=0) is None and collate(empty, 0, share_prompts=True).targets.shape == (6, 1)
    # a cut sequence (max_train_tokens) keeps the plain layout, which cuts it
    assert collate(same, pad_id=0, max_tokens=10, share_prompts=True).shared is None


def test_records_are_grouped_by_prompt_in_first_seen_order():
    a1, b1, a2, c1, b2 = (_record(p, [k]) for k, p in enumerate([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4]]))
    assert group_by_prompt([a1, b1, a2, c1, b2]) == [a1, a2, b1, b2, c1]


def test_gradient_checkpointing_turns_sharing_off():
    """Hugging Face models keep no key/value cache under gradient checkpointing in training."""
    assert SelfPlayModule().shares_prompts
    assert not SelfPlayModule(share_prompts=False).shares_prompts
    assert not SelfPlayModule(policy=PolicySettings(gradient_checkpointing=True)).shares_prompts
