// Calls the layer-select GMM aclnn pairs through the SDK's C types with per-layer tensor lists: W2 checked
// bit-exactly against values computed here (ND weights, plain loops, hand-written bf16 rounding), W1 run on the
// same rows, and a device-detected layer_index error reported by camSynchronizeStream with nothing written.
#include <cam/cam.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gmm_fixture.h"

using namespace sdk_test;

int main() {
    const int64_t m = 10, i = 40, h = 72, e = 3, layers = 3;
    const std::vector<int64_t> counts = {3, 0, 5};  // 8 rows; rows 8, 9 must stay untouched
    std::vector<int8_t> y(m * i);
    for (int64_t r = 0; r < m * i; ++r) y[r] = static_cast<int8_t>((r * 29 + 7) % 255 - 127);
    std::vector<float> yScale(m);
    for (int64_t r = 0; r < m; ++r) yScale[r] = 0.01f * static_cast<float>(r + 1);
    Layers w2 = MakeLayers(layers, e, i, h, 3);
    std::vector<int64_t> groupList = counts;
    int64_t layerIndex = 2;  // "device" memory: the host passes its address, never its value
    std::vector<uint16_t> out(m * h, 0xBEEF);

    aclrtStream stream = nullptr;
    Expect(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream");
    aclTensor* ty = Make({m, i}, ACL_INT8, y.data());
    aclTensor* tys = Make({m}, ACL_FLOAT, yScale.data());
    aclTensor* tgl = Make({e}, ACL_INT64, groupList.data());
    aclTensor* tli = Make({1}, ACL_INT64, &layerIndex);
    aclTensor* tout = Make({m, h}, ACL_BF16, out.data());
    aclTensorList* tw = WeightList(w2, e, i, h);
    aclTensorList* tws = ScaleList(w2, e, h);

    auto runW2 = [&]() -> aclnnStatus {
        uint64_t wsSize = 0;
        aclOpExecutor* ex = nullptr;
        aclnnStatus st = aclnnCamGmmMultiLayerGetWorkspaceSize(ty, tys, tw, tws, tgl, tli, 1, tout, &wsSize, &ex);
        Expect(st == ACLNN_SUCCESS, std::string("W2 GetWorkspaceSize: ") + camGetLastErrorMessage());
        std::vector<uint8_t> workspace(wsSize);
        st = aclnnCamGmmMultiLayer(workspace.data(), wsSize, ex, stream);
        Expect(st == ACLNN_SUCCESS, std::string("W2 launch: ") + camGetLastErrorMessage());
        st = camSynchronizeStream(stream, 60000);
        // After a sync timeout the op still runs: its workspace (and tensors) must not be freed. Stop here.
        if (st == CAM_ERR_SYNC_TIMEOUT) {
            std::printf("FAIL: W2 synchronize: %s\n", camGetLastErrorMessage());
            std::fflush(stdout);
            std::_Exit(1);
        }
        return st;
    };

    Expect(runW2() == ACLNN_SUCCESS, std::string("W2 synchronize: ") + camGetLastErrorMessage());
    int64_t row = 0;
    for (int64_t x = 0; x < e; ++x) {
        for (int64_t c = 0; c < counts[x]; ++c, ++row) {
            for (int64_t col = 0; col < h; ++col) {
                int32_t acc = 0;
                for (int64_t k = 0; k < i; ++k) acc += int32_t(y[row * i + k]) * int32_t(w2.nd[2][(x * i + k) * h + col]);
                const float v = (static_cast<float>(acc) * yScale[row]) * w2.scales[2][x * h + col];
                if (out[row * h + col] != Bf16Rne(v))
                    Expect(false, "W2 out[" + std::to_string(row) + "][" + std::to_string(col) + "]");
            }
        }
    }
    for (int64_t r = row; r < m; ++r)
        for (int64_t col = 0; col < h; ++col) Expect(out[r * h + col] == 0xBEEF, "tail row written");

    // A layer_index outside [0, L) is found by the kernels' pre-pass: reported on synchronize, nothing written.
    std::fill(out.begin(), out.end(), 0xBEEF);
    layerIndex = 5;
    const aclnnStatus bad = runW2();
    Expect(bad == CAM_ERR_DEVICE_ARGUMENT, "bad layer_index must give CAM_ERR_DEVICE_ARGUMENT");
    Expect(std::strstr(camGetLastErrorMessage(), "layer_index 5 outside [0, 3)") != nullptr,
           std::string("message names layer_index: ") + camGetLastErrorMessage());
    bool untouched = true;
    for (uint16_t v : out) untouched = untouched && v == 0xBEEF;
    Expect(untouched, "out must be untouched after a device-detected error");

    // W1 on the same activations (its numerics are covered by tests/test_gmm.py): rows up to the total written, tail kept.
    layerIndex = 1;
    const int64_t n1 = 64;
    Layers w1 = MakeLayers(layers, e, i, n1, 5);
    std::vector<int8_t> y1(m * n1 / 2, 99);
    std::vector<float> y1Scale(m, -1.0f);
    aclTensor* ty1 = Make({m, n1 / 2}, ACL_INT8, y1.data());
    aclTensor* ty1s = Make({m}, ACL_FLOAT, y1Scale.data());
    aclTensorList* tw1 = WeightList(w1, e, i, n1);
    aclTensorList* tw1s = ScaleList(w1, e, n1);
    uint64_t wsSize = 0;
    aclOpExecutor* ex = nullptr;
    aclnnStatus st = aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize(ty, tys, tw1, tw1s, tgl, tli, 1, ty1, ty1s,
                                                                     &wsSize, &ex);
    Expect(st == ACLNN_SUCCESS, std::string("W1 GetWorkspaceSize: ") + camGetLastErrorMessage());
    std::vector<uint8_t> workspace(wsSize);
    st = aclnnCamGmmSwigluQuantMultiLayer(workspace.data(), wsSize, ex, stream);
    Expect(st == ACLNN_SUCCESS, std::string("W1 launch: ") + camGetLastErrorMessage());
    Expect(camSynchronizeStream(stream, 60000) == ACLNN_SUCCESS, std::string("W1 sync: ") + camGetLastErrorMessage());
    for (int64_t r = 0; r < m; ++r) Expect((r < 8) == (y1Scale[r] > 0.0f), "W1 rows written exactly up to the total");
    Expect(y1[9 * n1 / 2] == 99, "W1 tail row untouched");

    // Lists of different lengths are refused in the first phase, naming the argument.
    std::vector<const aclTensor*> one = {Make({e, n1}, ACL_FLOAT, w1.scales[0].data())};
    aclTensorList* oneScale = aclCreateTensorList(one.data(), one.size());
    st = aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize(ty, tys, tw1, oneScale, tgl, tli, 1, ty1, ty1s, &wsSize, &ex);
    Expect(st == ACLNN_ERR_PARAM_INVALID, "weight lists of different lengths must be refused");
    Expect(std::strstr(camGetLastErrorMessage(), "weights (3 layers) and weight_scales (1 layers) must match") != nullptr,
           std::string("message names the lists: ") + camGetLastErrorMessage());

    aclDestroyTensorList(oneScale);
    aclDestroyTensorList(tw1);
    aclDestroyTensorList(tw1s);
    aclDestroyTensorList(tw);
    aclDestroyTensorList(tws);
    for (aclTensor* t : {ty, tys, tgl, tli, tout, ty1, ty1s}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    std::printf("backend %s: %s\n", camBackendName(), failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
