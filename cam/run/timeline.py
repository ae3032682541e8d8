"""What each rank of a ``cam-run`` world did when: phases recorded on the run's common clock.

A rank records its work as spans on one lane (it is one thread doing one thing at a time), each span a phase name,
start and end in seconds since the run's start, and a few arguments. Spans of one lane are either disjoint or
nested (a step contains its layers, a layer its phases); ``cam.run.trace`` turns every lane into Chrome trace
events and ``check_lanes`` verifies the nesting.

Phases (docs/run.md):
    Attention rank: ``step`` ⊃ ``layer`` ⊃ ``attention`` (the attention block and router; under ``--cost-model``
    it contains ``emulated``, the slept attention time), ``dense_mlp``, ``dispatch`` (dispatch_send), ``shared`` (shared experts), ``combine_wait``
    (combine_recv: waiting for the FFN ranks, then the weighted sum), ``gather`` (P > 1: the participants'
    all-gather of their rows), ``barrier`` (sync mode, before each layer); ``wait_arrival`` between steps while
    the next batch's requests have not arrived yet.
    FFN rank: ``item`` (one work item: replica, layer, rows) ⊃ ``recv`` (the receive that returned it),
    ``compute`` (W1 + W2; with --graph the whole replay), ``send`` (combine_send); ``idle`` (receives that
    returned empty work items, consecutive ones merged).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Dict, Iterable, List

ATTENTION_PHASES = ("attention", "emulated", "dense_mlp", "dispatch", "shared", "combine_wait", "gather", "barrier",
                    "wait_arrival")
FFN_PHASES = ("recv", "compute", "send", "idle")


class Lane:
    """One rank's spans, timed with ``time.time()`` against the run's origin ``t0`` (every rank shares it)."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.spans: List[dict] = []

    def now(self) -> float:
        return time.time() - self.t0

    def add(self, name: str, start: float, end: float, **args) -> None:
        self.spans.append({"name": name, "start_s": start, "end_s": max(start, end), "args": args})

    @contextmanager
    def span(self, name: str, **args):
        start = self.now()
        try:
            yield
        finally:
            self.add(name, start, self.now(), **args)

    def idle(self, start: float, end: float) -> None:
        """An idle interval; merged with the previous span when that was idle too and they touch."""
        last = self.spans[-1] if self.spans else None
        if last is not None and last["name"] == "idle" and start - last["end_s"] < 1e-3:
            last["end_s"] = max(last["end_s"], end)
        else:
            self.add("idle", start, end)


def check_lanes(spans_by_lane: Dict[object, Iterable[dict]], eps: float = 0.0) -> None:
    """Raises ValueError unless, in every lane, any two spans are disjoint or one contains the other."""
    for lane, spans in spans_by_lane.items():
        ordered = sorted(spans, key=lambda s: (s["start_s"], -s["end_s"]))
        open_: List[dict] = []
        for s in ordered:
            if s["end_s"] < s["start_s"]:
                raise ValueError(f"lane {lane}: span {s['name']} ends before it starts")
            while open_ and open_[-1]["end_s"] <= s["start_s"] + eps:
                open_.pop()
            if open_ and s["end_s"] > open_[-1]["end_s"] + eps:
                p = open_[-1]
                raise ValueError(f"lane {lane}: {s['name']} [{s['start_s']}, {s['end_s']}] overlaps "
                                 f"{p['name']} [{p['start_s']}, {p['end_s']}] without nesting")
            open_.append(s)
