"""Golden implementations in plain numpy/torch, written from the docs and independent of the kernels.

One golden per op (the data-plane ops share one module, the GMM pair another; docs/architecture.md has the op →
file table)."""

from .dispatch_combine import combine, dispatch, round_trip, round_trip_plane
from .dynamic_quant import dynamic_quant
from .gmm import (
    gmm_int32_reference,
    gmm_multi_layer,
    gmm_swiglu_quant_multi_layer,
    group_bounds,
    prepack_nz_reference,
    unpack_nz_reference,
)

__all__ = [
    # dynamic_quant
    "dynamic_quant",
    # dispatch_send / dispatch_recv / combine_send / combine_recv
    "dispatch",
    "combine",
    "round_trip",
    "round_trip_plane",
    # gmm_swiglu_quant_multi_layer (W1) / gmm_multi_layer (W2)
    "gmm_swiglu_quant_multi_layer",
    "gmm_multi_layer",
    "gmm_int32_reference",
    "group_bounds",
    "prepack_nz_reference",
    "unpack_nz_reference",
]
