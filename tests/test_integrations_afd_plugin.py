"""cam.integrations.afd_plugin against the vLLM AFD plugin's contract as tools/afd_plugin_manifest.json pins it.

A fake ``afd_plugin.connectors.base`` is built from the manifest (its abstract methods, class attributes and payload
field names are the manifest's, nothing else), the adapter is re-imported over it (so it subclasses the fake base
the way it subclasses the real one), and the manifest's call sequence drives it over a real shm plane: Attention
sends at layer l and receives at the start of layer l+1, two stages from two threads holding one permit in turn;
the FFN runner does one receive per layer. Results are checked against cam's routed golden (cam.models)."""

import abc
import dataclasses
import importlib
import inspect
import json
import pathlib
import sys
import threading
import types
from datetime import timedelta

import pytest
import torch

import cam
from cam.connector import ffn_compute
from cam.models import PRESETS, MoEModel

ROOT = pathlib.Path(__file__).resolve().parents[1]
MANIFEST = json.loads((ROOT / "tools" / "afd_plugin_manifest.json").read_text())
JOIN_S = 120


def _fake_plugin():
    """``afd_plugin.connectors.base`` / ``.metadata`` modules built from the manifest only."""
    base = MANIFEST["base_class"]
    ns = {name: None if a["default"] == "None" else eval(a["default"])  # noqa: S307 - the manifest's literals
          for name, a in base["attributes"].items()}

    def stub(name):
        def f(self, *a, **k):
            raise AssertionError(f"fake base {name} called")
        f.__name__ = name
        return f

    for name in base["abstract"]:
        m = base["methods"][name]
        fn = abc.abstractmethod(stub(name))
        if "property" in m["decorators"]:
            fn = property(fn)
        elif "classmethod" in m["decorators"]:
            fn = classmethod(fn)
        ns[name] = fn

    def __init__(self, rank, local_rank, vllm_config, afd_config, role_rank):
        self.rank, self.local_rank, self.vllm_config = rank, local_rank, vllm_config
        self.afd_config, self.role_rank = afd_config, role_rank
        extra = (getattr(vllm_config, "additional_config", None) or {}).get("afd", {}).get("connector_extra_config")
        self.extra_info = self.parse_extra_config(extra or {})

    ns["__init__"] = __init__
    Base = abc.ABCMeta("AFDConnectorBase", (abc.ABC,), ns)
    mod_base = types.ModuleType("afd_plugin.connectors.base")
    mod_base.AFDConnectorBase = Base
    mod_meta = types.ModuleType("afd_plugin.connectors.metadata")
    for tname, t in MANIFEST["metadata_types"].items():
        fields = [(f["name"], object, dataclasses.field(default=None)) if f["default"] is not None
                  else (f["name"], object) for f in t["fields"]]
        setattr(mod_meta, tname, dataclasses.make_dataclass(tname, fields))
    return {"afd_plugin": types.ModuleType("afd_plugin"), "afd_plugin.connectors": types.ModuleType("x"),
            "afd_plugin.connectors.base": mod_base, "afd_plugin.connectors.metadata": mod_meta}


@pytest.fixture()
def plugin(monkeypatch):
    mods = _fake_plugin()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    import cam.integrations.afd_plugin as adapter
    adapter = importlib.reload(adapter)
    yield adapter, mods
    monkeypatch.undo()
    importlib.reload(adapter)


def _vllm_config(model_cfg, tokens, extra=None):
    hf = {"n_routed_experts": model_cfg.num_experts, "num_experts_per_tok": model_cfg.top_k,
          "hidden_size": model_cfg.hidden}
    return types.SimpleNamespace(model_config=types.SimpleNamespace(model=None, hf_config=hf),
                                 scheduler_config=types.SimpleNamespace(max_num_batched_tokens=tokens),
                                 additional_config={"afd": {"connector_extra_config": {"dynamicQuant": 1,
                                                                                       **(extra or {})}}})


def _afd_config(role, A, F, port=29000):
    return types.SimpleNamespace(role=role, num_attention_ranks=A, num_ffn_ranks=F, host="127.0.0.1", port=port)


def test_the_adapter_subclasses_the_manifest_base_and_matches_its_members(plugin):
    adapter, mods = plugin
    Base = mods["afd_plugin.connectors.base"].AFDConnectorBase
    cls = adapter.AFDPluginConnector
    assert issubclass(cls, Base) and not inspect.isabstract(cls)
    assert cls.control_plane is None
    for name, m in {**MANIFEST["base_class"]["methods"], **MANIFEST["async_connector"]["methods"]}.items():
        if "property" in m["decorators"]:
            assert isinstance(inspect.getattr_static(cls, name), property), name
            continue
        fn = inspect.getattr_static(cls, name).__func__ if "classmethod" in m["decorators"] else getattr(cls, name)
        got = [(p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default))
               for p in inspect.signature(fn).parameters.values()]
        want = [(p["name"], p["kind"], p["default"]) for p in m["params"]]
        if name == "select_experts":  # the plugin passes its selector's keywords through **kwargs
            assert got[-1][1] == "VAR_KEYWORD"
            continue
        assert got == want, name
    fields = {f["name"] for f in MANIFEST["async_types"]["AFDAsyncFFNWorkItem"]["fields"]}
    assert fields <= {f.name for f in dataclasses.fields(adapter.PluginWorkItem)}


def test_without_the_plugin_the_structural_base_has_the_same_members():
    from cam.integrations import afd_plugin as adapter
    assert adapter.plugin_base() is None and issubclass(adapter.AFDPluginConnector, adapter.StructuralBase)
    assert set(MANIFEST["base_class"]["attributes"]) <= set(vars(adapter.StructuralBase))
    missing = [n for n in MANIFEST["base_class"]["abstract"] if not hasattr(adapter.AFDPluginConnector, n)]
    assert not missing


@pytest.mark.parametrize("extra, match", [
    ({"hccl_buffer_size": 4096}, r"unknown key\(s\) \['hccl_buffer_size'\]"),
    ({"async_moe_num_ubatches": 3}, "async_moe_num_ubatches must be one of \\[2\\]"),
    ({"dynamicQuant": 2}, "dynamicQuant must be one of"),
    ({"async_moe_split": "layer"}, "async_moe_split must be one of"),
    ({"attn_ranks_per_dp": "x"}, "attn_ranks_per_dp must be an int"),
    ({"attn_ranks_per_dp": 0}, "attn_ranks_per_dp must be >= 1"),
])
def test_bad_extra_config_is_named(extra, match):
    from cam.integrations.afd_plugin import AFDPluginConnector
    with pytest.raises(ValueError, match=match):
        AFDPluginConnector.parse_extra_config(extra)


def test_every_manifest_key_is_mapped():
    from cam.integrations.afd_plugin import EXTRA_KEYS, AFDPluginConnector
    keys = MANIFEST["connector_extra_config"]["keys"]
    assert {k: (f["field"], f["type"], f["default"], f["allowed"]) for k, f in keys.items()} == \
        {k: (field, kind.__name__, default, None if allowed is None else sorted(allowed))
         for k, (field, kind, default, allowed) in EXTRA_KEYS.items()}
    parsed = AFDPluginConnector.parse_extra_config({})
    for key, fact in keys.items():
        assert getattr(parsed, fact["field"]) == fact["default"], key
    info = AFDPluginConnector.parse_extra_config({"dynamicQuant": 1, "attn_ranks_per_dp": 2,
                                                  "async_moe_ubatching": "true", "async_moe_num_ubatches": 2,
                                                  "async_moe_split": "request"})
    assert info.to_mapping() == {"dynamicQuant": 1, "attn_ranks_per_dp": 2, "async_moe_ubatching": True,
                                 "async_moe_num_ubatches": 2, "async_moe_split": "request"}
    assert sorted(info.to_mapping()) == sorted(keys)


def test_topology_from_the_plugin_config():
    from cam.integrations.afd_plugin import AFDPluginConnector
    c = PRESETS["tiny"]
    cls = AFDPluginConnector.bind(moe_layers=3)
    conn = cls(5, 0, _vllm_config(c, 16, {"attn_ranks_per_dp": 2}), _afd_config("ffn", 4, 2), 1)
    t = conn.topology
    assert (t.D, t.P, t.F, t.Bmax, t.L, t.E, t.slots, t.quantized) == (2, 2, 2, 16, 3, c.num_experts, 1, True)
    two = cls(0, 0, _vllm_config(c, 16, {"async_moe_ubatching": True}), _afd_config("attention", 4, 2), 0)
    assert two.topology.slots == 2   # one round in flight per stage
    with pytest.raises(ValueError, match="dynamicQuant must be 1"):
        cls(0, 0, _vllm_config(c, 16, {"dynamicQuant": 0}), _afd_config("attention", 4, 2), 0)
    assert conn.world_rank == 5 and conn.attn_size == 4 and conn.ffn_size == 2 and not conn.is_initialized
    with pytest.raises(ValueError, match="attn_ranks_per_dp 3 does not divide num_attention_ranks 4"):
        cls(0, 0, _vllm_config(c, 16, {"attn_ranks_per_dp": 3}), _afd_config("attention", 4, 2), 0)
    with pytest.raises(ValueError, match="moe_layers"):
        AFDPluginConnector(0, 0, _vllm_config(c, 16), _afd_config("attention", 4, 2), 0)


def test_max_num_batched_tokens_differing_between_roles_is_named():
    from cam.integrations.afd_plugin import AFDPluginConnector
    c = PRESETS["tiny"]
    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=JOIN_S))
    cls = AFDPluginConnector.bind(moe_layers=1, store=store, group="mnbt", timeout_s=30.0)
    conns = [cls(0, 0, _vllm_config(c, 16), _afd_config("attention", 1, 1), 0),
             cls(1, 0, _vllm_config(c, 32), _afd_config("ffn", 1, 1), 0)]
    errors = []

    def init(conn):
        try:
            conn.init_afd_connector()
        except ValueError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=init, args=(x,)) for x in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert len(errors) == 2 and all("max_num_batched_tokens differs between roles" in e for e in errors), errors
    assert not any(x.is_initialized for x in conns)


def _world(adapter, model, group, A=2, F=2, Bmax=24, idle="wait", extra=None):
    c = model.config
    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=JOIN_S))
    cls = adapter.AFDPluginConnector.bind(moe_layers=len(c.moe_layers), store=store, group=group, timeout_s=60.0,
                                          idle_poll_s=0.01, idle=idle, idle_wait_s=0.2)
    vllm = _vllm_config(c, Bmax, extra)
    conns = [cls(r, 0, vllm, _afd_config("attention", A, F), r) for r in range(A)]
    conns += [cls(A + j, 0, vllm, _afd_config("ffn", A, F), j) for j in range(F)]
    errors = []

    def init(conn):
        try:
            conn.init_afd_connector()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=init, args=(x,)) for x in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not errors and all(x.is_initialized for x in conns), errors
    return conns


@pytest.mark.e2e
def test_the_manifest_call_sequence_through_the_adapter(plugin):
    adapter, mods = plugin
    meta = mods["afd_plugin.connectors.metadata"]
    model = MoEModel(PRESETS["tiny"])
    c = model.config
    conns = _world(adapter, model, "seq", extra={"async_moe_ubatching": True})
    topo = conns[0].topology
    L = topo.L
    stop = threading.Event()
    errors, served = [], {}
    g = torch.Generator().manual_seed(3)

    def ffn_runner(conn):
        # The manifest's per-MoE-layer sequence: recv_ffn_work_item -> compute -> send_ffn_work_item_output.
        calls = [x["call"].rsplit(".", 1)[1] for x in MANIFEST["runners"]["ffn_connector_driven"]["per_moe_layer"]]
        assert calls == ["recv_ffn_work_item", "compute_ffn_output", "send_ffn_work_item_output"]
        try:
            w1, w2 = cam.connector.expert_weights(model, topo, conn.world_rank - topo.A)
            n = 0
            while not stop.is_set():
                wi = conn.recv_ffn_work_item(stage_idx=0, max_num_tokens=topo.Bmax)
                fwd = adapter.ffn_forward_metadata(wi, wi.hidden_states.shape[0])
                assert fwd.layer_idx.data_ptr() == wi.item.layer_index.data_ptr()  # a view, not a host copy
                out = ffn_compute(wi.item, w1, w2)
                conn.send_ffn_work_item_output(wi, meta.AFDF2ATransferPayload(routed_output=out))
                n += 1
            served[conn.world_rank] = n
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    inputs, results = {}, {}
    for a in range(topo.A):
        inputs[a] = []
        for layer in range(L):
            stages = []
            for s in range(2):
                rows, real = 6 + a + s, 4 + a + s   # the last rows of every send are padding
                h = torch.randn(rows, c.hidden, generator=g).to(torch.bfloat16)
                logits = torch.randn(rows, c.num_experts, generator=g)
                stages.append((h, logits, real))
            inputs[a].append(stages)

    def attention(conn, a):
        turn = {"stage": 0}
        cv = threading.Condition()
        outs = {}

        def stage(s):
            def take():
                with cv:
                    assert cv.wait_for(lambda: turn["stage"] == s, timeout=JOIN_S), "permit never came"

            def give():
                with cv:
                    turn["stage"] = 1 - s
                    cv.notify_all()

            try:
                for layer in range(L + 1):
                    take()
                    if layer:  # the previous layer's output, at the start of this layer
                        outs[(layer - 1, s)] = conn.recv_ffn_output(ref_tensor=inputs[a][layer - 1][s][0],
                                                                    ubatch_idx=s)
                    if layer < L:
                        h, logits, real = inputs[a][layer][s]
                        w, ids = conn.select_experts(router_logits=logits, top_k=c.top_k)
                        ctx = meta.AFDTransferContext(metadata=meta.AFDTransferMetadata(
                            layer_idx=layer, stage_idx=s, seq_lens=[real]))
                        conn.send_attn_output(h, ctx, topk_ids=ids, topk_weights=w, router_logits=logits)
                    give()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                give()

        threads = [threading.Thread(target=stage, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_S)
        results[a] = outs

    ffn_threads = [threading.Thread(target=ffn_runner, args=(x,)) for x in conns[topo.A:]]
    attn_threads = [threading.Thread(target=attention, args=(x, a)) for a, x in enumerate(conns[:topo.A])]
    for t in ffn_threads + attn_threads:
        t.start()
    for t in attn_threads:
        t.join(JOIN_S)
    stop.set()
    for t in ffn_threads:
        t.join(JOIN_S)
    for x in conns:
        x.close()
    assert not errors, errors
    for a in range(topo.A):
        for layer in range(L):
            for s in range(2):
                h, logits, real = inputs[a][layer][s]
                probs = torch.softmax(logits.float(), -1)
                w, ids = torch.topk(probs, c.top_k, -1)
                w = w / w.sum(-1, keepdim=True)
                want = model.routed_reference(layer, h[:real], ids[:real].to(torch.int32).contiguous(),
                                              w[:real].contiguous())
                got = results[a][(layer, s)]
                scale = max([1.0] + want.abs().flatten().tolist())
                torch.testing.assert_close(got[:real].float(), want.float(), atol=2e-2 * scale, rtol=0)
                assert torch.count_nonzero(got[real:]) == 0, "padding rows reached an expert"


@pytest.mark.e2e
def test_idle_policies(plugin):
    adapter, _ = plugin
    model = MoEModel(PRESETS["tiny"])
    for idle, group in (("empty", "idle-e"), ("wait", "idle-w"), ("real", "idle-r")):
        conns = _world(adapter, model, group, A=1, F=1, idle=idle)
        try:
            ffn = conns[1]
            if idle == "real":
                with pytest.raises(TimeoutError, match="idle_wait_s"):
                    ffn.recv_ffn_work_item(stage_idx=0, max_num_tokens=8)
            else:
                import time
                start = time.monotonic()
                wi = ffn.recv_ffn_work_item(stage_idx=0, max_num_tokens=8)
                took = time.monotonic() - start
                assert cam.WorkItem(wi.item.work_item).is_empty
                assert int(wi.num_tokens) == 0
                assert (took >= 0.2) == (idle == "wait"), (idle, took)
        finally:
            for x in conns:
                x.close()
    with pytest.raises(ValueError, match="idle must be one of"):
        adapter.AFDPluginConnector.bind(idle="spin")


class _PluginMoEBlock(torch.nn.Module):
    """A transformers MoE block as the plugin's Attention model code drives its connector (the manifest's
    ``attention_moe_layer`` calls): route in fp32, ``send_attn_output`` with the top-k, the shared expert here on
    Attention, then ``recv_ffn_output`` (which the plugin defers to the start of the next layer: in a sequential
    forward that is the same point of the data flow) plus the shared output."""

    def __init__(self, block, layer, conn, meta):
        super().__init__()
        self.block, self.layer, self.conn, self.meta = block, layer, conn, meta

    def forward(self, hidden_states):
        from cam.integrations import transformers as camtf

        shape = hidden_states.shape
        h = hidden_states.reshape(-1, shape[-1])
        ids, weights = camtf.route_float32(self.block, h)
        ctx = self.meta.AFDTransferContext(metadata=self.meta.AFDTransferMetadata(
            layer_idx=self.layer, stage_idx=0, seq_lens=[h.shape[0]]))
        self.conn.send_attn_output(h.to(torch.bfloat16), ctx, topk_ids=ids, topk_weights=weights)
        if hasattr(self.block, "shared_experts"):           # DeepSeek-V3
            shared = self.block.shared_experts(h)
        else:                                                # Qwen2-MoE: a sigmoid-gated shared expert
            shared = torch.sigmoid(self.block.shared_expert_gate(h)) * self.block.shared_expert(h)
        out = self.conn.recv_ffn_output(ref_tensor=h, ubatch_idx=0).to(h.dtype) + shared
        return out.reshape(shape)


@pytest.mark.e2e
@pytest.mark.parametrize("family", ["deepseek_v3", "qwen2_moe"])
def test_first_tokens_through_the_adapter_equal_native_transformers(plugin, family, tmp_path):
    import transformers

    from cam import convert
    from cam.integrations import transformers as camtf
    from test_integrations_transformers import (PROMPTS, SEQ, _config, _dequantize_experts, _init, _load, _prompts,
                                                _same_greedy)

    adapter, mods = plugin
    meta = mods["afd_plugin.connectors.metadata"]
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(_config(family))
    _init(hf, ["deepseek_v3", "qwen2_moe"].index(family))  # the seeds test_integrations_transformers uses
    hf.save_pretrained(tmp_path)
    path = str(tmp_path)
    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=JOIN_S))
    cls = adapter.AFDPluginConnector.bind(store=store, group=f"tok-{family}", timeout_s=60.0, idle_poll_s=0.01,
                                          idle="wait", idle_wait_s=0.2)
    vllm = types.SimpleNamespace(model_config=types.SimpleNamespace(model=path, hf_config=None),
                                 scheduler_config=types.SimpleNamespace(max_num_batched_tokens=SEQ),
                                 additional_config={"afd": {"connector_extra_config": {"attn_ranks_per_dp": 1,
                                                                                       "dynamicQuant": 1}}})
    conns = [cls(0, 0, vllm, _afd_config("attention", 1, 2), 0)] + \
        [cls(1 + j, 0, vllm, _afd_config("ffn", 1, 2), j) for j in range(2)]
    inits = [threading.Thread(target=x.init_afd_connector) for x in conns]
    for t in inits:
        t.start()
    for t in inits:
        t.join(JOIN_S)
    assert all(x.is_initialized for x in conns)
    topo = conns[0].topology     # from the checkpoint directory (Topology.from_checkpoint)
    layers, _ = convert.load_checkpoint_experts(path)
    stop, errors = threading.Event(), []

    def ffn_runner(conn, f):
        try:
            w1, w2 = convert.layer_weights(layers, range(f * topo.R, (f + 1) * topo.R))
            while not stop.is_set():
                wi = conn.recv_ffn_work_item(stage_idx=0, max_num_tokens=SEQ)
                conn.send_ffn_work_item_output(wi, ffn_compute(wi.item, w1, w2))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    runners = [threading.Thread(target=ffn_runner, args=(conns[1 + f], f)) for f in range(2)]
    for t in runners:
        t.start()
    try:
        native_q = _load(path)
        _dequantize_experts(native_q)
        model = _load(path)
        base = model.model
        for j, (i, block) in enumerate(camtf.moe_blocks(model).items()):
            base.layers[i].mlp = _PluginMoEBlock(block, j, conns[0], meta)
        exact = 0
        with torch.no_grad():
            for prompt in _prompts(model.config.vocab_size):
                exact += _same_greedy(model(prompt).logits[0, -1], native_q(prompt).logits[0, -1])
        assert exact >= PROMPTS - 1, (family, exact)
    finally:
        stop.set()
        for t in runners:
            t.join(JOIN_S)
        for x in conns:
            x.close()
    assert not errors, errors
    assert (topo.L, topo.E, topo.P, topo.Bmax) == (len(layers), layers[0].num_experts, 1, SEQ)


def test_ffn_forward_metadata_reads_nothing_on_the_host():
    """On meta tensors (which hold no data: any host read of one raises) the forward context is built whole."""
    from cam.connector import ffn_work_item
    from cam.integrations.afd_plugin import ffn_forward_metadata

    rows, H, R = 16, 8, 4
    meta = dict(device="meta")
    item = ffn_work_item(torch.empty(rows, H, dtype=torch.int8, **meta), torch.empty(rows, **meta),
                         torch.empty(R, dtype=torch.int64, **meta), torch.empty(64, dtype=torch.int64, **meta))
    m = ffn_forward_metadata(item, 12)
    assert m.hidden_states.shape == (12, H) and m.dynamic_scales.shape == (12,) and m.group_list.shape == (R,)
    assert m.layer_idx.shape == (1,) and m.num_tokens.shape == (1,) and m.num_tokens.device.type == "meta"
    with pytest.raises((RuntimeError, NotImplementedError)):
        int(item.group_list.sum())   # control: a host read of a meta tensor raises
    for bad in (0, rows + 1, 2.0, True):
        with pytest.raises(ValueError, match="capacity must be an int in"):
            ffn_forward_metadata(item, bad)


def test_select_experts_refuses_routings_it_does_not_compute():
    from cam.integrations.afd_plugin import AFDPluginConnector

    cls = AFDPluginConnector.bind(moe_layers=1)
    conn = cls(0, 0, _vllm_config(PRESETS["tiny"], 8), _afd_config("attention", 1, 1), 0)
    logits = torch.randn(5, 8)
    w, ids = conn.select_experts(router_logits=logits, top_k=2, use_grouped_topk=False, scoring_func="softmax")
    want_w, want_ids = torch.softmax(logits, -1).topk(2, -1)
    assert torch.equal(ids, want_ids.to(torch.int32)) and torch.allclose(w, want_w / want_w.sum(-1, keepdim=True))
    for kw, name in ((dict(use_grouped_topk=True), "use_grouped_topk"), (dict(scoring_func="sigmoid"), "scoring_func"),
                     (dict(e_score_correction_bias=torch.zeros(8)), "e_score_correction_bias")):
        with pytest.raises(ValueError, match=name):
            conn.select_experts(router_logits=logits, top_k=2, **kw)


def test_close_is_safe_before_init_and_twice():
    from cam.integrations.afd_plugin import AFDPluginConnector

    cls = AFDPluginConnector.bind(moe_layers=1)
    conn = cls(0, 0, _vllm_config(PRESETS["tiny"], 8), _afd_config("attention", 1, 1), 0)
    conn.close()
    conn.close()
    assert not conn.is_initialized
    with pytest.raises(ValueError, match="init_afd_connector"):
        conn.recv_ffn_output(ref_tensor=torch.zeros(1, 8))
