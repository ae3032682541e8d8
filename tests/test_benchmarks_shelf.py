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
