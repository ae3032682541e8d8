"""cam-run's checkpoint model on a pre-quantized W8A8 checkpoint (a tiny Qwen3-MoE written by save_pretrained, its
routed experts then rewritten in the W8A8_DYNAMIC layout with quant_model_description.json): the FFN weights are the
checkpoint's integers, the native model computes with their stored q * scale, and the check against it passes."""

import json
import os
import re

import pytest
import torch
import transformers

from cam import convert
from cam.layer_weights import prepack_weights

from test_integrations_transformers import _config, _init


def _w8a8_checkpoint(path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe"))
    _init(model, 2)
    model.save_pretrained(path)
    name = next(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    tensors, out, description = load_file(name), {}, {"model_quant_type": "W8A8_DYNAMIC"}
    g = torch.Generator().manual_seed(5)
    for key, w in tensors.items():
        if re.search(r"experts\.\d+\.(gate|up|down)_proj\.weight$", key):
            # Per output channel, and below full range on purpose: these integers are not what cam's quantizer
            # would give for q * scale, so loading them as shipped is visible.
            scale = (w.abs().amax(1, keepdim=True) / 100).to(torch.bfloat16)
            q = torch.round(w / scale.float()).clamp(-127, 127).to(torch.int8)
            q[:, 0] = torch.randint(-100, 101, (q.shape[0],), generator=g, dtype=torch.int8)
            stem = key[:-len("weight")]
            out[key], out[stem + "weight_scale"] = q, scale
            out[stem + "weight_offset"] = torch.zeros_like(scale)
            description[key] = "W8A8_DYNAMIC"
        else:
            out[key] = w
            description[key] = "FLOAT"
    save_file(out, name, metadata={"format": "pt"})
    with open(os.path.join(path, convert.QUANT_DESCRIPTION_FILE), "w") as f:
        json.dump(description, f)
    return str(path), out


def test_cam_run_model_on_a_w8a8_checkpoint(tmp_path):
    from cam.run.checkpoint import CheckpointModel, native_check

    path, stored = _w8a8_checkpoint(tmp_path / "q3")
    model = CheckpointModel(path)
    # The FFN weights are the stored integers: W2 of MoE layer 1, expert 3 is down_proj.weight transposed.
    q = stored["model.layers.1.mlp.experts.3.down_proj.weight"]
    assert torch.equal(model.w2[1][3], q.t())
    assert torch.equal(model.w2_scale[1][3], stored["model.layers.1.mlp.experts.3.down_proj.weight_scale"]
                       .float()[:, 0])
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 128, (n,), generator=g) for n in (9, 14)]
    report = native_check(model, prompts, model.forward_reference(prompts))
    assert report["ok"] and report["tokens_bounded"] > 0, report
    with pytest.raises(ValueError, match="--weights w8a8"):
        CheckpointModel(path, "w4a8")


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_on_a_w8a8_checkpoint_matches_native(tmp_path):
    import subprocess
    import sys

    path, _ = _w8a8_checkpoint(tmp_path / "q3")
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "cam.run.cli", "--checkpoint", path, "--check", "--requests", "4",
                           "--quiet", "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = json.loads(out.read_text())["check"]
    assert check["ok"] and check["native"]["ok"], check
