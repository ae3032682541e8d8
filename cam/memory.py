"""``cam.plan_memory``: the bytes cam itself holds per rank for one plane, before any of it is allocated.

A deployment sizes two separate things on every rank: cam's (this plan: the window, the FFN iteration's static
buffers, the expert weights) and the framework's own, including the HCCL buffer of its process groups
(``HCCL_BUFFSIZE``), which cam neither uses nor counts. Every figure is read from the rule that allocates it: the
window from the host's layout (:meth:`cam.Topology.rank_window_bytes`), the receive buffers from
:func:`cam.ops.dispatch_recv`'s output specs, the weights from :class:`cam.LayerWeights` built for one expert.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Dict, Optional

import torch

from .layer_weights import FORMATS, LayerWeights
from .ops.dispatch_recv import output_specs
from .topology import Topology

__all__ = ["MemoryPlan", "plan_memory"]

HCCL_NOTE = ("the framework's HCCL buffer (HCCL_BUFFSIZE, e.g. the AFD plugin's process groups) is separate and not "
             "counted here")


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per rank. ``attention`` and ``ffn`` map a part's name to its bytes on one rank of that role;
    ``hccl_window_bytes`` is the one window size every rank allocates where the transport needs one size for all
    (HCCL windows). ``note`` says what is not counted."""

    topology: Topology
    weight_format: str
    slots: int
    intermediate: int
    attention: Dict[str, int]
    ffn: Dict[str, int]
    hccl_window_bytes: int
    note: str = HCCL_NOTE

    @property
    def attention_bytes(self) -> int:
        return sum(self.attention.values())

    @property
    def ffn_bytes(self) -> int:
        return sum(self.ffn.values())

    def __str__(self) -> str:
        t = self.topology
        lines = [f"cam memory plan: D={t.D} P={t.P} F={t.F} E={t.E} K={t.K} H={t.H} I={self.intermediate} "
                 f"Bmax={t.Bmax} window_tokens={t.window_tokens} L={t.L} slots={t.slots} "
                 f"weights={self.weight_format} expert slots={self.slots}"]
        for role, parts, total in (("Attention rank", self.attention, self.attention_bytes),
                                   ("FFN rank", self.ffn, self.ffn_bytes)):
            lines.append(f"  {role}: {_mib(total)}")
            lines += [f"    {name}: {_mib(n)}" for name, n in parts.items()]
        lines.append(f"  one window size for every rank (HCCL): {_mib(self.hccl_window_bytes)}")
        lines.append(f"  not counted: {self.note}")
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n} B ({n / 2**20:.1f} MiB)"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _expert_bytes(k: int, n: int, weight_format: str) -> int:
    """Bytes one expert's ``[K, N]`` weight takes in one layer of a :class:`LayerWeights` of ``weight_format``
    (packed, with its scales and, for int4, column sums): the class itself built for one all-zero expert."""
    w = LayerWeights([torch.zeros(1, k, n, dtype=torch.int8)], [torch.zeros(1, n)], format=weight_format)
    return sum(_nbytes(t) for _, t in w.named_tensors())


def plan_memory(topology: Topology, weight_format: str = "int8", slots: Optional[int] = None, *,
                intermediate: int, dtype: torch.dtype = torch.bfloat16) -> MemoryPlan:
    """cam's bytes per rank for ``topology``.

    Args:
        topology: the plane.
        weight_format: the FFN ranks' expert weights, a :class:`cam.LayerWeights` format (``"int8"``: W8A8,
            ``"int4"``: W4A8 per channel; ``"w8a8"`` / ``"w4a8"`` are accepted for them).
        slots: expert weight slots per FFN rank (default the topology's ``R``; more with redundant experts).
        intermediate: I of a routed expert (W1 is ``[H, 2I]``, W2 ``[I, H]``), which the topology does not carry.
        dtype: the activations' dtype (the W2 output the FFN rank returns).

    Returns a :class:`MemoryPlan`: on an Attention rank its window; on an FFN rank its window, the FFN iteration's
    static buffers (receive, W1 and W2 outputs at the receive's capacity) and its expert weights for every MoE
    layer. Bad input is refused naming the argument.
    """
    aliases = {"w8a8": "int8", "w4a8": "int4"}
    if not isinstance(topology, Topology):
        raise TypeError(f"plan_memory: topology must be a cam.Topology, got {type(topology).__name__}")
    fmt = aliases.get(weight_format, weight_format)
    if fmt not in FORMATS:
        raise ValueError(f"plan_memory: weight_format must be one of {sorted(FORMATS) + sorted(aliases)}, got "
                         f"{weight_format!r}")
    if slots is None:
        slots = topology.R
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < topology.R:
        raise ValueError(f"plan_memory: slots must be an int >= the topology's {topology.R} experts per FFN rank, "
                         f"got {slots!r}")
    if isinstance(intermediate, bool) or not isinstance(intermediate, int) or intermediate < 1:
        raise ValueError(f"plan_memory: intermediate must be a positive int (a routed expert's I), got "
                         f"{intermediate!r}")
    t, i = topology, intermediate
    recv = sum(torch.Size(shape).numel() * torch.empty((), dtype=dt).element_size()
               for dt, shape in output_specs(types.SimpleNamespace(topology=t, dtype=dtype)))
    rows = t.recv_rows
    act = torch.empty((), dtype=dtype).element_size()
    ffn = {
        "window": t.ffn_window_bytes,
        "receive buffers": recv,
        # W1's output: the int8 SwiGLU product [rows, I] and its per-row fp32 scale; W2's: [rows, H] activations.
        "W1 output": rows * i + rows * 4,
        "W2 output": rows * t.H * act,
        "expert weights": t.L * slots * (_expert_bytes(t.H, 2 * i, fmt) + _expert_bytes(i, t.H, fmt)),
    }
    return MemoryPlan(topology=t, weight_format=fmt, slots=slots, intermediate=i,
                      attention={"window": t.attn_window_bytes}, ffn=ffn, hccl_window_bytes=t.window_bytes)
