"""Which checkpoint a rank loaded, from the checkpoint's files, so ranks of one world that loaded different
checkpoints of the same shape are refused by name before any round runs (docs/integrations.md §0,
"Which checkpoint each side loaded").

An identity is the model type and shape fields of ``config.json`` (:data:`cam.checkpoint_config.CONFIG_KEYS`) and,
for every routed expert tensor (``<...>.layers.<n>.mlp.experts.*``), its name, dtype, shape and a content hash
(BLAKE2b-128 of its bytes as stored). Hashing reads every expert byte once; the result is cached beside the
checkpoint (``.cam-identity.json``, or under ``$XDG_CACHE_HOME/cam/identity/`` when the directory is read-only), keyed
by each safetensors file's name, size and modification time, so a later rank reads one small JSON file. The cost is
one sequential read of the expert bytes per checkpoint version (disk speed; 4.5 ms cold and 0.2 ms cached for the
48 expert tensors of benchmarks/checkpoint_startup.py's tiny DeepSeek-V3).

What the handshake carries (:func:`published`) is the summary: model type, shape, one digest per MoE layer's experts
and one over all. :func:`check_same` compares the ranks' summaries and raises :class:`CheckpointMismatchError`
naming the field and the ranks on each side; :func:`compare` names the first differing tensor of two full
identities; :func:`check_loaded` compares the tensors an FFN rank loaded with the identity's hashes. Pure Python
(only :func:`check_loaded` imports torch).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple

from . import checkpoint_config as ckpt
from .errors import InvalidArgumentError

__all__ = ["CheckpointMismatchError", "check_loaded", "check_same", "compare", "identity", "published", "read",
           "write"]

CACHE_NAME = ".cam-identity.json"
# Bumped when what an identity holds or how it is hashed changes: an older cache is recomputed, never trusted.
_VERSION = 1
_SHAPE_FIELDS = ("hidden", "num_layers", "experts", "top_k", "moe_intermediate", "vocab_size")
_CHUNK = 1 << 22


class CheckpointMismatchError(InvalidArgumentError):
    """Ranks of one world loaded different checkpoints; the message names the differing field and the ranks on
    each side with their values."""


def _header(path: str) -> Tuple[int, dict]:
    """(offset of the data, the safetensors JSON header) of one file, read without a tensor library."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ckpt.CheckpointConfigError(f"{path}: not a readable safetensors file (shorter than its header)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 << 20:
            raise ckpt.CheckpointConfigError(f"{path}: not a readable safetensors file (header of {n} bytes)")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ckpt.CheckpointConfigError(f"{path}: not a readable safetensors file ({e})") from None
    return 8 + n, header


def _hash_range(f, start: int, end: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    f.seek(start)
    left = end - start
    while left > 0:
        block = f.read(min(_CHUNK, left))
        if not block:
            raise ckpt.CheckpointConfigError(f"{f.name}: truncated (a tensor's bytes end past the file's end)")
        h.update(block)
        left -= len(block)
    return h.hexdigest()


def _file_key(path: str) -> list:
    st = os.stat(path)
    return [os.path.basename(path), st.st_size, st.st_mtime_ns]


def _cache_paths(directory: str) -> List[str]:
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:24]
    return [os.path.join(directory, CACHE_NAME), os.path.join(home, "cam", "identity", f"{tag}.json")]


def _read_cache(directory: str, files_key: list) -> Optional[dict]:
    for path in _cache_paths(directory):
        try:
            with open(path) as f:
                cached = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(cached, dict) and cached.get("version") == _VERSION and cached.get("files") == files_key:
            return cached["identity"]
    return None


def _write_cache(directory: str, files_key: list, ident: dict) -> None:
    body = json.dumps({"version": _VERSION, "files": files_key, "identity": ident})
    for path in _cache_paths(directory):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(body)
            os.replace(tmp, path)  # a concurrent rank reads the old file or the whole new one
            return
        except OSError:
            continue


def identity(directory: str) -> dict:
    """The full identity of a checkpoint directory: ``{"model_type", "shape": {field: int}, "tensors": {name:
    [dtype, shape, hash]}, "layers": {decoder layer id: digest}, "digest"}``, from the cache when its files are
    unchanged. CheckpointConfigError naming the file for what cannot be read."""
    who = f"checkpoint {directory!r}"
    config = ckpt.model_section(ckpt.read_config(directory, who=who))
    files = ckpt.safetensors_files(directory)
    files_key = [_file_key(p) for p in files]
    cached = _read_cache(directory, files_key)
    if cached is not None:
        return cached
    shape = {name: ckpt.config_int(config, name, who=f"{who}: config.json", required=False) for name in _SHAPE_FIELDS}
    tensors: Dict[str, list] = {}
    layer_of: Dict[str, int] = {}
    for path in files:
        base, header = _header(path)
        experts = [(name, meta) for name, meta in header.items()
                   if name != "__metadata__" and ckpt.LAYER_EXPERTS.match(name)]
        if not experts:
            continue
        with open(path, "rb") as f:
            for name, meta in sorted(experts, key=lambda kv: kv[1]["data_offsets"][0]):
                lo, hi = meta["data_offsets"]
                tensors[name] = [meta["dtype"], list(meta["shape"]), _hash_range(f, base + lo, base + hi)]
                layer_of[name] = int(ckpt.LAYER_EXPERTS.match(name).group(2))
    if not tensors:
        raise ckpt.CheckpointConfigError(f"{who}: no routed experts (<...>.layers.<n>.mlp.experts.*) in its "
                                         "safetensors files")
    layers: Dict[str, str] = {}
    for layer in sorted(set(layer_of.values())):
        names = sorted(n for n in tensors if layer_of[n] == layer)
        layers[str(layer)] = _digest([[n, *tensors[n]] for n in names])
    ident = {"model_type": config.get("model_type"), "shape": shape, "layers": layers, "tensors": tensors}
    ident["digest"] = _digest([ident["model_type"], shape, layers])
    _write_cache(directory, files_key, ident)
    return ident


def _digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


def published(directory: str) -> dict:
    """What a rank publishes in the handshake: its identity without the per-tensor table (a few hundred bytes for
    any model; the table stays in the cache beside the checkpoint, for :func:`compare`)."""
    full = identity(directory)
    return {k: v for k, v in full.items() if k != "tensors"}


def compare(a: dict, b: dict) -> List[Tuple[str, object, object]]:
    """The fields two identities differ in, as ``(field, a's value, b's value)``, the coarsest first: model type,
    shape fields, the MoE layers, then each layer's expert digest, then (full identities) each expert tensor's
    dtype, shape and content hash, by name. Empty when they are the same checkpoint."""
    out: List[Tuple[str, object, object]] = []
    if a.get("model_type") != b.get("model_type"):
        out.append(("model_type", a.get("model_type"), b.get("model_type")))
    sa, sb = a.get("shape") or {}, b.get("shape") or {}
    out += [(f"config.json {k}", sa.get(k), sb.get(k)) for k in _SHAPE_FIELDS if sa.get(k) != sb.get(k)]
    la, lb = a.get("layers") or {}, b.get("layers") or {}
    if sorted(la, key=int) != sorted(lb, key=int):
        out.append(("MoE layers", sorted(map(int, la)), sorted(map(int, lb))))
    out += [(f"experts of decoder layer {k}", la[k], lb[k]) for k in sorted(la, key=int) if k in lb and la[k] != lb[k]]
    ta, tb = a.get("tensors"), b.get("tensors")
    if ta is not None and tb is not None:
        for name in sorted(set(ta) | set(tb)):
            va, vb = ta.get(name), tb.get(name)
            if va is None or vb is None:
                out.append((f"tensor {name}", va and "present", vb and "present"))
                continue
            for i, what in enumerate(("dtype", "shape", "content hash")):
                if va[i] != vb[i]:
                    out.append((f"tensor {name} {what}", va[i], vb[i]))
    if not out and a.get("digest") != b.get("digest"):
        out.append(("digest", a.get("digest"), b.get("digest")))
    return out


def check_loaded(ident: dict, loaded: dict, who: str) -> int:
    """Compares the expert tensors a rank loaded (``{name: tensor}``, as read from the files) with the content
    hashes of the checkpoint's identity ``ident`` (:func:`identity`): the weights a rank serves are the ones the
    world agreed on in the handshake, not a file rewritten since its identity was cached. Returns the count checked;
    CheckpointMismatchError naming the tensor and both hashes."""
    import torch

    table = ident.get("tensors") or {}
    for name, t in loaded.items():
        want = table.get(name)
        got = hashlib.blake2b(t.contiguous().view(torch.uint8).numpy().tobytes(), digest_size=16).hexdigest()
        if want is None or want[2] != got:
            raise CheckpointMismatchError(f"{who}: loaded {name} with content hash {got}, the checkpoint's identity "
                                          f"has {None if want is None else want[2]!r} (rewritten since it was "
                                          f"hashed?)")
    return len(loaded)


def write(store, group: str, rank: int, published_identity: Optional[dict]) -> None:
    """Publishes rank ``rank``'s identity (:func:`published`, or None) in the handshake's store."""
    store.set(f"{group}/checkpoint/{rank}", json.dumps(published_identity))


def read(store, group: str, world: int) -> List[Optional[dict]]:
    """Every rank's published identity, None for a rank that published none (never blocks on a missing key)."""
    keys = [f"{group}/checkpoint/{r}" for r in range(world)]
    return [json.loads(store.get(k).decode()) if store.check([k]) else None for k in keys]


def check_same(rank: int, identities: Sequence[Optional[dict]], attention_ranks: Optional[int] = None) -> None:
    """Raises :class:`CheckpointMismatchError` unless every rank that published an identity (``identities[r]``,
    None for a rank that gave none: the handshake then compares the others) published the same one. Every rank
    reads every rank's, so each reaches the same verdict: the ranks outside the group of rank ``min(published)``
    are named with each differing field and both sides' ranks and values; with ``attention_ranks`` (the topology's
    A) each rank is named with its role."""
    groups: Dict[str, List[int]] = {}
    for r, ident in enumerate(identities):
        if ident is not None:
            groups.setdefault(ident.get("digest"), []).append(r)
    if len(groups) <= 1:
        return

    def names(ranks):
        return ", ".join(str(r) if attention_ranks is None else
                         f"{r} ({'attention' if r < attention_ranks else 'ffn'})" for r in ranks)

    ref_ranks = min(groups.values(), key=lambda ranks: ranks[0])
    ref = identities[ref_ranks[0]]
    parts = []
    for ranks in groups.values():
        if ranks is ref_ranks:
            continue
        diffs = compare(identities[ranks[0]], ref)[:3]
        parts.append(f"rank(s) {names(ranks)} loaded another checkpoint than rank(s) {names(ref_ranks)}: " +
                     "; ".join(f"{field}: {mine!r} against {theirs!r}" for field, mine, theirs in diffs))
    raise CheckpointMismatchError(f"rank {rank}: checkpoint identity differs: " + " | ".join(parts))


if __name__ == "__main__":  # python -m cam.checkpoint_identity DIR [DIR2]: print one, or name how two differ
    import sys

    if len(sys.argv) == 2:
        print(json.dumps(published(sys.argv[1]), indent=1))
    elif len(sys.argv) == 3:
        diffs = compare(identity(sys.argv[1]), identity(sys.argv[2]))
        for field, a, b in diffs:
            print(f"{field}: {a!r} against {b!r}")
        sys.exit(1 if diffs else 0)
    else:
        sys.exit("usage: python -m cam.checkpoint_identity DIR [DIR2]")
