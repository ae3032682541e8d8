// One W2 (gmm_multi_layer) call through the SDK's C API at N = 72: a single N tile narrower than the cube's
// 96-column tile, so the cube's Fixpipe writes its tail with nSize = 72; K = 300, two k steps (256 + 44) of
// accumulating Mmads into a 16 x 96 tile, under the size where the cube orders them itself; and a group of one row,
// which the cube must not hand to Mmad as m = 1. Prints "OK", or "FAIL: " and the synchronize's error message (the
// twin's violation: rule, kernel, block, call site). The mutation suite links it against a cube kernel built with
// a mutant switch.
#include <cam/cam.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gmm_fixture.h"

using namespace sdk_test;

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
    aclTensor* ty = Make({m, i}, ACL_INT8, y.data());
    aclTensor* tys = Make({m}, ACL_FLOAT, yScale.data());
    aclTensor* tgl = Make({e}, ACL_INT64, groupList.data());
    aclTensor* tli = Make({1}, ACL_INT64, &layerIndex);
    aclTensor* tout = Make({m, h}, ACL_BF16, out.data());
    aclTensorList* tw = WeightList(w2, e, i, h);
    aclTensorList* tws = ScaleList(w2, e, h);
    uint64_t wsSize = 0;
    aclOpExecutor* ex = nullptr;
    const aclnnStatus prepared =
        aclnnCamGmmMultiLayerGetWorkspaceSize(ty, tys, tw, tws, tgl, tli, 1, tout, &wsSize, &ex);
    return RunAndReport(prepared, wsSize, ex, stream, aclnnCamGmmMultiLayer);
}
