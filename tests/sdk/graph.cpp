// The capture C API (cam/cam_graph.h) through the SDK: W2 captured with pool workspace replays bit for bit like an
// eager call with the output poisoned before every replay; the capture rules fail at once and invalidate; a
// destroyed graph is refused; a bad layer_index met by a replay fails the next synchronize.
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
    const int64_t m = 12, i = 40, h = 72, e = 3, layers = 3;
    std::vector<int8_t> y(m * i);
    for (int64_t r = 0; r < m * i; ++r) y[r] = static_cast<int8_t>((r * 31 + 5) % 255 - 127);
    std::vector<float> yScale(m);
    for (int64_t r = 0; r < m; ++r) yScale[r] = 0.01f * static_cast<float>(r + 2);
    Layers w2 = MakeLayers(layers, e, i, h, 9);
    std::vector<int64_t> groupList = {4, 0, 6};
    int64_t layerIndex = 1;
    std::vector<uint16_t> out(m * h), eager(m * h);

    aclrtStream stream = nullptr;
    Expect(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream");
    aclTensor* ty = Make({m, i}, ACL_INT8, y.data());
    aclTensor* tys = Make({m}, ACL_FLOAT, yScale.data());
    aclTensor* tgl = Make({e}, ACL_INT64, groupList.data());
    aclTensor* tli = Make({1}, ACL_INT64, &layerIndex);
    aclTensor* tout = Make({m, h}, ACL_BF16, out.data());
    aclTensorList* tw = WeightList(w2, e, i, h);
    aclTensorList* tws = ScaleList(w2, e, h);

    // workspace: null = take it from the capture's pool; otherwise this buffer.
    auto launchW2 = [&](std::vector<uint8_t>* own) -> aclnnStatus {
        uint64_t wsSize = 0;
        aclOpExecutor* ex = nullptr;
        aclnnStatus st = aclnnCamGmmMultiLayerGetWorkspaceSize(ty, tys, tw, tws, tgl, tli, 1, tout, &wsSize, &ex);
        if (st != ACLNN_SUCCESS) return st;
        void* ws = nullptr;
        if (own) {
            own->resize(wsSize);
            ws = own->data();
        } else if ((st = camStreamCaptureAllocWorkspace(stream, wsSize, &ws)) != ACLNN_SUCCESS) {
            return st;
        }
        return aclnnCamGmmMultiLayer(ws, wsSize, ex, stream);
    };
    auto sync = [&]() {
        const aclnnStatus st = camSynchronizeStream(stream, 60000);
        if (st == CAM_ERR_SYNC_TIMEOUT) {  // work still runs on buffers this program owns: stop here
            std::printf("FAIL: synchronize: %s\n", camGetLastErrorMessage());
            std::fflush(stdout);
            std::_Exit(1);
        }
        return st;
    };

    std::vector<uint8_t> eagerWs;
    std::fill(out.begin(), out.end(), 0xFFFF);
    Expect(launchW2(&eagerWs) == ACLNN_SUCCESS && sync() == ACLNN_SUCCESS, "eager W2");
    eager = out;

    camCaptureStatus status = CAM_CAPTURE_STATUS_INVALIDATED;
    Expect(camStreamGetCaptureInfo(stream, &status, nullptr) == ACLNN_SUCCESS && status == CAM_CAPTURE_STATUS_NONE,
           "status NONE before a capture");
    Expect(camStreamBeginCapture(stream, CAM_CAPTURE_MODE_GLOBAL) == ACLNN_SUCCESS, "begin capture");
    Expect(launchW2(nullptr) == ACLNN_SUCCESS, std::string("captured W2: ") + camGetLastErrorMessage());
    uint64_t ops = 0;
    Expect(camStreamGetCaptureInfo(stream, &status, &ops) == ACLNN_SUCCESS && status == CAM_CAPTURE_STATUS_ACTIVE &&
               ops == 1, "ACTIVE with one recorded kernel (W2's mixed kernel)");
    camGraph* graph = nullptr;
    Expect(camStreamEndCapture(stream, &graph) == ACLNN_SUCCESS && graph, "end capture");
    for (int rep = 0; rep < 100; ++rep) {
        std::fill(out.begin(), out.end(), 0xFFFF);
        Expect(camGraphLaunch(graph, stream) == ACLNN_SUCCESS && sync() == ACLNN_SUCCESS, "replay");
        if (out != eager) {
            Expect(false, "replay " + std::to_string(rep) + " differs from eager");
            break;
        }
    }

    // A bad layer_index met by a replay: the next synchronize fails with the eager sentence.
    layerIndex = 5;
    std::fill(out.begin(), out.end(), 0xFFFF);
    Expect(camGraphLaunch(graph, stream) == ACLNN_SUCCESS, "launch");
    Expect(sync() == CAM_ERR_DEVICE_ARGUMENT &&
               std::strstr(camGetLastErrorMessage(), "gmm_multi_layer: layer_index 5 outside [0, 3)") != nullptr,
           std::string("replay with bad layer_index: ") + camGetLastErrorMessage());
    layerIndex = 1;

    // Rules: a workspace that is not graph-owned, a synchronize; each fails at once and invalidates.
    Expect(camStreamBeginCapture(stream, CAM_CAPTURE_MODE_RELAXED) == ACLNN_SUCCESS, "begin capture 2");
    std::vector<uint8_t> privateWs;
    Expect(launchW2(&privateWs) == CAM_ERR_CAPTURE_INVALIDATED &&
               std::strstr(camGetLastErrorMessage(), "not graph-owned") != nullptr,
           std::string("private workspace refused: ") + camGetLastErrorMessage());
    Expect(camStreamGetCaptureInfo(stream, &status, nullptr) == ACLNN_SUCCESS &&
               status == CAM_CAPTURE_STATUS_INVALIDATED, "INVALIDATED");
    camGraph* none = reinterpret_cast<camGraph*>(1);
    Expect(camStreamEndCapture(stream, &none) == CAM_ERR_CAPTURE_INVALIDATED && none == nullptr &&
               std::strstr(camGetLastErrorMessage(), "not graph-owned") != nullptr,
           std::string("ending an invalidated capture: ") + camGetLastErrorMessage());
    Expect(camStreamBeginCapture(stream, CAM_CAPTURE_MODE_RELAXED) == ACLNN_SUCCESS, "begin capture 3");
    Expect(camSynchronizeStream(stream, 1000) == CAM_ERR_CAPTURE_INVALIDATED, "synchronize in a capture refused");
    Expect(camStreamEndCapture(stream, &none) == CAM_ERR_CAPTURE_INVALIDATED &&
               std::strstr(camGetLastErrorMessage(), "synchronize") != nullptr,
           std::string("ending after a synchronize: ") + camGetLastErrorMessage());

    // Lifetime: a destroyed graph is refused, never dereferenced.
    Expect(camGraphDestroy(graph) == ACLNN_SUCCESS, "destroy");
    Expect(camGraphLaunch(graph, stream) == CAM_ERR_GRAPH_INVALID, "launching a destroyed graph is refused");
    Expect(camGraphDestroy(graph) == CAM_ERR_GRAPH_INVALID, "destroying twice is refused");
    Expect(sync() == ACLNN_SUCCESS, "final synchronize");

    aclDestroyTensorList(tw);
    aclDestroyTensorList(tws);
    for (aclTensor* t : {ty, tys, tgl, tli, tout}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    std::printf("backend %s: %s\n", camBackendName(), failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
