"""ESTIMATES of step time and GPU-hours for Qwen3-1.7B and Qwen3-4B league runs on 1, 8 and 64
H100s (docs/scale-out.md, "What a real run would cost"). No GPU has run these configs; every
figure this prints for a GPU is an estimate, and says so.

Two kinds of input, kept apart in the output:

- **Measured here**, on this CPU with the tiny model, on the shipped GPU recipe's games and
  batch (``configs/tictactoe_qwen3_1p7b_vllm_gpu.yaml``: Tic-Tac-Toe, 64 episodes per rank),
  with the recipe's opponents (half self-play, half RandomBot) and with a league's (every
  opponent a past checkpoint: a model call like the learner's, which does not train): how many
  model calls a step makes, in how many
  generate calls (the waves a step waits for one after the other: a game's next move needs
  the last one's answer), how many rows each wave holds, and how long the prompts are in
  characters. These depend on the games and the arena, not on the model.
- **Assumed** (printed with the table): Qwen3's published shapes (parameters counted by building
  the model on the meta device), H100 SXM peak figures, efficiencies, the mean and longest
  thinking answer, 4 characters per Qwen token, interconnect bandwidths.

The model of a step, per rank (each rank plays its own batch; the per-rank batch stays fixed
as ranks are added, as docs/scale-out.md recommends):

- generation: every wave decodes as many steps as its longest answer (``--max_answer``); each
  decode step reads the weights once and each row's KV cache (memory-bound), times vLLM's LoRA
  overhead; prefill is compute at ``--gen_mfu``;
- training: forward and backward through the frozen base (4 x parameters FLOPs per token: no
  weight gradients for the frozen base), at ``--train_mfu``, times ``update_epochs``;
- the adapter's gradient summed over the ranks (ring all-reduce of fp32 LoRA gradients over
  NVLink within a node, InfiniBand across nodes), and the new adapter written and loaded into
  vLLM once per step.

    python benchmarks/scale_estimate.py
    python benchmarks/scale_estimate.py --max_answer 512 --mean_answer 256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.gpu_check import PROJECTIONS  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "tictactoe_qwen3_1p7b_vllm_gpu.yaml")
QWEN3 = {  # Qwen3's published configs (both tie the input and output embeddings)
    "Qwen3-1.7B": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=6144, vocab_size=151936, tie_word_embeddings=True),
    "Qwen3-4B": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=9728, vocab_size=151936, tie_word_embeddings=True),
}
H100 = {"bf16_flops": 989e12, "hbm_bytes_per_s": 3.35e12}  # SXM, dense bf16
GPUS = (1, 8, 64)
GPUS_PER_NODE = 8


# ---- measured here -------------------------------------------------------------------------------
RUNS = {  # the recipe's opponents, and a league run's: every opponent a past checkpoint, a model
    "recipe": {"learner": 0.5, "bot:random": 0.5},  # call as the learner's are (counted as self-play;
    "league": {"learner": 1.0},                     # only the learner's half of them trains)
}


def measure_workload(seed: int, run: str) -> dict:
    """One training batch of the GPU recipe's games, played by the tiny model on the Hugging Face
    backend (one-token moves: the waves and rows do not depend on the answer's length)."""
    import torch

    from sp_lightning import build_from_config

    torch.manual_seed(seed)
    lora = {"r": 16, "alpha": 32, "target_modules": PROJECTIONS, "trainable_tokens": None}
    games = [{"id": "tictactoe_v1", "env_kwargs": {"invalid_move": "random"}, "opponents": RUNS[run],
              "reward": {"outcome": "payoff", "invalid_move_penalty": 1.0}}]
    module, dm = build_from_config(
        "--config", CONFIG, "--model.policy.model", "tiny", "--model.policy.dtype", "float32",
        "--model.policy.lora", json.dumps(lora), "--data.sampling.max_new_tokens", "1",
        "--data.rollout", json.dumps({"class_path": "sp_lightning.rollout.HFRolloutWorker"}),
        "--data.games", json.dumps(games), "--seed_everything", str(seed))
    engine = dm.build_engine(module)
    waves: list[int] = []
    generate = engine.worker.generate

    def counting_generate(requests, sampling):  # counts the calls of the real worker
        waves.append(len(requests))
        return generate(requests, sampling)

    engine.worker.generate = counting_generate
    engine.start()
    try:
        batch = engine.next_batch()
    finally:
        engine.close()
    tokenizer = module.tokenizer
    prompt_chars = [len(tokenizer.decode(r.prompt_ids, skip_special_tokens=True)) for r in batch.records]
    records = len(batch.records) if run == "recipe" else len(batch.records) // 2  # checkpoints do not train
    return {"run": run, "episodes": len(batch.rollouts), "learner_calls": sum(waves), "waves": len(waves),
            "rows_per_wave_max": max(waves), "records": records,
            "prompt_chars_mean": statistics.mean(prompt_chars),
            "update_epochs": module.update_epochs}


# ---- the model of a step ------------------------------------------------------------------------
def shape_figures(shape: dict, lora_rank: int) -> dict:
    """Parameters (the model built on the meta device), KV bytes per token (bf16) and LoRA
    parameters (rank ``lora_rank`` on every projection)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**shape)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    h, kv = shape["hidden_size"], shape["num_key_value_heads"] * shape["head_dim"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    m = shape["intermediate_size"]
    per_layer = {  # (in, out) of each projection LoRA adapts
        "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
        "gate_proj": (h, m), "up_proj": (h, m), "down_proj": (m, h)}
    lora = shape["num_hidden_layers"] * sum(lora_rank * (a + b) for a, b in per_layer.values())
    # the tied embedding is counted once and multiplies once per token (the output head)
    return {"params": params, "matmul_params": params,
            "kv_bytes_per_token": 2 * shape["num_hidden_layers"] * kv * 2, "lora_params": lora}


def step_seconds(work: dict, fig: dict, a: argparse.Namespace, gpus: int) -> dict:
    prompt = work["prompt_chars_mean"] / a.chars_per_token + a.template_tokens
    rows = work["learner_calls"] / work["waves"]  # mean rows decoding together in a wave
    weight_bytes = 2 * fig["params"]
    # decode: each step reads the weights once and every row's KV cache (mean context: the
    # prompt plus half the longest answer), memory-bound
    context = prompt + a.max_answer / 2
    per_decode_step = (weight_bytes + rows * context * fig["kv_bytes_per_token"]) / (H100["hbm_bytes_per_s"] * a.hbm_eff)
    decode = work["waves"] * a.max_answer * per_decode_step * a.lora_overhead
    prefill = 2 * fig["matmul_params"] * work["learner_calls"] * prompt / (H100["bf16_flops"] * a.gen_mfu)
    trained_tokens = work["records"] * (prompt + a.mean_answer)
    train = work["update_epochs"] * 4 * fig["matmul_params"] * trained_tokens / (H100["bf16_flops"] * a.train_mfu)
    grad_bytes = 4 * fig["lora_params"]
    if gpus == 1:
        reduce = 0.0
    else:  # ring all-reduce moves 2 (n-1)/n of the bytes over the slowest link
        link = a.nvlink_bytes_per_s if gpus <= GPUS_PER_NODE else a.ib_bytes_per_s
        reduce = 2 * (gpus - 1) / gpus * grad_bytes / link
    sync = 2 * fig["lora_params"] / a.adapter_bytes_per_s  # write the bf16 adapter, vLLM loads it
    total = decode + prefill + train + reduce + sync
    return {"decode": decode, "prefill": prefill, "train": train, "reduce": reduce, "sync": sync, "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_answer", type=int, default=1024,
                        help="decode steps of a wave: its longest answer (the recipe's max_new_tokens)")
    parser.add_argument("--mean_answer", type=int, default=400, help="mean answer tokens trained on")
    parser.add_argument("--chars_per_token", type=float, default=4.0)
    parser.add_argument("--template_tokens", type=int, default=30, help="chat-template tokens per prompt")
    parser.add_argument("--hbm_eff", type=float, default=0.5, help="share of HBM bandwidth decode reaches")
    parser.add_argument("--gen_mfu", type=float, default=0.4, help="prefill's share of peak FLOPs")
    parser.add_argument("--train_mfu", type=float, default=0.3, help="training's share of peak FLOPs")
    parser.add_argument("--lora_overhead", type=float, default=1.25, help="vLLM's multi-LoRA decode cost factor")
    parser.add_argument("--nvlink_bytes_per_s", type=float, default=200e9)
    parser.add_argument("--ib_bytes_per_s", type=float, default=40e9, help="per GPU across nodes (400 Gb/s)")
    parser.add_argument("--adapter_bytes_per_s", type=float, default=0.5e9, help="adapter write + load")
    a = parser.parse_args()

    works = [measure_workload(a.seed, run) for run in RUNS]
    print(f"MEASURED here (tiny model, one batch of {os.path.relpath(CONFIG, ROOT)}'s games, seed {a.seed}):")
    for work in works:
        print(f"  {work['run']} ({RUNS[work['run']]}): {work['episodes']} episodes, {work['learner_calls']} model "
              f"calls in {work['waves']} generate waves (up to {work['rows_per_wave_max']} rows), {work['records']} "
              f"trained records, prompts {work['prompt_chars_mean']:.0f} characters on average, update_epochs "
              f"{work['update_epochs']}")
    print("\nASSUMED: H100 SXM (989 TFLOPS bf16 dense, 3.35 TB/s HBM); "
          + ", ".join(f"{k} {v:g}" for k, v in vars(a).items() if k != "seed"))
    print(f"\nESTIMATES (not measured; per-rank batch {works[0]['episodes']} episodes, LoRA r16 on every "
          f"projection):\n")
    header = (f"{'model':<11} {'run':<7} {'GPUs':>4} {'step s':>7} {'decode':>7} {'prefill':>7} {'train':>6} "
              f"{'reduce':>7} {'sync':>5} {'episodes/h':>11} {'GPU-h per 1000 steps':>21} "
              f"{'GPU-h per 100k episodes':>24}")
    print(header)
    print("-" * len(header))
    for name, shape in QWEN3.items():
        fig = shape_figures(shape, lora_rank=16)
        for work in works:
            for gpus in GPUS:
                t = step_seconds(work, fig, a, gpus)
                episodes_per_hour = 3600 / t["total"] * work["episodes"] * gpus
                print(f"{name:<11} {work['run']:<7} {gpus:>4} {t['total']:>7.1f} {t['decode']:>7.1f} "
                      f"{t['prefill']:>7.2f} {t['train']:>6.1f} {t['reduce']:>7.3f} {t['sync']:>5.2f} "
                      f"{episodes_per_hour:>11,.0f} {t['total'] * 1000 * gpus / 3600:>21,.1f} "
                      f"{100_000 / episodes_per_hour * gpus:>24,.1f}")
        print(f"{'':<11} ({fig['params'] / 1e9:.2f}B parameters, {fig['lora_params'] / 1e6:.1f}M LoRA, "
              f"{fig['kv_bytes_per_token'] / 1024:.0f} KiB KV per token)")


if __name__ == "__main__":
    main()
