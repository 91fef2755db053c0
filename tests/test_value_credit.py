"""GAE credit with a learned value head: the estimates by hand, the records' trajectories, the
value head's hidden state, and a fit that trains the head."""

import pytest
import torch

from sp_lightning.batch import to_records
from sp_lightning.credit import GAE, gae
from sp_lightning.collate import collate
from sp_lightning.module import SelfPlayModule
from sp_lightning.types import Completion, PolicyRef, Rollout, Step, TrainingRecord
from sp_lightning.value_head import ValueHeads, capture_final_hidden, prompt_end_hidden


def test_gae_by_hand():
    """rewards [0, 0, 1], values [0.5, 0.2, 0.8], discount 1:
    deltas: d2 = 1 + 0 - 0.8 = 0.2, d1 = 0 + 0.8 - 0.2 = 0.6, d0 = 0 + 0.2 - 0.5 = -0.3.
    lam 0.5: A2 = 0.2, A1 = 0.6 + 0.5 * 0.2 = 0.7, A0 = -0.3 + 0.5 * 0.7 = 0.05.
    lam 1: the return minus V: [0.5, 0.8, 0.2]. lam 0: the deltas.
    discount 0.9, lam 1: returns [0.81, 0.9, 1] minus V: [0.31, 0.7, 0.2]."""
    rewards, values = [0.0, 0.0, 1.0], [0.5, 0.2, 0.8]
    assert gae(rewards, values, 1.0, 0.5) == pytest.approx([0.05, 0.7, 0.2])
    assert gae(rewards, values, 1.0, 1.0) == pytest.approx([0.5, 0.8, 0.2])
    assert gae(rewards, values, 1.0, 0.0) == pytest.approx([-0.3, 0.6, 0.2])
    assert gae(rewards, values, 0.9, 1.0) == pytest.approx([0.31, 0.7, 0.2])


def record(trajectory, turn, reward, step_reward=0.0):
    return TrainingRecord(prompt_ids=[1], completion_ids=[2], logprobs=[-1.0], advantage=reward, reward=reward,
                          action_mask=[1], trajectory=trajectory, turn=turn, step_reward=step_reward)


def test_advantages_chain_each_trajectory_by_turn_with_the_outcome_at_its_end():
    """Trajectory a: turns 1, 0 (given out of order), outcome +1; turn 1 an invalid move (-3, so
    its reward is 1 - 3 = -2, step reward -3). Trajectory b: one decision, outcome -1.
    values: a0 0.4, a1 0.6, b0 -0.5; discount 1. The outcome's lambda-returns are the targets
    and the step's own reward is added to its advantage only:
    lam 1: a: targets [1, 1], A = [1 - 0.4, -3 + 1 - 0.6] = [0.6, -2.6]; b: target -1, A = -0.5.
    lam 0: a0: target V(a1) = 0.6, A = 0.6 - 0.4 = 0.2; a1 as with lam 1 (the last decision).
    In record order (a1, b0, a0)."""
    records = [record("0/x", 1, -2.0, step_reward=-3.0), record("1/o", 0, -1.0), record("0/x", 0, 1.0)]
    advantages, targets = GAE(lam=1.0).advantages(records, [0.6, -0.5, 0.4])
    assert advantages == pytest.approx([-2.6, -0.5, 0.6])
    assert targets == pytest.approx([1.0, -1.0, 1.0])
    advantages, targets = GAE(lam=0.0).advantages(records, [0.6, -0.5, 0.4])
    assert advantages == pytest.approx([-2.6, -0.5, 0.2])
    assert targets == pytest.approx([1.0, -1.0, 0.6])
    normalized, _ = GAE(lam=1.0, normalize=True).advantages(records, [0.6, -0.5, 0.4])
    mean = sum(normalized) / 3
    assert mean == pytest.approx(0.0, abs=1e-6)
    assert sum((a - mean) ** 2 for a in normalized) / 3 == pytest.approx(1.0, rel=1e-4)


def test_records_carry_their_trajectory_turn_and_step_reward():
    """Mirror self-play, x moves twice (the second an invalid move, -3) and o once, a bot
    between: x's records are turns 0 and 1 of rollout 0's x, o's turn 0 of its o; a second
    rollout's trajectories are its own. compute gives each step its return (GAE until the
    trainer has values): x 1 + 0, 1 - 3; o -1."""
    def move(role, reward=0.0):
        return Step(role, Completion("[1]", prompt_ids=[1], completion_ids=[2]), reward=reward)

    bot = Step("o", Completion("[3]", completion_ids=[2], policy=PolicyRef("bot", "random")))
    rollouts = [Rollout("ttt", steps=[move("x"), move("o"), bot, move("x", -3.0)], rewards={"x": 1.0, "o": -1.0}),
                Rollout("ttt", steps=[move("x")], rewards={"x": 0.0, "o": 0.0})]
    credit = GAE()
    credit.assign(rollouts)
    records = to_records(rollouts)
    assert [(r.trajectory, r.turn, r.step_reward) for r in records] == [
        ("0/x", 0, 0.0), ("0/o", 0, 0.0), ("0/x", 1, -3.0), ("1/x", 0, 0.0)]
    assert [r.advantage for r in records] == [1.0, -1.0, -2.0, 0.0]


def test_gae_settings_name_the_key():
    with pytest.raises(ValueError, match="credit.lam"):
        GAE(lam=1.5)
    with pytest.raises(ValueError, match="credit.discount"):
        GAE(discount=0.0)
    with pytest.raises(ValueError, match="credit.value_coef"):
        GAE(value_coef=0.0)


@pytest.mark.parametrize("share", [False, True])
def test_the_value_reads_the_last_hidden_state_at_the_end_of_each_prompt(share):
    """Completions of 1, 2 and 3 tokens (a window of 3), four rows sharing a prompt: the hidden
    state caught at each row's value column is the model's last hidden state at its prompt's
    last token in a forward of that prompt alone, on the plain and the shared-prompt layouts."""
    module = SelfPlayModule()
    model = module.model
    prompt_a, prompt_b = [5, 6, 7, 11, 12, 13, 14, 15], [5, 12]
    records = [TrainingRecord(prompt_ids=p, completion_ids=c, logprobs=[-1.0] * len(c), advantage=0.0, reward=0.0,
                              action_mask=[1] * len(c))
               for p, c in ((prompt_a, [8]), (prompt_a, [8, 9]), (prompt_a, [10]), (prompt_a, [9, 8]),
                            (prompt_b, [9, 10, 11]))]
    batch = collate(records, module.tokenizer.pad_token_id, share_prompts=share)
    assert (batch.shared is not None) == share
    with torch.no_grad():
        with capture_final_hidden(model) as captured:
            module.policy_forward(batch)[:2]
        hidden = prompt_end_hidden(captured["hidden"], batch.value_column)
        for row, r in enumerate(records):
            alone = model(input_ids=torch.tensor([r.prompt_ids]), output_hidden_states=True).hidden_states[-1]
            torch.testing.assert_close(hidden[row], alone[0, -1], atol=1e-5, rtol=1e-5)


def test_value_heads_start_at_zero_one_per_learner():
    heads = ValueHeads(["", "exploiter"], hidden_size=4)
    hidden = torch.randn(3, 4)
    assert heads("", hidden).tolist() == [0.0, 0.0, 0.0]
    assert set(heads.heads) == {"default", "exploiter"}


@pytest.mark.slow
def test_a_fit_with_gae_trains_its_value_head_saves_it_and_resumes_with_it(tmp_path):
    """Four steps of Tic-Tac-Toe with GAE credit: the value head moves off zero, its weights are
    in the checkpoint beside the adapter, a resumed fit goes on from them (its first value pass
    reads the saved head), and ``evaluate`` loads the checkpoint (the head is no part of the
    policy it plays)."""
    from sp_lightning.cli import main
    from tests.test_e2e import _args

    credit = ["--data.credit", '{"class_path": "sp_lightning.credit.GAE", "init_args": {"lam": 0.9}}']
    main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 4), *credit])
    last = tmp_path / "ckpt" / "last.ckpt"
    state = torch.load(last, weights_only=False)["state_dict"]
    head = {k: v for k, v in state.items() if k.startswith("value_heads.")}
    assert set(head) == {"value_heads.heads.default.weight", "value_heads.heads.default.bias"}
    assert head["value_heads.heads.default.weight"].abs().sum() > 0, "the value head never trained"
    assert any("lora_B" in k for k in state)

    main(["fit", *_args("tictactoe_tiny.yaml", tmp_path, 6), *credit, "--ckpt_path", str(last)])
    resumed = torch.load(last, weights_only=False)
    assert resumed["global_step"] == 6
    unbroken_root = tmp_path / "unbroken"
    unbroken_root.mkdir()
    main(["fit", *_args("tictactoe_tiny.yaml", unbroken_root, 6), *credit])
    unbroken = torch.load(unbroken_root / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    for key, value in unbroken.items():  # the resumed head (and adapter) are the unbroken run's
        torch.testing.assert_close(resumed["state_dict"][key], value, rtol=0, atol=0, msg=key)

    main(["evaluate", "--config", "configs/tictactoe_tiny.yaml", "--checkpoint", str(last),
          "--games_per_seat", "2", "--seed", "5"])


def test_a_fit_whose_module_was_not_given_the_learning_credit_is_refused(tmp_path):
    """GAE's value heads train in the module's loss: a module built without the data block's
    credit would train on advantages from heads that never learn, so the fit stops first and
    says how to link them."""
    from sp_lightning.data import SelfPlayDataModule
    from sp_lightning.games import GameSettings
    from sp_lightning.trainer import make_trainer

    data = SelfPlayDataModule(games=[GameSettings(id="tictactoe_v1")], credit=GAE(), episodes_per_batch=2)
    trainer = make_trainer(max_steps=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"data.credit: GAE learns values.*SelfPlayModule\(credit="):
        trainer.fit(SelfPlayModule(), datamodule=data)
