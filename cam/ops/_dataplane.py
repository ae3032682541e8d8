"""What the four data-plane ops share on the host: finding the op's Comm from the id the op schema carries, and the
direct (eager, plain CPU tensors) call that validates once. Argument checks go through the one checker
(``_checks.Args``); device-resident values such as expert ids are checked by the kernels."""

from __future__ import annotations

from typing import Callable

from .. import _runtime
from ..comm import Comm, lookup
from ..errors import CamError


def _role(op: str, comm: Comm, attention: bool) -> Comm:
    if comm.is_attention != attention:
        role = "Attention" if attention else "FFN"
        raise ValueError(f"{op}: rank {comm.rank} is {'an Attention' if comm.is_attention else 'an FFN'} rank; "
                         f"{op} runs on {role} ranks")
    return comm


def comm_for(op: str, comm_id: int, attention: bool) -> Comm:
    return _role(op, lookup(comm_id)._require(), attention)


def comm_arg(op: str, comm) -> Comm:
    """The public wrappers' ``comm`` argument: a live :class:`cam.Comm`."""
    if not isinstance(comm, Comm):
        raise TypeError(f"{op}: comm must be a cam.Comm, got {type(comm).__name__}")
    return comm._require()


def run_direct(op: str, attention: bool, check: Callable, launch, comm_id: int, *args) -> None:
    """A data-plane op's direct body (``Op.register_direct``): ``launch(comm, *args)`` on the Comm's stream, with
    validation once per call. The C API checks the role, the communicator's state and every argument ``check``
    checks (host/src/comm_ops.cpp CheckComm, host/src/<op>.cpp) before anything is written, so ``check`` runs only
    after the C API refused: it raises what the dispatcher path raises, its checks first, naming the argument as
    documented; where it passes (the C API was stricter, or the failure came later, from the kernel), the C API's
    error stands."""
    comm = lookup(comm_id)._require()
    try:
        _runtime.run(launch, comm._c, *args, stream=comm.stream)
    except CamError:
        check(_role(op, comm, attention), *args)
        raise
