"""What one weight sync costs: the trainer's trainable tensors sent to the rollout backend.

Every optimizer step ends with the weight path (``sp_lightning.weight_sync.WeightSync``) sending
each learner's trainable tensors (LoRA weights, trainable token rows; never the frozen base) to
the backend's own copy of the policy (``RolloutWorker.load_weights``). This prints, for the
shipped tiny configs on the Hugging Face backend, the bytes of one update and the median
milliseconds of a send (building the update and the worker's copy; the same call a fit times as
``rollout/weight_sync_ms``), measured here, and next to them the bytes one update of Qwen3-1.7B
with LoRA r16 on every projection holds, computed from its published shape (the model built on
the meta device: no weights, no download) at bf16 and at float32 (peft keeps adapter weights in
float32 on a bf16 base unless the precision casts them).

    python benchmarks/bench_weight_sync.py                 # ~1 min
    python benchmarks/bench_weight_sync.py --repeats 200
"""

from __future__ import annotations

import argparse
import statistics
import time

CONFIGS = ["configs/tictactoe_tiny.yaml", "configs/kuhn_poker_league_tiny.yaml",
           "configs/proposer_solver_two_learners_tiny.yaml"]
QWEN3_1P7B = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, intermediate_size=6144, vocab_size=151936, tie_word_embeddings=True)
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def measured(config: str, repeats: int) -> tuple[int, float]:
    """(bytes of one update, median ms of one send) for ``config``'s policy on its HF worker."""
    from sp_lightning import build_from_config

    module, dm = build_from_config("--config", config)
    dm.build_engine(module)
    sync = dm.weight_sync
    times = []
    for version in range(repeats):
        start = time.perf_counter()
        sync.send(module, version)
        times.append(1000 * (time.perf_counter() - start))
    return sync.last_bytes, statistics.median(times)


def qwen3_1p7b_lora_parameters(rank: int = 16) -> int:
    """Trainable parameters of LoRA ``rank`` on every projection of Qwen3-1.7B, counted on a model
    built on the meta device."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_1P7B))
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=PROJECTIONS))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    from sp_lightning.threads import configure_torch_threads

    configure_torch_threads()
    print(f"{'policy':<48} {'bytes / update':>16} {'ms / send (median)':>20}")
    for config in CONFIGS:
        size, ms = measured(config, args.repeats)
        print(f"{config:<48} {size:>16,} {ms:>20.3f}")
    params = qwen3_1p7b_lora_parameters()
    for dtype, width in (("bf16", 2), ("float32", 4)):
        print(f"{'Qwen3-1.7B, LoRA r16 on every projection, ' + dtype:<48} {params * width:>16,} {'computed':>20}")
    print("measured on one H200 (2026-11-27, docs/scale-out.md): 33.25 MiB in 18 ms a send (HF backend, bf16)")


if __name__ == "__main__":
    main()
