"""The twin's fast compute paths give the bits of its element-by-element definitions (kernels/twin/include/twin/
reference.h): every Cast pair and round mode over all 16-bit inputs and fp32 probes, the elementwise fp32
instructions, Max/Min, ReduceMax on every vector path (CAM_TWIN_VECTOR), and the int8 Mmad on every cube path
(CAM_TWIN_CUBE) this machine supports plus the portable one (tests/twin/compute_identity.cpp). The binary is built
with the flags the wheel's twin uses, so the proof covers the code that runs. Then, through the ops: each path forced
by its variable gives the same bits, and a path the machine cannot run is a clear error."""

import os
import subprocess
import sys
import textwrap

import pytest
from _twin_build import TWIN_FLAGS, build_twin_program, twin_support_objects

pytestmark = [pytest.mark.slow]

CUBE_PATHS = ["amx", "avx512vnni", "avx2", "portable"]
VECTOR_PATHS = ["avx512", "avx2", "portable"]
# The twin sources holding the compute paths under proof: compiled here with the wheel's flags. The rest of the twin
# (runtime, pipes, caches, streams: none of it computes a value checked here) links from the session's self-test
# objects, which the other twin self-tests build anyway; compiling all of it at -O3 as well took most of this
# module's set-up (121 s of a loaded run).
COMPUTE_SOURCES = ["vector_simd.cpp", "cube.cpp", "cube_kernels.cpp"]


@pytest.fixture(scope="module")
def identity_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin_compute") / "compute_identity"),
                              "compute_identity.cpp", flags=TWIN_FLAGS, twin_sources=COMPUTE_SOURCES,
                              link_objects=twin_support_objects(source_root, COMPUTE_SOURCES, timeout=400),
                              timeout=400)


def run(binary, *args, timeout=300):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)


def supported_paths(binary):
    result = run(binary, "paths", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    paths = result.stdout.split()
    assert "portable" in paths  # always there: the fallback must never be missing
    return paths


def supported_vector_paths(binary):
    result = run(binary, "vector-paths", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    paths = result.stdout.split()
    assert "portable" in paths
    return paths


@pytest.mark.parametrize("path", VECTOR_PATHS)
def test_vector_path_bit_identical(identity_binary, path):
    if path not in supported_vector_paths(identity_binary):
        pytest.skip(f"vector path {path} not supported by this CPU (ran: {supported_vector_paths(identity_binary)})")
    result = run(identity_binary, "vector", path)
    assert result.returncode == 0 and result.stdout.startswith(f"OK vector {path}"), result.stdout + result.stderr
    print(result.stdout.strip())


def test_vector_check_catches_a_wrong_path(identity_binary):
    # Control: an unknown path name is refused, not treated as a pass.
    result = run(identity_binary, "vector", "no-such-path")
    assert result.returncode == 1 and "MISMATCH unknown vector path" in result.stdout


@pytest.mark.parametrize("path", CUBE_PATHS)
def test_mmad_path_bit_identical(identity_binary, path):
    if path not in supported_paths(identity_binary):
        pytest.skip(f"cube path {path} not supported by this CPU/OS (ran: {supported_paths(identity_binary)})")
    result = run(identity_binary, "mmad", path)
    assert result.returncode == 0 and result.stdout.startswith(f"OK mmad {path}"), result.stdout + result.stderr
    print(result.stdout.strip())


def test_mmad_check_catches_a_wrong_path(identity_binary):
    # Control: the comparison is not vacuous. An unknown path name is refused, not treated as a pass.
    result = run(identity_binary, "mmad", "no-such-path")
    assert result.returncode == 1 and "MISMATCH unknown cube path" in result.stdout


@pytest.mark.parametrize("path", VECTOR_PATHS)
def test_fp32_sweep(identity_binary, path):
    # Every 1021st fp32 bit pattern (4.2 M inputs, all exponents, an odd stride so every low-bit pattern recurs);
    # CAM_TWIN_EXHAUSTIVE=1 sweeps all 2^32 (minutes of CPU).
    if path not in supported_vector_paths(identity_binary):
        pytest.skip(f"vector path {path} not supported by this CPU")
    stride = "1" if os.environ.get("CAM_TWIN_EXHAUSTIVE") else "1021"
    result = run(identity_binary, "fp32-exhaustive", stride, path, timeout=3600)
    assert result.returncode == 0 and result.stdout.startswith("OK"), result.stdout + result.stderr
    print(result.stdout.strip())


GMM_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys, torch, cam
    g = torch.Generator().manual_seed(3)
    m, k, n, e = 150, 300, 200, 3
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    x[0, :] = -128
    w = torch.randint(-128, 128, (e, k, n), generator=g, dtype=torch.int8)
    w[0, :, 0] = -128
    lw = cam.LayerWeights([w], [torch.ones(e, n)])
    gl = torch.tensor([40, 0, 110], dtype=torch.int64)
    out = cam.ops.gmm_multi_layer(x, torch.ones(m), lw, gl, torch.tensor([0], dtype=torch.int64))
    print(hashlib.sha256(out.view(torch.int16).numpy().tobytes()).hexdigest())
    """
)


def run_gmm(path):
    env = dict(os.environ, CAM_TWIN_CUBE=path)
    return subprocess.run([sys.executable, "-c", GMM_SCRIPT], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def forced_digests(identity_binary):
    """Each supported cube path through gmm_multi_layer and each vector path through dynamic_quant, in as few
    processes as the longer list needs: process i forces cube path i and vector path i (cycling the shorter list),
    and runs both scripts. Returns ({cube path: [gmm digests]}, {vector path: [quant digests]})."""
    cube, vector = supported_paths(identity_binary), supported_vector_paths(identity_binary)
    gmm, quant = {}, {}
    for i in range(max(len(cube), len(vector))):
        c, v = cube[i % len(cube)], vector[i % len(vector)]
        env = dict(os.environ, CAM_TWIN_CUBE=c, CAM_TWIN_VECTOR=v)
        result = subprocess.run([sys.executable, "-c", GMM_SCRIPT + QUANT_SCRIPT], capture_output=True, text=True,
                                timeout=300, env=env)
        assert result.returncode == 0, f"CAM_TWIN_CUBE={c} CAM_TWIN_VECTOR={v}: {result.stderr[-2000:]}"
        g, q = result.stdout.split()
        gmm.setdefault(c, []).append(g)
        quant.setdefault(v, []).append(q)
    return gmm, quant


def test_forced_cube_paths_agree_through_the_op(forced_digests):
    digests = forced_digests[0]
    print("cube paths run through gmm_multi_layer:", ", ".join(digests))
    assert len({d for ds in digests.values() for d in ds}) == 1, digests


def test_unknown_cube_path_is_refused():
    result = run_gmm("bogus")
    assert result.returncode != 0
    assert "CAM_TWIN_CUBE='bogus' is not one of" in result.stderr, result.stderr[-2000:]


def test_unsupported_cube_path_is_refused(identity_binary):
    unsupported = [p for p in CUBE_PATHS if p not in supported_paths(identity_binary)]
    if not unsupported:
        pytest.skip("every cube path runs on this machine; no unsupported one to force")
    result = run_gmm(unsupported[0])
    assert result.returncode != 0 and "does not support it" in result.stderr, result.stderr[-2000:]


QUANT_SCRIPT = textwrap.dedent(
    """
    import hashlib, torch, cam
    g = torch.Generator().manual_seed(5)
    outs = []
    for dtype in (torch.bfloat16, torch.float16):
        for rows, cols in ((37, 2048), (5, 100), (3, 7168)):
            x = (torch.randn(rows, cols, generator=g) * 40).to(dtype)
            x[0, 3] = 0.5   # a tie-to-even on the int8 side once scaled
            x[1, :] = 0     # a zero row
            q, s = cam.ops.dynamic_quant(x)
            outs.append(q.numpy().tobytes() + s.numpy().tobytes())
    print(hashlib.sha256(b"".join(outs)).hexdigest())
    """
)


def run_quant(path):
    env = dict(os.environ, CAM_TWIN_VECTOR=path)
    return subprocess.run([sys.executable, "-c", QUANT_SCRIPT], capture_output=True, text=True, timeout=300, env=env)


def test_forced_vector_paths_agree_through_the_op(forced_digests):
    digests = forced_digests[1]
    print("vector paths run through dynamic_quant:", ", ".join(digests))
    assert len({d for ds in digests.values() for d in ds}) == 1, digests


def test_unknown_vector_path_is_refused():
    result = run_quant("bogus")
    assert result.returncode != 0
    assert "CAM_TWIN_VECTOR='bogus' is not one of" in result.stderr, result.stderr[-2000:]


def test_unsupported_vector_path_is_refused(identity_binary):
    unsupported = [p for p in VECTOR_PATHS if p not in supported_vector_paths(identity_binary)]
    if not unsupported:
        pytest.skip("every vector path runs on this machine; no unsupported one to force")
    result = run_quant(unsupported[0])
    assert result.returncode != 0 and "does not support it" in result.stderr, result.stderr[-2000:]
