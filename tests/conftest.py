import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `python -m pytest` puts the working directory first on sys.path. Started from the checkout root, the checkout's
# `cam/` (sources only, no compiled extension) would shadow the installed package these tests check, so the root
# comes off the path before any test imports cam. Plain `pytest` never puts it there.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]

# The twin's rule gm-unordered-access (docs/twin.md) is on for every test, in this process and in the programs the
# tests start; outside tests it is off, since its logging costs the GMM kernels a few per cent of the twin's CPU.
os.environ.setdefault("CAM_TWIN_GM_RACE", "1")


@pytest.fixture(scope="session")
def source_root() -> str:
    """The checkout the tests run from (the twin self-tests compile kernels from its sources)."""
    return ROOT


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests (hypothesis tampering, soak); deselect with -m 'not slow'")
    config.addinivalue_line("markers", "mutation: the standing mutation suite (tests/test_mutants.py; CAM_MUTANTS=1)")
