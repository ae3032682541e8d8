"""torch tensors -> the plain descriptors cam._C takes (no libtorch link in the extension)."""

import torch

from . import _C

# ACL dtype codes, from cam/acl_compat.h through cam._C (keyed by torch's dtype name).
ACL_DTYPE = {getattr(torch, name): code for name, code in _C.acl_dtypes().items()}


def desc(t: torch.Tensor):
    """(data_ptr, shape, strides, dtype code) of a CPU tensor; shape and strides as torch gives them (tuples: the
    binding takes any sequence, no list copy per call)."""
    return (t.data_ptr(), t.shape, t.stride(), ACL_DTYPE[t.dtype])


def shape_desc(t: torch.Tensor):
    """A descriptor of ``t`` without data (null address), for an argument check: ``t`` may be a fake or meta tensor.
    Symbolic extents are specialized to their hint (int())."""
    return (0, [int(d) for d in t.shape], [int(s) for s in t.stride()], ACL_DTYPE.get(t.dtype, -1))
