"""The shape of one AFD data plane (``cam.Topology``).

Every size derived from it (windows, work item, receive rows, fingerprint) comes from the one window layout header,
``kernels/common/window_layout.h``, through the compiled extension (docs/protocol.md §3-§4): Python never
re-derives the layout.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from . import _C
from . import checkpoint_config
from .placement import contiguous_slots

__all__ = ["Topology"]

MAX_INT32 = 2**31 - 1
MAX_DIM = 1 << 20


@dataclass(frozen=True)
class Topology:
    """Shape of one asynchronous AFD data plane: who talks to whom and how big everything is.

    World layout (docs/protocol.md §1): Attention ranks are ``[0, A)`` with ``A = D * P``; replica
    ``d`` is Attention ranks ``[d*P, (d+1)*P)``; FFN ranks are ``[A, A + F)``. Every FFN rank has ``R``
    local expert slots; by default ``R = E // F`` and routed expert ``e`` lives in slot ``e % R`` of FFN rank
    ``A + e // R`` (the contiguous placement); with ``expert_slots`` any E and F are served through a placement
    table (:class:`cam.placement.Placement`, docs/protocol.md §15).

    Arguments:
        D: number of Attention data-parallel replicas (>= 1). Replicas progress
            independently; an FFN rank serves any ready one.
        P: participants per replica (>= 1): the Attention ranks (TP/CP/SP members) that
            together form one replica's work item. Each dispatches the tokens it holds
            and gets back exactly its own tokens from combine_recv.
        F: number of FFN ranks (>= 1).
        E: number of routed experts (>= 1; ``E % F == 0`` unless ``expert_slots`` is given); ids are
            0-based and carry no shared expert.
        K: top-k slots per token (``1 <= K <= E``). A slot id of -1 is an empty slot;
            duplicate ids within a token are legal.
        H: hidden size (>= 1).
        Bmax: maximum tokens per Attention rank per layer (>= 1). ``B = 0`` is legal at
            run time.
        L: number of MoE layers (>= 1); a work item's layer must lie in ``[0, L)``.
        slots: rounds (micro-batches/layers) an Attention rank may have in flight (>= 1).
            Round ``r`` uses slot ``r % slots``; 2 lets two rounds overlap.
        act_dtype_bytes: element size of activations (bf16/fp16), currently only 2.
        quantized: dispatch int8 + one fp32 scale per token (``True``, the default,
            feeds W1 directly) or the activations unchanged (``False``).
        capacity: ``Nmax``, rows one work item may bring to one FFN rank (>= 1): the FFN
            working set (dispatch_recv's outputs, the W1/W2 buffers). ``None`` means the
            worst case ``P * min(Bmax, window_tokens) * K``. A round with more rows for an
            FFN rank is not an error: it is delivered as several work items (chunks of
            whole experts, an expert larger than ``capacity`` split by rows), and the
            round completes when its last chunk is combined (docs/protocol.md §8). A
            larger value behaves like the worst case.
        window_tokens: distinct tokens one participant may send one FFN rank in one
            round (>= 1); ``None`` (or 0) means ``Bmax``. This sizes the windows (the memory a
            transport must provide, ``HCCL_BUFFSIZE`` on Ascend); a round above it is
            refused before anything is written. A larger value behaves like ``Bmax``.
        expert_slots: local expert slots on every FFN rank, fixed for the plane's life (a rebalance only
            changes which expert a slot holds). ``None`` (or 0) means ``E // F`` with the contiguous
            placement; any other value needs ``F * expert_slots >= E`` and a placement table on the
            Attention ranks (``cam.Comm(placement=...)``).

    All window sizes and offsets are pure functions of these fields (see
    ``kernels/common/window_layout.h``); invalid values raise ``ValueError`` naming the
    field.
    """

    D: int
    P: int
    F: int
    E: int
    K: int
    H: int
    Bmax: int
    L: int
    slots: int = 2
    act_dtype_bytes: int = 2
    quantized: bool = True
    capacity: Optional[int] = None
    window_tokens: Optional[int] = None
    expert_slots: Optional[int] = None

    def __post_init__(self) -> None:
        if self.window_tokens is None or (_is_int(self.window_tokens) and self.window_tokens == 0):
            object.__setattr__(self, "window_tokens", self.Bmax)  # 0 means Bmax in the C POD too
        if self.expert_slots is None:
            object.__setattr__(self, "expert_slots", 0)  # 0 means E // F in the C POD
        if self.capacity is None:
            ints = all(_is_int(v) for v in (self.P, self.Bmax, self.K, self.window_tokens))
            # an invalid window_tokens is reported by validate() under its own name, not as a capacity of 0
            window = self.window_tokens if ints and self.window_tokens >= 1 else self.Bmax
            cap = self.P * min(self.Bmax, window) * self.K if ints else None
            object.__setattr__(self, "capacity", cap)
        self.validate()

    # ------------------------------------------------------------------ from a model's config

    @classmethod
    def from_config(cls, config: dict, *, moe_layers, D: int, F: int, Bmax: int, P: int = 1, who: str = "config",
                    **fields) -> "Topology":
        """The plane of a transformers model config (``config.json`` as a dict, or its nested ``text_config``):
        E, K and H read through the one table of config keys (:data:`cam.checkpoint_config.CONFIG_KEYS`), L the
        number of MoE layers (``moe_layers``: a count or the decoder layer ids). ``expert_slots`` defaults to
        :func:`cam.placement.contiguous_slots` (a table's ``ceil(E / F)`` slots when F does not divide E); the other
        ``fields`` (slots, capacity, window_tokens, quantized, ...) are the constructor's. A config without a key
        for one of them, or with a value that is not a positive int, is refused naming ``who`` and the key
        (:class:`cam.checkpoint_config.CheckpointConfigError`)."""
        if not isinstance(config, dict):
            raise checkpoint_config.CheckpointConfigError(f"{who}: a model config is a dict (config.json's object), "
                                                          f"got {type(config).__name__}")
        section = checkpoint_config.model_section(config)
        E = checkpoint_config.config_int(section, "experts", who=who)
        K = checkpoint_config.config_int(section, "top_k", who=who)
        H = checkpoint_config.config_int(section, "hidden", who=who)
        L = moe_layers if _is_int(moe_layers) else len(moe_layers)
        fields.setdefault("expert_slots", contiguous_slots(E, F))
        return cls(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=Bmax, L=L, **fields)

    @classmethod
    def from_checkpoint(cls, directory: str, *, D: int, F: int, Bmax: int, P: int = 1, **fields) -> "Topology":
        """:meth:`from_config` on a checkpoint directory's ``config.json``, L its decoder layers with routed experts
        (from the safetensors headers, no weight loaded). Errors name the file."""
        config = checkpoint_config.read_config(directory, who="Topology.from_checkpoint")
        layers = checkpoint_config.moe_layers(directory)
        return cls.from_config(config, moe_layers=layers, D=D, F=F, Bmax=Bmax, P=P,
                               who=f"{directory}/config.json", **fields)

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field (same order as the C++ check)."""
        for name in ("D", "P", "F", "E", "K", "H", "Bmax", "L", "slots", "act_dtype_bytes", "capacity",
                     "window_tokens", "expert_slots"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"Topology.{name} must be an int, got {getattr(self, name)!r}")
        if not isinstance(self.quantized, bool) and self.quantized not in (0, 1):
            raise ValueError(f"Topology.quantized must be a bool (or 0/1), got {self.quantized!r}")

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"Topology.{name} = {getattr(self, name)}: {why}")

        for name in ("D", "P", "F"):
            if not 1 <= getattr(self, name) <= MAX_DIM:
                raise bad(name, f"must be in [1, {MAX_DIM}]")
        if not 1 <= self.E <= MAX_DIM:
            raise bad("E", f"must be in [1, {MAX_DIM}]")
        if self.expert_slots == 0 and self.E % self.F != 0:
            raise bad("E", f"must be a multiple of F = {self.F} (experts are split evenly over FFN ranks), or "
                           f"give expert_slots and a placement table")
        if not 1 <= self.K <= self.E:
            raise bad("K", f"must be in [1, E = {self.E}]")
        if not 1 <= self.H <= MAX_DIM:
            raise bad("H", f"must be in [1, {MAX_DIM}]")
        if not 1 <= self.Bmax <= MAX_DIM:
            raise bad("Bmax", f"must be in [1, {MAX_DIM}]")
        if self.Bmax * self.K > MAX_INT32:
            raise bad("Bmax", f"Bmax * K must fit in int32 (token*K + k is an int32 index), K = {self.K}")
        if not 1 <= self.L <= MAX_DIM:
            raise bad("L", f"must be in [1, {MAX_DIM}]")
        if not 1 <= self.slots <= MAX_DIM:
            raise bad("slots", f"must be in [1, {MAX_DIM}]")
        if self.act_dtype_bytes != 2:
            raise bad("act_dtype_bytes", "only 2-byte activations (bf16/fp16) are supported")
        if not 1 <= self.capacity <= MAX_INT32:
            raise bad("capacity", f"must be in [1, {MAX_INT32}] rows")
        if not 1 <= self.window_tokens <= MAX_INT32:
            raise bad("window_tokens", f"must be in [1, {MAX_INT32}] tokens (or None / 0: Bmax)")
        if not 0 <= self.expert_slots <= MAX_DIM or self.expert_slots * self.F > MAX_DIM:
            raise bad("expert_slots", f"must be in [0, {MAX_DIM}] with F * expert_slots <= {MAX_DIM}")
        if self.expert_slots and self.expert_slots * self.F < self.E:
            raise bad("expert_slots", f"F = {self.F} ranks of {self.expert_slots} slots cannot hold E = {self.E} "
                                      f"experts")
        if self._layout["first_bad_field"] == _C.WINDOW_FIELD_WINDOW:
            raise ValueError(f"Topology needs a window larger than 2**56 bytes: {self}")
        if self._layout["first_bad_field"] != 0:  # the checks above mirror check_topology field by field
            raise ValueError(f"Topology is invalid (window_layout.h field {self._layout['first_bad_field']}): {self}")

    # ------------------------------------------------------------------ derived counts

    @property
    def A(self) -> int:
        """Attention ranks, ``D * P``."""
        return self.D * self.P

    @property
    def R(self) -> int:
        """Local expert slots per FFN rank: ``expert_slots``, or ``E // F`` by default."""
        return self.expert_slots or self.E // self.F

    @property
    def contiguous_placement(self) -> bool:
        """True when the default placement (expert ``e`` in slot ``e % R`` of FFN index ``e // R``) applies, so
        no placement table is needed."""
        return self.E % self.F == 0 and self.R == self.E // self.F

    @property
    def world_size(self) -> int:
        return self.A + self.F

    @property
    def quant(self) -> int:
        return 1 if self.quantized else 0

    def replica_of(self, attn_rank: int) -> int:
        return attn_rank // self.P

    def participant_of(self, attn_rank: int) -> int:
        return attn_rank % self.P

    def attn_rank_of(self, replica: int, participant: int) -> int:
        return replica * self.P + participant

    def ffn_rank_of_expert(self, expert: int) -> int:
        """Global rank of the FFN rank holding routed expert ``expert`` in the contiguous placement."""
        if not self.contiguous_placement:
            raise ValueError(f"ffn_rank_of_expert: E = {self.E} on F = {self.F} ranks of {self.R} slots has no "
                             f"contiguous placement; ask the placement table")
        return self.A + expert // self.R

    def ffn_index(self, rank: int) -> int:
        """``f`` in ``[0, F)`` of global FFN rank ``A + f``."""
        return rank - self.A

    # ------------------------------------------------------------------ capacity

    @property
    def worst_case_rows(self) -> int:
        """Rows one round can bring to one FFN rank at most, ``P * min(Bmax, window_tokens) * K``."""
        return self._layout["worst_case_rows"]

    @property
    def recv_rows(self) -> int:
        """Rows of one work item and of dispatch_recv's static-shape outputs: ``min(capacity, worst_case_rows)``."""
        return self._layout["recv_rows"]

    @property
    def max_chunks_per_round(self) -> int:
        """Work items one round may take on one FFN rank: ``max(1, 2 * ceil(worst_case_rows / capacity))``."""
        return self._layout["max_chunks_per_round"]

    # ------------------------------------------------------------------ sizes (from window_layout.h)

    @functools.cached_property
    def _layout(self) -> dict:
        return _C.window_layout(list(self.as_c_fields()))

    @property
    def work_item_words(self) -> int:
        """Length of dispatch_recv's int64 work item (docs/protocol.md §4.2)."""
        return self._layout["work_item_words"]

    @property
    def placement_width(self) -> int:
        """Words per expert of the device placement table, ``1 + 2 * F`` (docs/protocol.md §15)."""
        return self._layout["placement_width"]

    @property
    def placement_words(self) -> int:
        """Words of the device placement table: its epoch line, then ``L * E * placement_width`` (§15)."""
        return self._layout["placement_words"]

    @property
    def attn_window_bytes(self) -> int:
        return self._layout["attn_window_bytes"]

    @property
    def ffn_window_bytes(self) -> int:
        return self._layout["ffn_window_bytes"]

    @property
    def window_bytes(self) -> int:
        """Size every rank allocates when the transport needs one size for all (HCCL's window)."""
        return self._layout["window_bytes"]

    def rank_window_bytes(self, rank: int) -> int:
        """Bytes rank ``rank`` needs for its own role."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside [0, {self.world_size})")
        return self.attn_window_bytes if rank < self.A else self.ffn_window_bytes

    # ------------------------------------------------------------------ identity

    @property
    def fingerprint(self) -> int:
        """63-bit hash of the layout version and every field; equal on all ranks of one plane."""
        return self._layout["fingerprint"]

    def as_c_fields(self) -> tuple:
        """Field values in ``CamTopology`` order (what the bindings copy into the POD)."""
        return (
            self.D,
            self.P,
            self.F,
            self.E,
            self.K,
            self.H,
            self.Bmax,
            self.L,
            self.slots,
            self.act_dtype_bytes,
            self.quant,
            self.capacity,
            self.window_tokens,
            self.expert_slots,
        )


def _is_int(v) -> bool:
    # bool is an int subclass, but True as a rank count is always a mistake
    return isinstance(v, int) and not isinstance(v, bool)
