"""The transformers block adapter with the FFN ranks as threads of this process (docs/integrations.md §2): a tiny
random Qwen3-MoE checkpoint (written here, no download), its MoE blocks replaced by cam's (router and shared expert
here, routed experts sent over an in-process data plane), two FFN ranks serving the checkpoint's experts with
``cam.serve_ffn``. The greedy next token of each prompt is compared with the same model run natively with cam's
int8 expert weights; the logits must agree within the W8A8 bound (docs/numerics.md).

    python examples/transformers_ffn_threads.py     # prints the tokens and "ok"; exit code 1 on a mismatch
"""

import os
import sys
import tempfile
import threading

import torch
import transformers

import cam
from cam import convert
from cam.connector import AsyncAFDConnector, ConnectorConfig
from cam.integrations import transformers as camtf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tiny_moe import TOKENS, compare_with_native, tiny_checkpoint, verdict  # noqa: E402 - beside this file

TIMEOUT_S = 60.0  # every device wait and join below: a hung rank fails the example instead of blocking it
F = 2


def main():
    with tempfile.TemporaryDirectory() as path:
        tiny_checkpoint(path)
        native = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        layers, info = convert.load_checkpoint_experts(path)
        topo = cam.Topology.from_checkpoint(path, D=1, F=F, Bmax=TOKENS)
        cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group="example-threads",
                              transport="in_process")
        store = torch.distributed.HashStore()
        errors = []

        def serve(f):
            conn = AsyncAFDConnector(topo.A + f, "ffn", cfg)
            try:
                conn.init_afd_connector(store)
                w1, w2 = convert.layer_weights(layers, range(f * topo.R, (f + 1) * topo.R))
                cam.serve_ffn(conn, w1, w2, swiglu_limit=info["swiglu_limit"], max_serve_s=4 * TIMEOUT_S)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                conn.close()

        ffn = [threading.Thread(target=serve, args=(f,), daemon=True) for f in range(F)]
        for t in ffn:
            t.start()
        attention = AsyncAFDConnector(0, "attention", cfg)
        attention.init_afd_connector(store)
        ok = False
        try:
            attention.wait_ffn_serving(TIMEOUT_S)
            camtf.wrap_moe_blocks(model, camtf.AttentionPlane(attention))
            ok = compare_with_native(model, native)
        finally:
            attention.finish()
            for t in ffn:
                t.join(TIMEOUT_S)
            attention.close()
        if errors or any(t.is_alive() for t in ffn):
            print(f"FFN ranks: {errors or 'did not stop'}")
            ok = False
    return verdict(ok)


if __name__ == "__main__":
    sys.exit(main())
