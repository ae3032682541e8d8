"""``cam-run --checkpoint DIR``: the main job on a transformers checkpoint directory (``config.json`` and
``*.safetensors``) instead of a built-in synthetic model (docs/run.md, "A checkpoint").

:class:`CheckpointModel` is the checkpoint's own architecture cut into the pieces every ``cam-run`` rank runs
(``embed_tokens``, ``pre_moe``, ``shared``, ``dense_mlp``, ``moe_output``, ``finish``): the transformers model's
embedding, attention, norms, router (in float32, ``cam.integrations.transformers.route_float32``), shared and dense
MLPs, while its routed experts come from the checkpoint's files through :mod:`cam.convert` and run on cam's FFN
ranks, with the checkpoint's ``swiglu_limit`` (DeepSeek-V4's clamped SwiGLU). :class:`DeepseekV4CheckpointModel`
is DeepSeek-V4's: its residual is a set of hyper-connection streams, which its pieces carry as ``x``.
:func:`load_model` picks the class. Its ``forward_reference`` is the same single-process golden as the synthetic
models' (``--check``), and :func:`native_check` compares cam's prefill with the engine itself: the transformers
model run natively with the same dequantized expert weights.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import List, Optional, Sequence

from .. import checkpoint_config
from ..layer_weights import weight_format
from ..models.moe_model import PrefillReference

# The architectures with an MoE block the block adapter knows (cam.integrations.transformers): those whose decoder
# layer is ``x + attn(norm(x))`` then ``x + mlp(norm(x))`` (CheckpointModel), and DeepSeek-V4, whose residual is
# hyper-connection streams and whose experts clamp the SwiGLU (DeepseekV4CheckpointModel).
SUPPORTED = ("deepseek_v3", "deepseek_v4", "qwen2_moe", "qwen3_moe")


@dataclasses.dataclass(frozen=True)
class CheckpointShape:
    """What the launcher plans a run with (workload, topology, placement), read from ``config.json`` and the
    safetensors headers without loading a weight; the fields cam-run reads of :class:`cam.models.ModelConfig`."""

    path: str
    model_type: str
    vocab_size: int
    hidden: int
    num_layers: int
    num_experts: int
    top_k: int
    moe_intermediate: int
    moe_layer_ids: tuple
    # The clamp of the experts' SwiGLU the FFN ranks apply (cam.convert.check_supported_config: DeepSeek-V4's, else
    # None)
    swiglu_limit: Optional[float] = None

    @property
    def moe_layers(self) -> List[int]:
        return list(self.moe_layer_ids)


def checkpoint_shape(directory: str) -> CheckpointShape:
    """The checkpoint's shape; ValueError naming ``--checkpoint`` for a directory cam-run cannot run."""
    from .. import convert

    who = f"--checkpoint {directory!r}"
    config = checkpoint_config.model_section(checkpoint_config.read_config(directory, who=who))
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        raise ValueError(f"--checkpoint {directory!r}: model_type {model_type!r} is not supported by cam-run "
                         f"(supported: {', '.join(SUPPORTED)})")
    try:
        limit = convert.check_supported_config(_Namespace(config), who=who)
        layers = convert.checkpoint_moe_layers(directory)
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith("--checkpoint") else f"{who}: {e}") from None
    # The shape through the one table of config keys (cam.checkpoint_config.CONFIG_KEYS), as Topology.from_config
    # reads it.
    fields = {name: checkpoint_config.config_int(config, name, who=f"{who}: config.json")
              for name in ("vocab_size", "hidden", "num_layers", "experts", "top_k", "moe_intermediate")}
    fields["num_experts"] = fields.pop("experts")
    preload(model_type)
    return CheckpointShape(path=os.path.abspath(directory), model_type=model_type, moe_layer_ids=tuple(layers),
                           swiglu_limit=limit, **fields)


class _Namespace:
    def __init__(self, d):
        self.__dict__.update(d)


def _causal_mask(n: int, dtype):
    import torch

    mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return mask[None, None]


def _load_native(directory: str, routed_experts: bool = True):
    """The transformers model of ``directory`` in float32. Without ``routed_experts`` (an Attention rank: the FFN
    ranks serve them) the MoE blocks' routed experts are neither read nor allocated: they stay on the meta device
    (shapes only), and a call of one is refused by name (:func:`_without_routed_experts`)."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # a rank's log is one line per phase, not a bar per rank
    if routed_experts:
        return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    base = MODEL_FOR_CAUSAL_LM_MAPPING[type(transformers.AutoConfig.from_pretrained(directory))]
    hf = _without_routed_experts(base).from_pretrained(directory, dtype=torch.float32).eval()
    for layer, experts in hf.__dict__.pop("_cam_routed_experts").items():
        experts.register_forward_pre_hook(_refuse_routed_call)
        hf.model.layers[layer].mlp.experts = experts
    return hf


_ATTENTION_SIDE_CLASSES: dict = {}


class _NoRoutedExperts:
    """Placeholder of a MoE block's routed experts while an Attention rank's model loads: a module without
    parameters, so transformers' loader (which reads a checkpoint tensor only for a parameter the model has) leaves
    every routed expert tensor unread, as unexpected keys it is told to ignore."""


def _without_routed_experts(base):
    """``base`` (a transformers causal-LM class) whose instances set their MoE blocks' routed experts aside while
    ``from_pretrained`` loads them: constructed on the meta device as transformers builds every model, they are
    restored afterwards by :func:`_load_native`, still on meta. The shared experts, routers, attention and norms
    load as usual."""
    import torch

    cls = _ATTENTION_SIDE_CLASSES.get(base)
    if cls is not None:
        return cls

    class Placeholder(_NoRoutedExperts, torch.nn.Module):
        pass

    def __init__(self, config, *args, **kwargs):
        base.__init__(self, config, *args, **kwargs)
        kept = {}
        for i, layer in enumerate(self.model.layers):
            mlp = getattr(layer, "mlp", None)
            if mlp is not None and hasattr(getattr(mlp, "experts", None), "gate_up_proj"):
                kept[i] = mlp.experts
                mlp.experts = Placeholder()
        self.__dict__["_cam_routed_experts"] = kept  # not a submodule: nothing of it is loaded

    # The checkpoint's routed expert keys (fused or per expert, any vocabulary) are expected to go unused.
    cls = type(f"{base.__name__}WithoutRoutedExperts", (base,),
               {"__init__": __init__, "__module__": __name__,
                "_keys_to_ignore_on_load_unexpected": list(base._keys_to_ignore_on_load_unexpected or []) +
                [r"\.mlp\.experts\."]})
    _ATTENTION_SIDE_CLASSES[base] = cls
    return cls


def _refuse_routed_call(module, args):
    raise RuntimeError(f"{type(module).__name__}: an Attention rank's routed experts are not loaded (they stay on the "
                       "meta device): the FFN ranks compute them")


def _state_bytes(module) -> int:
    """Bytes of a module's parameters and persistent buffers that hold data (not on the meta device), each tensor
    once (tied weights share one)."""
    seen, total = set(), 0
    for t in module.state_dict().values():
        if t.is_meta or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def preload(model_type: str) -> None:
    """Imports the modeling module of ``model_type`` (and transformers with it) once, in the launcher before it
    forks its ranks (:func:`checkpoint_shape`, which plans the run, calls it): a forked rank then builds its model
    without importing them again (seconds per rank on a loaded machine)."""
    import importlib

    importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    # What every rank's from_pretrained builds first, made once here: transformers' checkpoint renaming rules of
    # every model family (hundreds of regular expressions, about 0.4 s, cached in its module) and the auto classes.
    from transformers import conversion_mapping
    from transformers.models.auto import modeling_auto  # noqa: F401 - MODEL_FOR_CAUSAL_LM_MAPPING, _load_native

    getattr(conversion_mapping, "get_checkpoint_conversion_mapping", lambda _: None)(model_type)


# cam-run --weights: the routed experts' weight format -> the bits of cam.quantize_weight. W4A8 serves per-channel
# int4 values packed (LayerWeights format "int4", cam.layer_weights.weight_format): the int4 kernels, half the bytes.
WEIGHT_BITS = {"w8a8": 8, "w4a8": 4}


def load_model(directory: str, weights: str = "w8a8") -> "CheckpointModel":
    """The checkpoint's cam-run model: :class:`DeepseekV4CheckpointModel` for DeepSeek-V4, else
    :class:`CheckpointModel`, its routed experts quantized as ``weights`` (a key of :data:`WEIGHT_BITS`)."""
    shape = checkpoint_shape(directory)
    cls = DeepseekV4CheckpointModel if shape.model_type == "deepseek_v4" else CheckpointModel
    return cls(directory, weights)


class CheckpointModel(PrefillReference):
    """A transformers MoE checkpoint as cam-run's model (float32 on the Attention side; routed experts int8 by
    :func:`cam.quantize_weight` from :func:`cam.convert.load_checkpoint_experts`). The architectures whose decoder
    layer is ``x + attn(norm(x))`` then ``x + mlp(norm(x))``; :func:`load_model` picks the class."""

    model_types = ("deepseek_v3", "qwen2_moe", "qwen3_moe")

    def __init__(self, directory: str, weights: str = "w8a8"):
        import torch

        from .. import convert

        if weights not in WEIGHT_BITS:
            raise ValueError(f"--weights must be one of {sorted(WEIGHT_BITS)}, got {weights!r}")
        self.weights = weights
        self.weight_bits = WEIGHT_BITS[weights]
        self.weight_format = weight_format(self.weight_bits)
        from ..integrations import transformers as camtf

        self.config = checkpoint_shape(directory)
        if self.config.model_type not in self.model_types:
            raise ValueError(f"--checkpoint {directory!r}: {type(self).__name__} runs model_type "
                             f"{', '.join(self.model_types)}, not {self.config.model_type!r} (cam.run.checkpoint."
                             f"load_model picks the class)")
        self._camtf = camtf
        self._directory = directory
        if self.weight_bits != 8 and convert.checkpoint_quant_layout(directory) is not None:
            raise ValueError(f"--checkpoint {directory!r} holds pre-quantized W8A8 experts; --weights {weights} "
                             "would quantize them again (use --weights w8a8)")
        # What every FFN rank's W1 applies, and the golden with it: the config's limit (checkpoint_shape), checked
        # against the experts' own once they are loaded.
        self.swiglu_limit = self.config.swiglu_limit
        self._no_grad = torch.no_grad
        # What this process read of the checkpoint and how long it took, per part ("attention": the transformers
        # model without its routed experts; "experts": the routed experts it loaded, and how many of E): the
        # report's per-rank start-up (docs/run.md, "Wall time").
        self.loaded: dict = {}
        # Each rank builds only the part it runs, on first use (start-up, docs/run.md "Wall time"): an Attention
        # rank the transformers model (_NATIVE), an FFN rank the quantized routed experts (_EXPERTS).

    _NATIVE = ("hf", "blocks", "_layers", "_rotary")
    _EXPERTS = ("experts", "w1", "w1_scale", "w2", "w2_scale")

    def __getattr__(self, name):
        # Only for attributes not set yet: the lazily built parts.
        if name in CheckpointModel._NATIVE:
            self._build_native()
        elif name in CheckpointModel._EXPERTS:
            self._build_experts()
        else:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return self.__dict__[name]

    def _build_native(self) -> None:
        directory = self._directory
        start = time.monotonic()
        hf = _load_native(directory, routed_experts=False)
        self.loaded["attention"] = {"bytes": _state_bytes(hf), "s": time.monotonic() - start}
        blocks = self._camtf.moe_blocks(hf)
        if list(blocks) != self.config.moe_layers:
            raise ValueError(f"--checkpoint {directory!r}: the model's MoE blocks are decoder layers "
                             f"{list(blocks)}, its files' experts layers {self.config.moe_layers}")
        self.__dict__.update(hf=hf, blocks=blocks, _layers=hf.model.layers, _rotary=hf.model.rotary_emb)

    def _build_experts(self) -> None:
        experts, quantized = self._load_experts(range(self.config.num_experts))
        # experts: native_check's weights, convert.dequantized of each (a W8A8 one's stored q * scale)
        self.__dict__.update(experts=experts, **dict(zip(CheckpointModel._EXPERTS[1:], quantized)))

    def routed_weights(self, first_expert: int, num_local: int):
        """As :meth:`PrefillReference.routed_weights`; before every expert was built (an FFN rank), only experts
        ``[first_expert, first_expert + num_local)`` are read from the checkpoint's files."""
        if "w1" in self.__dict__ or (first_expert, num_local) == (0, self.config.num_experts):
            return super().routed_weights(first_expert, num_local)  # every expert: built once, kept
        _, quantized = self._load_experts(range(first_expert, first_expert + num_local))
        return tuple(quantized)

    def _load_experts(self, ids: range):
        """Experts ``ids`` of every MoE layer, read alone from the files (:func:`cam.ffn_weights.load_rank_experts`)
        and quantized: ``(layers, (w1, w1_scale, w2, w2_scale))``. Counted in :attr:`loaded` (``"experts"``)."""
        from .. import convert
        from ..ffn_weights import load_rank_experts

        directory = self._directory
        start = time.monotonic()
        experts, _ = load_rank_experts(directory, ids)
        limit = convert.common_swiglu_limit(experts)
        if limit != self.config.swiglu_limit:
            raise ValueError(f"--checkpoint {directory!r}: the experts' swiglu_limit {limit!r} is not "
                             f"the config's {self.config.swiglu_limit!r}")
        w1, w1_scale, w2, w2_scale = [], [], [], []
        if all(isinstance(ffn, convert.QuantizedExpertFFN) for ffn in experts):
            # A pre-quantized W8A8 checkpoint: its integers and scales as shipped (--weights w8a8, checked in
            # __init__).
            for ffn in experts:
                w1.append(ffn.w1)
                w1_scale.append(ffn.w1_scale)
                w2.append(ffn.w2)
                w2_scale.append(ffn.w2_scale)
        else:
            for ffn in experts:
                for w, q_list, s_list in ((ffn.w1, w1, w1_scale), (ffn.w2, w2, w2_scale)):
                    q, s = convert.quantize_weight(w, bits=self.weight_bits)
                    q_list.append(q)
                    s_list.append(s)
        read = sum(t.numel() * t.element_size() for ffn in experts for t in _expert_tensors(ffn))
        done = self.loaded.setdefault("experts", {"bytes": 0, "s": 0.0, "experts": 0})
        done["bytes"] += read
        done["s"] += time.monotonic() - start
        done["experts"] += len(ids)
        return experts, (w1, w1_scale, w2, w2_scale)

    @property
    def num_experts(self) -> int:
        return self.config.num_experts

    @property
    def top_k(self) -> int:
        return self.config.top_k

    @property
    def hidden(self) -> int:
        return self.config.hidden

    @property
    def moe_layers(self) -> List[int]:
        return self.config.moe_layers

    def embed_tokens(self, tokens):
        import torch

        with self._no_grad():
            return self.hf.model.embed_tokens(tokens.long()).to(torch.float32)

    def pre_moe(self, layer: int, x, seq_lens: Sequence[int], tokens=None):
        """The decoder layer up to its MLP: ``x + attn(input_layernorm(x))`` over each request alone (causal,
        positions from 0), then ``post_attention_layernorm``; for an MoE layer also the float32 router. Returns
        ``(x, h)`` or ``(x, h_bf16, topk_ids int32, topk_weights fp32)``, as :class:`cam.models.MoEModel` does.
        These routers do not read ``tokens``."""
        import torch

        decoder = self._layers[layer]
        with self._no_grad():
            out = torch.empty_like(x)
            start = 0
            for n in seq_lens:
                seg = x[start:start + n][None]
                positions = torch.arange(n)[None]
                attn, _ = decoder.self_attn(hidden_states=decoder.input_layernorm(seg),
                                            position_embeddings=self._rotary(seg, positions),
                                            attention_mask=_causal_mask(n, seg.dtype), position_ids=positions)
                out[start:start + n] = seg[0] + attn[0]
                start += n
            h = decoder.post_attention_layernorm(out)
            if layer not in self.blocks:
                return out, h
            ids, weights = self._camtf.route_float32(self.blocks[layer], h)
        return out, h.to(torch.bfloat16), ids, weights

    def dense_mlp(self, layer: int, h):
        with self._no_grad():
            return self._layers[layer].mlp(h)

    def shared(self, layer: int, h_bf16):
        """The layer's shared expert (DeepSeek-V3's, Qwen2-MoE's gated one; zeros for Qwen3-MoE) on the bf16 input
        the routed experts get, as the synthetic model does."""
        import torch

        h = h_bf16.to(torch.float32)
        with self._no_grad():
            out = self._camtf._shared(self.blocks[layer], h)
        return torch.zeros_like(h) if out is None else out

    def finish(self, x):
        with self._no_grad():
            return self.hf.model.norm(x)


class _UpToTheMoE:
    """A DeepSeek-V4 decoder layer as its own ``forward`` sees it (``self.attn_hc``, ``self.self_attn``, ...), its
    MoE block replaced by a capture: transformers' ``DeepseekV4DecoderLayer.forward`` runs the attention sublayer
    with its hyper-connections and residual mixing, then ``ffn_hc`` (whose ``post`` weights are kept) and
    ``post_attention_layernorm``, hands the MoE block's input to :meth:`mlp` (kept), and, since that returns zeros,
    returns ``post * 0 + comb^T @ streams``: exactly the streams' residual part of the layer's output. One per call,
    so the model is never modified (a colocated process warms its two ranks up on two threads)."""

    def __init__(self, decoder):
        self._decoder = decoder
        self.attn_hc = decoder.attn_hc
        self.self_attn = decoder.self_attn
        self.input_layernorm = decoder.input_layernorm
        self.post_attention_layernorm = decoder.post_attention_layernorm
        self.post = self.h = None

    def ffn_hc(self, streams):
        post, comb, collapsed = self._decoder.ffn_hc(streams)
        self.post = post
        return post, comb, collapsed

    def mlp(self, h, input_ids=None):
        import torch

        self.h = h
        return torch.zeros_like(h)

    def __call__(self, streams, **kwargs):
        mixed = type(self._decoder).forward(self, streams, **kwargs)
        return mixed, self.post, self.h


class DeepseekV4CheckpointModel(CheckpointModel):
    """DeepSeek-V4 (transformers' ``DeepseekV4ForCausalLM``) as cam-run's model. Its residual is ``hc_mult``
    hyper-connection streams per token, so ``x`` is ``[T, hc_mult, H]`` between the pieces, and an MoE layer's
    output is ``post * (routed + shared) + comb^T @ streams`` with the ``ffn_hc`` weights of that layer
    (``DeepseekV4DecoderLayer.forward``), not a sum. Every piece but that last line is the transformers model's own
    code: :class:`_UpToTheMoE` runs the decoder layer's ``forward`` up to its MoE block, ``hc_head`` collapses the
    streams at the end. Its routers: the top-k layers' on the float32 scores, the hash layers' on the token ids
    (``tokens``). Its routed experts clamp the SwiGLU halves with the checkpoint's ``swiglu_limit``, on the FFN
    ranks as in the golden; its shared expert, here, with the model's own module (which clamps as well)."""

    model_types = ("deepseek_v4",)

    def _build_native(self) -> None:
        super()._build_native()
        # _UpToTheMoE runs this class's forward on a view of the layer: refuse another layer class by name rather
        # than run a forward written for other attributes.
        kinds = {type(layer).__name__ for layer in self._layers}
        if kinds != {"DeepseekV4DecoderLayer"}:
            raise ValueError(f"--checkpoint {self._directory!r}: DeepseekV4CheckpointModel runs "
                             f"DeepseekV4DecoderLayer layers, the model has {sorted(kinds)}")

    @property
    def _hc(self) -> int:
        return self.hf.config.hc_mult

    def embed_tokens(self, tokens):
        """``[T, hc_mult, H]``: the embedding copied into every stream (``DeepseekV4Model.forward``)."""
        import torch

        with self._no_grad():
            e = self.hf.model.embed_tokens(tokens.long()).to(torch.float32)
        return e.unsqueeze(1).expand(-1, self._hc, -1).contiguous()

    def _position_inputs(self, seg):
        """What ``DeepseekV4Model.forward`` hands each decoder layer for one request alone from position 0 without
        a cache: the positions, both rotary tables and its sliding-window causal mask (made by transformers)."""
        import torch
        from transformers.masking_utils import create_sliding_window_causal_mask

        base = self.hf.model
        n = seg.shape[1]
        positions = torch.arange(n)[None]
        embeds = seg[:, :, 0]
        mask = create_sliding_window_causal_mask(config=base.config, inputs_embeds=embeds, attention_mask=None,
                                                 past_key_values=None, position_ids=positions)
        rope = {kind: self._rotary(embeds, position_ids=positions, layer_type=kind) for kind in ("main", "compress")}
        return {"position_embeddings": rope, "position_ids": positions, "attention_mask": mask}

    def pre_moe(self, layer: int, x, seq_lens: Sequence[int], tokens=None):
        """The decoder layer up to its MoE block over each request alone: returns ``((mixed, post), h_bf16, ids,
        weights)`` with ``mixed = comb^T @ streams`` and ``post`` the ``ffn_hc`` weights the MoE output is expanded
        with (:meth:`moe_output`). ``tokens`` (the batch's ids) is needed by the hash-routed layers."""
        import torch

        if tokens is None or tokens.numel() != x.shape[0]:
            raise ValueError(f"DeepseekV4CheckpointModel.pre_moe: tokens must hold the batch's {x.shape[0]} token "
                             f"ids (the hash-routed layers read them), got "
                             f"{None if tokens is None else tuple(tokens.shape)}")
        decoder = self._layers[layer]
        hidden = x.shape[-1]
        mixed, post, h = torch.empty_like(x), x.new_empty(x.shape[:2]), x.new_empty(x.shape[0], hidden)
        with self._no_grad():
            start = 0
            for n in seq_lens:
                seg = x[start:start + n][None]
                m, p, hn = _UpToTheMoE(decoder)(seg, **self._position_inputs(seg))
                mixed[start:start + n], post[start:start + n], h[start:start + n] = m[0], p[0], hn[0]
                start += n
            ids, weights = self._camtf.route_float32(self.blocks[layer], h, tokens.reshape(-1))
        return (mixed, post), h.to(torch.bfloat16), ids, weights

    def moe_output(self, layer: int, x, routed, shared, rows: slice = slice(None)):
        """``post * (routed + shared) + comb^T @ streams`` for rows ``rows``: ``DeepseekV4DecoderLayer.forward``'s
        last line, with the MoE block's output ``routed + shared`` as its ``DeepseekV4SparseMoeBlock`` sums them."""
        import torch

        mixed, post = x
        y = routed.to(torch.float32) + shared
        return post[rows].unsqueeze(-1) * y.unsqueeze(-2) + mixed[rows]

    def dense_mlp(self, layer: int, h):
        raise ValueError("DeepSeek-V4 has no dense MLP layer (its mlp_layer_types are hash_moe and moe)")

    def finish(self, x):
        """``norm(hc_head(streams))``: the streams collapsed, then the final norm (``DeepseekV4Model.forward``)."""
        base = self.hf.model
        with self._no_grad():
            return base.norm(base.hc_head(x[None]))[0]


def _expert_tensors(ffn):
    """The tensors of one layer's experts as read (a float ``ExpertFFN``'s or a pre-quantized one's)."""
    return [getattr(ffn, name) for name in ("w1", "w1_scale", "w2", "w2_scale") if hasattr(ffn, name)]


W8A8_REL_BOUND = 0.05  # docs/numerics.md, "W8A8 against the float model": a block's error relative to its norm


def _indexer_hooks(model, store: list) -> list:
    """Records the choice of every DeepSeek-V4 lightning indexer of ``model`` (its compressed-sparse-attention layers':
    the top-``index_topk`` compressed KV blocks each query attends to, ``[S, k]``, -1 for none) in call order. Like
    a router's top-k, a discrete choice that a near-tie flips under int8 activations."""
    return [m.register_forward_hook(lambda mod, args, out: store.append(out[0]))
            for m in model.modules() if type(m).__name__ == "DeepseekV4Indexer"]


def _first_difference(mine: list, theirs: list, n: int) -> int:
    """The first of ``n`` positions where two lists of per-position top-k choices (``[n, k]`` each, paired in order)
    differ as sets; ``n`` if none does."""
    import torch

    same = torch.ones(n, dtype=torch.bool)
    for a, b in zip(mine, theirs):
        if a.shape != b.shape or a.dim() != 2 or a.shape[0] != n:
            raise ValueError(f"_first_difference: choices of shapes {tuple(a.shape)} and {tuple(b.shape)} for {n} "
                             "positions")
        same &= (a.long().sort(-1)[0] == b.long().sort(-1)[0]).all(-1)
    return n if bool(same.all()) else int((~same).nonzero()[0])


def native_check(model: CheckpointModel, prompts: Sequence, outputs: Sequence) -> dict:
    """cam's final hidden states of each prompt against the transformers model run natively on that prompt alone,
    with the expert weights cam computes with (dequantized int8), and the greedy next token of both through the
    model's own ``lm_head``.

    Tolerance. What differs is cam's per-token int8 activations and bf16 routed input and output: the W8A8 error
    docs/numerics.md bounds at 5 % of a block's norm (about 1 % per token on the test models). That bound holds for a
    token only while cam and the native model make the same discrete choices for it and for every token before it
    in the request (attention mixes them in): a token whose router sits at a near-tie may flip its top-k under that
    1 %, and then differs by a different expert's output, not a rounding; so may a DeepSeek-V4 lightning indexer's
    top-k of the compressed blocks a query attends to (its compressed-sparse-attention layers). So the bound is
    checked per token up to the first position where a router (both float32, on each side's own input) or an
    indexer chose differently from native at some layer; the positions after it are counted, not bounded
    (``first_flip`` says which kind came first in how many requests). The greedy token at the last position must be
    equal, or a near-tie: the native logits of the two tokens closer than twice the largest logit difference of
    that prompt.

    A flip at the first token would leave nothing bounded, so each MoE block is also checked on its own
    (teacher-forced): on the native block's input and with the native router's choice, cam's routed experts of that
    MoE layer (the int8 golden of ``routed_reference``) plus the shared expert must be within the W8A8 bound of the
    native block's output, relative to its norm over the request. This is what catches a wrong layer's or a wrong
    half's weights whatever the routing does.
    """
    import torch

    from .. import convert
    from ..integrations import transformers as camtf

    native = _load_native(model.config.path)
    blocks = list(camtf.moe_blocks(native).values())
    native_io: list = []
    # Each block's input, the token ids a hash-routed one reads (DeepSeek-V4's, passed as input_ids=), its output.
    hooks = [b.register_forward_hook(lambda mod, args, kwargs, out: native_io.append(
        (mod, args[0].reshape(-1, args[0].shape[-1]), kwargs.get("input_ids"), out.reshape(-1, out.shape[-1]))),
        with_kwargs=True) for b in blocks]
    native_picks: list = []
    cam_picks: list = []
    hooks += _indexer_hooks(native, native_picks) + _indexer_hooks(model.hf, cam_picks)
    worst, worst_block, checked, flipped, greedy_equal, near_ties, ok = 0.0, 0.0, 0, 0, 0, 0, True
    first_flip = {"router": 0, "indexer": 0}
    try:
        with torch.no_grad():
            for block, ffn in zip(blocks, model.experts):
                q = convert.dequantized(ffn, bits=model.weight_bits)
                block.experts.gate_up_proj.copy_(q.w1.transpose(1, 2))
                block.experts.down_proj.copy_(q.w2.transpose(1, 2))
            for tokens, got in zip(prompts, outputs):
                native_io.clear()
                native_picks.clear()
                cam_picks.clear()
                want = native.model(input_ids=tokens.reshape(1, -1).long()).last_hidden_state[0]
                native_ids = []
                for j, (block, x, input_ids, out) in enumerate(native_io):
                    ids, weights = camtf.route_float32(block, x, input_ids)
                    native_ids.append(ids)
                    h = x.to(torch.bfloat16)
                    mine = model.routed_reference(j, h, ids, weights).float() + model.shared(model.moe_layers[j], h)
                    worst_block = max(worst_block, float((mine - out).norm() / out.norm().clamp_min(1e-12)))
                cam_ids: list = []
                model.forward_reference([tokens.reshape(-1)], on_route=lambda j, ids: cam_ids.append(ids))
                n = want.shape[0]
                if len(cam_picks) != len(native_picks):
                    raise RuntimeError(f"native_check: {len(cam_picks)} indexer calls on cam's side, "
                                       f"{len(native_picks)} on native's, for one request")
                routed = _first_difference(cam_ids, native_ids, n)
                indexed = _first_difference(cam_picks, native_picks, n)
                clean = min(routed, indexed)
                for kind, at in (("router", routed), ("indexer", indexed)):
                    first_flip[kind] += at == clean < n
                rel = (got.float() - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-12)
                if clean:
                    worst = max(worst, float(rel[:clean].max()))
                checked += clean
                flipped += n - clean
                lg, lw = native.lm_head(got[-1:].float())[0], native.lm_head(want[-1:])[0]
                a, b = int(lw.argmax()), int(lg.argmax())
                if a == b:
                    greedy_equal += 1
                elif float(lw[a] - lw[b]) <= 2 * float((lg - lw).abs().max()):
                    near_ties += 1
                else:
                    ok = False
    finally:
        for h in hooks:
            h.remove()
    return {"ok": ok and worst < W8A8_REL_BOUND and worst_block < W8A8_REL_BOUND, "max_rel_diff": worst,
            "max_block_rel_diff": worst_block, "tokens_bounded": checked,
            "tokens_after_a_flip": flipped, "first_flip": first_flip, "greedy_equal": greedy_equal,
            "greedy_near_ties": near_ties,
            "requests": len(outputs), "tolerance": {"max_rel_diff": W8A8_REL_BOUND,
                                                    "max_block_rel_diff": W8A8_REL_BOUND}}
