"""NPU implementations of cam's torch custom ops, registered for torch's "npu" device when torch_npu is importable
(docs/ascend.md §7). They pass the NPU tensors and torch_npu's current stream to the aclnn API, and follow the same
rule as the CPU path: an op has completed when it returns (the stream is synchronized, bounded by
CAM_SYNC_TIMEOUT_S), so device-detected errors surface as the op's exception and workspace outlives its use.

Registration is tested here against a stub torch_npu; nothing in this module has run on an NPU."""

import importlib

import torch

from . import _C, _runtime
from ._tensor import desc

_registered = False


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
    stream.synchronize(_runtime.sync_timeout_s())


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


def _needs_hccl_transport(op: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"cam::{op} on NPU tensors needs the HCCL transport of docs/ascend.md §5, which "
                                  "is not built yet")
    return refuse


IMPLEMENTATIONS = {
    "cam::dynamic_quant": dynamic_quant,
    "cam::gmm_swiglu_quant_multi_layer": gmm_swiglu_quant_multi_layer,
    "cam::gmm_multi_layer": gmm_multi_layer,
    **{f"cam::{op}": _needs_hccl_transport(op)
       for op in ("dispatch_send", "dispatch_recv", "combine_send", "combine_recv")},
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
