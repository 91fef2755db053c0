"""Policy routing in the HF worker: learner, base (adapter off) and saved checkpoints as named
peft adapters, mixed in one batch (peft's adapter_names), with an LRU cap on adapters held at once."""

from contextlib import nullcontext

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings, load_policy
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef
from tests.helpers import send_weights

PROMPT = [{"role": "user", "content": "Tic-Tac-Toe. You are X.\n[0] [1] [2]\n[3] [4] [5]\n[6] [7] [8]\nLegal moves: [0] [1] [2] [3] [4] [5] [6] [7] [8]"}]
MOVES = [f"[{i}]" for i in range(9)]


@pytest.fixture
def policy():
    """A fresh policy for each test: the tests move its weights, and a model moved by every test
    before grows activations large enough that float32's rounding differs from one process (or
    thread count) to the next by more than the 1e-5 the scores are compared at."""
    return load_policy(PolicySettings(lora=LoraSettings(r=8, alpha=16, trainable_tokens=["moves"])))


def _perturb(model, scale, *workers):
    """Move the trained weights, as an optimizer step would, and send them to ``workers``."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * scale)
    for worker in workers:
        send_weights(worker, model)


def _plain_scores(model, tok, messages, candidates) -> list[float]:
    """Each candidate's logprob after the prompt from one forward of prompt + candidate, in eval mode."""
    from sp_lightning.rollout.chat import encode_chat

    prompt, scores = encode_chat(tok, messages), []
    model.eval()
    with torch.no_grad():
        for text in candidates:
            ids = tok.encode(text, add_special_tokens=False)
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
            logprobs = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
            scores.append(float(logprobs.gather(-1, torch.tensor(ids).unsqueeze(-1)).sum()))
    return scores


def _scores(worker, policy_ref):
    return worker.completion_logprobs([ModelRequest("player_0", PROMPT, policy_ref)], [MOVES])[0]


def test_checkpoints_serve_their_saved_weights_beside_the_learner(policy, tmp_path):
    model, tok = policy
    # peft's routing for the learner too: the checkpoints are compared with the learner's scores
    # when they were saved, and the merged copy's agree within 1e-4, not 1e-5 (see below)
    worker = HFRolloutWorker(model, tok, max_adapters=2, merge_learner=False)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    saved = {}
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        torch.manual_seed(seed)
        _perturb(model, 0.3, worker)
        model.save_pretrained(tmp_path / name, selected_adapters=["default"])
        saved[name] = _scores(worker, LEARNER)
        worker.register_adapter(name, str(tmp_path / name))
    _perturb(model, 0.3, worker)  # the learner moves on
    learner_now = _scores(worker, LEARNER)
    for name in ("a", "b", "c"):
        torch.testing.assert_close(_scores(worker, PolicyRef("checkpoint", name)), saved[name], atol=1e-5, rtol=0)
    assert len(worker.loaded) == 2 and list(worker.loaded) == ["b", "c"], "LRU: 'a' was unloaded first"
    torch.testing.assert_close(_scores(worker, LEARNER), learner_now)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == trainable, "serving changes nothing that trains"
    assert set(model.peft_config) == {"default"}, "no checkpoint adapter was loaded into the trained model"
    with model.disable_adapter():  # a worker whose copy has the adapter off: the base model
        base = _scores(HFRolloutWorker(model, tok, merge_learner=False), LEARNER)  # a merged copy would merge it back
    torch.testing.assert_close(_scores(worker, PolicyRef("base")), base)


def test_each_completion_names_its_policy_and_version(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok)
    model.save_pretrained(tmp_path / "x", selected_adapters=["default"])
    worker.register_adapter("x", str(tmp_path / "x"))
    send_weights(worker, model, 7)
    requests = [ModelRequest("p", PROMPT, ref) for ref in (LEARNER, PolicyRef("checkpoint", "x"), LEARNER, PolicyRef("base"))]
    out = worker.generate(requests, SamplingSettings(max_new_tokens=1))
    assert [c.policy for c in out] == [r.policy for r in requests]
    assert out[0].policy_version == 7 and out[1].policy_version == 0


def test_unknown_checkpoint_and_bad_directory_are_clear_errors(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok)
    with pytest.raises(ValueError, match="no adapter registered"):
        _scores(worker, PolicyRef("checkpoint", "nope"))
    with pytest.raises(ValueError, match="adapter_config.json"):
        worker.register_adapter("bad", str(tmp_path))


def test_mixed_policies_share_one_call_and_match_each_policy_served_alone(policy, tmp_path):
    """Learner, base and two checkpoints in one batch: one generate call (peft's mixed-adapter
    rows), the same scores and greedy moves as each policy served on its own."""
    model, tok = policy
    # peft's routing on both sides: a learner-only call would otherwise go to the merged copy,
    # whose logprobs agree within 1e-4, not 1e-5 (test_merged_learner_serves_the_same_policy...)
    worker = HFRolloutWorker(model, tok, max_adapters=2, merge_learner=False)
    for name, seed in (("m1", 11), ("m2", 12)):
        torch.manual_seed(seed)
        _perturb(model, 0.5, worker)
        model.save_pretrained(tmp_path / name, selected_adapters=["default"])
        worker.register_adapter(name, str(tmp_path / name))
    _perturb(model, 0.5, worker)  # the learner moves on
    refs = [LEARNER, PolicyRef("checkpoint", "m1"), PolicyRef("base"), PolicyRef("checkpoint", "m2"), LEARNER]
    alone = [_scores(worker, ref) for ref in refs]
    requests = [ModelRequest("p", PROMPT, ref) for ref in refs]
    mixed = worker.completion_logprobs(requests, [MOVES] * len(refs))
    for got, want in zip(mixed, alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert len({tuple(round(v, 3) for v in s) for s in alone}) == 4, "four different policies"

    greedy = SamplingSettings(max_new_tokens=2, temperature=0.0)
    alone_out = [worker.generate([request], greedy)[0] for request in requests]
    calls = []
    original = worker._generate_ids
    worker._generate_ids = lambda prompts, p, s: calls.append(list(p)) or original(prompts, p, s)
    out = worker.generate(requests, greedy)
    assert len(calls) == 1 and sorted(map(str, calls[0])) == sorted(map(str, refs))
    assert [c.policy for c in out] == refs
    assert [c.completion_ids for c in out] == [c.completion_ids for c in alone_out]
    for got, want in zip(out, alone_out):
        torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-5, rtol=0)


def test_a_call_holds_at_most_max_adapters_checkpoints_and_max_batch_size_rows(policy, tmp_path):
    model, tok = policy
    worker = HFRolloutWorker(model, tok, max_batch_size=4, max_adapters=2)
    assert worker.adapter_slots == 2, "what the league's cluster sampling keeps a batch within"
    refs = [PolicyRef("checkpoint", n) for n in "abc"] + [LEARNER] * 5
    calls = worker._calls(refs)
    assert sorted(i for call in calls for i in call) == list(range(len(refs)))
    for call in calls:
        assert len(call) <= 4
        assert len({refs[i] for i in call if refs[i].kind == "checkpoint"}) <= 2


def _generated_logprobs(worker, refs):
    """Greedy one-token answers' (token ids, logprobs) for one request per ref."""
    completions = worker.generate([ModelRequest("p", PROMPT, ref) for ref in refs],
                                  SamplingSettings(max_new_tokens=1, temperature=0.0))
    return [c.completion_ids for c in completions], torch.tensor([c.logprobs for c in completions])


def test_merged_learner_serves_the_same_policy_and_follows_every_weight_change(policy, tmp_path):
    model, tok = policy
    plain = HFRolloutWorker(model, tok, merge_learner=False)
    merged = HFRolloutWorker(model, tok, merge_learner=True)
    assert HFRolloutWorker(model, tok).merge_learner  # the default for a model this small
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for round_ in range(3):
        torch.manual_seed(round_)
        _perturb(model, 0.2, plain, merged)
        ids_plain, lp_plain = _generated_logprobs(plain, [LEARNER] * 3)
        ids_merged, lp_merged = _generated_logprobs(merged, [LEARNER] * 3)
        assert ids_merged == ids_plain
        torch.testing.assert_close(lp_merged, lp_plain, atol=1e-4, rtol=0)
        # scoring (exploitability's strategy) is served by the same copy
        torch.testing.assert_close(_scores(merged, LEARNER), _scores(plain, LEARNER), atol=1e-4, rtol=0)
        assert merged.merges == round_ + 1, "made current once per weight update, reused within it"
    # an optimizer step (in place, as in fit) is a weight change too
    model.train()
    logits = model(input_ids=torch.tensor([tok.encode("[1] [2]")])).logits
    logits[0, -1, tok.convert_tokens_to_ids("[4]")].backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()
    for worker in (plain, merged):
        send_weights(worker, model)
    ids_plain, lp_plain = _generated_logprobs(plain, [LEARNER])
    ids_merged, lp_merged = _generated_logprobs(merged, [LEARNER])
    assert merged.merges == 4 and ids_merged == ids_plain
    assert merged._merged.builds == 1, "built once, then refreshed in place"
    torch.testing.assert_close(lp_merged, lp_plain, atol=1e-4, rtol=0)
    # a call that mixes the learner with another policy goes through peft's routing, unmerged
    model.save_pretrained(tmp_path / "x", selected_adapters=["default"])
    for worker in (merged, plain):
        worker.register_adapter("x", str(tmp_path / "x"))
    _perturb(model, 0.2, merged, plain)
    merges = merged.merges
    ids_mixed, lp_mixed = _generated_logprobs(merged, [LEARNER, PolicyRef("checkpoint", "x"), PolicyRef("base")])
    ids_ref, lp_ref = _generated_logprobs(plain, [LEARNER, PolicyRef("checkpoint", "x"), PolicyRef("base")])
    assert merged.merges == merges and ids_mixed == ids_ref
    torch.testing.assert_close(lp_mixed, lp_ref, atol=1e-5, rtol=0)
    assert {n for n, p in model.named_parameters() if p.requires_grad}, "the trained model keeps its adapter"
    assert "default" in model.peft_config and hasattr(model, "disable_adapter")


@pytest.mark.parametrize("trainable_tokens", [["moves"], None])
def test_the_merged_copy_refreshed_in_place_equals_a_fresh_merge(trainable_tokens):
    """After weight changes (LoRA matrices and the trainable token rows), every weight of the
    copy refreshed in place is the weight peft's own merge of the same adapter gives."""
    from sp_lightning.model import LoraSettings, PolicySettings, load_policy
    from sp_lightning.rollout.merged_copy import MergedCopy

    model, _ = load_policy(PolicySettings(lora=LoraSettings(r=8, alpha=16, trainable_tokens=trainable_tokens)))
    copy_ = MergedCopy(model)
    copy_.get()
    for seed in range(3):
        torch.manual_seed(seed)
        _perturb(model, 0.3)
        copy_.mark_stale()  # what the worker's load_weights does
        refreshed = dict(copy_.get().named_parameters())
        fresh = dict(MergedCopy(model).get().named_parameters())
        assert refreshed.keys() == fresh.keys()
        for name, weight in fresh.items():
            torch.testing.assert_close(refreshed[name], weight, atol=1e-6, rtol=0, msg=name)
    assert copy_.builds == 1 and copy_.refreshes == 3


def test_a_merged_copy_first_made_under_inference_mode_is_refreshed_outside_it(policy):
    """Lightning validates under ``torch.inference_mode``: when validation makes the first
    learner-only call, the copy made then is refreshed by the next training rollout, outside it."""
    model, tok = policy
    plain = HFRolloutWorker(model, tok, merge_learner=False)
    merged = HFRolloutWorker(model, tok, merge_learner=True)
    with torch.inference_mode():
        _generated_logprobs(merged, [LEARNER])
    _perturb(model, 0.2, plain, merged)
    ids_merged, lp_merged = _generated_logprobs(merged, [LEARNER] * 2)
    ids_plain, lp_plain = _generated_logprobs(plain, [LEARNER] * 2)
    assert merged._merged.builds == 1 and merged._merged.refreshes == 1 and ids_merged == ids_plain
    torch.testing.assert_close(lp_merged, lp_plain, atol=1e-4, rtol=0)


def test_candidates_scored_on_shared_rows_are_each_candidates_own_forward(policy):
    """``completion_logprobs`` scores a request's candidates that differ only in their last token
    on one row; each value is still what one forward of prompt + that candidate gives (the sum of
    its tokens' logprobs): one-token moves, several-token texts with a common first token, a
    repeated and an empty candidate."""
    model, tok = policy
    torch.manual_seed(0)
    _perturb(model, 0.05)  # off its initial weights, so that the adapter is not the identity
    worker = HFRolloutWorker(model, tok, merge_learner=False)
    candidates = ["[4]", "[0]", "[4] [8]", "[4] [0]", "[8]", "[4]", ""]
    lengths = {len(tok.encode(t, add_special_tokens=False)) for t in candidates}
    assert {0, 1} <= lengths and max(lengths) > 1
    request = ModelRequest("player_0", PROMPT, LEARNER)
    (got,) = worker.completion_logprobs([request], [candidates])
    prompt = worker.encode_prompts([PROMPT])[0]
    want = []
    with torch.no_grad():
        for text in candidates:
            ids = tok.encode(text, add_special_tokens=False)
            logprobs = torch.log_softmax(worker.model(input_ids=torch.tensor([prompt + ids])).logits[0].float(), -1)
            want.append(sum((float(logprobs[len(prompt) - 1 + k, token]) for k, token in enumerate(ids)), 0.0))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert got[0] == got[5] and got[6] == 0.0


@pytest.mark.parametrize("served", ["learner", "learner-unmerged", "base", "checkpoint"])
def test_a_batch_of_prompts_scores_each_prompt_as_its_own_forward(policy, served, tmp_path):
    """Many prompts in one ``completion_logprobs`` call (sorted by length into calls of
    ``max_batch_size``, their common beginning computed once) give each prompt's scores from a
    forward of its own, in the order asked: for every policy a worker serves (the learner from
    its merged copy or through peft, the base model with the adapter off, a saved checkpoint)."""
    model, tok = policy
    torch.manual_seed(0)
    _perturb(model, 0.05)
    worker = HFRolloutWorker(model, tok, max_batch_size=3, merge_learner=served != "learner-unmerged")
    ref = {"base": PolicyRef("base"), "checkpoint": PolicyRef("checkpoint", "saved")}.get(served, LEARNER)
    if served == "checkpoint":  # saved, then the learner moves on: the rows must be the checkpoint's
        model.save_pretrained(tmp_path / "saved", selected_adapters=["default"])
        worker.register_adapter("saved", str(tmp_path / "saved"))
        _perturb(model, 0.05, worker)
    boards = ["X O X\n[3] O [5]\n[6] [7] [8]", "[0] [1] [2]\n[3] X [5]\n[6] [7] [8]", "X [1] [2]\n[3] O [5]\n[6] [7] X",
              "X O X\nO X O\n[6] [7] [8]", "[0] [1] [2]\n[3] [4] [5]\n[6] [7] [8]", "O [1] X\n[3] [4] [5]\n[6] X [8]",
              "X O [2]\n[3] [4] [5]\n[6] [7] [8]"]
    requests, candidates = [], []
    for board in boards:
        legal = [m for m in MOVES if m in board]
        text = f"Tic-Tac-Toe. You are X.\n{board}\nLegal moves: {' '.join(legal)}"
        requests.append(ModelRequest("player_0", [{"role": "user", "content": text}], ref))
        candidates.append(legal + ["[4] [8]"])
    assert len({len(p) for p in worker.encode_prompts([r.messages for r in requests])}) > 2
    together = worker.completion_logprobs(requests, candidates)
    alone = [worker.completion_logprobs([r], [c])[0] for r, c in zip(requests, candidates)]
    for got, want in zip(together, alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # and a request's scores are those of a plain forward of the model as that policy, one per candidate
    if served == "checkpoint":
        model.load_adapter(str(tmp_path / "saved"), adapter_name="plain")
        model.set_adapter("plain")
    with model.disable_adapter() if served == "base" else nullcontext():
        plain = _plain_scores(model, tok, requests[0].messages, candidates[0])
    # the merged copy's weights are the adapter's folded in: equal within 1e-4, not 1e-5
    torch.testing.assert_close(alone[0], plain, atol=1e-4 if served == "learner" else 1e-5, rtol=0)


def test_the_base_model_of_a_policy_without_an_adapter_is_refused_once_its_weights_moved():
    """With ``policy.lora: null`` the whole model trains and nothing can be switched off: before
    any update ``base`` is the learner's own weights, after one it would be the trained model
    answering as the base (a debate's judge judging its own debates); refused, naming the key."""
    from sp_lightning.errors import UserError

    model, tok = load_policy(PolicySettings(lora=None))
    worker = HFRolloutWorker(model, tok)
    torch.testing.assert_close(_scores(worker, PolicyRef("base")), _scores(worker, LEARNER))
    _perturb(model, 0.05)
    send_weights(worker, model, version=1)
    with pytest.raises(UserError, match=r"policy 'base' .*model.policy.lora null.*give model.policy.lora"):
        _scores(worker, PolicyRef("base"))
