"""cam-run's FFN ranks serve with the one ``cam.serve_ffn`` loop; its JSON report and timeline keep their shape.

The key sets below were recorded by running cam-run as it was before its own FFN loop went (its worker indexed the
results by position), with the same flags as here: each is what that run wrote, not a list typed from the code.
"""

import json
import os
import subprocess
import sys

import pytest

RUN_TIMEOUT_S = 300

REPORT = {"assign", "assignment", "batch_rows", "checkpoint", "cost_model", "devices", "ffn", "ffn_idle_fraction",
          "graph", "makespan_s", "mode", "model", "placement", "rebalances", "requests", "swiglu_limit",
          "throughput_tok_s", "tokens", "topology", "ttft_per_request_s", "ttft_s", "wall_s", "weights", "workload"}
REPORT_FFN = {"compute_s", "gmm_launches", "idle_fraction", "items", "rank", "recv_wait_s", "rows"}
# Added since that recording: "failovers" (elastic serving) and "loaded" (what the rank read of a --checkpoint).
FFN_RESULT = {"compute_s", "failovers", "gmm_launches", "idle_fraction", "items", "loaded", "loop_s", "lost_replicas",
              "placement_epoch", "rank", "recv_wait_s", "role", "rows", "spans", "startup"}
ITEM = {"end_s", "layer", "recv_done_s", "replica", "rows", "start_s"}
# FFN timeline lanes per run: a replayed or batched iteration has no send phase of its own.
LANES = {
    "graph": (["--graph"], {"compute", "idle", "item", "recv"}),
    "batch_items": (["--batch-items"], {"compute", "idle", "item", "recv"}),
    "colocated": (["--mode", "colocated"], {"compute", "idle", "item", "recv", "send"}),
    "keep_going": (["--keep-going"], {"compute", "idle", "item", "recv", "send"}),
}


@pytest.mark.parametrize("name", sorted(LANES))
def test_report_keys_and_timeline_lanes_are_those_of_the_old_loop(tmp_path, name):
    flags, lanes = LANES[name]
    keep = tmp_path / "keep"
    result = subprocess.run([sys.executable, "-m", "cam.run.cli", *flags, "--quiet", "--json",
                             str(tmp_path / "r.json"), "--keep", str(keep)], capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report) == REPORT
    assert report["ffn"] and all(set(f) == REPORT_FFN for f in report["ffn"])
    ffn = [r for r in (json.loads((keep / n).read_text()) for n in os.listdir(keep) if n.startswith("result-"))
           if r["role"] == "ffn"]
    assert ffn and all(set(r) == FFN_RESULT for r in ffn)
    assert all(set(item) == ITEM for r in ffn for item in r["items"]) and any(r["items"] for r in ffn)
    seen = {s["name"] for r in ffn for s in r["spans"]}
    # An idle span needs an idle receive, which timing decides; every other lane is always there.
    assert seen - {"idle"} == lanes - {"idle"} and seen <= lanes, seen
    # A replay launches no executor: the launch count is the eager loops' only.
    assert all((r["gmm_launches"] is None) == (name == "graph") for r in ffn)
    assert all(r["gmm_launches"] > 0 for r in ffn if name != "graph")
