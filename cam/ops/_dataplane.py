"""Host-side checks shared by the data-plane torch ops: each raises TypeError/ValueError naming the argument
before anything is launched (device-resident values such as expert ids are checked by the kernels)."""

from __future__ import annotations

import torch

from ..comm import Comm, lookup


def comm_for(op: str, comm_id: int, attention: bool) -> Comm:
    comm = lookup(comm_id)._require()
    if comm.is_attention != attention:
        role = "Attention" if attention else "FFN"
        raise ValueError(f"{op}: rank {comm.rank} is {'an Attention' if comm.is_attention else 'an FFN'} rank; "
                         f"{op} runs on {role} ranks")
    return comm


def check_tensor(op: str, name: str, t, dtype, shape=None, rank=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in dtypes:
        raise TypeError(f"{op}: {name} must be {' or '.join(str(d) for d in dtypes)}, got {t.dtype}")
    if rank is not None and t.dim() != rank:
        raise ValueError(f"{op}: {name} must have {rank} dimensions, got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.device.type != "cpu":
        raise ValueError(f"{op}: the twin backend runs on CPU tensors, {name} is on {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{op}: {name} must be contiguous (row-major); call .contiguous() first")


def check_layer(op: str, comm: Comm, layer) -> None:
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise TypeError(f"{op}: layer must be an int, got {type(layer).__name__}")
    if not 0 <= layer < comm.topology.L:
        raise ValueError(f"{op}: layer={layer} outside [0, L={comm.topology.L})")
