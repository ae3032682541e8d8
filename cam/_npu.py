"""NPU implementations of cam's torch custom ops, registered for torch's "npu" device when torch_npu is importable
(docs/ascend.md §7). They pass the NPU tensors and torch_npu's current stream to the aclnn API, and follow the same
rule as the CPU path: an op has completed when it returns (the stream is synchronized, bounded by
CAM_SYNC_TIMEOUT_S), so device-detected errors surface as the op's exception and workspace outlives its use.

Registration is tested against a stub torch_npu (tests/test_ascend_npu.py), whose current stream is the default
stream: the twin then runs these kernels on CPU tensors, data-plane round trips included, and they must match the
CPU path bit for bit. Nothing in this module has run on an NPU."""

import importlib

import torch

from . import _C, _runtime
from ._tensor import desc
from .errors import SyncTimeoutError
from .ops._dataplane import comm_for

_registered = False
_parked = []  # workspace and tensors of ops whose synchronize timed out


def _torch_npu():
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError):  # absent, or present without its CANN libraries: cam's CPU path still works
        return None


def _run(device: torch.device, launch) -> None:
    npu = _torch_npu()
    # torch_npu's current stream on the tensors' device, by its aclrtStream handle; cam never destroys it.
    stream = _C.Stream.wrap(int(npu.npu.current_stream(device).npu_stream))
    keep = []

    def allocate(nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
        keep.append(ws)
        return desc(ws)

    launch(stream, allocate)
    try:
        stream.synchronize(_runtime.sync_timeout_s())
    except SyncTimeoutError:
        _parked.append((keep, launch))  # the kernel may still use its workspace and tensors: never freed
        raise


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _run(x.device, lambda stream, allocate: _C.dynamic_quant(desc(x), desc(q), desc(scale), stream, allocate))
    return q, scale


def gmm_swiglu_quant_multi_layer(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y,
                                 y_scale) -> None:
    _run(x.device, lambda stream, allocate: _C.gmm_swiglu_quant_multi_layer(
        desc(x), desc(x_scale), [desc(w) for w in weights], [desc(s) for s in weight_scales], desc(group_list),
        desc(layer_index), group_list_type, desc(y), desc(y_scale), stream, allocate))


def gmm_multi_layer(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out) -> None:
    _run(y.device, lambda stream, allocate: _C.gmm_multi_layer(
        desc(y), desc(y_scale), [desc(w) for w in weights], [desc(s) for s in weight_scales], desc(group_list),
        desc(layer_index), group_list_type, desc(out), stream, allocate))


# The data-plane ops: the same checks and the same aclnn calls as the CPU path, on torch_npu's current stream, so
# they are ordered after the kernels that produced their inputs. The Comm must be one whose windows the device can
# reach: on Ascend that is a plane over HCCL, whose peer table the window_table op wrote (docs/ascend.md §5); the
# twin transports refuse to exist in an Ascend build.
def dispatch_send(token, x, topk_ids, layer, comm_id) -> None:
    from .ops.dispatch_send import _check

    comm = comm_for("dispatch_send", comm_id, attention=True)
    _check(comm, x, topk_ids, layer)
    _run(x.device, lambda stream, allocate: _C.dispatch_send(comm._c, desc(x), desc(topk_ids), layer, stream,
                                                             allocate))
    token.add_(1)


def dispatch_recv(token, expand_x, scales, expert_counts, work_item, comm_id) -> None:
    from .ops.dispatch_recv import _check

    comm = comm_for("dispatch_recv", comm_id, attention=False)
    _check(comm, expand_x, scales, expert_counts, work_item)
    _run(expand_x.device, lambda stream, allocate: _C.dispatch_recv(
        comm._c, desc(expand_x), desc(scales), desc(expert_counts), desc(work_item), stream, allocate))
    token.add_(1)


def combine_send(token, expert_out, work_item, comm_id) -> None:
    from .ops.combine_send import _check

    comm = comm_for("combine_send", comm_id, attention=False)
    _check(comm, expert_out, work_item)
    _run(expert_out.device, lambda stream, allocate: _C.combine_send(comm._c, desc(expert_out), desc(work_item),
                                                                     stream, allocate))
    token.add_(1)


def combine_recv(token, topk_ids, topk_weights, out, comm_id) -> None:
    from .ops.combine_recv import _check

    comm = comm_for("combine_recv", comm_id, attention=True)
    _check(comm, topk_ids, topk_weights, out)
    _run(out.device, lambda stream, allocate: _C.combine_recv(comm._c, desc(topk_ids), desc(topk_weights), desc(out),
                                                              stream, allocate))
    token.add_(1)


IMPLEMENTATIONS = {
    "cam::dynamic_quant": dynamic_quant,
    "cam::gmm_swiglu_quant_multi_layer": gmm_swiglu_quant_multi_layer,
    "cam::gmm_multi_layer": gmm_multi_layer,
    "cam::dispatch_send": dispatch_send,
    "cam::dispatch_recv": dispatch_recv,
    "cam::combine_send": combine_send,
    "cam::combine_recv": combine_recv,
}


def register() -> bool:
    """Registers the NPU implementations once, if torch_npu is importable. Returns whether they are registered."""
    global _registered
    if _registered:
        return True
    if _torch_npu() is None:
        return False
    for name, impl in IMPLEMENTATIONS.items():
        torch.library.register_kernel(name, "npu", impl)
    _registered = True
    return True


def registered() -> bool:
    return _registered
