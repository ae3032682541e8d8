"""The command-line tools refuse bad flags before anything heavy happens: before `import torch` (seconds on a quiet
machine, over a minute on a loaded one), before a run, a simulation or a file write, with an error that names the
flag and its bound. And the package's lazy loading keeps every public name importable as before."""

import subprocess
import sys

import pytest

TIMEOUT_S = 120

# Runs one CLI's main() in a fresh interpreter, then says whether torch or cam's extension got imported.
_PROBE = """
import sys
from {module} import main
try:
    code = main({argv!r})
except SystemExit as e:  # argparse's usage errors
    code = e.code
print("IMPORTED", "torch" in sys.modules, "cam._C" in sys.modules)
sys.exit(code)
"""


def _probe(module, argv, tmp_path):
    r = subprocess.run([sys.executable, "-c", _PROBE.format(module=module, argv=argv)], capture_output=True,
                       text=True, timeout=TIMEOUT_S, cwd=tmp_path, stdin=subprocess.DEVNULL)
    imported = [line for line in r.stdout.splitlines() if line.startswith("IMPORTED")]
    assert imported, r.stdout + r.stderr
    return r, imported[-1].split()[1:]


@pytest.mark.parametrize("module,argv,needle", [
    ("cam.run.cli", ["--ffn", "0"], "--ffn"),
    ("cam.run.cli", ["--replicas", "0"], "--replicas"),
    ("cam.run.cli", ["--json", "/nonexistent-cam-dir/r.json"], "--json"),
    ("cam.run.cli", ["--trace", "/nonexistent-cam-dir/t.json"], "--trace"),
    ("cam.sim.cli", ["--slo", "-1"], "--slo"),
    ("cam.sim.cli", ["--replicas", str(10 ** 12)], "--replicas"),
    ("cam.bench", ["ffn-loop", "--rows", "0"], "--rows"),
])
def test_refused_before_torch_is_imported(tmp_path, module, argv, needle):
    r, (torch_imported, extension_imported) = _probe(module, argv, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr, r.stderr
    assert torch_imported == "False" and extension_imported == "False", (module, argv, r.stdout)


def test_cam_qualify_help_answers_without_torch(tmp_path):
    """cam-qualify --help parses its flags only: neither torch nor cam's extension is imported (it took 4 s, 10x
    the other tools' --help, when importing cam.qualify loaded the package)."""
    r, (torch_imported, extension_imported) = _probe("cam.qualify", ["--help"], tmp_path)
    assert r.returncode == 0 and "--dry-run" in r.stdout, r.stdout + r.stderr
    assert torch_imported == "False" and extension_imported == "False", r.stdout


def test_the_simulator_runs_without_torch_or_kernels(tmp_path):
    """docs/sim.md: cam-sim (with cam-run's model shapes too) imports neither torch nor cam._C."""
    r, (torch_imported, extension_imported) = _probe(
        "cam.sim.cli", ["--model", "tiny", "-D", "2", "-F", "2", "--requests", "8", "--mean-len", "64",
                        "--costs", "twin-cpu", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert torch_imported == "False" and extension_imported == "False", r.stdout


# ---------------------------------------------------------------- cam-sim: each bound, named


@pytest.mark.parametrize("argv,needle", [
    (["--replicas", str(10 ** 12)], "--replicas"),
    (["--ffn", "0"], "--ffn"),
    (["--participants", "-1"], "--participants"),
    (["--requests", "0"], "--requests"),
    (["--rates", "nan"], "--rates"),
    (["--rates", "4,-1"], "--rates"),
    (["--rates", "inf"], "--rates"),
    (["--slo", "-1"], "--slo"),
    (["--slo", "nan"], "--slo"),
    (["--slo", "0"], "--slo"),
    (["--expert-skew", "-1"], "--expert-skew"),
    (["--expert-skew", "nan"], "--expert-skew"),
    (["--mean-len", "nan"], "--mean-len"),
    (["--min-len", "100", "--max-len", "10"], "--min-len"),
    (["--token-budget", "0"], "--token-budget"),
    (["--lengths", "trace"], "--trace"),
    (["--json", "/nonexistent-cam-dir/out.json"], "--json"),
])
def test_cam_sim_refuses_each_flag_by_name(capsys, argv, needle):
    from cam.sim.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and needle in err, err


def test_cam_sim_unwritable_plot_dir_is_refused_before_the_simulation(capsys, tmp_path):
    from cam.sim.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["--plot-dir", str(blocker / "plots")]) == 2
    err = capsys.readouterr().err
    assert "--plot-dir" in err and "makespan" not in capsys.readouterr().out, err


def test_cam_sim_missing_costs_file_says_where_it_looked(capsys, tmp_path, monkeypatch):
    from cam.sim.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["--costs", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--costs 'nosuch'" in err and str(tmp_path / "nosuch") in err and "ascend-a3-like" in err, err


def test_cam_sim_accepts_the_bounds_themselves(capsys):
    """Controls: the edge values the checks allow run."""
    from cam.sim.cli import main

    assert main(["-D", "2", "-F", "2", "--model", "tiny", "--costs", "twin-cpu", "--requests", "4",
                 "--mean-len", "32", "--rates", "0", "--slo", "1e-9", "--expert-skew", "0", "--quiet"]) == 0


def test_cam_sim_sweep_prints_best_split_and_async_gain(capsys):
    from cam.sim.cli import main

    assert main(["--model", "tiny", "--costs", "twin-cpu", "--sweep", "--total-ranks", "6", "--requests", "16",
                 "--mean-len", "64", "--slo", "10"]) == 0
    out = capsys.readouterr().out
    gains = [line for line in out.splitlines() if line.startswith("async/sync")]
    best = [line for line in out.splitlines() if line.startswith("best split")]
    # tiny has 8 experts: F in {1, 2, 4} leave D = 5, 4, 2 of 6 ranks
    assert len(gains) == 3 and all("goodput" in g and "x" in g for g in gains), out
    assert {b.split()[2] for b in best} == {"async", "sync"} and all("D=" in b and "F=" in b for b in best), out


# ---------------------------------------------------------------- cam-run


def test_cam_run_impossible_topology_names_the_flags(capsys):
    """tiny has 8 experts: 9 FFN ranks cannot each hold one; the refusal names the flag, not only the Topology
    field."""
    from cam.run.cli import main

    assert main(["--ffn", "9"]) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and "--ffn" in err, err


# ---------------------------------------------------------------- cam-bench ffn-loop


@pytest.mark.parametrize("argv", [
    ["--json", "/nonexistent-cam-dir/out.json"], ["--rows", "0"], ["--rows", "100000"], ["--items", "0"], ["--items", "x"], ["--batch", "0"],
    ["--batch", "65"], ["--rounds", "0"], ["--rounds", "-3"],
])
def test_cam_bench_ffn_loop_checks_its_arguments(capsys, argv):
    from cam.bench import main

    with pytest.raises(SystemExit) as info:
        main(["ffn-loop"] + argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and argv[0] in err, err


# ---------------------------------------------------------------- the lazy package


_LAZY_PROBE = """
import sys
import cam
assert "torch" not in sys.modules, "import cam imported torch"
from cam.comm import Comm            # a submodule first: the package loads before it
import cam.ops
assert cam.Comm is Comm and sys.modules["cam.comm"].Comm is Comm, "two copies of cam.comm"
assert isinstance(cam.ops, type(sys)) and cam.ops is sys.modules["cam.ops"]
from cam import CamError, Topology, LayerWeights, Graph, LostReplica, reference, errors, backend
import torch
torch.ops.cam.dynamic_quant  # registered by the load the submodule import set off
assert backend() in ("twin", "ascend", "ascend (torch_npu not importable)")
print("OK", sorted(set(cam.__all__) - set(dir(cam))))
"""


def test_lazy_package_keeps_every_name_and_one_copy_of_each_module(tmp_path):
    r = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True, timeout=TIMEOUT_S,
                       cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK []" in r.stdout, r.stdout


def test_every_public_name_resolves():
    import cam

    for name in cam.__all__:
        assert getattr(cam, name) is not None, name
    assert cam.__version__


_ORDER_PROBE = """
import sys
{first}
{second}
assert "cam._C" in sys.modules, "torch and cam imported, the ops not loaded"
torch.ops.cam.dynamic_quant
torch.ops.cam.gmm_multi_layer
print("OK")
"""


@pytest.mark.parametrize("first,second", [("import torch", "import cam"), ("import cam", "import torch")])
def test_torch_ops_cam_exist_once_torch_and_cam_are_imported_in_either_order(tmp_path, first, second):
    # A torch program that imports cam expects torch.ops.cam.* (README's op table) without touching a cam name.
    r = subprocess.run([sys.executable, "-c", _ORDER_PROBE.format(first=first, second=second)], capture_output=True,
                       text=True, timeout=TIMEOUT_S, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
