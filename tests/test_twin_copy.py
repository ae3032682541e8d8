"""The twin's MTE copies (docs/twin.md "Copies"). DataCopyPad's strided, padded and multi-block forms against a
reference written from the stated semantics (tests/twin/copy_pad.cpp). The GM side (kernels/twin/src/gm_copy.cpp):
each path copies exactly the run (every misalignment, lengths 0..300 and large, nothing outside touched); no
naturally aligned 2/4/8-byte word inside a copied region is ever seen torn by a concurrent reader (both directions,
with a byte-wise control that the same detector catches); through the ops each forced path gives the same bits; a
path the machine cannot run, or an unknown name, is a `copy-path` error."""

import os
import subprocess
import sys
import textwrap

import pytest
from _twin_build import TWIN_FLAGS, build_twin_program

PATHS = ["sse16", "word8"]
# Each stress run is bounded; the subprocess timeout bounds a hang.
TEAR_SECONDS = "0.5"


@pytest.fixture(scope="module")
def copy_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin_copy") / "gm_copy"), "gm_copy.cpp",
                              flags=TWIN_FLAGS, twin_sources=["gm_copy.cpp"])


@pytest.mark.slow  # builds the whole twin
def test_data_copy_pad_forms_against_reference(source_root, tmp_path):
    # -O1 as the enforcement self-test: the copy code is header templates, compiled into this binary either way.
    out = build_twin_program(source_root, str(tmp_path / "copy_pad"), "copy_pad.cpp", timeout=600)
    result = subprocess.run([out], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("OK"), result.stdout + result.stderr
    print(result.stdout.strip())


def run(binary, *args, env=None, timeout=120):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout, env=env)


def supported(binary):
    result = run(binary, "paths")
    assert result.returncode == 0, result.stdout + result.stderr
    paths = result.stdout.splitlines()[0].split()
    assert "word8" in paths  # the portable path is always there
    return paths


@pytest.mark.parametrize("path", PATHS)
def test_copy_paths_copy_exactly_the_run(copy_binary, path):
    if path not in supported(copy_binary):
        pytest.skip(f"copy path {path} not supported by this CPU (no AVX)")
    result = run(copy_binary, "identity", path)
    assert result.returncode == 0 and result.stdout.startswith(f"OK identity {path}"), result.stdout + result.stderr


def _tear(binary, mode, path):
    result = run(binary, mode, path, TEAR_SECONDS)
    print(result.stdout.strip())
    return result


@pytest.mark.parametrize("mode", ["tear-write", "tear-read"])
def test_bytewise_control_is_caught_tearing(copy_binary, mode):
    # The detector has power: a copy one byte at a time, raced the same way, shows torn words. Run until the first
    # torn word or the bound; if the two threads never overlapped (a machine too loaded to run them at once) there
    # is nothing to conclude.
    result = _tear(copy_binary, mode, "bytewise")
    if result.returncode == 0:
        pytest.skip(f"{mode}: the byte-wise control saw no torn word in {TEAR_SECONDS} s ({result.stdout.strip()}):"
                    " reader and writer did not run at the same time")
    assert result.returncode == 2 and result.stdout.startswith("TORN"), result.stdout + result.stderr


@pytest.mark.parametrize("mode", ["tear-write", "tear-read"])
@pytest.mark.parametrize("path", PATHS)
def test_no_torn_word_under_a_concurrent_reader(copy_binary, mode, path):
    if path not in supported(copy_binary):
        pytest.skip(f"copy path {path} not supported by this CPU (no AVX)")
    result = _tear(copy_binary, mode, path)
    assert result.returncode == 0 and result.stdout.startswith("OK"), result.stdout + result.stderr
    caught = int(result.stdout.split(",")[-1].split()[0])
    if caught == 0:
        pytest.skip(f"{mode} {path}: the reader never caught a copy in progress, so the run proves nothing")


OP_SCRIPT = textwrap.dedent(
    """
    import hashlib, torch, cam
    g = torch.Generator().manual_seed(5)
    h = hashlib.sha256()
    # dynamic_quant: DataCopyPad in (odd row lengths: padded blocks) and out (q rows, scales)
    for shape in ((7, 33), (3, 2048), (64, 1000)):
        q, s = cam.ops.dynamic_quant(torch.randn(shape, generator=g).to(torch.bfloat16))
        h.update(q.numpy().tobytes()); h.update(s.numpy().tobytes())
    # a GMM: ND -> NZ copies into L1, burst copies, Fixpipe and the epilogue's copies
    m, k, n, e = 150, 300, 200, 3
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (e, k, n), generator=g, dtype=torch.int8)
    lw = cam.LayerWeights([w], [torch.rand(e, n, generator=g)])
    gl = torch.tensor([40, 0, 110], dtype=torch.int64)
    out = cam.ops.gmm_multi_layer(x, torch.rand(m, generator=g), lw, gl, torch.tensor([0], dtype=torch.int64))
    h.update(out.view(torch.int16).numpy().tobytes())
    print(h.hexdigest())
    """
)


def run_ops(path):
    env = dict(os.environ, CAM_TWIN_COPY=path)
    return subprocess.run([sys.executable, "-c", OP_SCRIPT], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow  # two interpreter starts with torch and cam
def test_forced_copy_paths_agree_through_the_ops(copy_binary):
    digests = {}
    for path in supported(copy_binary):
        result = run_ops(path)
        assert result.returncode == 0, result.stderr[-2000:]
        digests[path] = result.stdout.strip()
    print("copy paths run through dynamic_quant and gmm_multi_layer:", ", ".join(digests))
    assert len(set(digests.values())) == 1, digests


def test_unknown_copy_path_is_refused():
    result = run_ops("bogus")
    assert result.returncode != 0
    assert "copy-path" in result.stderr and "CAM_TWIN_COPY='bogus' is not one of" in result.stderr, \
        result.stderr[-2000:]
