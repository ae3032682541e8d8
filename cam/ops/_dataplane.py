"""What the four data-plane ops share on the host: finding the op's Comm from the id the op schema carries, and the
public wrappers' ``comm`` argument. The Comm's role, state and bounds (H, Bmax, L, K, the window sizes) are checked by
the C API with every other argument (host/src/comm_ops.cpp CheckComm, host/src/<op>.cpp); device-resident values such
as expert ids by the kernels."""

from __future__ import annotations

from ..comm import Comm, lookup


def comm_of(comm_id: int) -> Comm:
    """The live Comm an op's ``comm_id`` names."""
    return lookup(comm_id)._require()


def comm_arg(op: str, comm) -> Comm:
    """The public wrappers' ``comm`` argument: a live :class:`cam.Comm`."""
    if not isinstance(comm, Comm):
        raise TypeError(f"{op}: comm must be a cam.Comm, got {type(comm).__name__}")
    return comm._require()
