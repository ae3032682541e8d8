"""Arguments of the wrong kind reach no op schema: every public op raises a TypeError that names the op and the
argument (not an AttributeError, nor the schema's RuntimeError), before anything runs."""

import pytest
import torch

import cam
from _dataplane_harness import raise_first, run_ranks

NOT_TENSORS = [None, [1, 2], 3.0, "x"]


def _gmm_args(k=32, n=64, rows=8):
    ws = [torch.randint(-5, 6, (2, k, n), dtype=torch.int8)]
    ss = [torch.rand(2, n)]
    return dict(x=torch.zeros(rows, k, dtype=torch.int8), x_scale=torch.ones(rows), weights=cam.LayerWeights(ws, ss),
                group_list=torch.tensor([3, 5]), layer_index=torch.tensor([0]))


@pytest.mark.parametrize("bad", NOT_TENSORS, ids=repr)
@pytest.mark.parametrize("name", ["x", "x_scale", "group_list", "layer_index"])
@pytest.mark.parametrize("op", ["gmm_swiglu_quant_multi_layer", "gmm_multi_layer"])
def test_gmm_non_tensor_argument_is_a_type_error_naming_it(op, name, bad):
    kw = _gmm_args()
    if op == "gmm_multi_layer":
        kw = dict(y=kw.pop("x"), y_scale=kw.pop("x_scale"), **kw)
        name = {"x": "y", "x_scale": "y_scale"}.get(name, name)
    kw[name] = bad
    with pytest.raises(TypeError, match=rf"{op}: {name} must be a torch.Tensor"):
        getattr(cam.ops, op)(**kw)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None])
def test_group_list_type_must_be_an_int_not_a_bool(value):
    with pytest.raises(TypeError, match="group_list_type must be an int"):
        cam.ops.gmm_swiglu_quant_multi_layer(**_gmm_args(), group_list_type=value)


def test_gmm_out_must_be_the_documented_tensors():
    kw = _gmm_args()
    with pytest.raises(TypeError, match=r"gmm_swiglu_quant_multi_layer: out must be a tuple of 2"):
        cam.ops.gmm_swiglu_quant_multi_layer(**kw, out=torch.zeros(8, 32, dtype=torch.int8))
    with pytest.raises(TypeError, match=r"out\[1\] must be a torch.Tensor"):
        cam.ops.gmm_swiglu_quant_multi_layer(**kw, out=(torch.zeros(8, 32, dtype=torch.int8), None))
    with pytest.raises(TypeError, match=r"gmm_multi_layer: out must be a torch.Tensor"):
        cam.ops.gmm_multi_layer(kw["x"], kw["x_scale"], kw["weights"], kw["group_list"], kw["layer_index"],
                                out=[torch.zeros(8, 64)])
    with pytest.raises(TypeError):  # out is keyword-only
        cam.ops.gmm_multi_layer(kw["x"], kw["x_scale"], kw["weights"], kw["group_list"], kw["layer_index"], 1,
                                torch.zeros(8, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("shape", [(2, 0, 64), (2, 32, 0), (0, 32, 64)])
def test_layer_weights_with_an_empty_dimension_are_refused(shape):
    with pytest.raises(ValueError, match=r"LayerWeights: weights must be \[E_local >= 1, K >= 1, N >= 1\]"):
        cam.LayerWeights([torch.zeros(shape, dtype=torch.int8)], [torch.zeros(shape[0], shape[2])])


def test_prepack_refuses_an_empty_matrix():
    with pytest.raises(ValueError, match="K >= 1 and N >= 1"):
        cam.ops.prepack_weights(torch.zeros(0, 8, dtype=torch.int8))


def test_data_plane_non_tensor_arguments_are_type_errors_naming_them():
    topo = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=4, L=2)
    x = torch.zeros(2, topo.H, dtype=torch.bfloat16)
    ids = torch.zeros(2, topo.K, dtype=torch.int32)
    w = torch.ones(2, topo.K)

    def expect(fn, pattern):
        with pytest.raises(TypeError, match=pattern):
            fn()

    def attention(comm):
        for bad in NOT_TENSORS:
            expect(lambda: cam.ops.dispatch_send(comm, bad, ids, 0), "dispatch_send: x must be a torch.Tensor")
            expect(lambda: cam.ops.dispatch_send(comm, x, bad, 0), "dispatch_send: topk_ids must be a torch.Tensor")
            expect(lambda: cam.ops.combine_recv(comm, bad, w), "combine_recv: topk_ids must be a torch.Tensor")
            expect(lambda: cam.ops.combine_recv(comm, ids, bad), "combine_recv: topk_weights must be a torch.Tensor")
        for layer in (True, 1.0, None, "0"):
            expect(lambda: cam.ops.dispatch_send(comm, x, ids, layer), "dispatch_send: layer must be an int")
        expect(lambda: cam.ops.dispatch_send(None, x, ids, 0), "dispatch_send: comm must be a cam.Comm")
        expect(lambda: cam.ops.combine_recv(comm, ids, w, out=[x]), "combine_recv: out must be a torch.Tensor")
        return True

    def ffn(comm):
        item = torch.zeros(topo.work_item_words, dtype=torch.int64)
        out = torch.zeros(topo.recv_rows, topo.H, dtype=torch.bfloat16)
        for bad in NOT_TENSORS:
            expect(lambda: cam.ops.combine_send(comm, bad, item), "combine_send: expert_out must be a torch.Tensor")
            expect(lambda: cam.ops.combine_send(comm, out, bad), "combine_send: work_item must be a torch.Tensor")
        expect(lambda: cam.ops.dispatch_recv(comm, out=(out,)), "dispatch_recv: out must be a tuple of 4")
        expect(lambda: cam.ops.dispatch_recv("comm"), "dispatch_recv: comm must be a cam.Comm")
        return True

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=60)
    raise_first(errors)
    assert results == {0: True, 1: True}


# ---------------------------------------------------------------- the C rules, on every path
# An op's rules are its C API's (host/src/<op>.cpp): the direct eager call, the dispatcher path (any mode active)
# and the fake implementation (FakeTensorMode, data-less descriptors through the same C checks) must refuse each
# bad call with the same class and the same words, naming the op and the argument, and write nothing. A wrong dtype
# is a cam.errors.InvalidDtypeError (a TypeError); everything else a cam.InvalidArgumentError (a ValueError, not a
# TypeError).

import importlib  # noqa: E402

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

cr_mod, cs_mod, dr_mod, ds_mod, gmm_mod = (importlib.import_module(f"cam.ops.{m}") for m in (
    "combine_recv", "combine_send", "dispatch_recv", "dispatch_send", "gmm"))


class Passthrough(TorchDispatchMode):
    """A mode that only forwards: with it active, every cam op goes through torch.ops.cam (the dispatcher path)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _fake(args):
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    conv = lambda a: mode.from_tensor(a) if isinstance(a, torch.Tensor) else (  # noqa: E731
        [mode.from_tensor(t) for t in a] if isinstance(a, list) else a)
    return mode, [conv(a) for a in args]


def assert_refused_alike(op, fn, args, written, argument, dtype):
    """``fn(*args)`` (an op's registered body) refused alike on the three paths."""
    before = [t.clone() for t in written]
    errors = []
    for path in ("direct", "dispatcher", "fake"):
        with pytest.raises(cam.CamError) as e:
            if path == "direct":
                fn(*args)
            elif path == "dispatcher":
                with Passthrough():
                    fn(*args)
            else:
                mode, fake_args = _fake(args)
                with mode:
                    fn(*fake_args)
        errors.append(e.value)
    d = errors[0]
    assert all(type(x) is type(d) and str(x) == str(d) for x in errors), errors
    assert f"{op}: " in str(d) and argument in str(d), d
    assert isinstance(d, cam.InvalidArgumentError)
    if dtype:
        assert isinstance(d, TypeError) and isinstance(d, cam.errors.InvalidDtypeError), d
    else:
        assert not isinstance(d, TypeError), d
    for t, b in zip(written, before):
        assert torch.equal(t, b)


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


# case -> (how to break the arguments, the argument the message names (W1, W2), whether it is a dtype error)
GMM_CASES = {
    "x dtype": (lambda a: a.update(x=a["x"].to(torch.int16)), ("x must be int8", "y must be int8"), True),
    "x rank": (lambda a: a.update(x=a["x"].reshape(M, 2, K // 2)), ("x must be 2-D", "y must be 2-D"), False),
    "x not contiguous": (lambda a: a.update(x=torch.zeros(K, M, dtype=torch.int8).t()), ("contiguous",) * 2, False),
    "x_scale dtype": (lambda a: a.update(xs=a["xs"].double()), ("x_scale must be float32", "y_scale must be float32"),
                      True),
    "x_scale shape": (lambda a: a.update(xs=torch.ones(M + 1)), ("x_scale must have shape [8]",
                                                                 "y_scale must have shape [8]"), False),
    "layers differ": (lambda a: a.update(ws=a["ws"][:1]), ("must match",) * 2, False),
    "no layers": (lambda a: a.update(ws=[], ss=[]), ("weights must hold at least one layer",) * 2, False),
    "weights[1] shape": (lambda a: a.update(ws=[a["ws"][0], a["ws"][1][:1].contiguous()]),
                         ("weights[1] must be FRACTAL_NZ",) * 2, False),
    "weights[0] dtype": (lambda a: a.update(ws=[a["ws"][0].view(torch.uint8), a["ws"][1]]),
                         ("weights[0] must be int8, got uint8",) * 2, True),
    "weight_scales[0] rank": (lambda a: a.update(ss=[a["ss"][0].reshape(-1), a["ss"][1]]),
                              ("weight_scales[0] must be 2-D",) * 2, False),
    "weight_scales[1] shape": (lambda a: a.update(ss=[a["ss"][0], torch.ones(E, N + 2)]),
                               ("weight_scales[1] must have shape",) * 2, False),
    "weight_scales[1] dtype": (lambda a: a.update(ss=[a["ss"][0], a["ss"][1].half()]),
                               ("weight_scales[1] must be float32, got float16",) * 2, True),
    "group_list dtype": (lambda a: a.update(gl=a["gl"].int()), ("group_list must be int64, got int32",) * 2, True),
    "group_list shape": (lambda a: a.update(gl=torch.tensor([3, 5, 0])), ("group_list must have shape [2]",) * 2,
                         False),
    "layer_index dtype": (lambda a: a.update(li=a["li"].int()), ("layer_index must be int64",) * 2, True),
    "layer_index two elements": (lambda a: a.update(li=torch.tensor([0, 1])),
                                 ("layer_index must hold exactly one element",) * 2, False),
    "group_list_type": (lambda a: a.update(glt=3),
                        ("group_list_type must be 0 (cumsum), 1 (counts) or 2 (group table), got 3",) * 2, False),
    "group table shape": (lambda a: a.update(glt=2),
                          ("group_list (a group table, group_list_type 2) must be [G, 3] {layer, expert, rows}, got "
                           "shape [2]",) * 2, False),
    "group table columns": (lambda a: a.update(glt=2, gl=torch.zeros(2, 2, dtype=torch.int64)),
                            ("must be [G, 3] {layer, expert, rows}, got shape [2, 2]",) * 2, False),
    "odd N": (odd_n, ("N = 63 must be even (N from weight_scales)", None), False),
    "outputs dtype": (lambda a: a.update(y=a["y"].to(torch.int16), out=a["out"].half()),
                      ("y must be int8, got int16", "out must be bfloat16, got float16"), True),
    "outputs shape": (lambda a: a.update(y=torch.zeros(M, N, dtype=torch.int8), out=torch.zeros(M, N // 2,
                                                                                                 dtype=torch.bfloat16)),
                      ("y must have shape [8, 32]", "out must have shape [8, 64]"), False),
    "y_scale shape": (lambda a: a.update(ys=torch.zeros(M - 1)), ("y_scale must have shape [8]", None), False),
}


@pytest.mark.parametrize("op, case", [(op, c) for op in ("gmm_swiglu_quant_multi_layer", "gmm_multi_layer")
                                      for c in sorted(GMM_CASES)
                                      if GMM_CASES[c][1][op == "gmm_multi_layer"] is not None])
def test_gmm_refusals_are_the_c_rules_on_every_path(op, case):
    a = gmm_args()
    GMM_CASES[case][0](a)
    argument, dtype = GMM_CASES[case][1][op == "gmm_multi_layer"], GMM_CASES[case][2]
    common = [a["x"], a["xs"], a["ws"], a["ss"], a["gl"], a["li"], a["glt"]]
    if op == "gmm_swiglu_quant_multi_layer":
        fn, args, written = gmm_mod._gmm_swiglu_quant_multi_layer, common + [a["y"], a["ys"]], [a["y"], a["ys"]]
    else:
        fn, args, written = gmm_mod._gmm_multi_layer, common + [a["out"]], [a["out"]]
    assert_refused_alike(op, fn, args, written, argument, dtype)


TOPO = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=4, L=2)
BF = torch.bfloat16


def attention_cases(comm):
    x = torch.zeros(2, TOPO.H, dtype=BF)
    ids = torch.zeros(2, TOPO.K, dtype=torch.int32)
    w = torch.ones(2, TOPO.K)
    out = torch.full((2, TOPO.H), 7.0, dtype=BF)
    t = comm.token
    send = lambda x=x, ids=ids, layer=0: (ds_mod._dispatch_send, [t, x, ids, layer, comm.id])  # noqa: E731
    recv = lambda ids=ids, w=w, out=out: (cr_mod._combine_recv, [t, ids, w, out, comm.id])  # noqa: E731
    return {  # name -> (op, (fn, args), written, the words naming argument and bound, dtype error)
        "dispatch_send x dtype": ("dispatch_send", send(x=x.half()), [], "x is float16, but the communicator was "
                                  "created for bfloat16 activations", True),
        "dispatch_send x rank": ("dispatch_send", send(x=x.reshape(2, 2, TOPO.H // 2)), [], "x must be 2-D", False),
        "dispatch_send x hidden": ("dispatch_send", send(x=torch.zeros(2, TOPO.H + 1, dtype=BF)), [],
                                   "x must be [B, H=32], got [2, 33]", False),
        "dispatch_send x over Bmax": ("dispatch_send", send(x=torch.zeros(TOPO.Bmax + 1, TOPO.H, dtype=BF),
                                                            ids=torch.zeros(TOPO.Bmax + 1, 1, dtype=torch.int32)), [],
                                      "x has B=5 tokens, more than Bmax=4", False),
        "dispatch_send x not contiguous": ("dispatch_send", send(x=torch.zeros(TOPO.H, 2, dtype=BF).t()), [],
                                           "x must be contiguous", False),
        "dispatch_send topk_ids dtype": ("dispatch_send", send(ids=ids.long()), [],
                                         "topk_ids must be int32, got int64", True),
        "dispatch_send topk_ids shape": ("dispatch_send", send(ids=torch.zeros(3, 1, dtype=torch.int32)), [],
                                         "topk_ids must have shape [2, 1]", False),
        "dispatch_send layer": ("dispatch_send", send(layer=TOPO.L), [], "layer=2 outside [0, L=2)", False),
        "combine_recv topk_ids dtype": ("combine_recv", recv(ids=ids.long()), [out], "topk_ids must be int32", True),
        "combine_recv topk_ids shape": ("combine_recv", recv(ids=torch.zeros(2, 2, dtype=torch.int32)), [out],
                                        "topk_ids must be [B <= Bmax=4, K=1], got [2, 2]", False),
        "combine_recv topk_weights dtype": ("combine_recv", recv(w=w.double()), [out],
                                            "topk_weights must be float32, got float64", True),
        "combine_recv out shape": ("combine_recv", recv(out=torch.zeros(3, TOPO.H, dtype=BF)), [],
                                   "out must have shape [2, 32]", False),
        "combine_recv out dtype": ("combine_recv", recv(out=out.half()), [out], "out is float16", True),
        "combine_send on an Attention rank": ("combine_send", (cs_mod._combine_send, [
            t, torch.zeros(TOPO.recv_rows, TOPO.H, dtype=BF), torch.zeros(TOPO.work_item_words, dtype=torch.int64),
            comm.id]), [], "rank 0 is an Attention rank; combine_send runs on FFN ranks", False),
    }


def ffn_cases(comm):
    n = TOPO.recv_rows
    outs = [torch.full((n, TOPO.H), 7, dtype=torch.int8), torch.full((n,), 7.0),
            torch.full((TOPO.R,), 7, dtype=torch.int64), torch.full((TOPO.work_item_words,), 7, dtype=torch.int64)]
    if not TOPO.quantized:
        outs[0], outs[1] = torch.full((n, TOPO.H), 7.0, dtype=BF), torch.full((1,), 7.0)
    eo = torch.zeros(n, TOPO.H, dtype=BF)
    wi = torch.zeros(TOPO.work_item_words, dtype=torch.int64)
    t = comm.token

    def recv(i, x):
        o = list(outs)
        o[i] = x
        return (dr_mod._dispatch_recv, [t, *o, comm.id])

    send = lambda eo=eo, wi=wi: (cs_mod._combine_send, [t, eo, wi, comm.id])  # noqa: E731
    wrong = torch.int16
    return {
        "dispatch_recv expand_x dtype": ("dispatch_recv", recv(0, outs[0].to(wrong)), outs, "expand_x must be", True),
        "dispatch_recv expand_x shape": ("dispatch_recv", recv(0, torch.zeros(n + 1, TOPO.H, dtype=outs[0].dtype)),
                                         outs, f"expand_x must have shape [{n}, 32]", False),
        "dispatch_recv scales shape": ("dispatch_recv", recv(1, torch.zeros(outs[1].numel() + 1)), outs,
                                       "scales must have shape", False),
        "dispatch_recv expert_counts dtype": ("dispatch_recv", recv(2, outs[2].int()), outs,
                                              "expert_counts must be int64, got int32", True),
        "dispatch_recv work_item shape": ("dispatch_recv", recv(3, torch.zeros(3, dtype=torch.int64)), outs,
                                          f"work_item must have shape [{TOPO.work_item_words}]", False),
        "combine_send expert_out dtype": ("combine_send", send(eo=eo.half()), [], "expert_out is float16", True),
        "combine_send expert_out shape": ("combine_send", send(eo=torch.zeros(n + 1, TOPO.H, dtype=BF)), [],
                                          f"expert_out must have shape [{n}, 32]", False),
        "combine_send work_item dtype": ("combine_send", send(wi=wi.int()), [], "work_item must be int64", True),
        "combine_send work_item shape": ("combine_send", send(wi=wi[:3].contiguous()), [],
                                         "work_item must have shape", False),
        "dispatch_send on an FFN rank": ("dispatch_send", (ds_mod._dispatch_send, [
            t, torch.zeros(2, TOPO.H, dtype=BF), torch.zeros(2, 1, dtype=torch.int32), 0, comm.id]), [],
            "rank 1 is an FFN rank; dispatch_send runs on Attention ranks", False),
    }


def test_data_plane_refusals_are_the_c_rules_on_every_path():
    seen = {}

    def body(cases):
        def run(comm):
            token = comm.token.clone()
            for name, (op, (fn, args), written, argument, dtype) in cases(comm).items():
                assert_refused_alike(op, fn, args, written, argument, dtype)
                seen[name] = True
            assert torch.equal(comm.token, token)  # a refused call is not an op that ran
            return True
        return run

    results, errors = run_ranks(TOPO, {0: body(attention_cases), 1: body(ffn_cases)}, timeout=120, timeout_s=5.0)
    raise_first(errors)
    assert results == {0: True, 1: True} and len(seen) == 24
