"""The README's commands work as typed from the repo root, and CI runs exactly them.

A user types the README's first block at the root of a fresh clone. There the working directory holds the
checkout's `cam/` (sources, no compiled extension), and every `python -m ...` / `python -c ...` puts it first on
sys.path, ahead of the installed package. These tests start processes from the root and check that cam's own
processes never import the checkout, and that a user's `python -c "import cam"` there stops with one clear
sentence instead of a circular-import riddle."""

import os
import pathlib
import runpy
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
TIMEOUT_S = 120


def _python(*args, cwd, timeout=TIMEOUT_S, env=None):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def _readme_block():
    return runpy.run_path(str(ROOT / ".ci" / "readme_block.py"))["first_block"]((ROOT / "README.md").read_text())


def test_ci_runs_the_readme_block_verbatim():
    lines = _readme_block()
    assert len(lines) == 2, lines
    setup, tests = lines
    assert setup.startswith("python -m venv .venv") and setup.endswith("cam-run --check"), setup
    assert "pip install torch==2.13.0" in setup and "'.[test,viz]'" in setup, setup
    assert "pip install -v" in setup, "the wheel build must show what it compiles (CMake's progress)"
    assert tests.endswith("pytest -q tests"), tests
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run reads the block with the same parser from the root, runs line 1 as it stands, and runs the test
    # command only after checking that it is the README's line 2; each as a timed stage.
    assert 'cd "$(dirname "$0")/.."' in ci
    assert "python3 .ci/readme_block.py README.md" in ci
    assert 'README_LINE_1="${lines[0]}"' in ci and 'bash -euo pipefail -c "$README_LINE_1"' in ci
    assert f"TEST_COMMAND='{tests}'" in ci and '"${lines[1]}" != "$TEST_COMMAND"' in ci
    assert 'bash -euo pipefail -c "$TEST_COMMAND"' in ci
    stages = [line.split()[1:3] for line in ci.splitlines() if line.startswith("stage ")]
    assert stages[:3] == [["acl-headers", "acl_headers"], ["readme-setup-and-main-job", "readme_line_1"],
                          ["readme-tests", "readme_line_2"]], stages


def test_ci_stages_are_timed_and_a_failed_stage_fails_the_run(tmp_path):
    """.ci/run's stage runner, on stand-in stages: each prints its time, a failure does not stop later stages, and
    the script's exit code says a stage failed."""
    ci = (ROOT / ".ci" / "run").read_text()
    runner = ci[ci.index("stage() {"):ci.index("# CANN's public headers")]
    script = tmp_path / "stages.sh"
    script.write_text("set -euo pipefail\nfailed=()\n" + runner + """
ok() { true; }
bad() { false; echo 'errexit did not stop the stage'; }
later() { echo later-ran; }
export -f ok bad later
stage one ok || true
stage two bad || true
stage three later || true
[ "${#failed[@]}" -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
""")
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "=== stage one: passed in" in r.stdout and "later-ran" in r.stdout, r.stdout
    assert "=== stage two: FAILED (exit 1)" in r.stderr and "failed: two" in r.stdout, r.stdout + r.stderr
    assert "errexit did not stop the stage" not in r.stdout


def test_readme_block_parser_skips_prose_and_stops_at_the_first_block():
    parse = runpy.run_path(str(ROOT / ".ci" / "readme_block.py"))["first_block"]
    text = "# t\n\nprose\n```bash\n# a comment\nfirst && line\n\nsecond\n```\n```\nlater\n```\n"
    assert parse(text) == ["first && line", "second"]
    with pytest.raises(SystemExit):
        parse("```\nunclosed\n")


@pytest.mark.parametrize("args", [("-c", "import cam, cam.ops; print(cam._C.__file__, cam.ops.__file__)"),
                                  ("-m", "cam", "--cmake-dir")], ids=["import", "cmake-dir"])
def test_importing_from_the_source_root_uses_the_installed_package(args):
    """Started at the root, Python finds the checkout's cam/ first (it holds no compiled extension); the package
    then takes its extension, submodules and SDK paths from the installed copy. (`python -P` would avoid the
    shadowing, but needs 3.11; the package supports 3.10.)"""
    if any(p.name.startswith("_C.") for p in (ROOT / "cam").iterdir()):
        pytest.skip("this checkout holds a compiled extension (an in-place build): nothing is shadowed")
    result = _python(*args, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    assert printed and str(ROOT / "cam") not in printed, printed  # nothing from the checkout's cam/
    if args[0] == "-m":
        assert (pathlib.Path(printed) / "camConfig.cmake").is_file(), printed


def test_an_uninstalled_checkout_says_so_on_first_use(tmp_path):
    """Without an installed package (`-S`: no site-packages), the checkout's cam/ imports (it is lazy) and its
    first use stops with one sentence naming the fix."""
    import shutil

    shutil.copytree(ROOT / "cam", tmp_path / "cam", ignore=shutil.ignore_patterns("_C.*", "__pycache__"))
    result = _python("-S", "-c", "import cam; cam.Comm", cwd=tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: cam is not installed") and "pip install ." in last, result.stderr


@pytest.mark.parametrize("args", [("-c", "import cam; print(cam.backend())"), ("-m", "cam", "--cmake-dir")],
                         ids=["import", "cmake-dir"])
def test_the_same_commands_work_elsewhere(args, tmp_path):
    result = _python(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_worker_started_at_the_source_root_imports_the_installed_package(tmp_path):
    """A cam-run worker started with the repo root as its working directory gets past `import cam` (the installed
    package) and fails only on the missing config file it was given."""
    from cam.run.cli import worker_command

    missing = tmp_path / "no-such-config.json"
    cmd = worker_command(str(missing), 0)
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert "ImportError" not in result.stderr and "circular import" not in result.stderr, result.stderr
    assert "no-such-config.json" in result.stderr, result.stderr


def test_worker_bootstrap_keeps_the_path_under_safe_path(tmp_path):
    """With PYTHONSAFEPATH (3.11+) Python leaves the working directory off sys.path itself; the bootstrap must then
    not drop a real entry."""
    from cam.run import cli

    if sys.version_info < (3, 11):
        pytest.skip("PYTHONSAFEPATH is Python 3.11+")
    probe = cli._WORKER_BOOTSTRAP.replace("from cam.run.worker import main\nsys.exit(main(sys.argv[1:]))\n",
                                          "print(repr(sys.path))\n")
    plain = _python("-c", "import sys; print(repr(sys.path[1:]))", cwd=tmp_path)
    safe = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert safe.returncode == 0, safe.stderr
    assert eval(safe.stdout) == eval(plain.stdout)  # same path, nothing lost


@pytest.mark.slow
def test_python_m_pytest_from_the_source_root():
    """`python -m pytest` also puts the root first on sys.path; the suite's conftest takes it off, so tests check
    the installed package (here: the worker test above, run as a fresh pytest from the root)."""
    result = _python("-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "tests/test_readme.py::test_worker_started_at_the_source_root_imports_the_installed_package",
                     "tests/test_readme.py::test_the_same_commands_work_elsewhere", cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout, result.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_check_from_the_source_root():
    """The README's main job, `cam-run --check`, as typed at the root of the checkout."""
    cam_run = BIN / "cam-run"
    if not cam_run.exists():
        pytest.skip("cam-run is not installed next to this Python")
    result = subprocess.run([str(cam_run), "--check", "--quiet", "--timeout", "120"], cwd=ROOT, capture_output=True,
                            text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check       PASS" in result.stdout, result.stdout
