import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def source_root() -> str:
    """The checkout the tests run from (the twin self-tests compile kernels from its sources)."""
    return ROOT


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests (hypothesis tampering, soak); deselect with -m 'not slow'")
