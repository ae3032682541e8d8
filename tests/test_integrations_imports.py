"""Importing cam, its integrations package or cam-ffn's module imports no engine (transformers, vLLM) and, for the
command-line server, not even torch before its flags and checkpoint directory are checked."""

import subprocess
import sys

TIMEOUT_S = 120

_PROBE = """
import sys
import cam, cam.integrations, cam.ffn_server
assert "serve_ffn" in cam.__all__ and "quantize_weight" in cam.__all__
code = cam.ffn_server.main(["--checkpoint", "/nonexistent-cam-dir", "--rank", "2", "--max-tokens", "4"])
print("IMPORTED", code, *(name in sys.modules for name in ("torch", "transformers", "vllm")))
"""


def test_import_cam_imports_no_engine(tmp_path):
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=TIMEOUT_S,
                       cwd=tmp_path, stdin=subprocess.DEVNULL)
    line = [x for x in r.stdout.splitlines() if x.startswith("IMPORTED")]
    assert line, r.stdout + r.stderr
    assert line[-1].split()[1:] == ["2", "False", "False", "False"], r.stdout + r.stderr
    assert "--checkpoint /nonexistent-cam-dir is not a directory" in r.stderr
