"""The workspace the GMM hosts ask for (cam.bench.gmm.workspace_bytes: GetWorkspaceSize through the binding), against
the layout docs/gmm.md §5 states, written out here on its own: [status record | ring | W4A8: the split activation],
each part 512-byte aligned; the ring is AI cores x 2 slots (W1 with scale groups along K: then each AI core's fp32
row tile buffer); W2's slot, and W1's with scale groups along K, holds one unit (tm x tn per group and plane), W1's
per output channel a whole row tile (tm x N)."""

import pytest

import cam
from cam.bench.gmm import workspace_bytes

W1, W2 = "gmm_swiglu_quant_multi_layer", "gmm_multi_layer"
STATUS = 64  # the device status record (docs/gmm.md §5)


def _align(v, a=512):
    return -(-v // a) * a


def _expected(cores, m, k, tm, tn, n, groups, int4, whole_rows=False, row_buffer=False):
    planes = 2 if int4 else 1
    slot = 4 * groups * planes * tm * (n if whole_rows else tn)
    if not whole_rows:
        slot = _align(slot)
    ring = cores * 2 * slot + (cores * _align(4 * tm * n) if row_buffer else 0)
    total = _align(_align(STATUS) + ring)
    if int4:
        total = _align(total + m * 64 * -(-k // 64))
    return total


def _cores():
    return cam._C.platform()["aic_cores"]


# W2's tiles at these shapes (docs/gmm.md §5 "The mixed W2 kernel", §9.5): W8A8 the tall form, min(160, M up to 16)
# x min(192, N up to 32); W4A8 96 x 160.
@pytest.mark.parametrize("m,k,n,groups,int4,tm,tn", [
    (100, 256, 1000, 1, False, 112, 192),
    (100, 256, 1000, 4, False, 112, 192),
    (100, 256, 1000, 4, True, 96, 160),
    (300, 512, 70, 2, True, 96, 96),  # N = 70: one n-tile, 96 wide
])
def test_w2_slot_holds_one_unit(m, k, n, groups, int4, tm, tn):
    got = workspace_bytes(W2, m, k, n, 4, k_groups=groups, int4=int4)
    assert got == _expected(_cores(), m, k, tm, tn, n, groups, int4)


# W1's tiles (docs/gmm.md §5 "The mixed W1 kernel", §9.5): W8A8 at most 144 rows, W4A8 at most 64, each with the
# widest multiple of 32 up to 256 columns whose int32 C tile (two planes with int4) fits the 128 KiB L0C.
@pytest.mark.parametrize("m,k,n,groups,int4,tm,tn", [
    (100, 256, 600, 1, False, 112, 256),
    (100, 256, 600, 1, True, 64, 256),
    (100, 256, 600, 4, False, 112, 256),
    (100, 256, 600, 4, True, 64, 256),
    (300, 512, 1000, 2, False, 144, 224),
])
def test_w1_slot_holds_a_row_tile_per_channel_and_a_unit_with_k_groups(m, k, n, groups, int4, tm, tn):
    got = workspace_bytes(W1, m, k, n, 4, k_groups=groups, int4=int4)
    assert got == _expected(_cores(), m, k, tm, tn, n, groups, int4, whole_rows=groups == 1, row_buffer=groups > 1)


def test_workspace_bytes_refuses_an_unknown_op():
    with pytest.raises(ValueError, match="op must be"):
        workspace_bytes("gmm", 8, 64, 64, 1)
