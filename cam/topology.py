"""Topology of one AFD data plane and the window layout it implies.

``Topology`` is the Python twin of the C++ POD ``CamTopology`` in
``kernels/common/window_layout.h``; every size and offset below uses the same
formula as that header (docs/protocol.md §3-§4). The header is the layout; this
file is a plain mirror of it, kept in lock step by a test that compares the two.
Nothing here imports the compiled extension, so it can be used before a build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = [
    "Topology",
    "LAYOUT_VERSION",
    "ALIGN",
    "LINE",
    "CONTROL_BYTES",
    "ABORT_OFF",
    "STATUS_OFF",
    "IDENTITY_OFF",
    "STATUS_WORDS",
    "STATUS_FIELDS",
    "STATUS_CODES",
    "OPS",
    "HEADER_FIXED_WORDS",
    "WORK_ITEM_FIXED_WORDS",
    "WI_KIND",
    "WI_REPLICA",
    "WI_LAYER",
    "WI_SEQ",
    "WI_SLOT",
    "WI_ROWS",
    "WI_FFN_RANK",
    "WI_FINGERPRINT",
    "WI_COUNTS",
    "WI_EMPTY",
    "WI_WORK",
    "INDEX_ENTRY_BYTES",
    "MAX_DIM",
    "MAX_WINDOW_BYTES",
]

# ---- constants mirrored from window_layout.h (names without the k prefix) ----
LAYOUT_VERSION = 1
ALIGN = 32
LINE = 64
CONTROL_BYTES = 4 * LINE
ABORT_OFF = 0
STATUS_OFF = LINE
IDENTITY_OFF = 2 * LINE
STATUS_WORDS = 8
# status record word index -> name, in order
STATUS_FIELDS = ("code", "op", "rank", "peer", "replica", "layer", "seq", "detail")
STATUS_CODES = {
    0: "ok",
    1: "timeout",
    2: "aborted",
    3: "capacity",
    4: "bad_input",
    5: "topology_mismatch",
    6: "protocol",
}
OPS = {0: "none", 1: "dispatch_send", 2: "dispatch_recv", 3: "combine_send", 4: "combine_recv"}

HEADER_FIXED_WORDS = 8
WORK_ITEM_FIXED_WORDS = 8
WI_KIND, WI_REPLICA, WI_LAYER, WI_SEQ, WI_SLOT, WI_ROWS, WI_FFN_RANK, WI_FINGERPRINT = range(8)
WI_COUNTS = 8
WI_EMPTY = 0
WI_WORK = 1
INDEX_ENTRY_BYTES = 8
ATTN_FIXED_LINES = 2

MAX_INT32 = 2**31 - 1
MAX_DIM = 1 << 20
MAX_WINDOW_BYTES = 1 << 56

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_U64 = (1 << 64) - 1


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _fnv1a_word(h: int, v: int) -> int:
    v &= _U64  # the C++ casts int64 -> uint64 first
    for i in range(8):
        h ^= (v >> (8 * i)) & 0xFF
        h = (h * _FNV_PRIME) & _U64
    return h


@dataclass(frozen=True)
class Topology:
    """Shape of one asynchronous AFD data plane: who talks to whom and how big everything is.

    World layout (DESIGN §4): Attention ranks are ``[0, A)`` with ``A = D * P``; replica
    ``d`` is Attention ranks ``[d*P, (d+1)*P)``; FFN ranks are ``[A, A + F)``; routed
    expert ``e`` lives on FFN rank ``A + e // R`` with ``R = E // F``.

    Arguments:
        D: number of Attention data-parallel replicas (>= 1). Replicas progress
            independently; an FFN rank serves any ready one.
        P: participants per replica (>= 1): the Attention ranks (TP/CP/SP members) that
            together form one replica's work item. Each dispatches the tokens it holds
            and gets back exactly its own tokens from combine_recv.
        F: number of FFN ranks (>= 1).
        E: number of routed experts (>= 1, ``E % F == 0``); ids are 0-based and carry no
            shared expert.
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
        capacity: ``Nmax``, rows one work item may bring to one FFN rank (>= 1). ``None``
            means the worst case ``P * Bmax * K``. A smaller value shrinks the FFN
            window and dispatch_recv's outputs; a work item that does not fit is refused
            with an error before anything is written. A larger value is allowed and
            behaves like the worst case.

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

    def __post_init__(self) -> None:
        if self.capacity is None:
            cap = self.P * self.Bmax * self.K if all(
                _is_int(v) for v in (self.P, self.Bmax, self.K)
            ) else None
            object.__setattr__(self, "capacity", cap)
        self.validate()

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field (same order as the C++ check)."""
        for name in ("D", "P", "F", "E", "K", "H", "Bmax", "L", "slots", "act_dtype_bytes", "capacity"):
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
        if self.E % self.F != 0:
            raise bad("E", f"must be a multiple of F = {self.F} (experts are split evenly over FFN ranks)")
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
        regions = self.A * self.slots
        if regions > MAX_WINDOW_BYTES // (LINE + self.region_bytes):
            raise ValueError(f"Topology needs an FFN window larger than 2**56 bytes: {self}")
        if self.combine_row_bytes > (MAX_WINDOW_BYTES - self.attn_combine_off) // (self.slots * self.Bmax * self.K):
            raise ValueError(f"Topology needs an Attention window larger than 2**56 bytes: {self}")

    # ------------------------------------------------------------------ derived counts

    @property
    def A(self) -> int:
        """Attention ranks, ``D * P``."""
        return self.D * self.P

    @property
    def R(self) -> int:
        """Routed experts per FFN rank, ``E // F``."""
        return self.E // self.F

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
        """Global rank of the FFN rank holding routed expert ``expert``."""
        return self.A + expert // self.R

    def ffn_index(self, rank: int) -> int:
        """``f`` in ``[0, F)`` of global FFN rank ``A + f``."""
        return rank - self.A

    @staticmethod
    def seq_of_round(round_: int) -> int:
        return round_ + 1

    def slot_of_seq(self, seq: int) -> int:
        return (seq - 1) % self.slots

    # ------------------------------------------------------------------ capacity

    @property
    def worst_case_rows(self) -> int:
        return self.P * self.Bmax * self.K

    @property
    def recv_rows(self) -> int:
        """Rows of dispatch_recv's static-shape outputs: ``min(capacity, P*Bmax*K)``."""
        return min(self.capacity, self.worst_case_rows)

    @property
    def region_token_slots(self) -> int:
        return min(self.Bmax, self.capacity)

    @property
    def region_index_entries(self) -> int:
        return min(self.Bmax * self.K, self.capacity)

    # ------------------------------------------------------------------ row strides

    @property
    def dispatch_elem_bytes(self) -> int:
        return 1 if self.quantized else self.act_dtype_bytes

    @property
    def dispatch_row_bytes(self) -> int:
        return _align_up(self.H * self.dispatch_elem_bytes, ALIGN)

    @property
    def combine_row_bytes(self) -> int:
        return _align_up(self.H * self.act_dtype_bytes, ALIGN)

    # ------------------------------------------------------------------ dispatch region

    @property
    def header_words(self) -> int:
        return HEADER_FIXED_WORDS + self.R

    @property
    def header_bytes(self) -> int:
        return _align_up(8 * self.header_words, ALIGN)

    @property
    def index_bytes(self) -> int:
        return _align_up(INDEX_ENTRY_BYTES * self.region_index_entries, ALIGN)

    @property
    def tokens_bytes(self) -> int:
        return self.region_token_slots * self.dispatch_row_bytes

    @property
    def scales_bytes(self) -> int:
        return _align_up(4 * self.region_token_slots, ALIGN) if self.quantized else 0

    @property
    def region_header_off(self) -> int:
        return 0

    @property
    def region_index_off(self) -> int:
        return self.header_bytes

    @property
    def region_tokens_off(self) -> int:
        return self.region_index_off + self.index_bytes

    @property
    def region_scales_off(self) -> int:
        return self.region_tokens_off + self.tokens_bytes

    @property
    def region_bytes(self) -> int:
        return _align_up(self.region_scales_off + self.scales_bytes, LINE)

    # ------------------------------------------------------------------ FFN window

    @property
    def ffn_state_off(self) -> int:
        return CONTROL_BYTES

    @property
    def ffn_done_seq_off(self) -> int:
        return self.ffn_state_off + LINE

    @property
    def ffn_combined_seq_off(self) -> int:
        return self.ffn_done_seq_off + _align_up(8 * self.D, LINE)

    @property
    def ffn_state_bytes(self) -> int:
        return LINE + 2 * _align_up(8 * self.D, LINE)

    @property
    def ffn_ready_off(self) -> int:
        return self.ffn_state_off + self.ffn_state_bytes

    def ffn_ready_signal_off(self, attn_rank: int, slot: int) -> int:
        return self.ffn_ready_off + (attn_rank * self.slots + slot) * LINE

    @property
    def ffn_data_off(self) -> int:
        return self.ffn_ready_off + self.A * self.slots * LINE

    def ffn_region_off(self, attn_rank: int, slot: int) -> int:
        return self.ffn_data_off + (attn_rank * self.slots + slot) * self.region_bytes

    @property
    def ffn_window_bytes(self) -> int:
        return self.ffn_data_off + self.A * self.slots * self.region_bytes

    # ------------------------------------------------------------------ Attention window

    @property
    def attn_state_off(self) -> int:
        return CONTROL_BYTES

    @property
    def attn_send_count_off(self) -> int:
        return self.attn_state_off

    @property
    def attn_recv_count_off(self) -> int:
        return self.attn_state_off + LINE

    def attn_slot_state_off(self, slot: int) -> int:
        return self.attn_state_off + (ATTN_FIXED_LINES + slot) * LINE

    @property
    def attn_state_bytes(self) -> int:
        return (ATTN_FIXED_LINES + self.slots) * LINE

    @property
    def attn_completion_off(self) -> int:
        return self.attn_state_off + self.attn_state_bytes

    def attn_completion_signal_off(self, slot: int, f: int) -> int:
        return self.attn_completion_off + (slot * self.F + f) * LINE

    @property
    def attn_combine_off(self) -> int:
        return self.attn_completion_off + self.slots * self.F * LINE

    @property
    def attn_combine_slot_bytes(self) -> int:
        return self.Bmax * self.K * self.combine_row_bytes

    def attn_combine_row_off(self, slot: int, tk: int) -> int:
        return self.attn_combine_off + slot * self.attn_combine_slot_bytes + tk * self.combine_row_bytes

    @property
    def attn_window_bytes(self) -> int:
        return self.attn_combine_off + self.slots * self.attn_combine_slot_bytes

    @property
    def window_bytes(self) -> int:
        """Size every rank allocates when the transport needs one size for all (HCCL)."""
        return max(self.attn_window_bytes, self.ffn_window_bytes)

    def rank_window_bytes(self, rank: int) -> int:
        """Bytes rank ``rank`` needs for its own role."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside [0, {self.world_size})")
        return self.attn_window_bytes if rank < self.A else self.ffn_window_bytes

    # ------------------------------------------------------------------ work item

    def work_item_cell_out_off(self, j: int, p: int) -> int:
        return WI_COUNTS + self.R + j * self.P + p

    def work_item_cell_count(self, j: int, p: int) -> int:
        return WI_COUNTS + self.R + self.R * self.P + j * self.P + p

    def work_item_cell_src_off(self, j: int, p: int) -> int:
        return WI_COUNTS + self.R + 2 * self.R * self.P + j * self.P + p

    @property
    def work_item_words(self) -> int:
        return _align_up(WORK_ITEM_FIXED_WORDS + self.R + 3 * self.R * self.P, ALIGN // 8)

    # ------------------------------------------------------------------ identity

    @property
    def fingerprint(self) -> int:
        """63-bit FNV-1a of the layout version and every field; equal on all ranks of one plane."""
        h = _FNV_OFFSET
        for v in (LAYOUT_VERSION, *self.as_c_fields()):
            h = _fnv1a_word(h, int(v))
        return h & 0x7FFFFFFFFFFFFFFF

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
        )


def _is_int(v) -> bool:
    # bool is an int subclass, but True as a rank count is always a mistake
    return isinstance(v, int) and not isinstance(v, bool)
