"""``cam-run --trace out.json``: the run's timeline in the Chrome trace event format.

The JSON object format of the Trace Event Format (the one chrome://tracing, Perfetto and torch's profiler read):
``{"traceEvents": [...], "displayTimeUnit": "ms"}``. Every rank is one process (``pid`` = rank, named by a
``process_name`` metadata event: "attention 0 (replica 0, participant 0)" / "ffn 2"), with one thread; each span of
its lane (``cam.run.timeline``) is a complete event (``"ph": "X"``, ``ts`` and ``dur`` in microseconds since the
run's start) whose ``args`` carry the replica, layer, stage, rows. Spans of a lane nest or are disjoint, which is
what the viewers need to stack them.
"""

from __future__ import annotations

import json
from typing import Dict

# Category of each span, so a viewer can colour or filter by kind.
_CATEGORY = {"step": "batch", "layer": "layer", "item": "work_item", "idle": "idle", "wait_arrival": "idle",
             "barrier": "wait", "combine_wait": "wait", "recv": "wait"}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def process_name(result: dict) -> str:
    if result["role"] == "attention":
        return f"attention {result['rank']} (replica {result['replica']}, participant {result.get('participant', 0)})"
    return f"ffn {result['rank']}"


def trace_events(results: Dict[int, dict], report: dict) -> dict:
    """The trace of a run from its per-rank results (each with its ``spans``)."""
    events = []
    for rank in sorted(results):
        r = results[rank]
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": process_name(r)}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"name": "participant" if r["role"] == "attention" else "work items"}})
        for s in r["spans"]:
            name = s["name"]
            args = dict(s["args"])
            label = name
            if name == "item":
                label = f"replica {args['replica']} layer {args['layer']} ({args['rows']} rows)"
            elif name == "layer":
                label = f"layer {args['layer']}"
            elif name == "step":
                label = f"step {args['step']}"
            start, end = _us(s["start_s"]), _us(s["end_s"])
            events.append({"name": label, "cat": _CATEGORY.get(name, "compute"), "ph": "X", "pid": rank, "tid": 0,
                           "ts": start, "dur": round(end - start, 3), "args": dict(args, phase=name)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"mode": report["mode"], "makespan_s": report["makespan_s"],
                          "topology": report["topology"], "bound": report.get("bound")}}


def write_trace(path: str, results: Dict[int, dict], report: dict) -> None:
    with open(path, "w") as f:
        json.dump(trace_events(results, report), f)
