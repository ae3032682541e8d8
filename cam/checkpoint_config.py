"""What a transformers checkpoint directory says about its shape, read without loading a weight: ``config.json``
(or the ``text_config`` section a multimodal wrapper nests its language model's settings in), read through one
table of config keys (:data:`CONFIG_KEYS`), and the decoder layers with routed experts, from the safetensors
headers. :meth:`cam.Topology.from_checkpoint`, :mod:`cam.convert`, ``cam-run --checkpoint`` and the vLLM plugin all
read a checkpoint's shape here.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Dict, Iterable, List

__all__ = ["CONFIG_KEYS", "LAYER_EXPERTS", "CheckpointConfigError", "config_int", "expert_prefixes", "model_section",
           "moe_layers", "read_config", "safetensors_files", "safetensors_keys"]


class CheckpointConfigError(ValueError):
    """A checkpoint directory whose ``config.json`` or safetensors files cannot give its shape; the message names
    the file and the key or tensor."""


# The one table of config keys: a shape field -> the keys families spell it with, tried in this order (the first
# present wins; another present key that disagrees is refused). The routed experts' count: DeepSeek's
# n_routed_experts, Mixtral's (and transformers 5's Qwen) num_local_experts, Qwen's num_experts.
CONFIG_KEYS = {
    "experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "top_k": ("num_experts_per_tok",),
    "hidden": ("hidden_size",),
    "moe_intermediate": ("moe_intermediate_size",),
    "vocab_size": ("vocab_size",),
    "num_layers": ("num_hidden_layers",),
}


def model_section(config: dict) -> dict:
    """The part of a ``config.json`` that holds the language model's settings: the file itself, or its
    ``text_config`` when the file names none of the routed experts' keys and nests them there."""
    keys = CONFIG_KEYS["experts"] + CONFIG_KEYS["top_k"]
    if not any(k in config for k in keys) and isinstance(config.get("text_config"), dict):
        return config["text_config"]
    return config


def config_int(config: dict, field: str, *, who: str, required: bool = True):
    """The positive int ``config`` (a :func:`model_section`) gives for ``field`` (a key of :data:`CONFIG_KEYS`), or
    None when no key names it and ``required`` is false. Refuses, naming ``who`` and the key: no key of the table
    present, a value that is not a positive int (a string is said to be one), two keys that disagree."""
    names = CONFIG_KEYS[field]
    found = [(k, config[k]) for k in names if k in config]
    if not found:
        if not required:
            return None
        raise CheckpointConfigError(f"{who}: no {' / '.join(names)} (the {field} of {_what(field)}), neither at the "
                                    "top level nor under text_config")
    for key, value in found:
        if isinstance(value, str):
            raise CheckpointConfigError(f"{who}: {key} is the string {value!r}, not an int")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointConfigError(f"{who}: {key} = {value!r} is not a positive int")
    key, value = found[0]
    for other, v in found[1:]:
        if v != value:
            raise CheckpointConfigError(f"{who}: {key} = {value} and {other} = {v} disagree")
    return value


def _what(field: str) -> str:
    return {"experts": "routed experts", "top_k": "experts per token", "hidden": "hidden size",
            "moe_intermediate": "experts' intermediate size", "vocab_size": "vocabulary",
            "num_layers": "decoder layers"}[field]


def read_config(directory: str, *, who: str) -> dict:
    """``config.json`` of ``directory`` as a dict; CheckpointConfigError naming the file when it cannot be read,
    is not JSON, or is not a JSON object."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except OSError as e:
        raise CheckpointConfigError(f"{who}: cannot read {path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointConfigError(f"{who}: {path} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise CheckpointConfigError(f"{who}: {path} holds a JSON {type(config).__name__}, not an object of "
                                    "settings")
    return config


# ``mlp``: transformers' names; ``ffn``: DeepSeek's own, which transformers writes back for DeepSeek-V4.
LAYER_EXPERTS = re.compile(r"(.*\.layers\.(\d+)\.(?:mlp|ffn)\.experts\.)")


def safetensors_files(directory: str) -> List[str]:
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not files:
        raise CheckpointConfigError(f"cam.convert: no *.safetensors in {directory}")
    return files


def expert_prefixes(keys: Iterable[str], directory: str) -> Dict[int, str]:
    """``{decoder layer id: "<...>.layers.<n>.mlp.experts."}`` (or ``.ffn.experts.``) of every layer with routed
    experts."""
    prefixes = {}
    for key in keys:
        m = LAYER_EXPERTS.match(key)
        if m:
            prefixes[int(m.group(2))] = m.group(1)
    if not prefixes:
        raise CheckpointConfigError(f"cam.convert: no routed experts (<...>.layers.<n>.mlp.experts.*) in "
                                    f"{directory}")
    return prefixes


def safetensors_keys(name: str) -> List[str]:
    """The tensor names of one safetensors file, from its header; CheckpointConfigError naming the file when the
    header cannot be read (a truncated or garbage file)."""
    from safetensors import safe_open

    try:
        with safe_open(name, framework="pt") as f:
            return list(f.keys())
    except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError (and OSError) on bad bytes
        raise CheckpointConfigError(f"{name}: not a readable safetensors file ({type(e).__name__}: {e})") from None


def moe_layers(directory: str) -> List[int]:
    """The decoder layer ids with routed experts in a checkpoint directory, in order (MoE layer ``j`` is the
    ``j``-th), read from the safetensors headers without loading a weight."""
    keys: List[str] = []
    for name in safetensors_files(directory):
        keys.extend(safetensors_keys(name))
    return sorted(expert_prefixes(keys, directory))
