"""The policy factory: tiny preset offline and deterministic, local directories, LoRA, errors."""

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings, TinyModelSettings, load_base, load_policy
from envs import GAMES


def test_tiny_preset_is_deterministic_and_holds_every_move_of_its_games_as_one_token():
    (m1, t1), (m2, t2) = load_base(PolicySettings()), load_base(PolicySettings())
    assert t1.get_vocab() == t2.get_vocab()
    for (n1, p1), (n2, p2) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    for game_id in TinyModelSettings().games:
        for move in GAMES[game_id].game_info.moves:
            ids = t1.encode(move, add_special_tokens=False)
            assert len(ids) == 1 and ids[0] < m1.config.vocab_size, move


def test_chat_template_ends_with_the_assistant_turn(tiny_policy):
    _, tok = tiny_policy
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"


def test_lora_trains_only_the_adapter_and_the_move_rows():
    model, tok = load_policy(PolicySettings(lora=LoraSettings(r=4, trainable_tokens=["[4]", "[bet]"])))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "trainable_tokens" in n for n in trainable)


def test_unknown_trainable_token_names_the_key():
    with pytest.raises(ValueError, match="trainable_tokens"):
        load_policy(PolicySettings(lora=LoraSettings(trainable_tokens=["[not a move]"])))


def test_loads_a_local_directory_as_a_hub_model_would_be(tmp_path):
    """The hub-loading path, exercised on a directory written by save_pretrained."""
    base, tok = load_base(PolicySettings())
    base.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, tok2 = load_policy(PolicySettings(model=str(tmp_path), lora=LoraSettings(r=2)))
    assert tok2.get_vocab() == tok.get_vocab()
    ids = torch.tensor([tok.encode("Legal moves: [4]")])
    with model.disable_adapter():
        torch.testing.assert_close(model(input_ids=ids).logits, base(input_ids=ids).logits)


def test_warm_start_from_an_adapter_directory(tmp_path):
    model, _ = load_policy(PolicySettings(lora=LoraSettings(r=2)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    model.save_pretrained(tmp_path)
    warm, _ = load_policy(PolicySettings(adapter_path=str(tmp_path)))
    saved = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    loaded = {n: p for n, p in warm.named_parameters() if "lora_B" in n}
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[n], loaded[n]) for n in saved)
    assert all(p.requires_grad for p in loaded.values())


def test_bad_model_and_dtype_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="policy.model"):
        load_policy(PolicySettings(model=str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="policy.dtype"):
        load_policy(PolicySettings(dtype="float8"))
    with pytest.raises(ValueError, match="policy.adapter_path"):
        load_policy(PolicySettings(adapter_path=str(tmp_path / "missing")))


def test_tiny_tokenizer_depends_on_its_config_not_on_the_registry(monkeypatch):
    """Registering a new game must not change the tiny base that adapter checkpoints rely on."""
    import envs

    before = load_base(PolicySettings())[1].get_vocab()
    monkeypatch.setitem(envs.GAMES, "copy_of_kuhn_v9", envs.GAMES["kuhn_poker_v1"])
    assert load_base(PolicySettings())[1].get_vocab() == before
