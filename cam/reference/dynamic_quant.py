"""Golden per-token int8 quantization, written from docs/numerics.md with numpy fp32 arithmetic."""

import numpy as np
import torch

_F32 = np.float32
_TINY = np.finfo(np.float32).tiny  # smallest normal fp32


def dynamic_quant(x: torch.Tensor):
    """``x`` [M, H] (bf16, fp16 or fp32) -> (q int8 [M, H], scale fp32 [M])."""
    xf = x.detach().to(torch.float32).cpu().numpy()
    rows, cols = xf.shape
    q = np.zeros((rows, cols), dtype=np.int8)
    scale = np.zeros(rows, dtype=np.float32)
    with np.errstate(all="ignore"):
        for m in range(rows):
            row = xf[m]
            amax = _F32(np.max(np.abs(row))) if cols else _F32(0)  # np.max propagates NaN
            if not np.isfinite(amax):
                scale[m] = amax / _F32(127)
                continue
            if amax < _TINY:
                continue
            inv = _F32(127) / amax
            if not np.isfinite(inv):
                continue
            v = (row * inv).astype(np.float32)
            q[m] = np.clip(np.rint(v), -127, 127).astype(np.int8)
            scale[m] = amax / _F32(127)
    return torch.from_numpy(q), torch.from_numpy(scale)
