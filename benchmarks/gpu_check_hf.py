"""``gpu_check.py --backend hf``: the stages for the GPU machines this project borrows (no vLLM
there), and for the test suite at tiny size on a CPU. See ``gpu_check.py``.

1. **fit**: ``sp-lightning fit`` of ``configs/tictactoe_qwen3_hf_gpu.yaml`` (the Hugging Face
   worker generating from a copy of its own, into which each step's LoRA weights are copied) for
   ``--steps`` optimizer steps with short answers (``--max_new_tokens``). Its worker is the real
   one that also writes down every generate call it makes (:class:`CallRecordingHFWorker`). Per
   step, from the run's CSV log: play and update seconds, the weight sync's milliseconds and
   bytes, generation and training tokens/s, and the peak memory of each phase.
2. **raw**: the generate calls of one batch of the fit (its second: the first warms up),
   replayed with the same prompts in the same batches and the same sampling, on the same model
   as the worker serves it (peft, unmerged LoRA), through ``model.generate``, through the
   worker's own sampler alone, and through the sampler on a copy with the LoRA merged in (what
   ``merge_learner: true`` serves); and a torch profile of one call each way. Arena against raw
   generate is the share the GPU check exists to measure; the sampler and the recorded call
   times split the gap into the arena's own overhead (envs, prompts, scoring) and the generate
   loop's; the merged row measures the first lever the profile points to (on the H200 a decode
   step is bound by launching ~3,000 kernels, two thirds of its matmuls the LoRA's).
3. **trl**: ours against TRL's ``GRPOTrainer`` (``benchmarks/bench_trl.py``) on the same model,
   LoRA and work: 8 Tic-Tac-Toe prompts x 8 completions with long answers (``--long_tokens``: a
   random-weight model rarely stops, so decode dominates as for a thinking model); training
   tokens/s of each (ours / TRL), seconds per step, our play / update split, and a profile of one
   of our updates.
"""

from __future__ import annotations

import gc
import json
import os
import time

from gpu_check import PROJECTIONS, ROOT, PeakSampler, fit_flags, on_gpu, peak_rss_bytes, read_csv_metrics
from sp_lightning.rollout.hf import HFRolloutWorker

CONFIG = os.path.join(ROOT, "configs", "tictactoe_qwen3_hf_gpu.yaml")
TRL_PROMPTS, TRL_GENERATIONS = 8, 8


class CallRecordingHFWorker(HFRolloutWorker):
    """The real Hugging Face worker, which also appends one JSON line per generate call to
    ``calls_path``: the learner's weight version, the call's prompt ids, its seconds and the
    tokens it generated, so that raw ``generate`` can replay the very batches the arena sent."""

    def __init__(self, model, tokenizer, calls_path: str, max_batch_size: int = 256, max_adapters: int = 8,
                 merge_learner: bool | None = None):
        super().__init__(model, tokenizer, max_batch_size=max_batch_size, max_adapters=max_adapters,
                         merge_learner=merge_learner)
        self.calls_path = calls_path

    def _generate_ids(self, prompts, policies, sampling):
        start = time.perf_counter()
        completions = super()._generate_ids(prompts, policies, sampling)  # ends on the CPU: synchronised
        seconds = time.perf_counter() - start
        with open(self.calls_path, "a") as f:
            f.write(json.dumps({"version": self.policy_version, "prompts": [list(p) for p in prompts],
                                "seconds": seconds, "tokens": sum(len(c.completion_ids) for c in completions)}) + "\n")
        return completions


def policy_settings(args):
    """The fit's policy: the model directory, LoRA r16 on every projection, no trainable tokens."""
    from sp_lightning.model import LoraSettings, PolicySettings

    return PolicySettings(model=args.model_dir, dtype=args.dtype,
                          lora=LoraSettings(r=16, alpha=32, target_modules=list(PROJECTIONS), trainable_tokens=None))


# ---- stage 1: the fit ----------------------------------------------------------------------------
def stage_fit(args) -> dict:
    import torch

    from sp_lightning.cli import main

    run = os.path.join(args.out, "fit")
    calls = os.path.join(args.out, "calls.jsonl")
    if os.path.exists(calls):
        os.remove(calls)
    flags = fit_flags(args, CONFIG, run)
    flags += ["--data.rollout", json.dumps({"class_path": "gpu_check_hf.CallRecordingHFWorker",
                                            "init_args": {"calls_path": calls, "max_batch_size": 256}})]
    if not on_gpu():
        flags += ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true"]
    with PeakSampler() as device:
        start = time.perf_counter()
        main(flags)
        wall = time.perf_counter() - start
    out = {"wall_seconds": wall, "steps": read_csv_metrics(run), "calls": calls}
    if on_gpu():
        out["process_peak_bytes"] = torch.cuda.max_memory_allocated()
        out["device_peak_bytes"] = device.peak
    else:
        out["process_peak_rss_bytes"] = peak_rss_bytes()
    return out


# ---- stage 2: raw generate on the fit's calls ------------------------------------------------------
def stage_raw(args) -> dict:
    import torch

    from sp_lightning.model import load_policy
    from sp_lightning.rollout.base import SamplingSettings
    from sp_lightning.padding import left_pad
    from sp_lightning.rollout.merged_copy import MergedCopy
    from sp_lightning.rollout.sampler import sample

    with open(os.path.join(args.out, "calls.jsonl")) as f:
        calls = [json.loads(line) for line in f]
    versions = sorted({c["version"] for c in calls})
    version = versions[1] if len(versions) > 1 else versions[0]  # the second batch: the first warms up
    batch = [c for c in calls if c["version"] == version]
    model, tokenizer = load_policy(policy_settings(args))
    device = torch.device("cuda" if on_gpu() else "cpu")
    model.to(device).eval()
    sampling = SamplingSettings(max_new_tokens=args.max_new_tokens, temperature=1.0)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    tensors = [tuple(t.to(device) for t in left_pad(c["prompts"], pad)) for c in batch]

    def with_generate(input_ids, attention_mask):
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=sampling.max_new_tokens,
                             do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                             top_k=sampling.top_k, pad_token_id=pad, eos_token_id=eos)
        return out[:, input_ids.shape[1]:]

    def with_sampler(input_ids, attention_mask):
        return sample(model, input_ids, attention_mask, sampling, eos, pad)[0]

    result = {"version": version, "calls": len(batch), "rows": sum(len(c["prompts"]) for c in batch),
              "arena_generate_call_seconds": sum(c["seconds"] for c in batch),
              "arena_tokens": sum(c["tokens"] for c in batch)}
    merged = MergedCopy(model)  # the learner's LoRA merged into a copy of the weights (merge_learner)

    def with_merged_sampler(input_ids, attention_mask):
        return sample(merged.get(), input_ids, attention_mask, sampling, eos, pad)[0]

    with torch.no_grad():
        for name, run in (("generate", with_generate), ("sampler", with_sampler), ("merged_sampler", with_merged_sampler)):
            run(*tensors[0])  # warm-up
            seconds, tokens = [], 0
            for input_ids, attention_mask in tensors:
                start = time.perf_counter()
                new = run(input_ids, attention_mask).cpu()  # synchronised
                seconds.append(time.perf_counter() - start)
                tokens += completion_tokens(new.tolist(), eos)
            result[name] = {"seconds": sum(seconds), "tokens": tokens, "tokens_per_s": tokens / sum(seconds)}
            longest = max(range(len(tensors)), key=lambda i: tensors[i][0].shape[0])
            result[name]["profile"] = profile(lambda: run(*tensors[longest]).cpu(), seconds[longest])
    return result


def completion_tokens(rows: list[list[int]], eos: int) -> int:
    """Tokens generated in ``rows``: each row up to and with its end-of-turn token, else all."""
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def profile(fn, unprofiled_seconds: float, top: int = 8) -> dict:
    """A torch profile of ``fn()``: device-busy time against wall time, kernel launches, and the
    operators that take the most host and device time (the summary a person reads to see whether
    a step is bound by the GPU or by Python's launching of its kernels)."""
    import torch
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu() else [])
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    device_of = lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))  # noqa: E731
    device_ms = sum(device_of(e) for e in events) / 1000
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))

    def rows(key):
        ranked = sorted(events, key=key, reverse=True)[:top]
        return [{"op": e.key[:80], "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1000, 2),
                 "self_device_ms": round(device_of(e) / 1000, 2)} for e in ranked]

    return {"wall_ms_unprofiled": 1000 * unprofiled_seconds, "wall_ms_profiled": 1000 * wall,
            "device_busy_ms": device_ms, "device_busy_share": device_ms / max(1000 * unprofiled_seconds, 1e-9),
            "kernel_launches": launches, "top_host": rows(lambda e: e.self_cpu_time_total), "top_device": rows(device_of)}


# ---- stage 3: ours against TRL at long answers ----------------------------------------------------
def stage_trl(args) -> dict:
    import statistics

    import torch
    from bench_trl import Work, board_prompts, run_ours, run_trl

    from sp_lightning.module import SelfPlayModule
    from sp_lightning.update import PolicyUpdate

    class ProfiledUpdate(PolicyUpdate):
        """The real update; its second run (a warm-up step, not measured) under the profiler."""

        profiles: list = []

        def run(self, records, counts):
            self.runs = getattr(self, "runs", 0) + 1
            if self.runs != 2:
                return super().run(records, counts)
            got = {}
            summary = profile(lambda: got.setdefault("out", super(ProfiledUpdate, self).run(records, counts)),
                              float("nan"))
            ProfiledUpdate.profiles.append(summary)
            return got["out"]

    class ProfiledUpdateModule(SelfPlayModule):
        """The real module, its update profiled once (``ProfiledUpdate``)."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.updater = ProfiledUpdate(self)

    work = Work(board_prompts(TRL_PROMPTS), generations=TRL_GENERATIONS, max_new_tokens=args.long_tokens,
                policy=policy_settings(args), gpu=on_gpu())
    torch.manual_seed(0)
    ours = run_ours(work, steps=args.trl_steps, warmup=2, module_class=ProfiledUpdateModule)
    gc.collect()
    if on_gpu():
        torch.cuda.empty_cache()
    torch.manual_seed(0)
    trl = run_trl(work, steps=args.trl_steps, warmup=1)
    med = statistics.median

    def figures(d):
        return {"step_seconds": med(d["step"]), "update_seconds": med(d["update"]),
                "generation_seconds": med(d["generation"]), "tokens_per_step": med(d["tokens"]),
                "training_tokens_per_s": med(t / u for t, u in zip(d["tokens"], d["update"]))}

    result = {"prompts": TRL_PROMPTS, "generations": TRL_GENERATIONS, "max_new_tokens": args.long_tokens,
              "measured_steps": args.trl_steps, "ours": figures(ours), "trl": figures(trl),
              "ours_update_profile": ProfiledUpdate.profiles[0] if ProfiledUpdate.profiles else None}
    result["training_ours_over_trl"] = (result["ours"]["training_tokens_per_s"]
                                        / result["trl"]["training_tokens_per_s"])
    result["step_trl_over_ours"] = result["trl"]["step_seconds"] / result["ours"]["step_seconds"]
    return result


STAGES = {"fit": stage_fit, "raw": stage_raw, "trl": stage_trl}


# ---- the report ----------------------------------------------------------------------------------
def report(results: dict, median) -> list[str]:
    fit, raw, trl = results.get("fit"), results.get("raw"), results.get("trl")
    lines = []
    if fit:
        sync = median(fit, "rollout/weight_sync_ms")
        lines += [
            f"  peak memory (allocator; everything resident counts): play {median(fit, 'rollout/peak_memory_gib'):.2f} "
            f"GiB, update {median(fit, 'train/peak_memory_gib'):.2f} GiB; device (sampled) "
            f"{fit.get('device_peak_bytes', 0) / 2**30:.2f} GiB",
            f"  training: {median(fit, 'train/tokens_per_s'):,.0f} tokens/s; generation "
            f"{median(fit, 'rollout/tokens_per_s'):,.0f} tokens/s",
            f"  step split: play {median(fit, 'rollout/seconds'):.2f} s + update {median(fit, 'train/update_seconds'):.2f} s "
            f"(weight sync {sync:.1f} ms, {median(fit, 'rollout/weight_sync_bytes') / 2**20:.1f} MiB) "
            f"= {median(fit, 'train/step_seconds'):.2f} s",
        ]
    if fit and raw:
        arena = [s for s in fit["steps"] if s.get("rollout/policy_version") == raw["version"]]
        arena_tps = arena[0]["rollout/tokens_per_s"] if arena else float("nan")
        gen, smp, merged = raw["generate"], raw["sampler"], raw["merged_sampler"]
        share_calls = raw["arena_generate_call_seconds"] / arena[0]["rollout/seconds"] if arena else float("nan")
        lines += [
            f"  generation vs raw generate (batch {raw['version']}: {raw['calls']} calls, {raw['rows']} rows): arena "
            f"{arena_tps:,.0f} tokens/s, raw generate {gen['tokens_per_s']:,.0f}, raw sampler {smp['tokens_per_s']:,.0f}, "
            f"merged {merged['tokens_per_s']:,.0f}; "
            f"share of raw generate {arena_tps / gen['tokens_per_s']:.2f}; the arena's generate calls are "
            f"{share_calls:.0%} of its play",
            f"  one call profiled: generate {gen['profile']['device_busy_share']:.0%} device-busy, "
            f"{gen['profile']['kernel_launches']:,} launches; sampler {smp['profile']['device_busy_share']:.0%}, "
            f"{smp['profile']['kernel_launches']:,} launches; merged {merged['profile']['device_busy_share']:.0%}, "
            f"{merged['profile']['kernel_launches']:,} launches",
        ]
    if trl:
        ours, theirs = trl["ours"], trl["trl"]
        lines += [
            f"  vs TRL GRPOTrainer ({trl['prompts']} prompts x {trl['generations']}, <= {trl['max_new_tokens']} tokens): "
            f"training {ours['training_tokens_per_s']:,.0f} vs {theirs['training_tokens_per_s']:,.0f} tokens/s "
            f"(ours / TRL {trl['training_ours_over_trl']:.2f}); step {ours['step_seconds']:.2f} vs "
            f"{theirs['step_seconds']:.2f} s; ours at long answers: play {ours['generation_seconds']:.2f} s + update "
            f"{ours['update_seconds']:.2f} s",
        ]
    return lines
