"""What the four data-plane ops share on the host: finding the op's Comm from the id the op schema carries. Argument
checks go through the one checker (``_checks.Args``); device-resident values such as expert ids are checked by the
kernels."""

from __future__ import annotations

from ..comm import Comm, lookup


def comm_for(op: str, comm_id: int, attention: bool) -> Comm:
    comm = lookup(comm_id)._require()
    if comm.is_attention != attention:
        role = "Attention" if attention else "FFN"
        raise ValueError(f"{op}: rank {comm.rank} is {'an Attention' if comm.is_attention else 'an FFN'} rank; "
                         f"{op} runs on {role} ranks")
    return comm


def comm_arg(op: str, comm) -> Comm:
    """The public wrappers' ``comm`` argument: a live :class:`cam.Comm`."""
    if not isinstance(comm, Comm):
        raise TypeError(f"{op}: comm must be a cam.Comm, got {type(comm).__name__}")
    return comm._require()
