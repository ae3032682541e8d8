"""benchmarks/results/ is a shelf, not a notebook: every results file the tree cites exists, every recorded file
is named by a row of benchmarks/README.md, and no record is named after a past round of work."""

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CITE = re.compile(r"((?:benchmarks/)?(?:sim/)?)results/([A-Za-z0-9_.{},*\[\]-]+)")
SCANNED = ("*.md", "*.py", "*.cpp", "*.h", "*.txt", "*.toml")
# Citations in files owned elsewhere that still name records removed from the shelf; each is a one-line fix in that
# file (point it at results/twin-speed.md or drop the citation). Listed so the shelf's rule holds everywhere else.
KNOWN_STALE = set()  # (file, cited name) pairs allowed to cite a missing record: none


def _expand(pattern: str):
    """`a{b,c}.json` -> a-b / a-c names; `[x]` optional parts; `*` globs."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m:
        for alt in m.group(1).split(","):
            yield from _expand(pattern[:m.start()] + alt + pattern[m.end():])
        return
    m = re.search(r"\[([^\[\]]*)\]", pattern)
    if m:
        yield from _expand(pattern[:m.start()] + pattern[m.end():])
        yield from _expand(pattern[:m.start()] + m.group(1) + pattern[m.end():])
        return
    yield pattern.rstrip(".,;:)`")


def _tracked_files():
    """The tree's own text files: build trees, virtual environments and the records themselves pruned."""
    me = pathlib.Path(__file__).resolve()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv", "build", "results", "__pycache__", ".acl-headers")
                   and not d.startswith(".")]
        for name in files:
            path = pathlib.Path(folder) / name
            if any(path.match(g) for g in SCANNED) and path != me:
                yield path.relative_to(ROOT).as_posix(), path


def test_every_cited_results_file_exists():
    missing = []
    for rel, path in _tracked_files():
        for m in CITE.finditer(path.read_text(errors="replace")):
            prefix, cited = m.groups()
            while cited.count("]") > cited.count("["):  # `[--out results/x.json]` in a usage line
                cited = cited[:cited.rindex("]")]
            if prefix.startswith("benchmarks/"):
                base = ROOT / prefix / "results"
            else:  # relative to the citing file's folder when it has results/ of its own (benchmarks/sim/README.md)
                base = path.parent / prefix / "results" if (path.parent / prefix / "results").is_dir() else RESULTS
            for name in _expand(cited):
                if not name or (rel, name) in KNOWN_STALE:
                    continue
                if not (list(base.glob(name)) if "*" in name else (base / name).exists()):
                    missing.append(f"{rel}: {m.group(0)} -> {name}")
    assert not missing, "cited results files that do not exist:\n" + "\n".join(missing)


def test_every_record_has_a_readme_row_and_no_round_label():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    named = {n for m in CITE.finditer(readme) for n in _expand(m.group(2))}
    for path in RESULTS.iterdir():
        assert any(path.match(n) for n in named), f"{path.name} has no row in benchmarks/README.md"
        assert not re.search(r"(before|after|-s\d|run\d|plane\d|suite\d|session|quiet-)", path.name), path.name


# One current record per benchmark, a figure beside it where the README shows one.
MAX_RECORDS = 30


def test_the_shelf_holds_at_most_30_records():
    records = sorted(p.name for p in RESULTS.iterdir())
    assert len(records) <= MAX_RECORDS, f"{len(records)} records on the shelf: {records}"


def test_e2e_benchmark_creates_its_figures_directory(tmp_path):
    """benchmarks/e2e_async_vs_sync.py --figures DIR makes DIR before the first cam-run draws its timeline there (a
    stand-in for cam-run checks the directory exists, writes the report and the figure); each mode's first report
    is kept in the summary."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("e2e_async_vs_sync", ROOT / "benchmarks" / "e2e_async_vs_sync.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    figures = tmp_path / "figs" / "deeper"
    runs = []

    def cam_run(argv, **kw):
        mode = argv[argv.index("--mode") + 1]
        report = {"mode": mode, "makespan_s": 1.0 + len(runs), "ttft_s": {"mean": 0.5, "p90": 0.9},
                  "ffn_idle_fraction": 0.1}
        pathlib.Path(argv[argv.index("--json") + 1]).write_text(json.dumps(report))
        if "--timeline" in argv:
            png = argv[argv.index("--timeline") + 1]
            assert os.path.isdir(os.path.dirname(png)), f"{png}: its directory does not exist"
            pathlib.Path(png).write_bytes(b"png")
        runs.append(mode)

    out = tmp_path / "s.json"
    assert bench.main(["--repeats", "2", "--figures", str(figures), "--out", str(out)], run=cam_run) == 0
    assert sorted(os.listdir(figures)) == ["e2e-imbalanced-async.png", "e2e-imbalanced-sync.png"]
    assert runs == ["async", "sync"] * 2
    first = json.loads(out.read_text())["first_repeat_reports"]
    assert first["async"]["makespan_s"] == 1.0 and first["sync"]["makespan_s"] == 2.0
