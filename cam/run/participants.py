"""The P participants of one replica in ``cam-run --participants P``: sequence parallelism over a micro-batch.

Each participant owns a contiguous, balanced share of a micro-batch's tokens (``cam.connector.split_tokens``), and
dispatches and combines only those: the data plane sees P participants forming one work item, and every
participant gets exactly its own tokens back. The Attention-side dense math (attention, router, shared experts)
is replicated on the whole micro-batch, and after each MoE layer the participants all-gather their updated rows,
which stands in for a sequence-parallel attention's key/value exchange. Replicating the dense math keeps every
participant's rows bit-identical to ``P = 1`` (a matmul over fewer rows need not round like the full one); only
the emulated attention time (``--cost-model``) is the participant's 1/P share, as the simulator models it.

The all-gather is a gloo process group over the replica's participants, rendezvoused through the run's store under
a per-replica prefix, and bounded by the run's timeout.
"""

from __future__ import annotations

from datetime import timedelta
from typing import List, Sequence, Tuple

import torch

from ..connector import split_tokens


def share(tokens: int, part: int, count: int) -> Tuple[int, int]:
    """[start, end) of participant ``part``'s tokens in a micro-batch of ``tokens`` tokens split over ``count``."""
    return split_tokens(tokens, count)[part]


class Participants:
    """Participant ``part`` of a replica of ``count`` participants."""

    def __init__(self, store, replica: int, part: int, count: int, timeout_s: float):
        if not 0 <= part < count:
            raise ValueError(f"participant {part} outside [0, {count})")
        self.replica, self.part, self.count = replica, part, count
        self._group = None
        if count > 1:
            dist = torch.distributed
            # One process group per process (a rank belongs to one replica), rendezvoused under a replica prefix.
            dist.init_process_group("gloo", store=dist.PrefixStore(f"run/sp/{replica}", store), rank=part,
                                    world_size=count, timeout=timedelta(seconds=timeout_s))
            self._group = dist.group.WORLD

    def own(self, tokens: int) -> Tuple[int, int]:
        """[start, end) of this participant's tokens in a micro-batch of ``tokens`` tokens."""
        return share(tokens, self.part, self.count)

    def gather(self, own_rows: torch.Tensor, tokens: int) -> torch.Tensor:
        """Every participant's rows of a micro-batch of ``tokens`` tokens, in token order (``own_rows`` are this
        participant's ``own(tokens)`` rows)."""
        start, end = self.own(tokens)
        if own_rows.shape[0] != end - start:
            raise ValueError(f"gather: {own_rows.shape[0]} rows, participant {self.part} owns {end - start}")
        if self.count == 1 or tokens == 0:  # every participant sees the same empty micro-batch: nothing to send
            return own_rows
        bounds = split_tokens(tokens, self.count)
        width = max(e - s for s, e in bounds)  # all_gather needs equal shapes: pad to the largest share
        padded = own_rows.new_zeros((width,) + tuple(own_rows.shape[1:]))
        padded[:end - start] = own_rows
        parts = [torch.empty_like(padded) for _ in range(self.count)]
        torch.distributed.all_gather(parts, padded.contiguous(), group=self._group)
        return torch.cat([p[:e - s] for p, (s, e) in zip(parts, bounds)])

    def close(self) -> None:
        if self._group is not None:
            torch.distributed.destroy_process_group()
            self._group = None


def request_pieces(rids: Sequence[int], seq_lens: Sequence[int], start: int,
                   end: int) -> List[Tuple[int, int, int, int]]:
    """Tokens [start, end) of a micro-batch that concatenates requests ``rids`` (lengths ``seq_lens``), as
    (request id, first token within the request, first row within [start, end), rows)."""
    out, offset = [], 0
    for rid, n in zip(rids, seq_lens):
        lo, hi = max(start, offset), min(end, offset + n)
        if lo < hi:
            out.append((rid, lo - offset, lo - start, hi - lo))
        offset += n
    return out


def assemble(pieces, lengths) -> dict:
    """Requests' final hidden states from every participant's pieces ``(rid, first_token, rows)``; each token must be
    delivered by exactly one participant (what "every participant gets exactly its own tokens back" means)."""
    by_rid: dict = {}
    for rid, first, rows in pieces:
        by_rid.setdefault(rid, []).append((first, rows))
    out = {}
    for rid, parts in by_rid.items():
        parts.sort(key=lambda p: p[0])
        covered = 0
        for first, rows in parts:
            if first != covered:
                how = "missing" if first > covered else "delivered twice"
                raise ValueError(f"request {rid}: tokens from {min(covered, first)} {how}")
            covered += rows.shape[0]
        if covered != lengths[rid]:
            raise ValueError(f"request {rid}: {covered} tokens delivered, it has {lengths[rid]}")
        out[rid] = torch.cat([rows for _, rows in parts]) if len(parts) > 1 else parts[0][1]
    return out
