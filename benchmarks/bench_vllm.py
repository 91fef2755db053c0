"""Rollout tokens/s of the Hugging Face and vLLM backends, and our overhead over raw vLLM.

The same tiny model (``configs/tictactoe_vllm_tiny.yaml``'s: projection-only LoRA r16, LoRA B
moved off zero so the adapter is not a no-op) and the same requests: ``--prompts`` Tic-Tac-Toe
observations in the chat template, sampled at temperature 1 for ``--new_tokens`` tokens. Rows:

- **hf**: ``HFRolloutWorker.generate`` (the default backend, merged learner copy);
- **vllm**: ``VLLMRolloutWorker.generate`` (prompt encoding, adapter routing, completions);
- **raw vllm** (the limit): the same engine's ``LLM.generate`` on the same prompts, already
  tokenized, with the same adapter and sampling parameters.

Our overhead is vllm seconds / raw seconds - 1 (goal: at most 10%). Medians of ``--repeats``,
the three interleaved. Run it in the vLLM environment (docs/rollout.md); on this 2-core CPU vLLM's
engine works on one core, so the HF row is the faster here: vLLM is the backend for GPUs.

    . .venv-vllm/bin/activate && python benchmarks/bench_vllm.py        # ~2 min
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_trl import board_prompts  # the same Tic-Tac-Toe prompts as the TRL benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from vllm.inputs import TokensPrompt

    from sp_lightning.model import LoraSettings, PolicySettings, load_policy
    from sp_lightning.prompts import make_template
    from sp_lightning.rollout import HFRolloutWorker, SamplingSettings, VLLMRolloutWorker
    from sp_lightning.rollout.chat import encode_chats
    from sp_lightning.threads import configure_torch_threads
    from sp_lightning.types import LEARNER, ModelRequest

    threads = configure_torch_threads()
    torch.manual_seed(0)
    model, tokenizer = load_policy(PolicySettings(lora=LoraSettings(r=16, alpha=32)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    model.eval()
    template = make_template("plain")
    requests = [ModelRequest("player", template.messages(text, "player_0"), LEARNER)
                for text, _ in board_prompts(args.prompts)]
    hf = HFRolloutWorker(model, tokenizer, max_batch_size=256)
    vllm = VLLMRolloutWorker(model, tokenizer, max_loras=2, dtype="float32", enforce_eager=True, max_model_len=1024,
                             engine_kwargs={"kv_cache_memory_bytes": 1 << 30})
    try:
        print(f"{args.prompts} prompts, temperature 1, torch threads {threads}; medians of {args.repeats}")
        print(f"{'new tokens':>10} | {'hf tok/s':>9} | {'vllm tok/s':>10} | {'raw vllm tok/s':>14} | "
              f"{'vllm / hf':>9} | {'our overhead over raw vllm':>26}")
        for new_tokens in args.new_tokens:
            sampling = SamplingSettings(max_new_tokens=new_tokens, temperature=1.0)
            vllm.generate(requests, sampling)  # warm-up: the engine, the adapter, compilation
            hf.generate(requests, sampling)
            prompts = [TokensPrompt(prompt_token_ids=ids)
                       for ids in encode_chats(tokenizer, [r.messages for r in requests], vllm.prompts.specials)]
            params = vllm._sampling_params(sampling)
            lora = vllm._learner_request()
            times: dict[str, list[float]] = {"hf": [], "vllm": [], "raw": []}
            tokens: dict[str, list[int]] = {"hf": [], "vllm": [], "raw": []}
            for _ in range(args.repeats):
                for kind in ("raw", "vllm", "hf"):
                    start = time.perf_counter()
                    if kind == "raw":
                        out = vllm.llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
                        count = sum(len(o.outputs[0].token_ids) for o in out)
                    else:
                        out = (vllm if kind == "vllm" else hf).generate(requests, sampling)
                        count = sum(len(c.completion_ids) for c in out)
                    times[kind].append(time.perf_counter() - start)
                    tokens[kind].append(count)
            rate = {k: statistics.median(n / t for n, t in zip(tokens[k], times[k])) for k in times}
            overhead = statistics.median(times["vllm"]) / statistics.median(times["raw"]) - 1
            print(f"{new_tokens:>10} | {rate['hf']:>9.0f} | {rate['vllm']:>10.0f} | {rate['raw']:>14.0f} | "
                  f"{rate['vllm'] / rate['hf']:>9.2f} | {100 * overhead:>25.1f}%")
        print("goal: our overhead over raw vLLM generate at most 10%")
    finally:
        vllm.close()


if __name__ == "__main__":
    main()
