"""cam's import graph, read from the sources (module-level and function-local imports alike, through ast): no
cycle, no upward import between the layers tools -> serve -> library -> runtime, and no private name (``_x``)
imported from another module. The layer of every cam module is the table below (docs/architecture.md repeats it)."""

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

RUNTIME, LIBRARY, SERVE, TOOLS = range(4)
# Prefix -> layer; the longest prefix that matches a module wins. `cam` itself (the package's lazy facade) is what
# tools import; everything not named here is the library (ops, Comm, Topology, weights, convert, models, goldens).
LAYERS = {
    "cam": TOOLS,
    "cam._C": RUNTIME, "cam._capture": RUNTIME, "cam._npu": RUNTIME, "cam._proc": RUNTIME, "cam._runtime": RUNTIME,
    "cam._tensor": RUNTIME, "cam.errors": RUNTIME,
    "cam.ops": LIBRARY, "cam.comm": LIBRARY, "cam.graph": LIBRARY, "cam.topology": LIBRARY, "cam.placement": LIBRARY,
    "cam.work_item": LIBRARY, "cam.layer_weights": LIBRARY, "cam.ffn_weights": LIBRARY, "cam.w4a8": LIBRARY,
    "cam.convert": LIBRARY, "cam.models": LIBRARY, "cam.reference": LIBRARY,
    "cam.serve": SERVE, "cam.connector": SERVE, "cam.integrations": SERVE,
    "cam.ffn_server": TOOLS, "cam.run": TOOLS, "cam.sim": TOOLS, "cam.bench": TOOLS, "cam.qualify": TOOLS,
    "cam.__main__": TOOLS,
}
# cam/reference/ is frozen (its goldens are written apart from the code they check and change only under their own
# review): its modules share private helpers among themselves.
FROZEN = ("cam.reference.",)
# Violations in files another change owns, named until it lands (each must still be one, so the list only shrinks).
PENDING: set = set()


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    return LIBRARY if best is None or (best == "cam" and module != "cam") else LAYERS[best]


def modules(root=ROOT):
    out = {}
    for path in (root / "cam").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def imports(root=ROOT):
    """(importer, imported module, name or None, line) for every import of a cam module, at any depth."""
    mods = modules(root)
    known = set(mods) | {"cam._C"}
    edges = []
    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges += [(mod, a.name, None, node.lineno) for a in node.names
                          if a.name == "cam" or a.name.startswith("cam.")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target != "cam" and not target.startswith("cam."):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    edges.append((mod, sub, None, node.lineno) if sub in known else
                                 (mod, target, a.name, node.lineno))
    return edges


def cycles(edges):
    graph = collections.defaultdict(set)
    for src, dst, _, _ in edges:
        if src != dst:
            graph[src].add(dst)
    found, state = [], {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def violations(edges):
    up = [f"{s}:{line} imports {d} ({['runtime', 'library', 'serve', 'tools'][layer(d)]}) from "
          f"{['runtime', 'library', 'serve', 'tools'][layer(s)]}" for s, d, _, line in edges if layer(d) > layer(s)]
    private = {(s, d, n) for s, d, n, _ in edges
               if n is not None and n.startswith("_") and s != d and not s.startswith(FROZEN)}
    return up, private


def test_cam_imports_have_no_cycle():
    assert cycles(imports()) == []


def test_cam_imports_only_go_down_the_layers():
    assert violations(imports())[0] == []


def test_no_private_name_is_imported_across_modules():
    _, private = violations(imports())
    assert private - PENDING == set()
    assert PENDING <= private, "a pending violation was fixed: drop it from PENDING"


def test_the_walk_sees_function_local_imports_and_every_kind_of_violation(tmp_path):
    """The control: a tree with a function-local cycle, an upward import and a private import is caught."""
    pkg = tmp_path / "cam"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("def f():\n    from ..run import cli\n")
    (pkg / "run").mkdir()
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "cli.py").write_text("def g():\n    from ..ops import f\n    from ..topology import _hidden\n")
    (pkg / "topology.py").write_text("_hidden = 1\n")
    edges = imports(tmp_path)
    assert cycles(edges) == [["cam.ops", "cam.run.cli", "cam.ops"]]
    up, private = violations(edges)
    assert up == ["cam.ops:2 imports cam.run.cli (tools) from library"]
    assert private == {("cam.run.cli", "cam.topology", "_hidden")}
