"""``cam-run --checkpoint DIR`` against ``cam-run --model tiny`` of the same shape: how much of the wall time the
checkpoint's start-up costs (docs/run.md, "Wall time").

The checkpoint is a DeepSeek-V3 written here with transformers at the ``tiny`` preset's shape (H 128, 3 layers of
which the first is dense, 8 routed experts top-2, I 64, one shared expert, vocabulary 512). Both commands run with
the same D, F and requests, alternated, ``--repeats`` times each, in one job; the record holds each run's wall time
(measured here, start to exit), the medians, their ratio (target ≤ 3) and the checkpoint run's wall-time phases
(its ``--json`` report's ``wall_s``) to show where the rest goes, with each rank's start-up stages and what it read
of the checkpoint (``loaded``: the Attention ranks the model without its routed experts, the FFN ranks their own
experts).

    python benchmarks/checkpoint_startup.py --repeats 3 --json benchmarks/results/checkpoint-startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _checkpoint(path: str) -> None:
    import torch
    import transformers

    cfg = transformers.DeepseekV3Config(
        vocab_size=512, hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=256, num_experts_per_tok=2, moe_intermediate_size=64, intermediate_size=256,
        n_routed_experts=8, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=None,
        kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=32, routed_scaling_factor=1.0,
        norm_topk_prob=True, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    model.save_pretrained(path)


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _run(cam_run: str, source: list, common: list, out: str) -> dict:
    start = time.monotonic()
    r = subprocess.run([cam_run, *source, *common, "--json", out], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"{' '.join(source)}: exit {r.returncode}\n{r.stderr[-3000:]}")
    with open(out) as f:
        report = json.load(f)
    w = report["wall_s"]
    return {"wall_s": wall, "phases": {k: v for k, v in w.items() if k not in ("ranks", "loaded")},
            # each rank's start-up stages (its checkpoint read is inside warm_up) and what it read (--checkpoint)
            "ranks": w["ranks"], **({"loaded": w["loaded"]} if "loaded" in w else {}), "load": _load()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--ffn", type=int, default=2)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cam_run = os.path.join(os.path.dirname(sys.executable), "cam-run")
    common = ["--replicas", str(args.replicas), "--ffn", str(args.ffn), "--requests", str(args.requests), "--quiet"]
    runs = {"model": [], "checkpoint": []}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        _checkpoint(ckpt)
        sources = {"model": ["--model", "tiny"], "checkpoint": ["--checkpoint", ckpt]}
        for i in range(args.repeats):
            for name in ("model", "checkpoint"):
                runs[name].append(_run(cam_run, sources[name], common, os.path.join(tmp, f"{name}{i}.json")))
                print(f"{name} {i}: {runs[name][-1]['wall_s']:.2f} s (load {runs[name][-1]['load']})", flush=True)
    med = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    ratio = med["checkpoint"] / med["model"]
    record = {"command": "cam-run --checkpoint DIR vs cam-run --model tiny", "replicas": args.replicas,
              "ffn": args.ffn, "requests": args.requests, "median_wall_s": med, "ratio": ratio, "target": 3.0,
              "runs": runs}
    print(f"median wall: checkpoint {med['checkpoint']:.2f} s, model {med['model']:.2f} s: {ratio:.2f}x (target "
          f"≤ 3x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
