"""The data plane of the README's "Use" section, runnable: one ``cam.Comm`` per rank, ranks as threads of this
process (``transport="shm", store=...`` makes them processes). Two Attention replicas send LAYERS rounds each
without any barrier across replicas; two FFN ranks loop on ``dispatch_recv`` and run the routed experts (W1 with
SwiGLU and requantization, then W2, every layer's weights held once) on whatever work item is ready, with no
per-round host argument (the loop ``cam.Graph`` captures). Each replica's routed output is checked against
``cam.reference.round_trip`` with the goldens of the same two GMMs.

    python examples/dataplane.py        # prints one line per replica and "ok"; exit code 1 on a mismatch
"""

import sys
import threading

import torch

import cam

LAYERS, H, INTER, E, K, B = 2, 256, 128, 8, 2, 24
TIMEOUT_S = 60.0  # every join below is bounded by it: a hung rank fails the example instead of blocking it


def layer_weights(seed: int, R: int):
    """FFN rank weights, every MoE layer: W1 [R, H, 2*INTER] (gate | up), W2 [R, INTER, H], int8 with fp32 scales."""
    g = torch.Generator().manual_seed(seed)

    def one(k, n):
        ws = [torch.randint(-128, 128, (R, k, n), generator=g, dtype=torch.int8) for _ in range(LAYERS)]
        ss = [torch.rand(R, n, generator=g) * 2e-3 + 1e-3 for _ in range(LAYERS)]
        return ws, ss

    return one(H, 2 * INTER), one(INTER, H)


def experts(expand_x, scales, expert_counts, layer_index, w1, w2):
    """The routed MoE of one work item: rows grouped by local expert, ``expert_counts`` rows each."""
    y, y_scale = cam.ops.gmm_swiglu_quant_multi_layer(expand_x, scales, w1, expert_counts, layer_index)
    return cam.ops.gmm_multi_layer(y, y_scale, w2, expert_counts, layer_index)


def golden_experts(raw, layer):
    """``experts`` written with cam.reference's goldens, for ``round_trip``: rows arrive grouped by local expert."""
    (w1, s1), (w2, s2) = raw
    index = torch.tensor([layer], dtype=torch.int64)

    def fn(ids, rows, row_scales):
        counts = torch.bincount(ids.to(torch.int64), minlength=w1[0].shape[0])
        y, y_scale, _ = cam.reference.gmm_swiglu_quant_multi_layer(rows, row_scales, w1, s1, counts, index)
        return cam.reference.gmm_multi_layer(y, y_scale, w2, s2, counts, index)

    return fn


def main() -> int:
    topo = cam.Topology(D=2, P=1, F=2, E=E, K=K, H=H, Bmax=B, L=LAYERS, quantized=True)  # ranks 0-1 Attention, 2-3 FFN
    raw = [layer_weights(100 + f, topo.R) for f in range(topo.F)]
    g = torch.Generator().manual_seed(0)
    inputs = {a: [(torch.randn(B, H, generator=g).to(torch.bfloat16),
                   torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(B)]).to(torch.int32),
                   torch.rand(B, K, generator=g)) for _ in range(LAYERS)] for a in range(topo.A)}
    outputs, errors, attention_done = {}, {}, threading.Event()
    lock = threading.Lock()

    def attention(a):
        with cam.Comm(topo, a, group="example-plane", timeout_s=TIMEOUT_S) as comm:
            outs = []
            for layer, (x, topk_ids, topk_weights) in enumerate(inputs[a]):
                cam.ops.dispatch_send(comm, x, topk_ids, layer)  # no barrier across replicas
                outs.append(cam.ops.combine_recv(comm, topk_ids, topk_weights))  # bounded wait, fp32 reduce
            outputs[a] = outs
            with lock:
                if len(outputs) == topo.A:
                    attention_done.set()

    def ffn(f):
        (w1, s1), (w2, s2) = raw[f]
        lw1, lw2 = cam.LayerWeights(w1, s1), cam.LayerWeights(w2, s2)
        with cam.Comm(topo, topo.A + f, group="example-plane", timeout_s=TIMEOUT_S, idle_poll_s=0.01) as comm:
            while not attention_done.is_set():  # the README's `while serving`
                expand_x, scales, expert_counts, work_item = cam.ops.dispatch_recv(comm)  # empty item when idle
                y = experts(expand_x, scales, expert_counts, work_item[2:3], lw1, lw2)
                cam.ops.combine_send(comm, y, work_item)  # a no-op for an empty item

    def guarded(body, rank):
        try:
            body(rank)
        except BaseException as e:  # noqa: BLE001 - reported below, after every rank stopped
            errors[rank] = e
            attention_done.set()  # the FFN ranks stop serving; a failed Attention rank's peers time out

    threads = [threading.Thread(target=guarded, args=(attention, a), daemon=True) for a in range(topo.A)]
    threads += [threading.Thread(target=guarded, args=(ffn, f), daemon=True) for f in range(topo.F)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * TIMEOUT_S)
    if any(t.is_alive() for t in threads) or errors:
        print(f"failed: {errors or 'a rank did not finish in time'}", file=sys.stderr)
        return 1
    worst = 0.0
    for a in range(topo.A):
        for layer, (x, topk_ids, topk_weights) in enumerate(inputs[a]):
            # The routed output of one replica, through both FFN ranks' experts (global ids -> rank, local id).
            per_rank = [golden_experts(raw[f], layer) for f in range(topo.F)]
            expected = cam.reference.round_trip(
                topo, [(x, topk_ids, topk_weights)],
                lambda ids, rows, sc: _by_rank(per_rank, topo, ids, rows, sc), global_ids=True,
                quant_fn=cam.reference.dynamic_quant)[0]
            got = outputs[a][layer]
            # W1's epilogue: fp32 exp in the kernel vs a once-rounded float64 exp in the golden can move a SwiGLU
            # output one int8 level (docs/gmm.md), a bounded fraction of an element's scale after W2 and combine.
            rel = float((got.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-6))
            worst = max(worst, rel)
        print(f"replica {a}: {LAYERS} layers, max relative difference to the golden {worst:.2e}")
    if worst > 0.05:
        print("mismatch", file=sys.stderr)
        return 1
    print("ok")
    return 0


def _by_rank(per_rank, topo, ids, rows, scales):
    """Global expert ids -> the FFN rank that owns them (R consecutive experts each), in the rows' own order."""
    out = None
    owner = ids.to(torch.int64) // topo.R
    for f, fn in enumerate(per_rank):
        sel = (owner == f).nonzero().flatten()
        if sel.numel():
            y = fn(ids[sel].to(torch.int64) - f * topo.R, rows[sel], scales[sel])
            out = torch.empty(rows.shape[0], y.shape[1], dtype=y.dtype) if out is None else out
            out[sel] = y
    return out


if __name__ == "__main__":
    sys.exit(main())
