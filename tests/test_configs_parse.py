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


def test_every_config_and_overlay_has_a_row_in_the_configuration_table():
    """docs/configuration.md says what each shipped config trains and shows: none left out."""
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "docs", "configuration.md")) as f:
        rows = {line.split("`")[1] for line in f if line.startswith("| `configs/")}
    shipped = {os.path.relpath(path, root) for path in glob.glob(os.path.join(root, "configs", "**", "*.yaml"),
                                                                  recursive=True)}
    assert shipped - rows == set()
