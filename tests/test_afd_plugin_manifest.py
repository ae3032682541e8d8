"""tools/afd_plugin_manifest.py: the vLLM AFD plugin's connector contract read with ast from a checkout.

The generator runs on a synthetic checkout (tests/fixtures/afd_plugin_checkout, signatures only) whose facts are
stated here by hand; the checked-in manifest is checked for the pinned commit and the facts the adapter relies on;
with ``CAM_AFD_PLUGIN_CHECKOUT`` set to a real checkout at the pinned commit, the manifest is regenerated and must
not differ (the CI drift stage, .ci/run)."""

import importlib.util
import json
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "afd_plugin_checkout"
MANIFEST = ROOT / "tools" / "afd_plugin_manifest.json"


def _tool():
    spec = importlib.util.spec_from_file_location("afd_plugin_manifest", ROOT / "tools" / "afd_plugin_manifest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fixture_facts():
    m = _tool().build(FIXTURE, "0" * 40)
    base = m["base_class"]
    assert base["abstract"] == ["parse_extra_config", "recv_ffn_output", "send_attn_output"]
    assert set(base["attributes"]) == {"control_plane", "attn_size"}
    assert base["attributes"]["attn_size"]["at"] == "afd_plugin/connectors/base.py:7"
    init = base["methods"]["__init__"]["params"]
    assert [p["name"] for p in init] == ["self", "rank", "local_rank", "vllm_config", "afd_config", "role_rank"]
    helper = {p["name"]: (p["kind"], p["default"]) for p in base["methods"]["helper"]["params"]}
    assert helper == {"self": ("POSITIONAL_OR_KEYWORD", None), "args": ("VAR_POSITIONAL", None),
                      "key": ("KEYWORD_ONLY", None), "flag": ("KEYWORD_ONLY", "True")}
    recv = {p["name"]: p["default"] for p in base["methods"]["recv_ffn_output"]["params"]}
    assert recv["ubatch_idx"] == "0"
    assert base["methods"]["parse_extra_config"]["decorators"] == ["abstractmethod", "classmethod"]
    assert [f["name"] for f in m["metadata_types"]["AFDTransferMetadata"]["fields"]] == \
        ["layer_idx", "stage_idx", "seq_lens"]
    assert [f["name"] for f in m["async_types"]["AFDAsyncFFNWorkItem"]["fields"]] == ["hidden_states", "num_tokens"]
    keys = m["connector_extra_config"]["keys"]
    assert keys["alpha"]["field"] == "alpha_field" and keys["alpha"]["default"] == 3
    assert keys["alpha"]["allowed"] == [3, 5] and keys["alpha"]["coerce"] == "coerce_int"
    assert keys["alpha"]["type"] == "int" and keys["beta"]["type"] == "str"
    # the default and the allowed value come through the module constant / the keyword alias
    assert keys["beta"]["default"] == "rows" and keys["beta"]["allowed"] == ["rows"]
    assert m["factory"]["registered"] == [{"name": "OneConnector", "module": "pkg.one", "class": "OneConnector",
                                           "at": "afd_plugin/connectors/factory.py:6"}]
    assert m["factory"]["supported_connectors"]["names"] == ["OneConnector", "Other"]
    ffn = m["runners"]["ffn_connector_driven"]["per_moe_layer"]
    assert [c["call"] for c in ffn] == ["connector.recv_ffn_work_item", "self.model.compute_ffn_output",
                                        "connector.send_ffn_work_item_output"]
    assert ffn[0]["keywords"] == ["stage_idx", "max_num_tokens"]
    layer = m["runners"]["attention_moe_layer"]["run_attention_gate_afd_forward"]["calls"]
    assert [c["call"] for c in layer] == ["afd_connector.send_attn_output", "afd_connector.recv_ffn_output"]
    kw = m["async_connector"]["methods"]["recv_ffn_work_item"]["params"]
    assert [(p["name"], p["kind"]) for p in kw][1:] == [("stage_idx", "KEYWORD_ONLY"),
                                                        ("max_num_tokens", "KEYWORD_ONLY")]


def test_missing_file_is_named(tmp_path):
    tool = _tool()
    with pytest.raises(tool.ManifestError, match="afd_plugin/connectors/base.py is missing"):
        tool.build(tmp_path, "0" * 40)


def test_check_mode_reports_a_difference(tmp_path, capsys):
    tool = _tool()
    out = tmp_path / "m.json"
    assert tool.main([str(FIXTURE), "--sha", "1" * 40, "--out", str(out)]) == 0
    assert tool.main([str(FIXTURE), "--sha", "1" * 40, "--out", str(out), "--check"]) == 0
    assert tool.main([str(FIXTURE), "--sha", "2" * 40, "--out", str(out), "--check"]) == 1
    assert "differs" in capsys.readouterr().err


def test_checked_in_manifest_is_the_pinned_commit():
    m = json.loads(MANIFEST.read_text())
    tool = _tool()
    assert m["repository"] == tool.REPOSITORY and m["sha"] == tool.PINNED_SHA
    assert m["base_class"]["methods"]["__init__"]["params"][1:] == [
        {"name": n, "kind": "POSITIONAL_OR_KEYWORD", "default": None, "annotation": a}
        for n, a in (("rank", "int"), ("local_rank", "int"), ("vllm_config", "VllmConfig"),
                     ("afd_config", "AFDConfig"), ("role_rank", "int"))]
    assert set(m["connector_extra_config"]["keys"]) == {"dynamicQuant", "attn_ranks_per_dp", "async_moe_ubatching",
                                                        "async_moe_num_ubatches", "async_moe_split"}


@pytest.mark.skipif(not os.environ.get("CAM_AFD_PLUGIN_CHECKOUT"),
                    reason="set CAM_AFD_PLUGIN_CHECKOUT to a vllm-project/afd-plugin checkout at the pinned commit")
def test_manifest_matches_the_plugin_checkout():
    tool = _tool()
    regenerated = tool.dumps(tool.build(os.environ["CAM_AFD_PLUGIN_CHECKOUT"], tool.PINNED_SHA))
    assert regenerated == MANIFEST.read_text(), "the plugin checkout differs from tools/afd_plugin_manifest.json"
