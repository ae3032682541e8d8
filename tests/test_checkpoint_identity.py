"""Checkpoint identity (cam.checkpoint_identity): ranks that loaded different checkpoints of the same shape are
refused by name in the handshake, before any round runs; the same checkpoint (a copy too) passes."""

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

import cam
from cam import checkpoint_identity as ci
from cam.connector import AsyncAFDConnector, ConnectorConfig

from test_ffn_server import B, E, H, K, L, TIMEOUT_S, _experts, _one_round, _reap, _write_checkpoint


def _pair(tmp_path, *, other_type=None, seed_b=1):
    """Two checkpoints of one shape: b differs from a only in layer 1's experts (or only in model_type)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    layers = _experts()
    _write_checkpoint(a, layers)
    if other_type is None:
        _write_checkpoint(b, [layers[0], _experts(seed_b)[1]])
    else:
        _write_checkpoint(b, layers, model_type=other_type)
    return str(a), str(b)


def test_expert_weights_alone_make_another_identity(tmp_path):
    a, b = _pair(tmp_path)
    diffs = ci.compare(ci.identity(b), ci.identity(a))
    fields = [f for f, _, _ in diffs]
    assert fields[0] == "experts of decoder layer 1", diffs
    assert "experts of decoder layer 0" not in fields
    assert "tensor model.layers.1.mlp.experts.0.gate_proj.weight content hash" in fields
    assert ci.published(a)["shape"] == ci.published(b)["shape"]


def test_model_type_alone_is_named(tmp_path):
    a, b = _pair(tmp_path, other_type="qwen2_moe")
    assert ci.compare(ci.published(b), ci.published(a)) == [("model_type", "qwen2_moe", "qwen3_moe")]


def test_a_copy_is_the_same_checkpoint_and_the_cache_follows_the_files(tmp_path):
    a, _ = _pair(tmp_path)
    first = ci.identity(a)
    assert os.path.isfile(os.path.join(a, ci.CACHE_NAME))
    copy = str(tmp_path / "copy")
    shutil.copytree(a, copy)
    os.remove(os.path.join(copy, ci.CACHE_NAME))
    assert ci.identity(copy)["digest"] == first["digest"]
    # A rewritten file (other size or time) is hashed again, not read from the stale cache.
    _write_checkpoint(a, _experts(7))
    assert ci.identity(a)["digest"] != first["digest"]


def test_check_same_names_the_ranks_on_each_side_and_ignores_ranks_without_one(tmp_path):
    a, b = _pair(tmp_path)
    pa, pb = ci.published(a), ci.published(b)
    ci.check_same(0, [pa, None, pa], attention_ranks=1)
    with pytest.raises(ci.CheckpointMismatchError) as e:
        ci.check_same(2, [pa, pb, pb], attention_ranks=1)
    msg = str(e.value)
    assert msg.startswith("rank 2: checkpoint identity differs")
    assert "rank(s) 1 (ffn), 2 (ffn) loaded another checkpoint than rank(s) 0 (attention)" in msg
    assert f"experts of decoder layer 1: {pb['layers']['1']!r} against {pa['layers']['1']!r}" in msg


def _serve(tmp_path, ffn_dir, attention_dir, group):
    """One cam-ffn process on ffn_dir, the Attention rank here with attention_dir's identity; (error or None,
    cam-ffn's exit code and stderr)."""
    from cam.connector import loopback_store

    secret = os.urandom(16)
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    store = loopback_store(0, TIMEOUT_S)
    topo = cam.Topology(D=1, P=1, F=1, E=E, K=K, H=H, Bmax=B, L=L)
    proc = subprocess.Popen([sys.executable, "-m", "cam.ffn_server", "--rank", "1", "--checkpoint", ffn_dir,
                             "--max-tokens", str(B), "--master-port", str(store.port), "--group", group,
                             "--idle-poll", "0.02", "--timeout", str(TIMEOUT_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group=group, secret=secret, checkpoint=ci.published(attention_dir))
        conn = AsyncAFDConnector(0, "attention", cfg)
        try:
            _one_round(conn, store, [proc])
            err = None
        except ci.CheckpointMismatchError as e:
            conn.close()
            err = e
        _, stderr = proc.communicate(timeout=TIMEOUT_S)
    finally:
        _reap([proc])
    return err, proc.returncode, stderr


@pytest.mark.parametrize("other_type, field", [(None, "experts of decoder layer 1"),
                                               ("qwen2_moe", "model_type: 'qwen2_moe' against 'qwen3_moe'")],
                         ids=["experts", "qwen2-behind-qwen3"])
def test_cam_ffn_on_another_checkpoint_of_the_same_shape_is_refused_on_both_sides(tmp_path, other_type, field):
    """cam-ffn on checkpoint b, the Attention rank on a: b's experts of layer 1 differ, or b is a Qwen2-MoE of the
    same shape and weights behind a Qwen3-MoE Attention side."""
    a, b = _pair(tmp_path, other_type=other_type)
    err, code, stderr = _serve(tmp_path, b, a, f"ident-refuse-{other_type}")
    assert err is not None, "the Attention rank joined an FFN rank serving another checkpoint"
    assert "rank(s) 1 (ffn) loaded another checkpoint than rank(s) 0 (attention)" in str(err)
    assert field in str(err), str(err)
    assert code != 0 and "CheckpointMismatchError" in stderr and field in stderr, stderr


def test_cam_ffn_on_the_same_checkpoint_serves(tmp_path):
    a, _ = _pair(tmp_path)
    copy = str(tmp_path / "copy")
    shutil.copytree(a, copy)
    err, code, stderr = _serve(tmp_path, copy, a, "ident-same")
    assert err is None and code == 0, stderr


def test_cam_ffn_refuses_experts_that_are_not_the_identity_it_publishes(tmp_path, caplog):
    """A safetensors file rewritten in place with its size and time kept: the cached identity still names the old
    bytes, and cam-ffn, which hashes what it loaded, refuses naming the tensor instead of serving other weights
    under the old identity. Control: before the rewrite it gets past the check (to the store, absent here)."""
    from cam import ffn_server

    a, _ = _pair(tmp_path)
    ci.identity(a)  # cached
    path = os.path.join(a, "model.safetensors")
    st = os.stat(path)
    _write_checkpoint(a, _experts(5))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size
    argv = ["--checkpoint", a, "--rank", "1", "--max-tokens", "4", "--master-port", "1", "--join-timeout", "1"]
    assert ffn_server.main(argv) == 2
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused:")]
    assert refused and "ffn rank 1: loaded model.layers.0.mlp.experts.0." in refused[0], caplog.text
    assert "the checkpoint's identity has" in refused[0]
    os.remove(os.path.join(a, ci.CACHE_NAME))
    shutil.rmtree(os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cam", "identity"),
                  ignore_errors=True)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cam.ffn"):
        assert ffn_server.main(argv) == 1  # loaded and checked; then no store at port 1 within --join-timeout
    assert "expert tensors loaded, their content hashes the checkpoint identity's" in caplog.text
