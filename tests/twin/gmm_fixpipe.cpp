// One W2 (gmm_multi_layer) call through the SDK's C API at N = 72: a single N tile narrower than the cube's
// 96-column tile, so the cube's Fixpipe writes its tail with nSize = 72; K = 300, two k steps (256 + 44) of
// accumulating Mmads into a 16 x 96 tile, under the size where the cube orders them itself; and a group of one row,
// which the cube must not hand to Mmad as m = 1. Before it, the same call in W4A8 (docs/gmm.md §9: int4 weights
// packed, aclnnCamGmmMultiLayerW4A8GetWorkspaceSize) at K = 301, an odd K the split pads to 320, through the cube
// kernel's int4 tile loop; after it, W1 (gmm_swiglu_quant_multi_layer) per output channel at the same shape, whose
// slot's rows are N apart. Prints "OK", or "FAIL: " and the synchronize's error message (the twin's violation: rule,
// kernel, block, call site). The mutation suite links it against a cube kernel built from a mutant's patch.
#include <cam/cam.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmm_fixture.h"

using namespace sdk_test;

// One W2 call in W4A8: int4 weights of value ((e + k + n) % 15) - 7 packed in the int4 cube's ZN fractals
// (docs/gmm.md §9.3), their colsums, per-channel scales. Returns only when it ran; a failure prints and exits.
void RunW4a8(aclrtStream stream) {
    const int64_t m = 9, k = 301, n = 72, e = 3;
    const int64_t kb = (k + 63) / 64, nb = (n + 15) / 16;
    std::vector<int8_t> y(m * k, -77);
    std::vector<float> yScale(m, 0.5f), scale(e * n, 1e-3f);
    std::vector<uint8_t> packed(e * kb * nb * 512, 0);
    std::vector<int32_t> colsums(e * n, 0);
    for (int64_t x = 0; x < e; ++x)
        for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) {
                const int v = static_cast<int>((x + r + c) % 15) - 7;
                const int64_t byte = ((x * kb + r / 64) * nb + c / 16) * 512 + (c % 16) * 32 + (r % 64) / 2;
                packed[byte] |= static_cast<uint8_t>((v & 0xF) << (4 * (r % 2)));
                colsums[x * n + c] += v;
            }
    std::vector<int64_t> groupList = {5, 3, 1};
    int64_t layerIndex = 0;
    std::vector<uint16_t> out(m * n, 0);
    aclTensor* w = Make({e, kb, nb, 16, 32}, ACL_UINT8, packed.data());
    aclTensor* s = Make({e, n}, ACL_FLOAT, scale.data());
    aclTensor* cs = Make({e, 1, n}, ACL_INT32, colsums.data());
    aclTensorList* tw = aclCreateTensorList(&w, 1);
    aclTensorList* tws = aclCreateTensorList(&s, 1);
    aclTensorList* tcs = aclCreateTensorList(&cs, 1);
    uint64_t wsSize = 0;
    aclOpExecutor* ex = nullptr;
    aclnnStatus st = aclnnCamGmmMultiLayerW4A8GetWorkspaceSize(
        Make({m, k}, ACL_INT8, y.data()), Make({m}, ACL_FLOAT, yScale.data()), tw, tws, tcs,
        Make({e}, ACL_INT64, groupList.data()), Make({1}, ACL_INT64, &layerIndex), 1, nullptr,
        Make({m, n}, ACL_BF16, out.data()), &wsSize, &ex);
    std::vector<uint8_t> workspace(wsSize);
    if (st == ACLNN_SUCCESS) st = aclnnCamGmmMultiLayer(workspace.data(), wsSize, ex, stream);
    if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 20000);
    if (st != ACLNN_SUCCESS) {
        std::printf("FAIL: W4A8: %s\n", camGetLastErrorMessage());
        std::fflush(stdout);
        std::_Exit(1);  // a timed-out op may still use the workspace: never free it
    }
}

int main() {
    const int64_t m = 9, i = 300, h = 72, e = 3, layers = 1;
    std::vector<int8_t> y(m * i, 3);
    std::vector<float> yScale(m, 0.5f);
    Layers w2 = MakeLayers(layers, e, i, h, 5);
    std::vector<int64_t> groupList = {5, 3, 1};
    int64_t layerIndex = 0;
    std::vector<uint16_t> out(m * h, 0);
    aclrtStream stream = nullptr;
    if (aclrtCreateStream(&stream) != ACL_SUCCESS) return 2;
    RunW4a8(stream);
    aclTensor* ty = Make({m, i}, ACL_INT8, y.data());
    aclTensor* tys = Make({m}, ACL_FLOAT, yScale.data());
    aclTensor* tgl = Make({e}, ACL_INT64, groupList.data());
    aclTensor* tli = Make({1}, ACL_INT64, &layerIndex);
    aclTensor* tout = Make({m, h}, ACL_BF16, out.data());
    aclTensorList* tw = WeightList(w2, e, i, h);
    aclTensorList* tws = ScaleList(w2, e, h);
    uint64_t wsSize = 0;
    aclOpExecutor* ex = nullptr;
    aclnnStatus st = aclnnCamGmmMultiLayerGetWorkspaceSize(ty, tys, tw, tws, tgl, tli, 1, tout, &wsSize, &ex);
    std::vector<uint8_t> workspace(st == ACLNN_SUCCESS ? wsSize : 0);
    if (st == ACLNN_SUCCESS) st = aclnnCamGmmMultiLayer(workspace.data(), wsSize, ex, stream);
    if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 20000);
    if (st != ACLNN_SUCCESS) {
        std::printf("FAIL: %s\n", camGetLastErrorMessage());
        std::fflush(stdout);
        std::_Exit(1);  // a timed-out op may still use the workspace: never free it
    }
    // Then W1 (gmm_swiglu_quant_multi_layer) per output channel at the same N = 72: its slot holds a whole row
    // tile, rows N apart, so the Fixpipe of its single 96-wide n-tile writes 72 columns of each row.
    Layers w1 = MakeLayers(layers, e, i, h, 6);
    std::vector<int8_t> y1(m * h / 2, 0);
    std::vector<float> y1Scale(m, 0.0f);
    ex = nullptr;
    const aclnnStatus prepared = aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize(
        ty, tys, WeightList(w1, e, i, h), ScaleList(w1, e, h), tgl, tli, 1, Make({m, h / 2}, ACL_INT8, y1.data()),
        Make({m}, ACL_FLOAT, y1Scale.data()), &wsSize, &ex);
    return RunAndReport(prepared, wsSize, ex, stream, aclnnCamGmmSwigluQuantMultiLayer);
}
