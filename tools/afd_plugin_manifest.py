"""The vLLM AFD plugin's connector contract as cam's adapter targets it: names and signatures only, read from a plugin
checkout with Python's ``ast`` (the plugin is never imported: it needs vLLM and torch_npu), each fact with its
``path:line`` at the pinned commit.

    python tools/afd_plugin_manifest.py CHECKOUT [--sha SHA] [--out tools/afd_plugin_manifest.json] [--check]

``--check`` compares with the file at ``--out`` instead of writing it and exits 1 on a difference (the CI drift
stage, docs/integrations.md). ``--sha`` defaults to the checkout's ``git rev-parse HEAD``.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import subprocess
import sys

REPOSITORY = "vllm-project/afd-plugin"
PINNED_SHA = "2e4378f2d478313992e9a1b850c61b1e888a1145"

BASE = "afd_plugin/connectors/base.py"
METADATA = "afd_plugin/connectors/metadata.py"
FACTORY = "afd_plugin/connectors/factory.py"
ASYNC_CAM = "afd_plugin/connectors/npu/async_cam.py"
VALIDATION = "afd_plugin/compat/npu/feature_validation.py"
CONFIG = "afd_plugin/config.py"
FFN_RUNNER = "afd_plugin/v1/worker/npu/ffn_model_runner.py"
ATTN_RUNNER = "afd_plugin/v1/worker/npu/attention_model_runner.py"
ATTN_FORWARD = "afd_plugin/model_executor/models/npu/deepseek_v2_async_cam_forward.py"
PATHS = (BASE, METADATA, FACTORY, ASYNC_CAM, VALIDATION, CONFIG, FFN_RUNNER, ATTN_RUNNER, ATTN_FORWARD)

# The types whose field names the adapter's payloads carry.
METADATA_TYPES = ("AFDTransferMetadata", "AFDTransferContext", "AFDA2FTransferPayload", "AFDF2ATransferPayload",
                  "AFDForwardContextMetadata")
ASYNC_TYPES = ("AFDAsyncFFNWorkItem", "AFDAsyncTransferState")
# The async CAM connector's members beyond the base class that the runners call.
ASYNC_METHODS = ("select_experts", "recv_ffn_work_item", "send_ffn_work_item_output")
# Receivers whose calls make up a runner's call sequence.
CONNECTOR_NAMES = ("connector", "afd_connector", "self.connector")
MODEL_NAMES = ("self.model",)


class ManifestError(ValueError):
    pass


def _at(path: str, node: ast.AST) -> str:
    return f"{path}:{node.lineno}"


def _src(node) -> str | None:
    return None if node is None else ast.unparse(node)


class Source:
    def __init__(self, checkout: pathlib.Path, path: str):
        file = checkout / path
        if not file.is_file():
            raise ManifestError(f"checkout {checkout}: {path} is missing (the contract reads {', '.join(PATHS)})")
        self.path = path
        self.tree = ast.parse(file.read_text(), filename=path)

    def cls(self, name: str) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise ManifestError(f"{self.path}: no class {name}")

    def function(self, name: str, within: ast.AST | None = None) -> ast.FunctionDef:
        for node in ast.walk(within or self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        raise ManifestError(f"{self.path}: no function {name}")

    def constants(self) -> dict:
        """Module-level ``NAME = literal`` (annotated or not), for resolving names used as values."""
        out = {}
        for node in self.tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            if target is None:
                continue
            try:
                out[target] = ast.literal_eval(value)
            except ValueError:
                continue
        return out


def _params(path: str, fn: ast.FunctionDef) -> list:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append({"name": arg.arg, "kind": kind, "default": _src(default), "annotation": _src(arg.annotation)})
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "default": None,
                    "annotation": _src(a.vararg.annotation)})
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": _src(default),
                    "annotation": _src(arg.annotation)})
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "default": None,
                    "annotation": _src(a.kwarg.annotation)})
    return out


def _decorators(fn: ast.FunctionDef) -> list:
    return sorted(_src(d) for d in fn.decorator_list)


def _method(path: str, fn: ast.FunctionDef) -> dict:
    return {"at": _at(path, fn), "decorators": _decorators(fn), "params": _params(path, fn),
            "returns": _src(fn.returns)}


def _class_attributes(path: str, cls: ast.ClassDef) -> dict:
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = {"at": _at(path, node), "annotation": _src(node.annotation),
                                   "default": _src(node.value)}
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = {"at": _at(path, node), "annotation": None, "default": _src(node.value)}
    return out


def _methods(path: str, cls: ast.ClassDef, names=None) -> dict:
    out = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (names is None or node.name in names):
            out[node.name] = _method(path, node)
    if names is not None:
        missing = sorted(set(names) - set(out))
        if missing:
            raise ManifestError(f"{path}: class {cls.name} has no method(s) {missing}")
    return out


def _fields(path: str, cls: ast.ClassDef) -> list:
    """A dataclass's fields in order (annotated class-level names, ClassVar excluded)."""
    return [{"name": n.target.id, "at": _at(path, n), "annotation": _src(n.annotation), "default": _src(n.value)}
            for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            and not _src(n.annotation).startswith("ClassVar")]


def _base_class(src: Source) -> dict:
    cls = src.cls("AFDConnectorBase")
    return {"name": cls.name, "at": _at(src.path, cls), "bases": [_src(b) for b in cls.bases],
            "attributes": _class_attributes(src.path, cls), "methods": _methods(src.path, cls),
            "abstract": sorted(n.name for n in cls.body if isinstance(n, ast.FunctionDef)
                               and any(_src(d).endswith("abstractmethod") for d in n.decorator_list))}


def _extra_config(src: Source, validation: Source) -> dict:
    """Accepted ``connector_extra_config`` keys: the set of accepted names, and per key the typed field it sets
    (the coercion helper names its type), its default, and the values the feature validation allows."""
    consts = src.constants()
    accepted = None
    for node in src.tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "_AFD_ASYNC_EXTRA_CONFIG_FIELDS":
            accepted = sorted(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                              and isinstance(c.value, str))
            accepted_at = _at(src.path, node)
    if accepted is None:
        raise ManifestError(f"{src.path}: no _AFD_ASYNC_EXTRA_CONFIG_FIELDS")
    info = src.cls("AFDAsyncExtraInfo")
    parse = src.function("from_mapping", info)
    keys = {}
    for call in ast.walk(parse):
        if not (isinstance(call, ast.Call) and _src(call.func) == "cls"):
            continue
        for kw in call.keywords:
            coerce = kw.value
            if not isinstance(coerce, ast.Call) or not coerce.args:
                continue
            get = coerce.args[0]
            if not (isinstance(get, ast.Call) and _src(get.func).endswith(".get") and get.args):
                continue
            key = ast.literal_eval(get.args[0])
            default = get.args[1] if len(get.args) > 1 else None
            default = consts.get(default.id, _src(default)) if isinstance(default, ast.Name) else (
                ast.literal_eval(default) if default is not None else None)
            helper = _src(coerce.func)
            kind = next((t for t in ("bool", "int", "str", "float") if helper.endswith("_" + t)), None)
            keys[key] = {"field": kw.arg, "coerce": helper, "type": kind, "default": default,
                         "at": _at(src.path, kw.value), "allowed": None}
    missing = sorted(set(accepted) - set(keys))
    if missing:
        raise ManifestError(f"{src.path}: key(s) {missing} accepted but not parsed in from_mapping")
    by_field = {v["field"]: k for k, v in keys.items()}
    # Allowed values: `x not in (..)` / `x != v` checks in the feature validation, where x is extra_info.<field> or a
    # parameter passed as <param>=extra_info.<field>.
    aliases = {}
    for call in ast.walk(validation.tree):
        if isinstance(call, ast.Call):
            for kw in call.keywords:
                value = _src(kw.value)
                if kw.arg and value.startswith("extra_info."):
                    aliases[kw.arg] = value.split(".", 1)[1]
    vconsts = {**consts, **validation.constants()}
    for node in ast.walk(validation.tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.NotIn, ast.NotEq))):
            continue
        left = _src(node.left)
        field = left.split(".", 1)[1] if left.startswith("extra_info.") else aliases.get(left)
        if field not in by_field:
            continue
        right = node.comparators[0]
        if isinstance(right, ast.Name):
            value = vconsts.get(right.id, consts.get(right.id))
            if value is None:
                value = src.constants().get(right.id)
        else:
            value = ast.literal_eval(right)
        allowed = sorted(value) if isinstance(node.ops[0], ast.NotIn) else [value]
        keys[by_field[field]]["allowed"] = allowed
        keys[by_field[field]]["allowed_at"] = _at(validation.path, node)
    return {"accepted_at": accepted_at, "keys": dict(sorted(keys.items()))}


def _factory(src: Source, config: Source) -> dict:
    cls = src.cls("AFDConnectorFactory")
    registered = []
    for node in src.tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                _src(node.value.func).endswith("register_connector"):
            registered.append({"name": ast.literal_eval(node.value.args[0]),
                               "module": ast.literal_eval(node.value.args[1]),
                               "class": ast.literal_eval(node.value.args[2]), "at": _at(src.path, node)})
    consts = config.constants()
    supported = None
    for node in config.tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                node.target.id == "SUPPORTED_AFD_CONNECTORS":
            supported = {"at": _at(config.path, node),
                         "names": [consts.get(e.id, e.id) if isinstance(e, ast.Name) else ast.literal_eval(e)
                                   for e in node.value.elts]}
    return {"class": cls.name, "at": _at(src.path, cls), "methods": _methods(src.path, cls),
            "registered": registered, "supported_connectors": supported}


def _calls(path: str, fn: ast.FunctionDef, receivers) -> list:
    """The calls ``<receiver>.<method>(...)`` in ``fn`` in source order, with their keyword names."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                _src(node.func.value) in receivers:
            out.append({"call": f"{_src(node.func.value)}.{node.func.attr}", "at": _at(path, node),
                        "keywords": [k.arg for k in node.keywords if k.arg]})
    return sorted(out, key=lambda c: int(c["at"].rsplit(":", 1)[1]))


def _runners(ffn: Source, attn: Source, forward: Source) -> dict:
    driven = ffn.function("_ffn_forward_connector_driven")
    init = attn.function("__init__")
    return {
        "ffn_connector_driven": {"function": "_ffn_forward_connector_driven", "at": _at(ffn.path, driven),
                                 "per_moe_layer": _calls(ffn.path, driven, CONNECTOR_NAMES + MODEL_NAMES)},
        "attention_init": {"function": "__init__", "at": _at(attn.path, init),
                           "calls": [c for c in _calls(attn.path, init, ("self.connector", "AFDConnectorFactory"))]},
        "attention_moe_layer": {f: {"at": _at(forward.path, forward.function(f)),
                                    "calls": _calls(forward.path, forward.function(f), CONNECTOR_NAMES)}
                                for f in ("run_attention_gate_afd_forward", "run_async_moe_ubatch_afd_forward")},
    }


def build(checkout, sha: str) -> dict:
    checkout = pathlib.Path(checkout)
    src = {p: Source(checkout, p) for p in PATHS}
    meta, cam = src[METADATA], src[ASYNC_CAM]
    connector = cam.cls("CAMAsyncAFDConnector")
    return {
        "repository": REPOSITORY,
        "sha": sha,
        "paths": list(PATHS),
        "base_class": _base_class(src[BASE]),
        "metadata_types": {n: {"at": _at(meta.path, meta.cls(n)), "fields": _fields(meta.path, meta.cls(n))}
                           for n in METADATA_TYPES},
        "async_types": {n: {"at": _at(cam.path, cam.cls(n)), "fields": _fields(cam.path, cam.cls(n))}
                        for n in ASYNC_TYPES},
        "async_connector": {"class": connector.name, "at": _at(cam.path, connector),
                            "attributes": _class_attributes(cam.path, connector),
                            "methods": _methods(cam.path, connector, ASYNC_METHODS)},
        "connector_extra_config": _extra_config(cam, src[VALIDATION]),
        "factory": _factory(src[FACTORY], src[CONFIG]),
        "runners": _runners(src[FFN_RUNNER], src[ATTN_RUNNER], src[ATTN_FORWARD]),
    }


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="a directory holding the plugin's sources (afd_plugin/...)")
    parser.add_argument("--sha", help="the commit the checkout is at (default: git rev-parse HEAD there)")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).with_suffix(".json")))
    parser.add_argument("--check", action="store_true", help="compare with --out; exit 1 on a difference")
    args = parser.parse_args(argv)
    sha = args.sha
    if sha is None:
        sha = subprocess.run(["git", "-C", args.checkout, "rev-parse", "HEAD"], check=True, capture_output=True,
                             text=True, timeout=60).stdout.strip()
    text = dumps(build(args.checkout, sha))
    out = pathlib.Path(args.out)
    if args.check:
        old = out.read_text() if out.is_file() else ""
        if old != text:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(out),
                                                       "regenerated"))
            print(f"afd_plugin_manifest: {out} differs from the checkout at {sha}", file=sys.stderr)
            return 1
        print(f"afd_plugin_manifest: {out} matches the checkout at {sha}")
        return 0
    out.write_text(text)
    print(f"afd_plugin_manifest: wrote {out} ({sha})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
