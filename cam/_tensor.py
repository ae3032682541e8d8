"""torch tensors -> the plain descriptors cam._C takes (no libtorch link in the extension)."""

import torch

from . import _C

# ACL dtype codes, from cam/acl_compat.h through cam._C (keyed by torch's dtype name).
ACL_DTYPE = {getattr(torch, name): code for name, code in _C.acl_dtypes().items()}


def desc(t: torch.Tensor):
    """(data_ptr, shape, strides, dtype code) of a CPU tensor."""
    return (t.data_ptr(), list(t.shape), list(t.stride()), ACL_DTYPE[t.dtype])
