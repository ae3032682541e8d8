"""What the two transformers examples share (not an example itself): the tiny Qwen3-MoE checkpoint they serve and
their comparison of cam's logits with the model run natively. Each example imports it from its own directory."""

import torch
import transformers

from cam import convert
from cam.integrations import transformers as camtf

W8A8_REL_BOUND = 0.05  # docs/numerics.md, "W8A8 against the float model"
TOKENS = 12  # tokens per prompt
PROMPTS = 3


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


def compare_with_native(model, native) -> bool:
    """The last-position logits of a few random prompts through ``model`` (its MoE blocks cam's) and ``native``:
    prints each prompt's greedy tokens and relative error; True when every error is within the W8A8 bound."""
    ok = True
    g = torch.Generator().manual_seed(3)
    for _ in range(PROMPTS):
        prompt = torch.randint(0, 128, (1, TOKENS), generator=g)
        with torch.no_grad():
            got, want = model(prompt).logits[0, -1], native(prompt).logits[0, -1]
        rel = float((got - want).norm() / want.norm())
        print(f"greedy token cam {int(got.argmax())}, native {int(want.argmax())}; logits rel. error {rel:.4f}")
        ok &= rel < W8A8_REL_BOUND
    return ok


def verdict(ok: bool) -> int:
    """Prints the example's last line ("ok" or "MISMATCH"); its exit code."""
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1
