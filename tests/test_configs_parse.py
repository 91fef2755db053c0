"""Every shipped config parses: each key is one the CLI knows, each class path resolves and its
arguments fit (``--print_config`` parses the whole config without building or running it). The
configs that run here are also run by their own tests; this parses the GPU config too. It does
not build the settings, so their own checks (``__post_init__``, the workers' constructors) are
left to the runs and to tests/test_config_errors.py."""

import glob
import os

import pytest

from sp_lightning.cli import main

CONFIGS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "configs", "*.yaml")))


@pytest.mark.parametrize("config", CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_config_parses(config, capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", config, "--print_config"])
    assert done.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "trainer:" in printed and "model:" in printed and "data:" in printed
