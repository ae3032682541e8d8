"""Engines in front of cam (docs/integrations.md): ``cam.integrations.transformers`` (an experts implementation and
MoE block adapters for transformers models) and ``cam.integrations.vllm`` (a vLLM general plugin). Each imports its
engine when it is imported itself; ``import cam`` and this package import neither."""
