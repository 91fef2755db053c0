"""benchmarks/reproduce_results.py passes the fit's model-defining flags on to every evaluation
of the run, so that a recipe run with another model (``--fit_flags --model.policy.tiny.layers 4``)
evaluates its checkpoints on that model instead of being refused as another config's."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from reproduce_results import policy_flags  # noqa: E402


def test_the_model_policy_flags_are_picked_out_of_the_fit_flags_with_their_values():
    fit_flags = ["--data.warm_start.teacher", "bot:tictactoe_pressing", "--model.policy.tiny.layers", "4",
                 "--model.policy.lora={\"r\": 8}", "--model.optimizer.lr", "0.001", "--model.policy.tiny.heads", "8"]
    assert policy_flags(fit_flags) == ["--model.policy.tiny.layers", "4", "--model.policy.lora={\"r\": 8}",
                                       "--model.policy.tiny.heads", "8"]
    assert policy_flags(["--trainer.max_steps", "4"]) == []
