"""What a serving engine does around the model, as the simulator applies it (docs/sim.md §11).

An engine preset names the engine whose defaults a run takes; ``none`` is the neutral setting (no chunked prefill),
under which the simulator is the one validated against ``cam-run``. Every figure here carries its public source.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional


@dataclasses.dataclass(frozen=True)
class Engine:
    """Serving-engine defaults.

    Args:
        max_num_batched_tokens: the per-step token budget (``None``: no engine; a batch of whole prompts up to
            ``--token-budget``, a longer prompt alone).
        chunked_prefill: a prompt longer than what is left of the step's budget is served in chunks.
        source: where the defaults come from.
    """

    max_num_batched_tokens: Optional[int]
    chunked_prefill: bool
    source: str


ENGINES: Dict[str, Engine] = {
    "none": Engine(None, False, "neutral: whole prompts per batch, as cam-run batches them"),
    # vLLM V1 always runs chunked prefill; EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py) sets
    # max_num_batched_tokens for `vllm serve` (UsageContext.OPENAI_API_SERVER) to 8192 on a device with >= 70 GiB
    # of memory other than an A100, 2048 otherwise.
    "vllm": Engine(8192, True, "vLLM V1 `vllm serve`: chunked prefill always on; max_num_batched_tokens 8192 "
                               "(EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py, device >= 70 GiB)"),
    # The vLLM AFD plugin's A3 recipes set max_num_batched_tokens 65536 on both roles (vllm-project/afd-plugin
    # deployment docs; cited in the project's public-reference notes).
    "vllm-afd-recipe": Engine(65536, True, "vLLM with the AFD plugin's A3 recipe: max_num_batched_tokens 65536 "
                                           "(vllm-project/afd-plugin recipes), chunked prefill on"),
}


def engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"--engine must be one of {sorted(ENGINES)}, got {name!r}")
    return ENGINES[name]
