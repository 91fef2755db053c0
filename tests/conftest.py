import pytest

from tests.helpers import ScriptedOpenAIServer


@pytest.fixture(scope="session")
def tiny_policy():
    """One tiny model + tokenizer for the whole session (fresh copies where a test trains)."""
    from sp_lightning.model import PolicySettings, load_policy

    return load_policy(PolicySettings())


def pytest_terminal_summary(terminalreporter):
    """Counts of the hostile-completion and exact-resume tests (long profiles go in the notes)."""
    import sys

    module = sys.modules.get("test_hostile_completions")
    if module is not None and module.COUNTS:
        counts = ", ".join(f"{n} {what}" for what, n in sorted(module.COUNTS.items()))
        terminalreporter.write_line(f"hostile completions: {counts}")
    resume = sys.modules.get("test_exact_resume")
    if resume is not None and resume.COUNTS:
        terminalreporter.write_line("exact resume: " + ", ".join(f"{what} {n}" for what, n in resume.COUNTS.items()))


@pytest.fixture
def serve():
    """Starts ScriptedOpenAIServer(**kwargs) on loopback; every one started is closed after the test."""
    servers = []

    def start(**kwargs):
        servers.append(ScriptedOpenAIServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
