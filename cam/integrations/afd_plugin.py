"""``cam.integrations.afd_plugin``: cam as the async connector of the vLLM AFD plugin (``vllm-project/afd-plugin``).

:class:`AFDPluginConnector` has the plugin's connector contract as ``tools/afd_plugin_manifest.json`` pins it (the
base class's attributes and abstract methods, the constructor ``(rank, local_rank, vllm_config, afd_config,
role_rank)``, ``parse_extra_config``, the FFN work-item methods the runner calls). It derives from the plugin's
``AFDConnectorBase`` when the plugin imports, else from :class:`StructuralBase` with the same members, so cam has no
install dependency on the plugin. The data plane is :class:`cam.connector.AsyncAFDConnector`, called, never
re-implemented; the plugin-side registration is docs/integrations.md's.

Topology: Attention-first world (Attention role rank ``i`` is world rank ``i``, FFN role rank ``j`` is ``A + j``),
``attn_ranks_per_dp`` is cam's P (participants per replica), ``max_num_batched_tokens`` cam's Bmax (tokens per
participant per layer), built with :meth:`cam.Topology.from_checkpoint` (a local model directory) or
:meth:`cam.Topology.from_config`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Optional

import torch

from .. import _npu, _runtime, ops
from ..comm import Comm
from ..connector import (AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig,
                         FFNWorkItem, ffn_work_item, loopback_store)
from ..convert import check_swiglu_limit
from ..layer_weights import LayerWeights
from ..ops.dispatch_recv import output_specs
from ..topology import Topology
from ..work_item import WorkItem

__all__ = ["AFDPluginConnector", "ExtraConfig", "FFNForwardMetadata", "FFNGraphLoop", "IDLE_POLICIES",
           "PluginWorkItem", "StructuralBase", "ffn_forward_metadata", "plugin_base"]

_KIND_WORD = WorkItem.WORDS["kind"]
_EMPTY = WorkItem.EMPTY

# The plugin's connector_extra_config keys at the pinned commit (tools/afd_plugin_manifest.json,
# "connector_extra_config"): key -> (field, type, default, allowed values or None).
EXTRA_KEYS = {
    "dynamicQuant": ("dynamic_quant", int, 0, (0, 1)),
    "attn_ranks_per_dp": ("attn_ranks_per_dp", int, 1, None),
    "async_moe_ubatching": ("async_moe_ubatching", bool, False, None),
    "async_moe_num_ubatches": ("async_moe_num_ubatches", int, 2, (2,)),
    "async_moe_split": ("async_moe_split", str, "request", ("request",)),
}

# How recv_ffn_work_item behaves while nothing is ready (docs/integrations.md, "vLLM AFD plugin"):
# "empty": one receive, an empty item after the plane's idle poll; "wait": receives until a real item or
# idle_wait_s, then the empty item; "real": receives until a real item, TimeoutError after idle_wait_s.
IDLE_POLICIES = ("empty", "wait", "real")


def plugin_base():
    """The plugin's ``AFDConnectorBase`` if the plugin imports, else None."""
    try:
        from afd_plugin.connectors.base import AFDConnectorBase
    except Exception:  # noqa: BLE001 - any failure to import the plugin (absent, or vLLM / torch_npu missing)
        return None
    return AFDConnectorBase


class StructuralBase:
    """The plugin base class's members (the manifest's ``base_class``) when the plugin is not installed: the same
    class attributes and constructor; the abstract methods are :class:`AFDPluginConnector`'s."""

    control_plane = None
    attn_size: int = 0
    ffn_size: int = 0

    def __init__(self, rank: int, local_rank: int, vllm_config, afd_config, role_rank: int) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.vllm_config = vllm_config
        self.afd_config = afd_config
        self.role_rank = role_rank
        self.extra_info = self.parse_extra_config(_extra_config_of(vllm_config))


def _extra_config_of(vllm_config) -> Mapping:
    """``additional_config["afd"]["connector_extra_config"]`` of a vLLM config (empty when absent)."""
    additional = getattr(vllm_config, "additional_config", None) or {}
    afd = additional.get("afd") or {}
    return afd.get("connector_extra_config") or {}


@dataclasses.dataclass(frozen=True)
class ExtraConfig:
    """The typed ``connector_extra_config`` (the plugin's keys, :data:`EXTRA_KEYS`)."""

    dynamic_quant: int = 0
    attn_ranks_per_dp: int = 1
    async_moe_ubatching: bool = False
    async_moe_num_ubatches: int = 2
    async_moe_split: str = "request"

    @classmethod
    def from_mapping(cls, raw: Optional[Mapping[str, Any]]) -> "ExtraConfig":
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise TypeError(f"connector_extra_config must be a mapping, got {type(raw).__name__}")
        unknown = sorted(str(k) for k in raw if k not in EXTRA_KEYS)
        if unknown:
            raise ValueError(f"connector_extra_config: unknown key(s) {unknown}; cam's AFD plugin connector accepts "
                             f"{sorted(EXTRA_KEYS)}")
        values = {}
        for key, (field, kind, default, allowed) in EXTRA_KEYS.items():
            value = raw.get(key, default)
            if kind is bool:
                if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                    value = value.lower() in ("true", "1")
                elif not isinstance(value, bool) and value not in (0, 1):
                    raise ValueError(f"connector_extra_config: {key} must be a bool, got {value!r}")
                value = bool(value)
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, (int, str)) or \
                        (isinstance(value, str) and not value.strip().lstrip("-").isdigit()):
                    raise ValueError(f"connector_extra_config: {key} must be an int, got {value!r}")
                value = int(value)
                if key == "attn_ranks_per_dp" and value < 1:
                    raise ValueError(f"connector_extra_config: attn_ranks_per_dp must be >= 1, got {value}")
            elif not isinstance(value, str):
                raise ValueError(f"connector_extra_config: {key} must be a string, got {value!r}")
            if allowed is not None and value not in allowed:
                raise ValueError(f"connector_extra_config: {key} must be one of {list(allowed)}, got {value!r}")
            values[field] = value
        return cls(**values)

    def to_mapping(self) -> dict:
        return {key: getattr(self, field) for key, (field, *_rest) in EXTRA_KEYS.items()}


@dataclasses.dataclass(frozen=True)
class FFNForwardMetadata:
    """The FFN runner's forward context at a fixed capacity, every field a device tensor (no host read).

    Attributes:
        hidden_states: ``[capacity, H]`` rows grouped by local expert (rows past ``num_tokens`` are not valid).
        dynamic_scales: ``[capacity]`` per-row scales.
        group_list: ``[R]`` int64 rows per local expert (the GMM's ``group_list``).
        layer_idx: int64 ``[1]`` the MoE layer (the GMM's ``layer_index``).
        num_tokens: int64 ``[1]`` the valid rows (the sum of ``group_list``).
        capacity: the static row count the forward is captured at (a host int the caller gave).
    """

    hidden_states: torch.Tensor
    dynamic_scales: torch.Tensor
    group_list: torch.Tensor
    layer_idx: torch.Tensor
    num_tokens: torch.Tensor
    capacity: int


@dataclasses.dataclass
class PluginWorkItem:
    """An FFN work item with the plugin's work-item field names (the manifest's ``AFDAsyncFFNWorkItem``). The
    counts stay on the device: ``layer_idx``, ``num_tokens`` and ``total_num_tokens`` are int64 ``[1]`` tensors,
    ``shared_num_tokens`` is 0 (shared experts run on Attention). ``item`` is cam's :class:`FFNWorkItem`."""

    hidden_states: torch.Tensor
    context: Any
    recv_output: Any
    layer_idx: torch.Tensor
    stage_idx: int
    num_tokens: torch.Tensor
    total_num_tokens: torch.Tensor
    shared_num_tokens: int
    item: FFNWorkItem


_Base = plugin_base() or StructuralBase


class AFDPluginConnector(_Base):
    """cam's connector for the plugin's factory (docs/integrations.md, "vLLM AFD plugin").

    Construction does no device work. cam-side settings the plugin's config has no key for (the transport, a
    shared store for an in-process world, timeouts, the number of MoE layers when the model is not a local
    directory, the idle policy) are class attributes set with :meth:`bind`, which returns a subclass the factory
    can register by name.
    """

    control_plane = None
    cam_options: dict = {}

    @classmethod
    def bind(cls, **options) -> type:
        """A subclass with these cam-side options: ``transport`` ("shm" | "in_process"), ``store`` (the store an
        in-process world shares), ``group``, ``timeout_s``, ``idle_poll_s``, ``idle`` (:data:`IDLE_POLICIES`),
        ``idle_wait_s``, ``moe_layers``, ``dtype``."""
        known = {"transport", "store", "group", "timeout_s", "idle_poll_s", "idle", "idle_wait_s", "moe_layers",
                 "dtype"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"AFDPluginConnector.bind: unknown option(s) {unknown}; known: {sorted(known)}")
        if options.get("idle", "empty") not in IDLE_POLICIES:
            raise ValueError(f"AFDPluginConnector.bind: idle must be one of {IDLE_POLICIES}, got {options['idle']!r}")
        return type(cls.__name__, (cls,), {"cam_options": {**cls.cam_options, **options}})

    @classmethod
    def parse_extra_config(cls, raw: Optional[Mapping[str, Any]]) -> ExtraConfig:
        return ExtraConfig.from_mapping(raw)

    def __init__(self, rank: int, local_rank: int, vllm_config, afd_config, role_rank: int) -> None:
        super().__init__(rank, local_rank, vllm_config, afd_config, role_rank)
        role = getattr(afd_config, "role", None)
        if role not in ("attention", "ffn"):
            raise ValueError(f"AFDPluginConnector: afd_config.role must be 'attention' or 'ffn', got {role!r}")
        A, F = int(afd_config.num_attention_ranks), int(afd_config.num_ffn_ranks)
        size = A if role == "attention" else F
        if not 0 <= role_rank < size:
            raise ValueError(f"AFDPluginConnector: role_rank {role_rank} outside the {role} ranks [0, {size})")
        extra = self.extra_info
        if extra.dynamic_quant != 1:
            # cam's FFN GMMs take int8 rows: the dispatch always quantizes per token (Topology.quantized).
            raise ValueError(f"AFDPluginConnector: connector_extra_config dynamicQuant must be 1 with cam (its FFN "
                             f"computes int8 activations quantized at dispatch), got {extra.dynamic_quant}")
        P = extra.attn_ranks_per_dp
        if A % P:
            raise ValueError(f"AFDPluginConnector: attn_ranks_per_dp {P} does not divide num_attention_ranks {A}")
        self.max_num_batched_tokens = int(vllm_config.scheduler_config.max_num_batched_tokens)
        # Rounds in flight per Attention rank: one per stage (each stage receives layer l before it sends l + 1).
        slots = extra.async_moe_num_ubatches if extra.async_moe_ubatching else 1
        self.topology = self._topology(vllm_config, D=A // P, P=P, F=F, Bmax=self.max_num_batched_tokens,
                                       slots=slots, quantized=True)
        self.world_rank = role_rank if role == "attention" else A + role_rank
        self.attn_size, self.ffn_size = A, F
        self.expert_per_rank = self.topology.R
        opts = self.cam_options
        self.idle = opts.get("idle", "empty")
        self.idle_wait_s = float(opts.get("idle_wait_s", 30.0))
        self._store = opts.get("store")
        self.cam_config = ConnectorConfig(
            self.topology, master_addr=str(afd_config.host), master_port=int(afd_config.port),
            dtype=opts.get("dtype", torch.bfloat16), timeout_s=float(opts.get("timeout_s", 300.0)),
            idle_poll_s=float(opts.get("idle_poll_s", 0.05)), group=opts.get("group", "afd_plugin"),
            transport=opts.get("transport", "shm"))
        self.cam = AsyncAFDConnector(self.world_rank, role, self.cam_config)

    def _topology(self, vllm_config, **dims) -> Topology:
        model = getattr(vllm_config.model_config, "model", None)
        if isinstance(model, str) and os.path.isfile(os.path.join(model, "config.json")):
            return Topology.from_checkpoint(model, **dims)
        hf = vllm_config.model_config.hf_config
        config = hf if isinstance(hf, dict) else hf.to_dict() if hasattr(hf, "to_dict") else dict(vars(hf))
        layers = self.cam_options.get("moe_layers")
        if layers is None:
            raise ValueError("AFDPluginConnector: the model is not a local checkpoint directory; bind(moe_layers=...) "
                             "names its MoE layers (a count or the decoder layer ids)")
        return Topology.from_config(config, moe_layers=layers, who="vllm_config.model_config.hf_config", **dims)

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_initialized(self) -> bool:
        return self.cam.is_initialized

    def init_afd_connector(self) -> None:
        """Collective over the Attention-first world; refuses a world whose ranks disagree on
        ``max_num_batched_tokens`` (naming both values) before the plane is built. Idempotent."""
        if self.is_initialized:
            return
        cfg = self.cam_config
        store = self._store
        if store is None:
            if cfg.transport == "in_process":
                raise ValueError("AFDPluginConnector: an in_process world needs bind(store=...)")
            if self.world_rank == 0 and cfg.master_addr in ("127.0.0.1", "localhost"):
                store = loopback_store(cfg.master_port, cfg.timeout_s, self.topology.world_size)
            else:
                store = torch.distributed.TCPStore(cfg.master_addr, cfg.master_port, self.topology.world_size,
                                                   is_master=self.world_rank == 0,
                                                   timeout=timedelta(seconds=cfg.timeout_s), wait_for_workers=False)
        self._agree_on_batch_tokens(store)
        self.cam.init_afd_connector(store=store)

    def _agree_on_batch_tokens(self, store) -> None:
        key = f"{self.cam_config.group}/afd_plugin/max_num_batched_tokens/{{}}"
        role = self.cam.role
        store.set(key.format(self.world_rank), f"{role}:{self.max_num_batched_tokens}")
        deadline = time.monotonic() + self.cam_config.timeout_s
        seen = {}
        for r in range(self.topology.world_size):
            while not store.check([key.format(r)]):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"init_afd_connector: world rank {r} did not join within "
                                       f"{self.cam_config.timeout_s:g} s")
                time.sleep(0.005)
            seen[r] = store.get(key.format(r)).decode()
        for r, value in seen.items():
            other_role, tokens = value.split(":")
            if int(tokens) != self.max_num_batched_tokens:
                raise ValueError(f"init_afd_connector: max_num_batched_tokens differs between roles: {tokens} on "
                                 f"{other_role} world rank {r}, {self.max_num_batched_tokens} on {role} world rank "
                                 f"{self.world_rank} (both roles must set the same value)")

    def close(self) -> None:
        self.cam.close()

    # ------------------------------------------------------------------ Attention side

    def select_experts(self, *, router_logits: torch.Tensor, top_k: int, renormalize: bool = True, **kwargs):
        """fp32 softmax top-k routing: ``(topk_weights fp32 [B, K], topk_ids int32 [B, K])``. A routing this does not
        compute (grouped top-k, a score function other than softmax, a score-correction bias, a custom routing
        function) is refused by name rather than approximated: route such models in the model code."""
        unsupported = [name for name, on in (
            ("use_grouped_topk", bool(kwargs.get("use_grouped_topk"))),
            ("scoring_func", kwargs.get("scoring_func", "softmax") != "softmax"),
            ("e_score_correction_bias", kwargs.get("e_score_correction_bias") is not None),
            ("custom_routing_function", kwargs.get("custom_routing_function") is not None)) if on]
        if unsupported:
            raise ValueError(f"select_experts: {unsupported} not supported by cam's connector (softmax top-k only)")
        probs = torch.softmax(router_logits.float(), dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        if renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return weights, ids.to(torch.int32)

    def send_attn_output(self, hidden_states: torch.Tensor, context, **kwargs: Any) -> None:
        """Dispatches one MoE layer's rows; rows past ``context.metadata.seq_lens``'s sum are padding and carry
        expert id -1 (no expert computes them, their combined output is zero)."""
        if "topk_ids" not in kwargs or "topk_weights" not in kwargs:
            raise ValueError("send_attn_output: topk_ids and topk_weights are required keyword arguments")
        ids, weights = kwargs["topk_ids"], kwargs["topk_weights"]
        meta = context.metadata
        real = sum(meta.seq_lens) if meta.seq_lens else hidden_states.shape[0]
        if not 0 <= real <= hidden_states.shape[0]:
            raise ValueError(f"send_attn_output: seq_lens sum to {real} rows, hidden_states has "
                             f"{hidden_states.shape[0]}")
        ids = ids.to(torch.int32)
        if real < ids.shape[0]:
            ids = ids.clone()
            ids[real:] = -1
        cam_context = AFDTransferContext(AFDTransferMetadata(int(meta.layer_idx), int(meta.stage_idx)))
        self.cam.send_attn_output(hidden_states, cam_context, topk_ids=ids.contiguous(),
                                  topk_weights=weights.float().contiguous())

    def recv_ffn_output(self, ref_tensor: torch.Tensor, ubatch_idx: int = 0, **kwargs: Any) -> torch.Tensor:
        return self.cam.recv_ffn_output(ref_tensor, ubatch_idx)

    # ------------------------------------------------------------------ FFN side

    def recv_ffn_work_item(self, *, stage_idx: int, max_num_tokens: int) -> PluginWorkItem:
        """The next work item by the idle policy (:data:`IDLE_POLICIES`); no host read of its counts."""
        if stage_idx != 0:
            raise ValueError(f"recv_ffn_work_item: the FFN side receives stage 0 only, got stage_idx {stage_idx}")
        deadline = time.monotonic() + self.idle_wait_s
        while True:
            item = self.cam.recv_ffn_work_item(stage_idx, max_num_tokens)
            # The idle policies other than "empty" read the kind word: one host read per idle poll, none per item.
            if self.idle == "empty" or int(item.work_item[_KIND_WORD]) != _EMPTY:
                break
            if time.monotonic() >= deadline:
                if self.idle == "wait":
                    break
                raise TimeoutError(f"recv_ffn_work_item: no work item within idle_wait_s = {self.idle_wait_s:g} s "
                                   "(idle policy 'real')")
        num = item.group_list.sum().reshape(1)
        context = AFDTransferContext(AFDTransferMetadata(0, stage_idx), states=item)
        return PluginWorkItem(item.hidden_states, context, None, item.layer_index, stage_idx, num, num, 0, item)

    def send_ffn_work_item_output(self, work_item: PluginWorkItem, ffn_output) -> torch.Tensor:
        out = getattr(ffn_output, "routed_output", ffn_output)
        if getattr(ffn_output, "shared_output", None) is not None:
            raise ValueError("send_ffn_work_item_output: shared experts run on Attention with cam; shared_output "
                             "must be None")
        self.cam.send_ffn_work_item_output(work_item.item, out)
        return out

    def recv_attn_output(self, ubatch_idx: int = 0, **kwargs: Any):
        """The plugin's generic FFN receive: the work item's rows and context (``context.states`` is cam's
        :class:`FFNWorkItem`)."""
        item = self.recv_ffn_work_item(stage_idx=ubatch_idx, max_num_tokens=kwargs.get("max_num_tokens", 0))
        return _A2FPayload(item.hidden_states, item.context)

    def send_ffn_output(self, ffn_output: torch.Tensor, context, **kwargs: Any) -> None:
        self.cam.send_ffn_work_item_output(context.states, getattr(ffn_output, "routed_output", ffn_output))

    def ffn_graph_loop(self, w1: LayerWeights, w2: LayerWeights, *, device=None,
                       swiglu_limit: Optional[float] = None) -> "FFNGraphLoop":
        """The FFN runner's per-layer iteration (receive, W1, W2, send) over static buffers, for the runner to
        capture in its own graph (:class:`FFNGraphLoop`)."""
        return FFNGraphLoop(self, w1, w2, device=device, swiglu_limit=swiglu_limit)


class FFNGraphLoop:
    """cam's FFN iteration for a graph the framework owns (docs/graph.md, "Inside a framework's graph").

    :meth:`iteration` is what the plugin's FFN runner does per MoE layer (``recv_ffn_work_item``, the routed
    experts' W1 and W2, ``send_ffn_work_item_output``) over static buffers on ``device`` (the weights' device):
    the framework records it once inside its graph (``torch.npu.graph(g)``: torch_npu's NPUGraph, on whose stream
    cam's ops on NPU tensors run) and replays the graph. Nothing in it reads the host; an empty work item makes W1,
    W2 and the send no-ops, so idle replays are correct.

    The receive is launched with the Comm's stop word (``dispatch_recv(..., stop=True)``): :meth:`stop` sets it, so
    a replay waiting for work ends at once with an empty item instead of after ``idle_poll_s``, and :meth:`run`
    returns after the replay in flight. A stop of a stopped loop is a no-op (returns False). The word stays set
    until :meth:`resume`; a new loop on the Comm starts resumed.

    ``connector``: an :class:`AFDPluginConnector` or :class:`cam.connector.AsyncAFDConnector` of an FFN rank, or its
    :class:`cam.Comm`. The recorded tensors are this object's: keep it alive while the graph may replay.
    """

    def __init__(self, connector, w1: LayerWeights, w2: LayerWeights, *, device=None,
                 swiglu_limit: Optional[float] = None):
        check_swiglu_limit("FFNGraphLoop", swiglu_limit)
        comm = getattr(getattr(connector, "cam", connector), "comm", connector)
        if not isinstance(comm, Comm):
            raise TypeError(f"FFNGraphLoop: connector must be an FFN rank's AFDPluginConnector, AsyncAFDConnector "
                            f"or cam.Comm, got {type(connector).__name__}")
        comm = comm._require()
        if comm.is_attention:
            raise ValueError(f"FFNGraphLoop: rank {comm.rank} is an Attention rank; the FFN loop runs on FFN ranks")
        self.comm = comm
        self.w1, self.w2, self.swiglu_limit = w1, w2, swiglu_limit
        device = torch.device(device) if device is not None else torch.device("cpu")
        self.device = device
        # Where the ops run, so where the framework captures them: fixed here, whichever thread later replays.
        self._stream = comm.stream if device.type == "cpu" else _npu.stream_and_workspace(device)[0]
        self.recv = tuple(torch.zeros(shape, dtype=dtype, device=device) for dtype, shape in output_specs(comm))
        self.item = ffn_work_item(*self.recv)
        it = self.item
        # Eager on the empty item (zero counts): builds W1/W2's persistent address tables outside any capture (a
        # capture may not copy from the host) and gives the static outputs their shapes.
        self.y, self.y_scale = ops.gmm_swiglu_quant_multi_layer(it.hidden_states, it.dynamic_scales, w1,
                                                                it.group_list, it.layer_index,
                                                                swiglu_limit=swiglu_limit)
        self.out = ops.gmm_multi_layer(self.y, self.y_scale, w2, it.group_list, it.layer_index)
        self._stopped = threading.Event()
        ops.dispatch_recv_resume(comm)

    def iteration(self) -> None:
        """One FFN iteration into the static buffers: eager outside a capture, recorded inside one."""
        it = self.item
        ops.dispatch_recv(self.comm, out=self.recv, stop=True)
        ops.gmm_swiglu_quant_multi_layer(it.hidden_states, it.dynamic_scales, self.w1, it.group_list, it.layer_index,
                                         out=(self.y, self.y_scale), swiglu_limit=self.swiglu_limit)
        ops.gmm_multi_layer(self.y, self.y_scale, self.w2, it.group_list, it.layer_index, out=self.out)
        ops.combine_send(self.comm, self.out, it.work_item)

    def synchronize(self) -> None:
        """Waits (within CAM_SYNC_TIMEOUT_S) for what is queued on the loop's stream (the Comm's for CPU tensors;
        for NPU tensors torch_npu's current stream of the thread that built the loop, the one the graph captures)
        and raises what the replays' ops reported: cam's synchronize reads the captured ops' status records, which
        a framework's own synchronize does not."""
        self._stream.synchronize(_runtime.sync_timeout_s())

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> bool:
        """Sets the stop word (a host write, no device work) and ends :meth:`run` after the replay in flight.
        Returns True when this call stopped the loop, False when it was stopped already (a no-op)."""
        first = ops.dispatch_recv_stop(self.comm)
        self._stopped.set()
        return first

    def resume(self) -> bool:
        """Clears the stop word; the receives wait for work again. Returns whether the loop was stopped."""
        self._stopped.clear()
        return ops.dispatch_recv_resume(self.comm)

    def release_graphs(self) -> None:
        """After the framework destroyed the graphs it captured :meth:`iteration` into (e.g. ``g.reset()``): cam
        stops reading their status records and releases the Comm they held in flight, so it can close. Only for
        NPU tensors, whose capture cam adopts from the runtime; a no-op for a loop on CPU tensors."""
        if self.device.type != "cpu":
            _npu.release_framework_graphs(self._stream)

    def run(self, replay: Callable[[], Any], max_replays: Optional[int] = None) -> int:
        """Calls ``replay`` (one launch of the framework's graph, synchronized) until :meth:`stop` or
        ``max_replays``; returns how many ran."""
        n = 0
        while not self._stopped.is_set() and (max_replays is None or n < max_replays):
            replay()
            n += 1
        return n


@dataclasses.dataclass
class _A2FPayload:
    """The plugin's ``AFDA2FTransferPayload`` fields (the manifest's ``metadata_types``)."""

    hidden_states: torch.Tensor
    context: Any
    router_logits: Optional[torch.Tensor] = None


def ffn_forward_metadata(work_item, capacity: int) -> FFNForwardMetadata:
    """The fixed-capacity forward context of ``work_item`` (a :class:`PluginWorkItem` or cam's
    :class:`FFNWorkItem`) as device tensors: views of the receive buffers, no host read."""
    item = getattr(work_item, "item", work_item)
    rows = item.hidden_states.shape[0]
    if not isinstance(capacity, int) or isinstance(capacity, bool) or not 1 <= capacity <= rows:
        raise ValueError(f"ffn_forward_metadata: capacity must be an int in [1, {rows}] (the receive buffer's rows), "
                         f"got {capacity!r}")
    return FFNForwardMetadata(item.hidden_states[:capacity], item.dynamic_scales[:capacity], item.group_list,
                              item.layer_index, item.group_list.sum().reshape(1), capacity)
