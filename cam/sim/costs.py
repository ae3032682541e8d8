"""Per-op costs as functions of shape.

Every op's time is one formula over the quantities the simulator computes for that call (``Work``):

    seconds = fixed_s + (nonempty_s if tokens or rows else 0) + per_token_s * tokens + per_row_s * rows
              + per_len2_s * sum(len^2) + max(flop / (tflops * 1e12), byte / (gbps * 1e9)) + net_byte / (net_gbps * 1e9)

so a cost file is a table of coefficients per op (absent = 0; a rate of 0 or absent = that term is free). Twin
calibration (``cam.sim.calibrate``) fits the fixed / per-token / per-row terms; a device file (``devices/*.json``)
gives rates (compute roofline against memory, plus link bandwidth) and per-launch latencies.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, NamedTuple

# Attention side (per participant, per micro-batch, per layer) and FFN side (per work item), plus the sync barrier,
# the delay an idle FFN rank takes to notice a published round, and the colocated mode's all-to-all collective
# (fixed_s its latency, net_gbps the per-device link rate, net_byte the most one device sends or receives in it),
# and the tensor-parallel collectives inside an Attention replica of P > 1 ranks (docs/sim.md §11; net_byte the
# bytes one rank sends in the ring).
OPS = ("attention", "dense_mlp", "shared", "dispatch_send", "combine_recv",
       "dispatch_recv", "w1", "w2", "combine_send", "ffn_wake", "barrier", "all_to_all", "tp_all_reduce")

# Cited figures for ops a shipped device file does not give (the file's own entry wins). A3: a TP collective inside
# one node runs over HCCS; the per-rank bandwidth DeepEP-Ascend achieves there intranode (EP8 normal mode, the
# lower of its 146 GB/s dispatch and 125 GB/s combine; sgl-project/sgl-kernel-npu README, "DeepEP-Ascend
# Performance") stands in for the ring's per-rank rate; no latency is published for it, so none is charged.
# The A3 file fitted at the afd-a3 study's shape (benchmarks/fit_sim_devices.py) is the same die: the same figure.
CITED_DEFAULTS = {name: {"tp_all_reduce": {"net_gbps": 125.0}} for name in ("ascend-a3-like", "ascend-a3-like-v4-flash")}
TERMS = ("fixed_s", "nonempty_s", "per_token_s", "per_row_s", "per_len2_s", "tflops", "gbps", "net_gbps")


class Work(NamedTuple):
    tokens: float = 0.0
    rows: float = 0.0
    len2: float = 0.0
    flop: float = 0.0
    byte: float = 0.0
    net_byte: float = 0.0


@dataclasses.dataclass(frozen=True)
class OpCost:
    fixed_s: float = 0.0
    nonempty_s: float = 0.0
    per_token_s: float = 0.0
    per_row_s: float = 0.0
    per_len2_s: float = 0.0
    tflops: float = 0.0
    gbps: float = 0.0
    net_gbps: float = 0.0

    def __post_init__(self):
        for name in TERMS:
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v != v or v < 0:
                raise ValueError(f"cost term {name} must be a number >= 0, got {v!r}")

    def seconds(self, w: Work) -> float:
        t = self.fixed_s + self.per_token_s * w.tokens + self.per_row_s * w.rows + self.per_len2_s * w.len2
        if w.tokens or w.rows:
            t += self.nonempty_s
        compute = w.flop / (self.tflops * 1e12) if self.tflops else 0.0
        memory = w.byte / (self.gbps * 1e9) if self.gbps else 0.0
        t += max(compute, memory)
        if self.net_gbps:
            t += w.net_byte / (self.net_gbps * 1e9)
        return t


@dataclasses.dataclass(frozen=True)
class CostModel:
    ops: Dict[str, OpCost]
    name: str = ""
    meta: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        unknown = set(self.ops) - set(OPS)
        if unknown:
            raise ValueError(f"cost model {self.name!r}: unknown op(s) {sorted(unknown)}; ops are {OPS}")

    def op(self, name: str) -> OpCost:
        return self.ops.get(name, _FREE)

    def seconds(self, name: str, w: Work) -> float:
        return self.op(name).seconds(w)

    def to_dict(self) -> dict:
        return {"name": self.name, "meta": self.meta,
                "ops": {k: {t: v for t, v in dataclasses.asdict(c).items() if v} for k, c in sorted(self.ops.items())}}

    @staticmethod
    def from_dict(d: dict) -> "CostModel":
        if not isinstance(d, dict) or not isinstance(d.get("ops"), dict):
            raise ValueError("cost file: expected an object with an 'ops' table")
        ops = {}
        for name, terms in d["ops"].items():
            if not isinstance(terms, dict):
                raise ValueError(f"cost file: ops.{name} must be an object of terms")
            bad = set(terms) - set(TERMS)
            if bad:
                raise ValueError(f"cost file: ops.{name} has unknown term(s) {sorted(bad)}; terms are {TERMS}")
            try:
                ops[name] = OpCost(**{k: float(v) for k, v in terms.items()})
            except (TypeError, ValueError) as e:
                raise ValueError(f"cost file: ops.{name}: {e}") from None
        return CostModel(ops, name=str(d.get("name", "")), meta=dict(d.get("meta", {})))

    @staticmethod
    def load(path: str) -> "CostModel":
        cited = CITED_DEFAULTS.get(path, {}) if path in device_files() else {}
        if path in device_files():
            path = device_files()[path]
        with open(path) as f:
            model = CostModel.from_dict(json.load(f))
        missing = {k: OpCost(**v) for k, v in cited.items() if k not in model.ops}
        if missing:
            model = CostModel(dict(model.ops, **missing), name=model.name,
                              meta=dict(model.meta, cited_defaults={k: cited[k] for k in missing}))
        return model

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")


_FREE = OpCost()


def device_files() -> Dict[str, str]:
    """Example device cost files shipped with the package, by name (``ascend-a3-like``)."""
    here = os.path.join(os.path.dirname(__file__), "devices")
    return {f[:-5]: os.path.join(here, f) for f in sorted(os.listdir(here)) if f.endswith(".json")}
