"""cam-run --checkpoint DIR --weights w4a8: a tiny random checkpoint's routed experts as per-channel int4 values
(held packed, run by the int4 kernels, docs/gmm.md §9.3), checked against the single-process reference and the
transformers model run natively with the same dequantized int4 experts."""

import pytest

from test_run_checkpoint import _cam_run, _checkpoint, _refused


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v4"])
def test_cam_run_w4a8_on_a_checkpoint_matches_native(family, tmp_path):
    path = _checkpoint(family, tmp_path / family)
    proc, report = _cam_run(path, tmp_path, "--weights", "w4a8", python=("-m", "cam.run.cli"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["weights"] == "w4a8"
    check = report["check"]
    assert check["ok"] and check["reference_ok"], check
    native = check["native"]
    assert native["ok"] and native["requests"] == 4, native
    assert native["greedy_equal"] + native["greedy_near_ties"] == 4, native
    assert 0 < native["max_block_rel_diff"] < native["tolerance"]["max_block_rel_diff"]


def test_weights_flag_needs_a_checkpoint():
    _refused(["--weights", "w4a8"], "--weights w4a8 needs --checkpoint")


def test_cam_ffn_serves_w4a8_experts(tmp_path):
    """A cam-ffn process with --weights w4a8 --group-size 64 serves a checkpoint (I = 64: int4 scale groups are
    multiples of 64 K rows): the routed output equals cam's ops in one process on the same int4 experts, and differs
    from the W8A8 experts'."""
    import os

    import torch

    import cam
    from cam import convert
    from cam.connector import AsyncAFDConnector, ConnectorConfig, loopback_store
    from cam.integrations.plane import routed_local
    from test_ffn_server import B, E, H, K, L, TIMEOUT_S, _cam_ffn, _one_round, _reap, _write_checkpoint

    g = torch.Generator().manual_seed(0)
    layers = [convert.ExpertFFN(torch.randn(E, H, 128, generator=g) / H ** 0.5,
                                torch.randn(E, 64, H, generator=g) / 8) for _ in range(L)]
    _write_checkpoint(tmp_path, layers)
    secret = os.urandom(16)
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    store = loopback_store(0, TIMEOUT_S)
    topo = cam.Topology(D=1, P=1, F=1, E=E, K=K, H=H, Bmax=B, L=L)
    procs = [_cam_ffn(["--rank", "1", "--checkpoint", str(tmp_path), "-D", "1", "-F", "1", "--max-tokens", str(B),
                       "--master-port", str(store.port), "--group", "ffn-w4", "--idle-poll", "0.02", "--timeout",
                       str(TIMEOUT_S), "--weights", "w4a8", "--group-size", "64"], env)]
    try:
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group="ffn-w4", secret=secret)
        conn = AsyncAFDConnector(0, "attention", cfg)
        x, ids, w, out, outs = _one_round(conn, store, procs)
    finally:
        _reap(procs)
    assert procs[0].returncode == 0, outs[0][1]
    assert "weights w4a8 (groups of 64 K rows)" in outs[0][1]
    w1, w2 = convert.layer_weights(layers, bits=4, group_size=64)
    assert w1.format == w2.format == "int4"
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 1))
    w1, w2 = convert.layer_weights(layers)
    assert not torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


def test_cam_ffn_group_size_needs_w4a8(tmp_path, caplog):
    from cam import ffn_server
    from test_ffn_server import _experts, _write_checkpoint

    _write_checkpoint(tmp_path, _experts())
    assert ffn_server.main(["--checkpoint", str(tmp_path), "--rank", "1", "--max-tokens", "4",
                            "--group-size", "32"]) == 2
    assert "--group-size needs --weights w4a8" in caplog.text


def test_transformers_cam_w4a8_experts_match_native_with_the_same_int4_weights():
    """transformers' experts extension point with "cam_w4a8": greedy tokens of a tiny Qwen3-MoE equal the native
    model's with the same dequantized int4 experts (near-ties allowed, as for "cam"), and the W8A8-dequantized native
    model is a different model at these weights."""
    import torch
    import transformers

    from cam import convert
    from cam.integrations import transformers as camtf
    from test_integrations_transformers import PROMPTS, _config, _init, _prompts, _same_greedy

    camtf.register()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe")).eval()
    _init(model, 7)
    natives = {}
    for bits in (4, 8):
        native = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe")).eval()
        native.load_state_dict(model.state_dict())
        with torch.no_grad():
            for block in camtf.moe_blocks(native).values():
                ffn = convert.dequantized(convert.from_hf_module(block.experts), bits=bits)
                block.experts.gate_up_proj.copy_(ffn.w1.transpose(1, 2))
                block.experts.down_proj.copy_(ffn.w2.transpose(1, 2))
        natives[bits] = native
    model.set_experts_implementation(camtf.EXPERTS_IMPLEMENTATION_W4A8)
    prompts = _prompts(model.config.vocab_size)
    with torch.no_grad():
        got = [model(p).logits[0, -1] for p in prompts]
        want = [natives[4](p).logits[0, -1] for p in prompts]
        w8 = [natives[8](p).logits[0, -1] for p in prompts]
    assert sum(_same_greedy(g, w) for g, w in zip(got, want)) >= PROMPTS - 1
    err4 = max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want))
    err8 = max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, w8))
    assert err4 < err8, (err4, err8)  # closer to its own weights than to the int8 ones


def _to_consumer_layout(directory):
    """Rewrites a checkpoint's routed experts into the consumer's W4A8 layout (cam.convert.CONSUMER_W4A8_KEYS:
    per-channel int4 packed eight to an int32 [E, K, N/8], int64-encoded scales, the fp32 assist matrix) and states
    the layout in cam_w4a8.json. Returns {layer prefix: (q1, s1, q2, s2)}, the int4 values and scales written."""
    import glob
    import json
    import os

    from safetensors.torch import load_file, save_file

    from cam import convert, w4a8
    from cam.checkpoint_config import LAYER_EXPERTS

    layout = "int32_low_nibble_first"
    written = {}
    for name in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        tensors = load_file(name)
        prefixes = sorted({m.group(1) for m in map(LAYER_EXPERTS.match, tensors) if m})
        for prefix in prefixes:
            ffn = convert.from_hf_state_dict(tensors, prefix)
            for key in [k for k in tensors if k.startswith(prefix)]:
                del tensors[key]
            out = []
            for tag, w in (("w13", ffn.w1), ("w2", ffn.w2)):
                q, s = convert.quantize_weight(w, bits=4)
                s = w4a8.decode_scale_int64(w4a8.encode_scale_int64(s))  # what the int64 words hold
                tensors[f"{prefix}{tag}_weight"] = w4a8.pack_int4(q, layout=layout)
                tensors[f"{prefix}{tag}_weight_scale"] = w4a8.encode_scale_int64(s)
                tensors[f"{prefix}{tag}_weight_assist"] = w4a8.assist_matrix(q, s)
                out += [q, s]
            written[prefix] = tuple(out)
        save_file(tensors, name, metadata={"format": "pt"})
    with open(os.path.join(directory, convert.CONSUMER_W4A8_FILE), "w") as f:
        json.dump({"layout": layout, "group_size": None}, f)
    return written


def test_consumer_layout_checkpoint_is_decoded_not_guessed(tmp_path):
    """The converter reads the consumer's packed experts back to the same int4 values and scales cam-run computes
    with (its per-channel quantizer of the decoded weights returns them exactly), and refuses them without the
    layout file, naming it."""
    import os

    import torch

    from cam import convert

    path = _checkpoint("deepseek_v3", tmp_path / "ckpt")
    written = _to_consumer_layout(path)
    layers, _ = convert.load_checkpoint_experts(path)
    assert len(layers) == len(written)
    for ffn, (q1, s1, q2, s2) in zip(layers, written.values()):
        for w, q, s in ((ffn.w1, q1, s1), (ffn.w2, q2, s2)):
            q_again, s_again = convert.quantize_weight(w, bits=4)
            assert torch.equal(q_again, q) and torch.equal(s_again, s)
    os.remove(os.path.join(path, convert.CONSUMER_W4A8_FILE))
    with pytest.raises(ValueError, match="no layout was given .*cam_w4a8.json"):
        convert.load_checkpoint_experts(path)


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_on_a_consumer_layout_checkpoint_matches_native(tmp_path):
    """cam-run --checkpoint DIR --weights w4a8 on a tiny DeepSeek-V3 checkpoint whose routed experts are in the
    consumer's W4A8 layout: checked against the golden and the transformers model with the same dequantized int4
    experts (greedy tokens, block error), as for the float checkpoint."""
    path = _checkpoint("deepseek_v3", tmp_path / "ckpt")
    _to_consumer_layout(path)
    proc, report = _cam_run(path, tmp_path, "--weights", "w4a8", python=("-m", "cam.run.cli"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["weights"] == "w4a8"
    check = report["check"]
    assert check["ok"] and check["reference_ok"], check
    native = check["native"]
    assert native["ok"] and native["requests"] == 4, native
    assert native["greedy_equal"] + native["greedy_near_ties"] == 4, native
    assert 0 < native["max_block_rel_diff"] < native["tolerance"]["max_block_rel_diff"]


def _expert_bytes(*sets):
    return sum(t.nbytes for lw in sets for t in lw.weights)


def test_cam_ffn_w4a8_rank_holds_packed_int4_experts_at_half_the_bytes(tmp_path):
    """cam-ffn --weights w4a8 serves LayerWeights of format int4 (packed, with column sums): its expert bytes are
    half the W8A8 rank's (H and I are multiples of the packing's 64 x 16 fractal, so no padding)."""
    import torch

    from cam import convert, ffn_server
    from test_ffn_server import E, H, L, _write_checkpoint

    inter = 64
    g = torch.Generator().manual_seed(5)
    layers = [convert.ExpertFFN(torch.randn(E, H, 2 * inter, generator=g), torch.randn(E, inter, H, generator=g))
              for _ in range(L)]
    _write_checkpoint(tmp_path, layers)
    loaded = {}
    for weights in ("w8a8", "w4a8"):
        args = ffn_server._parser().parse_args(["--checkpoint", str(tmp_path), "--rank", "1", "--max-tokens", "4",
                                                "--weights", weights])
        _, w1, w2, _, _ = ffn_server._load(args)
        loaded[weights] = (w1, w2)
    w1, w2 = loaded["w4a8"]
    assert w1.format == w2.format == "int4" and w1.colsums is not None and w2.colsums is not None
    assert all(t.dtype == torch.uint8 for t in w1.weights + w2.weights)
    w4_bytes, w8_bytes = _expert_bytes(*loaded["w4a8"]), _expert_bytes(*loaded["w8a8"])
    assert w8_bytes == E * L * 3 * H * inter
    assert 2 * w4_bytes == w8_bytes, (w4_bytes, w8_bytes)


def test_cam_run_w4a8_ffn_rank_holds_packed_int4_experts_at_half_the_bytes(tmp_path):
    """cam-run --checkpoint DIR --weights w4a8: an FFN rank's slot weights, contiguous or under --placement, are
    LayerWeights of format int4 at half the W8A8 bytes (up to the int4 fractal's K padding of 64), and hold the same
    experts (equal to cam.convert's)."""
    import types

    import torch

    import cam
    from cam import convert
    from cam.placement import Placement
    from cam.run import checkpoint, worker
    from cam.serve.iteration import expert_weights

    path = _checkpoint("deepseek_v3", tmp_path / "v3")
    models = {w: checkpoint.load_model(path, w) for w in ("w8a8", "w4a8")}
    model = models["w4a8"]
    e = model.num_experts
    topo = cam.Topology(D=1, P=1, F=2, E=e, K=model.top_k, H=model.hidden, Bmax=4, L=len(model.moe_layers))
    got = {w: expert_weights(m, topo, 1) for w, m in models.items()}
    w1, w2 = got["w4a8"]
    assert w1.format == w2.format == "int4"
    # W1 [H = 64, 2I = 64]: half the int8 bytes exactly; W2's K = I = 32 is padded to the int4 fractal's 64 rows
    # (so no smaller than int8 at this tiny I; the cam-ffn test above has I = 64 and halves both).
    assert 2 * _expert_bytes(w1) == _expert_bytes(got["w8a8"][0])
    assert _expert_bytes(w2) == topo.L * topo.R * 64 * model.hidden // 2
    experts, _ = convert.load_checkpoint_experts(path)
    c1, c2 = convert.layer_weights(experts, range(topo.R, 2 * topo.R), bits=4)
    assert all(torch.equal(a, b) for a, b in zip(w1.weights + w2.weights, c1.weights + c2.weights))
    assert torch.equal(w1.colsums_all, c1.colsums_all) and torch.equal(w2.colsums_all, c2.colsums_all)
    placement = Placement.balanced(e, 2, layers=topo.L, replicate=[0], slots_per_rank=topo.R + 1)
    cfg = types.SimpleNamespace(expert_placement=lambda: placement)
    p1, p2 = worker._ffn_weights(cfg, model, topo, 0)
    assert p1.format == p2.format == "int4" and p1.colsums is not None
