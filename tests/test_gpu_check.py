"""benchmarks/gpu_check.py at its tiny size on a CPU, so that the GPU check cannot rot: every
stage of each backend runs for real and the check fails if one fails.

- ``--backend hf`` (the GPU machines we borrow have no vLLM): the Hugging Face fit with its
  recorded generate calls, raw ``generate`` and the worker's sampler on those calls with a
  profile of one call each, and ours against TRL's GRPOTrainer on long answers.
- ``--backend vllm``: the colocated vLLM fit, raw ``LLM.generate`` on the fit's own prompts, and
  several LoRA adapters in one batch; where vLLM is installed (``.venv-vllm``)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_check(tmp_path, backend: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--backend", backend,
                             "--size", "tiny", "--steps", "3", "--out", str(tmp_path)], capture_output=True, text=True,
                            timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    config = json.loads((tmp_path / "qwen3-tiny-random" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert report["failed"] == {} and report["backend"] == backend
    return result, report


@pytest.mark.slow
def test_the_hf_check_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    pytest.importorskip("trl")
    result, report = run_check(tmp_path, "hf")
    fit, raw, trl = report["fit"], report["raw"], report["trl"]
    assert len(fit["steps"]) == 3 and fit["process_peak_rss_bytes"] > 0
    for step in fit["steps"]:
        assert step["rollout/tokens_per_s"] > 0 and step["train/tokens_per_s"] > 0
        # the worker generates from its own copy: each step's LoRA weights are copied into it
        assert step["rollout/weight_sync_bytes"] > 0 and step["rollout/weight_sync_ms"] > 0
    # raw replays the very calls of the fit's second batch, and both ways generate the same tokens
    assert raw["version"] == 1 and raw["calls"] > 0
    most = raw["rows"] * report["settings"]["max_new_tokens"]
    ways = ("generate", "sampler", "merged_sampler")
    assert all(0 < n <= most for n in [raw["arena_tokens"], *(raw[way]["tokens"] for way in ways)])
    assert all(raw[way]["profile"]["top_host"] for way in ways)
    assert trl["ours"]["training_tokens_per_s"] > 0 and trl["trl"]["training_tokens_per_s"] > 0
    assert trl["training_ours_over_trl"] > 0 and trl["ours_update_profile"]["top_host"]
    out = result.stdout
    assert "peak memory" in out and "step split" in out and "raw generate" in out and "vs TRL" in out


@pytest.mark.slow
def test_the_vllm_check_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    pytest.importorskip("vllm")
    result, report = run_check(tmp_path, "vllm")
    fit, raw, lora = report["fit"], report["raw"], report["multi_lora"]
    assert len(fit["steps"]) == 3 and fit["process_peak_rss_bytes"] > 0
    assert all(s["rollout/tokens_per_s"] > 0 and s["train/tokens_per_s"] > 0 for s in fit["steps"])
    assert raw["prompts"] > 0 and raw["tokens_per_s"] > 0
    # float32 on a CPU: each adapter's rows in the mixed batch are its own call's, and differ from the base
    assert all(lora["first_token_logprob_max_diff_by_policy"][f"adapter{k}"] < 1e-4 for k in range(3))
    assert lora["adapter_completions_unlike_base"] > 0
    out = result.stdout
    assert "peak memory" in out and "raw LLM.generate" in out and "step split" in out and "several LoRA" in out
