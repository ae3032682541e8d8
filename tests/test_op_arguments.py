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
