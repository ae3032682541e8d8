"""The vLLM tier (.ci/vllm_tier.sh; skipped unless CAM_ENGINE_TIER=1): cam-launch brings up and tears down a
two-replica, two-FFN-rank deployment from examples/vllm_launch.json on the tiny Qwen3-MoE checkpoint, each engine a
vLLM engine with cam's plugin (tests/engines/_vllm_run.py as the engine command: it prefills its prompts and
exits); first tokens equal vLLM native, and the engines' own log says cam replaced the MoE method, for which layers,
on which plane."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from test_vllm_plugin import MAX_TOKENS, PROMPTS, TIMEOUT_S, _checkpoint, _engine, _wait

pytestmark = pytest.mark.skipif(os.environ.get("CAM_ENGINE_TIER") != "1",
                                reason="the vLLM tier: CAM_ENGINE_TIER=1 (bash .ci/vllm_tier.sh)")

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "vllm_launch.json"


@pytest.mark.timeout(3 * TIMEOUT_S)
def test_cam_launch_serves_two_replicas_with_tokens_equal_to_native(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    _checkpoint("qwen3_moe", ckpt)
    halves = [PROMPTS[:2], PROMPTS[2:]]
    env = dict(os.environ)
    env.pop("CAM_VLLM_CONFIG", None)
    _wait([_engine(ckpt, halves[d], str(tmp_path / f"native{d}.json"), env, tmp_path) for d in range(2)])
    for d in range(2):
        (tmp_path / f"prompts{d}.json").write_text(json.dumps(halves[d]))
    engine = (f"{sys.executable} {HERE / '_vllm_run.py'} {{checkpoint}} {tmp_path}/prompts{{replica}}.json "
              f"{tmp_path}/cam{{replica}}.json {{max_tokens}}")
    r = subprocess.run([sys.executable, "-m", "cam.serve.launch", "--config", str(EXAMPLE), "--checkpoint", ckpt,
                        "--max-tokens", str(MAX_TOKENS), "--timeout", "500", "--engine", engine],
                       capture_output=True, text=True, timeout=2 * TIMEOUT_S, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    for d in range(2):
        assert f"[engine {d}]" in out and f"cam: replaced vLLM's UnquantizedFusedMoEMethod" in out, out[-6000:]
    assert "routed experts on cam's data plane (shm)" in out and "decoder layer 0" in out, out[-6000:]
    for rank in (2, 3):
        assert f'[ffn {rank}] {{"rank": {rank}' in out and "attention finished" in out, out[-6000:]
    native = [t for d in range(2) for t in json.loads((tmp_path / f"native{d}.json").read_text())]
    cam = [t for d in range(2) for t in json.loads((tmp_path / f"cam{d}.json").read_text())]
    assert [c["first"] for c in cam] == [n["first"] for n in native]
