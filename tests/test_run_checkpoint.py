"""cam-run --checkpoint DIR: the main job (processes as ranks) on tiny random transformers checkpoints written with
save_pretrained here (DeepSeek-V3 and Qwen3-MoE; token ids only, no download), checked against the single-process
reference and against the transformers model itself run natively with the same dequantized experts."""

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers

from test_integrations_transformers import FAMILIES, _config, _init

RUN_TIMEOUT_S = 300  # the whole cam-run: four rank processes each loading the model, on a shared 2-CPU machine


def _checkpoint(family, path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(family))
    _init(model, FAMILIES.index(family))
    model.save_pretrained(path)
    return str(path)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family", ["deepseek_v3", "qwen3_moe"])
def test_cam_run_on_a_checkpoint_matches_native(family, tmp_path):
    path = _checkpoint(family, tmp_path / family)
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "cam.run.cli", "--checkpoint", path, "--check", "--requests", "4",
                           "--quiet", "--json", str(out)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["checkpoint"] == os.path.abspath(path) and report["model"] is None
    assert report["requests"] == 4 and report["topology"]["E"] == 8 and report["topology"]["H"] == 64
    assert report["topology"]["L"] == (2 if family == "deepseek_v3" else 3)
    check = report["check"]
    assert check["ok"] and check["reference_ok"], check
    native = check["native"]
    assert native["ok"] and native["requests"] == 4, native
    assert native["greedy_equal"] + native["greedy_near_ties"] == 4 and native["greedy_equal"] >= 3, native
    assert native["tokens_bounded"] > 0 and 0 < native["max_rel_diff"] < native["tolerance"]["max_rel_diff"]
    assert 0 < native["max_block_rel_diff"] < native["tolerance"]["max_block_rel_diff"]
    assert "native      PASS" in proc.stdout


def _refused(argv, match):
    from cam.run import cli

    with pytest.raises(ValueError, match=match):
        cli.check_args(cli._parse(argv))


def test_checkpoint_flags_refused_by_name(tmp_path):
    _refused(["--checkpoint", str(tmp_path / "missing")], "--checkpoint .* is not a directory with a config.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek_v4", "swiglu_limit": 10.0}))
    _refused(["--checkpoint", str(tmp_path)], "model_type 'deepseek_v4' is not supported by cam-run")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "hidden_act": "gelu"}))
    _refused(["--checkpoint", str(tmp_path)], "hidden_act")
    _refused(["--checkpoint", str(tmp_path), "--model", "tiny"], "--checkpoint replaces --model")
    _refused(["--checkpoint", str(tmp_path), "--cost-model"], "--cost-model with --checkpoint")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    _refused(["--checkpoint", str(tmp_path)], r"no \*.safetensors")


def test_native_check_fails_on_a_layer_off_by_one(tmp_path):
    """The comparison with the engine can fail: the same CheckpointModel with its MoE layers' experts shifted by
    one (layer j computing with layer j+1's weights, the mistake the layer index invites) is outside the bound,
    while the model as loaded is within it."""
    from cam.run.checkpoint import CheckpointModel, native_check

    model = CheckpointModel(_checkpoint("qwen2_moe", tmp_path / "q2"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 128, (n,), generator=g) for n in (9, 14)]
    good = native_check(model, prompts, model.forward_reference(prompts))
    assert good["ok"] and good["tokens_bounded"] > 0, good
    for name in ("w1", "w1_scale", "w2", "w2_scale"):
        ws = getattr(model, name)
        setattr(model, name, ws[1:] + ws[:1])
    bad = native_check(model, prompts, model.forward_reference(prompts))
    assert not bad["ok"] and bad["max_block_rel_diff"] > 10 * good["max_block_rel_diff"], (good, bad)
