"""The transformers block adapter with the FFN ranks as threads of this process (docs/integrations.md §2): a tiny
random Qwen3-MoE checkpoint (written here, no download), its MoE blocks replaced by cam's (router and shared expert
here, routed experts sent over an in-process data plane), two FFN ranks serving the checkpoint's experts with
``cam.serve_ffn``. The greedy next token of each prompt is compared with the same model run natively with cam's
int8 expert weights; the logits must agree within the W8A8 bound (docs/numerics.md).

    python examples/transformers_ffn_threads.py     # prints the tokens and "ok"; exit code 1 on a mismatch
"""

import sys
import tempfile
import threading

import torch
import transformers

import cam
from cam import convert
from cam.connector import AsyncAFDConnector, ConnectorConfig
from cam.integrations import transformers as camtf

TIMEOUT_S = 60.0  # every device wait and join below: a hung rank fails the example instead of blocking it
W8A8_REL_BOUND = 0.05  # docs/numerics.md, "W8A8 against the float model"
F, TOKENS = 2, 12


def tiny_checkpoint(path):
    """A Qwen3-MoE of 3 layers, 8 experts, H = 64, weights std 1/sqrt(fan_in), its experts already cam's int8 values
    (dequantized), so the native model differs from cam's only in the activations' quantization."""
    config = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                                         num_experts_per_tok=2, moe_intermediate_size=32, intermediate_size=96,
                                         num_experts=8, decoder_sparse_step=1, norm_topk_prob=True,
                                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        for block in camtf.moe_blocks(model).values():
            ffn = convert.dequantized(convert.from_hf_module(block.experts))
            block.experts.gate_up_proj.copy_(ffn.w1.transpose(1, 2))
            block.experts.down_proj.copy_(ffn.w2.transpose(1, 2))
    model.save_pretrained(path)


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
        ok = True
        try:
            attention.wait_ffn_serving(TIMEOUT_S)
            camtf.wrap_moe_blocks(model, camtf.AttentionPlane(attention))
            g = torch.Generator().manual_seed(3)
            for _ in range(3):
                prompt = torch.randint(0, 128, (1, TOKENS), generator=g)
                with torch.no_grad():
                    got, want = model(prompt).logits[0, -1], native(prompt).logits[0, -1]
                rel = float((got - want).norm() / want.norm())
                print(f"greedy token cam {int(got.argmax())}, native {int(want.argmax())}; logits rel. error "
                      f"{rel:.4f}")
                ok &= rel < W8A8_REL_BOUND
        finally:
            attention.finish()
            for t in ffn:
                t.join(TIMEOUT_S)
            attention.close()
        if errors or any(t.is_alive() for t in ffn):
            print(f"FFN ranks: {errors or 'did not stop'}")
            ok = False
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
