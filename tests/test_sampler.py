"""The HF backend's sampler draws what ``model.generate`` draws, with the same processed logprobs."""

import pytest
import torch

from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.padding import left_pad
from sp_lightning.rollout.sampler import processed_logits, sample


def generate(model, input_ids, attention_mask, sampling, tok):
    """``model.generate`` with the settings the HF worker used before it had its own sampler:
    (tokens, logprobs of the processed scores)."""
    greedy = sampling.temperature == 0
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, do_sample=not greedy, output_scores=True,
                  return_dict_in_generate=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    kwargs.update(dict(temperature=None, top_p=None, top_k=None) if greedy else
                  dict(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k))
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    tokens = out.sequences[:, input_ids.shape[1]:]
    scores = torch.stack(out.scores, dim=1).float()
    return tokens, torch.log_softmax(scores, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("sampling", [
    SamplingSettings(max_new_tokens=1, temperature=1.0),
    SamplingSettings(max_new_tokens=6, temperature=1.0),
    SamplingSettings(max_new_tokens=6, temperature=0.7, top_k=20, top_p=0.9),
    SamplingSettings(max_new_tokens=6, temperature=0.0),
], ids=["one token", "six tokens", "warped", "greedy"])
def test_the_sampler_draws_the_tokens_generate_draws(tiny_policy, sampling):
    """Prompts of different lengths (left-padded), the same random state: the same tokens, the
    rows that ended padded after their end-of-turn token, logprobs within float rounding (on
    the tokens up to each row's end of turn: after it generate keeps the scores of the pad)."""
    model, tok = tiny_policy
    model.eval()
    prompts = [tok.encode(text) for text in ("Tic-Tac-Toe. You are X.", "[3]", "Legal moves: [1] [2] [5] [7]")] * 6
    input_ids, attention_mask = left_pad(prompts, tok.pad_token_id)
    torch.manual_seed(5)
    expected, expected_logprobs = generate(model, input_ids, attention_mask, sampling, tok)
    torch.manual_seed(5)
    tokens, logprobs = sample(model, input_ids, attention_mask, sampling, tok.eos_token_id, tok.pad_token_id)
    assert tokens.tolist() == expected.tolist()
    for row, ids in enumerate(tokens.tolist()):
        end = ids.index(tok.eos_token_id) + 1 if tok.eos_token_id in ids else len(ids)
        torch.testing.assert_close(logprobs[row, :end], expected_logprobs[row, :end], atol=1e-5, rtol=1e-5)


def test_processed_logits_by_hand():
    """logits [2, 1, 0, -1] at temperature 0.5 -> [4, 2, 0, -2]; top_k 2 keeps [4, 2]; top_p 0.5
    keeps the most likely token alone (its probability 0.87 already passes 0.5); greedy leaves
    the logits as they are."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    inf = float("inf")
    assert processed_logits(logits, SamplingSettings(temperature=0.5)).tolist() == [[4.0, 2.0, 0.0, -2.0]]
    assert processed_logits(logits, SamplingSettings(temperature=0.5, top_k=2)).tolist() == [[4.0, 2.0, -inf, -inf]]
    assert processed_logits(logits, SamplingSettings(temperature=0.5, top_p=0.5)).tolist() == [[4.0, -inf, -inf, -inf]]
    assert processed_logits(logits, SamplingSettings(temperature=0.0, top_k=1)).tolist() == logits.tolist()


def test_completions_sampled_from_a_truncated_distribution_say_their_logprobs_are_not_the_trainers(tiny_policy):
    """top-p / top-k renormalise over the tokens they keep, which the trainer's logprobs do not:
    the HF worker's completions then say so (and the surrogate, under importance_sampling
    "auto", corrects them); plain temperature and greedy sampling stay the trainer's own (float32)."""
    from sp_lightning.rollout import HFRolloutWorker
    from sp_lightning.types import LEARNER, ModelRequest

    model, tok = tiny_policy
    worker = HFRolloutWorker(model, tok)
    request = ModelRequest(role="player_0", messages=[{"role": "user", "content": "Legal moves: [1] [2]"}],
                           policy=LEARNER)
    said = {}
    for name, sampling in {"plain": SamplingSettings(temperature=0.7), "greedy": SamplingSettings(temperature=0.0),
                           "top_p": SamplingSettings(temperature=0.7, top_p=0.5),
                           "top_k": SamplingSettings(temperature=1.0, top_k=5)}.items():
        (completion,) = worker.generate([request], sampling)
        said[name] = completion.logprobs_from_trainer
    assert said == {"plain": True, "greedy": True, "top_p": False, "top_k": False}
    assert SamplingSettings(temperature=0.0, top_p=0.5).truncates is False  # greedy draws the argmax
