"""The timing model (docs/twin.md, "Timing model"): micro-kernels whose time is known in closed form come out at that
answer (tests/twin/timing.cpp, each case a fresh process), a kernel whose flags serialise MTE2 and V is predicted
slower than the same kernel whose flags let them overlap, and a launch with timing off is not costed. The constants
table (kernels/twin/include/twin/timing_constants.h) is checked against the docs' table row by row; an assumption
states a range its value lies in, and a changed value without its docs row changed fails (shown on a mutated copy)."""

import os
import re
import subprocess

import pytest
from _twin_build import build_twin_program

CASES = ["mte2_512", "mte2_4k", "mte2_32k", "vector_loop", "cube_loop", "cube_loop_int4", "cube_path", "queue_depth1", "queue_pingpong",
         "syncall_join", "serialised_slower", "off_records_nothing", "poll_repeats_not_costed",
         "peer_copy_link", "own_copy_core", "l2_reread", "l2_lru_evicted", "l2_lru_near_reuse", "l2_lru_issue_order",
         "l2_lru_capacity", "l2_lru_per_stretch",
         "poll_waits_on_later_write", "ingress_shared",
         "variants_shared"]


@pytest.fixture(scope="module")
def timing_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin-timing") / "timing"), "timing.cpp",
                              include_root=True)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_timing_case(timing_binary, case):
    result = subprocess.run([timing_binary, case], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CAM_TWIN_PLATFORM="ascend910_93"))
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.slow
def test_perfetto_trace(timing_binary, tmp_path):
    path = tmp_path / "trace.json"
    result = subprocess.run([timing_binary, "trace", str(path)], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CAM_TWIN_PLATFORM="ascend910_93"))
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr
    import json
    trace = json.loads(path.read_text())  # what Perfetto parses
    assert "model prediction" in trace["otherData"]["label"]


_ROW = re.compile(r'\{"(\w+)",\s*([^,]+),\s*([^,]+),\s*([^,]+),\s*([^,]+),\s*"([^"]*)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}',
                  re.S)


def _number(text):
    return float(eval(text, {"__builtins__": {}}))  # literals such as 192.0 * 1024 * 1024


def header_rows(text):
    body = text.split("// ROWS: begin", 1)[1].split("// ROWS: end", 1)[0]
    rows = {}
    for m in _ROW.finditer(body):
        citation = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(7)))
        rows[m.group(1)] = (_number(m.group(2)), _number(m.group(3)), _number(m.group(4)), _number(m.group(5)),
                            m.group(6), citation)
    return rows


def docs_rows(text):
    body = text.split("<!-- timing constants: begin -->", 1)[1].split("<!-- timing constants: end -->", 1)[0]
    rows = {}
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        rows[name] = (float(cells[1]), float(cells[2]), float(cells[3]), float(cells[4]), cells[5], cells[6])
    return rows


def problems(header_text, docs_text):
    """Every disagreement between the constants file and the docs table, and every row that breaks the rules."""
    h, d = header_rows(header_text), docs_rows(docs_text)
    out = []
    if set(h) != set(d):
        out.append(f"rows differ: only in the header {sorted(set(h) - set(d))}, only in docs {sorted(set(d) - set(h))}")
    for name in sorted(set(h) & set(d)):
        if h[name] != d[name]:
            out.append(f"{name}: header {h[name]} != docs {d[name]}")
    for name, (a2, a3, lo, hi, _unit, citation) in h.items():
        if not citation.strip():
            out.append(f"{name}: no citation")
        if citation.startswith("assumption"):
            m = re.search(r"range \[([-+0-9.e]+), ([-+0-9.e]+)\]", citation)
            if m is None or (float(m.group(1)), float(m.group(2))) != (lo, hi):
                out.append(f"{name}: the assumption's citation does not state its range [{lo}, {hi}]")
            if not (lo <= a2 <= hi and lo <= a3 <= hi):
                out.append(f"{name}: value outside its stated range")
    return out


def _read(source_root, *parts):
    with open(os.path.join(source_root, *parts), encoding="utf-8") as f:
        return f.read()


def test_constants_match_docs(source_root):
    header = _read(source_root, "kernels", "twin", "include", "twin", "timing_constants.h")
    docs = _read(source_root, "docs", "twin.md")
    assert len(header_rows(header)) >= 20
    assert problems(header, docs) == []


def test_changed_constant_without_docs_fails(source_root):
    header = _read(source_root, "kernels", "twin", "include", "twin", "timing_constants.h")
    docs = _read(source_root, "docs", "twin.md")
    mutated = header.replace('{"mte2_bytes_per_cycle", 128, 128,', '{"mte2_bytes_per_cycle", 256, 256,', 1)
    assert mutated != header
    found = problems(mutated, docs)
    assert any("mte2_bytes_per_cycle" in p for p in found), found
    # An assumption moved outside its stated range fails even with the docs changed the same way.
    out_of_range = header.replace('{"mte_latency_cycles", 500, 500,', '{"mte_latency_cycles", 5000, 5000,', 1)
    docs_same = docs.replace("| `mte_latency_cycles` | 500 | 500 |", "| `mte_latency_cycles` | 5000 | 5000 |")
    assert any("outside its stated range" in p for p in problems(out_of_range, docs_same))
