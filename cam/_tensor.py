"""torch tensors -> the plain descriptors cam._C takes (no libtorch link in the extension)."""

import torch

# ACL dtype codes (cam/acl_compat.h).
ACL_DTYPE = {
    torch.float32: 0,
    torch.float16: 1,
    torch.int8: 2,
    torch.int32: 3,
    torch.uint8: 4,
    torch.int16: 6,
    torch.int64: 9,
    torch.float64: 11,
    torch.bool: 12,
    torch.bfloat16: 27,
}


def desc(t: torch.Tensor):
    """(data_ptr, shape, strides, dtype code) of a CPU tensor."""
    return (t.data_ptr(), list(t.shape), list(t.stride()), ACL_DTYPE[t.dtype])
