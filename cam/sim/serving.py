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
        ubatch_split: how a step is cut into micro-batches: ``requests`` (every other request, as cam-run) or
            ``tokens`` (equal token spans).
        colocated_overlap: the colocated baseline overlaps one micro-batch's all-to-all with the other's compute.
        two_stage: async AFD's Attention side runs its two micro-batches as two stages on one stream (a micro-batch
            goes on to its next MoE layer after its own combine).
        step_overhead_s: host time per engine step before its first layer (scheduling, input preparation). No
            public figure for a prefill step of these engines on A3 was found, so every preset leaves it at 0 and
            ``--step-overhead`` sets it.
    """

    max_num_batched_tokens: Optional[int]
    chunked_prefill: bool
    source: str
    ubatch_split: str = "requests"
    colocated_overlap: bool = False
    step_overhead_s: float = 0.0
    two_stage: bool = False


ENGINES: Dict[str, Engine] = {
    "none": Engine(None, False, "neutral: whole prompts per batch, as cam-run batches them"),
    # vLLM V1 always runs chunked prefill; EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py) sets
    # max_num_batched_tokens for `vllm serve` (UsageContext.OPENAI_API_SERVER) to 8192 on a device with >= 70 GiB
    # of memory other than an A100, 2048 otherwise.
    "vllm": Engine(8192, True, "vLLM V1 `vllm serve`: chunked prefill always on; max_num_batched_tokens 8192 "
                               "(EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py, device >= 70 GiB)"),
    # The vLLM AFD plugin's A3 recipes set max_num_batched_tokens 65536 on both roles (vllm-project/afd-plugin
    # deployment docs); its Attention side's two-stage scheduler (CAMAsyncUbatchScheduler) runs two micro-batches
    # split by tokens. The EP16 baseline it is measured against is taken at its best: with vLLM's dual-batch
    # overlap (--enable-dbo), the two-micro-batch overlap of DeepSeek-V3's prefill (arXiv 2412.19437 §3.4.1).
    "vllm-afd-recipe": Engine(65536, True, "vLLM with the AFD plugin's A3 recipe: max_num_batched_tokens 65536 "
                                           "(vllm-project/afd-plugin recipes), chunked prefill on, two token-split "
                                           "micro-batches (its CAMAsyncUbatchScheduler); the colocated baseline "
                                           "with dual-batch overlap (vLLM --enable-dbo; DeepSeek-V3 §3.4.1)",
                              ubatch_split="tokens", colocated_overlap=True, two_stage=True),
}


def engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"--engine must be one of {sorted(ENGINES)}, got {name!r}")
    return ENGINES[name]


# One-command studies: each a list of cam-sim flags, applied before the command line's own (which override them).
# ``afd-a3``: the setting of the public A3 measurement of async prefill AFD (the vLLM AFD plugin's DeepSeek-V4-Flash
# recipe on one 16-NPU 910C node): Attention DP4 x TP2 + 8 FFN ranks against EP16 as DP4xTP4, DP8xTP2 and DP2xTP8;
# 512 prompts, lognormal with a mean of 10,288 and a maximum of 63,778 tokens; the recipe's engine
# (max_num_batched_tokens 65536, token-split micro-batches); a 10 s TTFT SLO; loads around the one at which the
# EP16 baseline keeps about two thirds of the requests within it; the recipe's model, DeepSeek-V4-Flash, costed by
# the A3 device file whose cam-op lines were fitted at its expert shape and at 4 Attention ranks' combine ingress
# (benchmarks/fit_sim_devices.py; docs/sim.md §12).
STUDIES = {
    "afd-a3": ["--model", "deepseek-v4-flash", "--costs", "ascend-a3-like-v4-flash", "-D", "4", "-P", "2", "-F", "8",
               "--mode", "all", "--colocated-tp", "4,2,8", "--engine", "vllm-afd-recipe",
               "--requests", "512", "--lengths", "lognormal", "--mean-len", "10288", "--max-len", "63778",
               "--slo", "10", "--sustain", "0.65", "--loads", "0.5,0.75,1.0,1.25,1.5", "--seed", "0"],
}


def expand_study(argv):
    """``--study NAME`` replaced by the study's flags, placed first so that the command line's own flags win."""
    argv = list(argv)
    if "--study" not in argv:
        return argv
    i = argv.index("--study")
    if i + 1 >= len(argv) or argv[i + 1] not in STUDIES:
        raise ValueError(f"--study must be one of {sorted(STUDIES)}, got {argv[i + 1] if i + 1 < len(argv) else None!r}")
    name = argv[i + 1]
    return STUDIES[name] + argv[:i] + argv[i + 2:]

