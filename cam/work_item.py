"""``cam.WorkItem``: a typed view over the work-item record ``dispatch_recv`` writes (docs/protocol.md §4.2).

Its one job is to name the record's words. Their positions are ``kernels/common/window_layout.h``'s (``kWi*``,
``kWc*``), bound through ``_C``; Python never numbers them. The record stays a device tensor: :attr:`layer_index`
is a view (the GMM ops' ``layer_index``, no host read), the integer fields read the host once each.
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from . import _C

__all__ = ["WorkItem"]

_WORD = dict(_C.WORK_ITEM_WORDS)
_CHUNK_WORD = dict(_C.WORK_ITEM_CHUNK_WORDS)


class WorkItem:
    """One work item: ``WorkItem(record)`` over a 1-D int64 ``[work_item_words]`` record (one-item receive), or
    :meth:`table` over the rows of a batched receive's ``[I, work_item_words]`` table.

    Attributes (host ints, read when asked): ``kind`` (:attr:`EMPTY` or :attr:`WORK`), ``replica`` (-1 when
    empty), ``layer`` (0 when empty), ``seq``, ``slot``, ``rows``, ``ffn_rank``, ``fingerprint`` (the plane id).
    """

    EMPTY = int(_C.WORK_ITEM_KIND_EMPTY)
    WORK = int(_C.WORK_ITEM_KIND_WORK)
    WORDS = _WORD  # name -> word, from window_layout.h

    __slots__ = ("record",)

    def __init__(self, record: torch.Tensor):
        if not isinstance(record, torch.Tensor) or record.dtype != torch.int64 or record.dim() != 1:
            raise TypeError(f"WorkItem: record must be a 1-D int64 tensor (one work item), got "
                            f"{getattr(record, 'dtype', type(record).__name__)} of shape "
                            f"{tuple(getattr(record, 'shape', ()))}")
        if record.numel() <= _WORD["counts"]:
            raise ValueError(f"WorkItem: record has {record.numel()} words, fewer than a work item's fixed words")
        self.record = record

    @classmethod
    def table(cls, records: torch.Tensor) -> List["WorkItem"]:
        """The items of a ``[n, work_item_words]`` table (a batch's ``work_items``), empty slots included."""
        if not isinstance(records, torch.Tensor) or records.dim() != 2:
            raise TypeError("WorkItem.table: records must be a 2-D int64 tensor [items, work_item_words]")
        return [cls(records[i]) for i in range(records.shape[0])]

    @staticmethod
    def kinds(records: torch.Tensor) -> torch.Tensor:
        """The kind word of every row of a ``[n, work_item_words]`` table, as a device view (no host read)."""
        return records[:, _WORD["kind"]]

    def _word(self, name: str) -> int:
        return int(self.record[_WORD[name]])

    kind = property(lambda self: self._word("kind"))
    replica = property(lambda self: self._word("replica"))
    layer = property(lambda self: self._word("layer"))
    seq = property(lambda self: self._word("seq"))
    slot = property(lambda self: self._word("slot"))
    rows = property(lambda self: self._word("rows"))
    ffn_rank = property(lambda self: self._word("ffn_rank"))
    fingerprint = property(lambda self: self._word("fingerprint"))

    @property
    def is_empty(self) -> bool:
        return self.kind == self.EMPTY

    @property
    def layer_index(self) -> torch.Tensor:
        """int64 ``[1]`` view of the layer word: the GMM ops' ``layer_index`` (stays on the device)."""
        word = _WORD["layer"]
        return self.record[word:word + 1]

    def counts(self, experts: int) -> torch.Tensor:
        """int64 ``[experts]`` view of the rows per local expert (``experts``: the topology's ``R``)."""
        word = _WORD["counts"]
        return self.record[word:word + experts]

    def chunk(self, topology) -> Tuple[int, int, int]:
        """``(first_row, round_rows, epoch)``: where this item's rows start in its round, the round's rows for this
        FFN rank, and the placement epoch it was routed by (docs/protocol.md §8, §15)."""
        off = _C.window_layout(list(topology.as_c_fields()))["work_item_chunk_off"]
        return tuple(int(self.record[off + _CHUNK_WORD[name]]) for name in ("first_row", "round_rows", "epoch"))

    def __repr__(self) -> str:
        if self.record.device.type != "cpu":
            return f"WorkItem(<{self.record.device} record of {self.record.numel()} words>)"
        return (f"WorkItem(kind={self.kind}, replica={self.replica}, layer={self.layer}, seq={self.seq}, "
                f"slot={self.slot}, rows={self.rows}, ffn_rank={self.ffn_rank})")
