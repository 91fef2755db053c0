import pytest


@pytest.fixture(scope="session")
def tiny_policy():
    """One tiny model + tokenizer for the whole session (fresh copies where a test trains)."""
    from sp_lightning.model import PolicySettings, load_policy

    return load_policy(PolicySettings())
