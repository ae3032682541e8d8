"""The pipe-ordering model reads one table of documented automatic syncs (kernels/twin/src/pipes.cpp, kAutoSync); the
same rows, each with its source, are docs/twin.md's "Pipe ordering" table. This test keeps the two identical, so the
model never relies on a sync the doc does not state (and the doc never states one the model ignores). The model's
rules themselves are run by tests/test_twin_enforcement.py (pipe_* cases and their good_ controls)."""

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent

ROW = re.compile(r"\{Pipe::(\w+), Pipe::(\w+), SyncBy::(\w+), Space::(\w+), TPosition::(\w+)\}")


def code_rows():
    text = (ROOT / "kernels" / "twin" / "src" / "pipes.cpp").read_text()
    table = text[text.index("const AutoSyncRow kAutoSync[]"):text.index("const int kAutoSyncRows")]
    return [m.groups() for m in ROW.finditer(table)]


def doc_rows():
    text = (ROOT / "docs" / "twin.md").read_text()
    start = text.index("<!-- auto-sync table: begin -->")
    end = text.index("<!-- auto-sync table: end -->")
    rows = []
    for line in text[start:end].splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] in ("pipe a", "") or set(cells[0]) <= set("-: "):
            continue
        assert cells[5], f"row without a source: {line}"
        rows.append(tuple(cells[:5]))
    return rows


def test_doc_table_is_the_models_table():
    code, doc = code_rows(), doc_rows()
    assert code, "no rows parsed from pipes.cpp"
    assert doc == code, f"docs/twin.md {doc} != kernels/twin/src/pipes.cpp {code}"


def test_compiler_rows_cover_only_the_scalar_unit_on_ub():
    # bisheng's --cce-auto-sync orders the scalar unit against MTE2, MTE3 and V for LocalTensor dependencies only;
    # MTE2 <-> MTE3 and every GM dependency are the kernel's own (the BiSheng compiler guide, "Automatic
    # Synchronization").
    for a, b, by, space, _ in code_rows():
        if by == "Compiler":
            assert space == "UB" and "S" in (a, b), (a, b)
    assert not [r for r in code_rows() if {r[0], r[1]} == {"MTE2", "MTE3"}]


def test_only_the_cost_benchmark_turns_the_model_off():
    # The model is on in every test and benchmark. Its cost is measured by benchmarks/twin_speed.py --pipe-model-ab
    # against runs with CAM_TWIN_PIPE_MODEL_BENCH_OFF=1 (read by pipes.cpp at each block's start); no other file in
    # the tree may name the switch, so no test, CI stage or library path can run without the model.
    name = "CAM_TWIN_PIPE_MODEL_BENCH_OFF"
    allowed = {"kernels/twin/src/pipes.cpp", "benchmarks/twin_speed.py", "benchmarks/README.md", "docs/twin.md",
               "tests/test_twin_pipes.py"}
    skip = {".git", ".venv", "build", "__pycache__", ".acl-headers", "results"}
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and (d == ".ci" or not d.startswith("."))]
        for f in files:
            path = pathlib.Path(folder) / f
            try:
                if name in path.read_text(errors="strict"):
                    found.add(path.relative_to(ROOT).as_posix())
            except (UnicodeDecodeError, OSError):
                continue
    assert "kernels/twin/src/pipes.cpp" in found, "the switch is no longer read where this test expects it"
    assert found <= allowed, f"files naming {name} besides the cost benchmark: {sorted(found - allowed)}"
