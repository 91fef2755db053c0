"""benchmarks/gpu_check.py at its tiny size on a CPU, so that the first GPU's check cannot rot:
the random-init Qwen3 directory, the colocated vLLM fit, raw ``LLM.generate`` on the fit's own
prompts, and several LoRA adapters in one batch. Runs where vLLM is installed (`.venv-vllm`)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_gpu_check_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    pytest.importorskip("vllm")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--size", "tiny",
                             "--steps", "3", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    config = json.loads((tmp_path / "qwen3-tiny-random" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    fit, raw, lora = report["fit"], report["raw"], report["multi_lora"]
    assert len(fit["steps"]) == 3 and fit["process_peak_rss_bytes"] > 0
    assert all(s["rollout/tokens_per_s"] > 0 and s["train/tokens_per_s"] > 0 for s in fit["steps"])
    assert raw["prompts"] > 0 and raw["tokens_per_s"] > 0
    # float32 on a CPU: each adapter's rows in the mixed batch are its own call's, and differ from the base
    assert all(lora["first_token_logprob_max_diff_by_policy"][f"adapter{k}"] < 1e-4 for k in range(3))
    assert lora["adapter_completions_unlike_base"] > 0
    out = result.stdout
    assert "peak memory" in out and "raw LLM.generate" in out and "step split" in out and "several LoRA" in out
