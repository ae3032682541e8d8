"""A Python re-derivation of kernels/common/window_layout.h, for tests only.

cam itself takes every size from the compiled header (``cam._C.window_layout``); this mirror is written from
docs/protocol.md §3-§4 so tests can (a) compare it with the header compiled on its own (test_topology_reference)
and (b) address words of a window when they tamper with it (test_dataplane)."""

from __future__ import annotations

LAYOUT_VERSION = 5
ALIGN = 32
LINE = 64
CONTROL_BYTES = 7 * LINE
IDENTITY_OFF = 2 * LINE  # int64[5]: fingerprint, layout version, rank, role, window bytes
HEADER_FIXED_WORDS = 9
HDR_EPOCH = 8  # the placement epoch the round was routed by (§4.1)
HDR_COUNTS = 9  # rows per local expert
WORK_ITEM_FIXED_WORDS = 8
WI_COUNTS = 8
CHUNK_WORDS = 3  # first row of the round, the round's rows, the round's placement epoch
WC_EPOCH = 2
PLACEMENT_HEADER_WORDS = LINE // 8  # the placement table's epoch line (word 0: the epoch), then its rows (§15)
INDEX_ENTRY_BYTES = 8
SEAL_BYTES = 8  # a seal: the int64 seq of the round whose data it follows (§10.2)
ATTN_FIXED_LINES = 2


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class WindowLayout:
    """Every size and offset of a :class:`cam.Topology`'s windows; other attributes come from the topology."""

    def __init__(self, topology):
        self.topology = topology

    def __getattr__(self, name):
        return getattr(self.topology, name)

    def __repr__(self) -> str:
        return f"WindowLayout({self.topology!r})"

    @property
    def window_token_slots(self) -> int:
        """Distinct tokens a participant may send one FFN rank per round: the window bound, not capacity."""
        return self.Bmax if self.window_tokens == 0 else min(self.Bmax, self.window_tokens)

    @property
    def worst_case_rows(self) -> int:
        return self.P * self.window_token_slots * self.K

    @property
    def max_chunks_per_round(self) -> int:
        return max(1, 2 * -(-self.worst_case_rows // self.capacity))

    @property
    def recv_rows(self) -> int:
        return min(self.capacity, self.worst_case_rows)

    @property
    def fingerprint(self) -> int:
        """63-bit FNV-1a over the layout version and every field, each as 8 little-endian bytes."""
        h = 14695981039346656037
        # the last field is hashed as its effective value (window_tokens 0 or above Bmax behaves like Bmax)
        # and the slot count only when it is not the contiguous default (0 and E / F are one plane)
        tail = () if self.E % self.F == 0 and self.R == self.E // self.F else (self.R,)
        for v in (LAYOUT_VERSION, *self.as_c_fields()[:-2], self.window_token_slots, *tail):
            v = int(v) & ((1 << 64) - 1)
            for i in range(8):
                h ^= (v >> (8 * i)) & 0xFF
                h = (h * 1099511628211) & ((1 << 64) - 1)
        return h & 0x7FFFFFFFFFFFFFFF

    @property
    def region_token_slots(self) -> int:
        return self.window_token_slots

    @property
    def region_index_entries(self) -> int:
        return self.window_token_slots * self.K

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
    def seals_bytes(self) -> int:
        """The tables seal in a 32-byte block of its own, then one int64 seal per token slot."""
        return _align_up(ALIGN + SEAL_BYTES * self.region_token_slots, ALIGN)

    @property
    def region_seals_off(self) -> int:
        return self.region_scales_off + self.scales_bytes

    @property
    def region_tables_seal_off(self) -> int:
        return self.region_seals_off

    def region_token_seal_off(self, token_slot: int) -> int:
        return self.region_seals_off + ALIGN + SEAL_BYTES * token_slot

    @property
    def region_bytes(self) -> int:
        return _align_up(self.region_seals_off + self.seals_bytes, LINE)

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
    def ffn_fence_off(self) -> int:
        return self.ffn_combined_seq_off + _align_up(8 * self.D, LINE)

    @property
    def ffn_chunk_cursor_off(self) -> int:
        return self.ffn_fence_off + _align_up(8 * self.D, LINE)

    @property
    def ffn_combined_rows_off(self) -> int:
        return self.ffn_chunk_cursor_off + _align_up(8 * self.D, LINE)

    @property
    def ffn_weights_epoch_off(self) -> int:
        """The line of the epoch of this FFN rank's slot weights (§15), after the per-replica arrays."""
        return self.ffn_combined_rows_off + _align_up(8 * self.D, LINE)

    @property
    def ffn_stop_off(self) -> int:
        """The int32 stop word of this rank's receive loops: the weights-epoch line's second 8-byte word
        (docs/protocol.md §3; docs/graph.md, "Stopping a captured loop")."""
        return self.ffn_weights_epoch_off + 8

    @property
    def ffn_state_bytes(self) -> int:
        return 2 * LINE + 5 * _align_up(8 * self.D, LINE)

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
    def attn_seals_off(self) -> int:
        return self.attn_completion_off + self.slots * self.F * LINE

    @property
    def attn_seals_bytes(self) -> int:
        return _align_up(SEAL_BYTES * self.slots * self.Bmax * self.K, LINE)

    def attn_combine_seal_off(self, slot: int, tk: int) -> int:
        return self.attn_seals_off + (slot * self.Bmax * self.K + tk) * SEAL_BYTES

    @property
    def attn_combine_off(self) -> int:
        return self.attn_seals_off + self.attn_seals_bytes

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
    def work_item_chunk_off(self) -> int:
        """First of the chunk words: the item's first row in its round, then the round's rows."""
        return WI_COUNTS + self.R + 3 * self.R * self.P

    @property
    def work_item_epoch(self) -> int:
        """The chunk word holding the round's placement epoch."""
        return self.work_item_chunk_off + WC_EPOCH

    @property
    def work_item_words(self) -> int:
        return _align_up(self.work_item_chunk_off + CHUNK_WORDS, ALIGN // 8)


    # ------------------------------------------------------------------ placement table (§15)

    @property
    def placement_width(self) -> int:
        return 1 + 2 * self.F

    def placement_layer_word(self, layer: int) -> int:
        return PLACEMENT_HEADER_WORDS + layer * self.E * self.placement_width

    @property
    def placement_words(self) -> int:
        return self.placement_layer_word(self.L)
