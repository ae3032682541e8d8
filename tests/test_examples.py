"""Every program under examples/ runs as a user would run it (a fresh interpreter, outside the checkout so the
installed package is used) and reports success; each checks its own results against cam.reference."""

import pathlib
import subprocess
import sys

import pytest

# A module named _*.py is what examples share (imported from beside them), not a program.
EXAMPLES = sorted(p for p in (pathlib.Path(__file__).resolve().parents[1] / "examples").glob("*.py")
                  if not p.name.startswith("_"))
TIMEOUT_S = 300  # a 4-rank in-process plane with two layers: seconds alone, a minute on a loaded 2-CPU machine


def test_there_are_examples():
    assert EXAMPLES, "examples/ holds no program"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    r = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "ok", r.stdout
