"""Validation once per call (issue 12) for the GMM pair and the four data-plane ops, as for dynamic_quant
(tests/test_twin_launch.py): on the direct eager path the C API validates alone and the Python checker only words a
refusal. Every refusal must be the one the dispatcher path (Python checks first, then the C API) raises, with
nothing written; a valid direct call must not run the Python checker, and the dispatcher path still must."""

import importlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cam
from _dataplane_harness import raise_first, run_ranks

# The op modules (cam.ops re-exports each op's function under the module's name).
cr_mod, cs_mod, dr_mod, ds_mod, gmm_mod = (importlib.import_module(f"cam.ops.{m}") for m in (
    "combine_recv", "combine_send", "dispatch_recv", "dispatch_send", "gmm"))


class Passthrough(TorchDispatchMode):
    """A mode that only forwards: with it active, every cam op goes through torch.ops.cam (the dispatcher path)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def both_paths(call):
    """(direct exception, dispatcher exception) of ``call()``; each path must refuse."""
    with pytest.raises(Exception) as direct:
        call()
    with Passthrough(), pytest.raises(Exception) as dispatched:
        call()
    return direct.value, dispatched.value


def assert_same_refusal(op, call, written):
    before = [t.clone() for t in written]
    d, p = both_paths(call)
    assert type(d) is type(p) and str(d) == str(p), (d, p)
    assert f"{op}:" in str(d)
    assert isinstance(d, (TypeError, ValueError)), d
    for t, b in zip(written, before):
        assert torch.equal(t, b)


# ---------------------------------------------------------------- GMM

M, K, N, E = 8, 32, 64, 2


def gmm_args():
    g = torch.Generator().manual_seed(3)
    lw = cam.LayerWeights([torch.randint(-5, 6, (E, K, N), generator=g, dtype=torch.int8) for _ in range(2)],
                          [torch.rand(E, N, generator=g) for _ in range(2)])
    return dict(x=torch.randint(-5, 6, (M, K), generator=g, dtype=torch.int8), xs=torch.rand(M, generator=g),
                ws=list(lw.weights), ss=list(lw.scales), gl=torch.tensor([3, 5]), li=torch.tensor([1]), glt=1,
                y=torch.full((M, N // 2), 7, dtype=torch.int8), ys=torch.full((M,), 7.0),
                out=torch.full((M, N), 7.0, dtype=torch.bfloat16))


def odd_n(a):
    # N = 63: NZ weights keep the shape of N = 64 (ceil(63/32) = 2 blocks), so only "N must be even" refuses.
    a["ss"] = [s[:, :63].contiguous() for s in a["ss"]]
    a["out"] = torch.zeros(M, 63, dtype=torch.bfloat16)


GMM_CASES = {
    "x dtype": lambda a: a.update(x=a["x"].to(torch.int16)),
    "x rank": lambda a: a.update(x=a["x"].reshape(M, 2, K // 2)),
    "x not contiguous": lambda a: a.update(x=torch.zeros(K, M, dtype=torch.int8).t()),
    "x_scale dtype": lambda a: a.update(xs=a["xs"].double()),
    "x_scale shape": lambda a: a.update(xs=torch.ones(M + 1)),
    "layers differ": lambda a: a.update(ws=a["ws"][:1]),
    "no layers": lambda a: a.update(ws=[], ss=[]),
    "weights[1] shape": lambda a: a.update(ws=[a["ws"][0], a["ws"][1][:1].contiguous()]),
    "weights[0] dtype": lambda a: a.update(ws=[a["ws"][0].view(torch.uint8), a["ws"][1]]),
    "weight_scales[0] rank": lambda a: a.update(ss=[a["ss"][0].reshape(-1), a["ss"][1]]),
    "weight_scales[1] shape": lambda a: a.update(ss=[a["ss"][0], torch.ones(E, N + 2)]),
    "weight_scales[1] dtype": lambda a: a.update(ss=[a["ss"][0], a["ss"][1].half()]),
    "group_list dtype": lambda a: a.update(gl=a["gl"].int()),
    "group_list shape": lambda a: a.update(gl=torch.tensor([3, 5, 0])),
    "layer_index dtype": lambda a: a.update(li=a["li"].int()),
    "layer_index two elements": lambda a: a.update(li=torch.tensor([0, 1])),
    "group_list_type": lambda a: a.update(glt=2),
    "odd N": odd_n,
    "outputs dtype": lambda a: a.update(y=a["y"].to(torch.int16), out=a["out"].half()),
    "outputs shape": lambda a: a.update(y=torch.zeros(M, N, dtype=torch.int8), out=torch.zeros(M, N // 2,
                                                                                                dtype=torch.bfloat16)),
    "y_scale shape": lambda a: a.update(ys=torch.zeros(M - 1)),
}


def w1(a):
    return lambda: gmm_mod._gmm_swiglu_quant_multi_layer(a["x"], a["xs"], a["ws"], a["ss"], a["gl"], a["li"],
                                                         a["glt"], a["y"], a["ys"])


def w2(a):
    return lambda: gmm_mod._gmm_multi_layer(a["x"], a["xs"], a["ws"], a["ss"], a["gl"], a["li"], a["glt"], a["out"])


W1_ONLY = {"odd N", "y_scale shape"}  # W2 has no evenness rule and no y_scale output


@pytest.mark.parametrize("op, case", [("gmm_swiglu_quant_multi_layer", c) for c in sorted(GMM_CASES)] +
                         [("gmm_multi_layer", c) for c in sorted(GMM_CASES) if c not in W1_ONLY])
def test_gmm_direct_call_refuses_exactly_as_the_dispatcher_path(op, case):
    a = gmm_args()
    GMM_CASES[case](a)
    call, written = (w1(a), [a["y"], a["ys"]]) if op == "gmm_swiglu_quant_multi_layer" else (w2(a), [a["out"]])
    assert_same_refusal(op, call, written)


def test_gmm_direct_call_runs_no_python_check(monkeypatch):
    a = gmm_args()
    w1(a)()
    w2(a)()
    y, ys, out = a["y"].clone(), a["ys"].clone(), a["out"].clone()
    a["y"].fill_(0), a["ys"].fill_(0), a["out"].fill_(0)

    def boom(*args):
        raise AssertionError("the Python check ran")

    monkeypatch.setattr(gmm_mod, "_check_w1", boom)
    monkeypatch.setattr(gmm_mod, "_check_w2", boom)
    w1(a)()
    w2(a)()
    assert torch.equal(a["y"], y) and torch.equal(a["ys"], ys) and torch.equal(a["out"], out)
    for call in (w1(a), w2(a)):  # the dispatcher path (and so the fake impl's path) still checks in Python
        with Passthrough(), pytest.raises(AssertionError, match="the Python check ran"):
            call()


# ---------------------------------------------------------------- data plane

TOPO = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=4, L=2)
BF = torch.bfloat16


def attention_cases(comm):
    x = torch.zeros(2, TOPO.H, dtype=BF)
    ids = torch.zeros(2, TOPO.K, dtype=torch.int32)
    w = torch.ones(2, TOPO.K)
    out = torch.full((2, TOPO.H), 7.0, dtype=BF)
    send = lambda x=x, ids=ids, layer=0: (lambda: ds_mod._dispatch_send(comm.token, x, ids, layer, comm.id))  # noqa
    recv = lambda ids=ids, w=w, out=out: (lambda: cr_mod._combine_recv(comm.token, ids, w, out, comm.id))  # noqa
    return {
        "dispatch_send x dtype": ("dispatch_send", send(x=x.half()), []),
        "dispatch_send x rank": ("dispatch_send", send(x=x.reshape(2, 2, TOPO.H // 2)), []),
        "dispatch_send x hidden": ("dispatch_send", send(x=torch.zeros(2, TOPO.H + 1, dtype=BF)), []),
        "dispatch_send x over Bmax": ("dispatch_send", send(x=torch.zeros(TOPO.Bmax + 1, TOPO.H, dtype=BF),
                                                            ids=torch.zeros(TOPO.Bmax + 1, 1, dtype=torch.int32)), []),
        "dispatch_send x not contiguous": ("dispatch_send", send(x=torch.zeros(TOPO.H, 2, dtype=BF).t()), []),
        "dispatch_send topk_ids dtype": ("dispatch_send", send(ids=ids.long()), []),
        "dispatch_send topk_ids shape": ("dispatch_send", send(ids=torch.zeros(3, 1, dtype=torch.int32)), []),
        "dispatch_send layer": ("dispatch_send", send(layer=TOPO.L), []),
        "combine_recv topk_ids dtype": ("combine_recv", recv(ids=ids.long()), [out]),
        "combine_recv topk_ids shape": ("combine_recv", recv(ids=torch.zeros(2, 2, dtype=torch.int32)), [out]),
        "combine_recv topk_weights dtype": ("combine_recv", recv(w=w.double()), [out]),
        "combine_recv out shape": ("combine_recv", recv(out=torch.zeros(3, TOPO.H, dtype=BF)), []),
        "combine_recv out dtype": ("combine_recv", recv(out=out.half()), [out]),
        "combine_send on an Attention rank": ("combine_send", lambda: cs_mod._combine_send(
            comm.token, torch.zeros(TOPO.recv_rows, TOPO.H, dtype=BF),
            torch.zeros(TOPO.work_item_words, dtype=torch.int64), comm.id), []),
    }


def ffn_cases(comm):
    n = TOPO.recv_rows
    outs = [torch.full((n, TOPO.H), 7, dtype=torch.int8), torch.full((n,), 7.0),
            torch.full((TOPO.R,), 7, dtype=torch.int64), torch.full((TOPO.work_item_words,), 7, dtype=torch.int64)]
    eo = torch.zeros(n, TOPO.H, dtype=BF)
    wi = torch.zeros(TOPO.work_item_words, dtype=torch.int64)

    def recv(i, t):
        o = list(outs)
        o[i] = t
        return lambda: dr_mod._dispatch_recv(comm.token, *o, comm.id)

    send = lambda eo=eo, wi=wi: (lambda: cs_mod._combine_send(comm.token, eo, wi, comm.id))  # noqa: E731
    return {
        "dispatch_recv expand_x dtype": ("dispatch_recv", recv(0, outs[0].to(BF)), outs),
        "dispatch_recv expand_x shape": ("dispatch_recv", recv(0, torch.zeros(n + 1, TOPO.H, dtype=torch.int8)),
                                         outs),
        "dispatch_recv scales shape": ("dispatch_recv", recv(1, torch.zeros(1)), outs),
        "dispatch_recv expert_counts dtype": ("dispatch_recv", recv(2, outs[2].int()), outs),
        "dispatch_recv work_item shape": ("dispatch_recv", recv(3, torch.zeros(3, dtype=torch.int64)), outs),
        "combine_send expert_out dtype": ("combine_send", send(eo=eo.half()), []),
        "combine_send expert_out shape": ("combine_send", send(eo=torch.zeros(n + 1, TOPO.H, dtype=BF)), []),
        "combine_send work_item dtype": ("combine_send", send(wi=wi.int()), []),
        "combine_send work_item shape": ("combine_send", send(wi=wi[:3].contiguous()), []),
        "dispatch_send on an FFN rank": ("dispatch_send", lambda: ds_mod._dispatch_send(
            comm.token, torch.zeros(2, TOPO.H, dtype=BF), torch.zeros(2, 1, dtype=torch.int32), 0, comm.id), []),
    }


def test_data_plane_direct_calls_refuse_exactly_as_the_dispatcher_path():
    seen = {}

    def body(cases):
        def run(comm):
            token = comm.token.clone()
            for name, (op, call, written) in cases(comm).items():
                assert_same_refusal(op, call, written)
                seen[name] = True
            assert torch.equal(comm.token, token)  # a refused call is not an op that ran
            return True
        return run

    results, errors = run_ranks(TOPO, {0: body(attention_cases), 1: body(ffn_cases)}, timeout=120, timeout_s=5.0)
    raise_first(errors)
    assert results == {0: True, 1: True} and len(seen) == 24


def test_data_plane_direct_calls_run_no_python_check(monkeypatch):
    def boom(*args):
        raise AssertionError("the Python check ran")

    for mod in (ds_mod, dr_mod, cs_mod, cr_mod):
        monkeypatch.setattr(mod, "_check", boom)
    x = torch.randn(3, TOPO.H).to(BF)
    ids = torch.tensor([[0], [1], [1]], dtype=torch.int32)
    w = torch.ones(3, 1)

    def attention(comm):
        cam.ops.dispatch_send(comm, x, ids, 1)
        out = cam.ops.combine_recv(comm, ids, w)
        with Passthrough(), pytest.raises(AssertionError, match="the Python check ran"):
            cam.ops.dispatch_send(comm, x, ids, 1)
        return out

    def ffn(comm):
        while True:
            expand_x, scales, counts, item = cam.ops.dispatch_recv(comm)
            if int(item[0]):
                break
        cam.ops.combine_send(comm, torch.zeros(TOPO.recv_rows, TOPO.H, dtype=BF), item)
        with Passthrough(), pytest.raises(AssertionError, match="the Python check ran"):
            cam.ops.dispatch_recv(comm)
        return int(item[5])

    results, errors = run_ranks(TOPO, {0: attention, 1: ffn}, timeout=120, timeout_s=10.0, idle_poll_s=0.05)
    raise_first(errors)
    assert results[1] == 3 and torch.equal(results[0], torch.zeros(3, TOPO.H, dtype=BF))
