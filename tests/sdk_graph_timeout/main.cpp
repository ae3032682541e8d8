// Graph timeout and teardown through the SDK, for the sanitizer builds (tests/test_sanitize.py) and the default
// tier alike: a synchronize that gives up with replays queued, the graph destroyed at once under them, the stream
// then drained and destroyed; camGraphLaunchBounded's back-pressure (never more than maxQueued queued, a zero
// timeout refused with nothing queued); two threads replaying one graph on two streams; a stream destroyed with
// replays queued. Every buffer a replay touches is freed only after a synchronize saw the stream idle, so ASan
// reports any read of freed memory and TSan any race in the registry or the queue count.
#include <cam/cam.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../sdk/gmm_fixture.h"

using namespace sdk_test;

namespace {

constexpr int64_t kM = 24, kI = 48, kH = 64, kE = 3, kLayers = 2;

struct Fixture {
    std::vector<int8_t> y = std::vector<int8_t>(kM * kI);
    std::vector<float> yScale = std::vector<float>(kM);
    Layers w2 = MakeLayers(kLayers, kE, kI, kH, 5);
    std::vector<int64_t> groupList = {8, 4, 12};
    int64_t layerIndex = 1;
    std::vector<uint16_t> out = std::vector<uint16_t>(kM * kH);
    aclTensor *ty, *tys, *tgl, *tli, *tout;
    aclTensorList *tw, *tws;
    Fixture() {
        for (int64_t r = 0; r < kM * kI; ++r) y[r] = static_cast<int8_t>((r * 17 + 3) % 255 - 127);
        for (int64_t r = 0; r < kM; ++r) yScale[r] = 0.02f * static_cast<float>(r + 1);
        ty = Make({kM, kI}, ACL_INT8, y.data());
        tys = Make({kM}, ACL_FLOAT, yScale.data());
        tgl = Make({kE}, ACL_INT64, groupList.data());
        tli = Make({1}, ACL_INT64, &layerIndex);
        tout = Make({kM, kH}, ACL_BF16, out.data());
        tw = WeightList(w2, kE, kI, kH);
        tws = ScaleList(w2, kE, kH);
    }
    ~Fixture() {
        aclDestroyTensorList(tw);
        aclDestroyTensorList(tws);
        for (aclTensor* t : {ty, tys, tgl, tli, tout}) aclDestroyTensor(t);
    }
    // W2 captured on `stream` (workspace from the pool); returns the graph or null.
    camGraph* Capture(aclrtStream stream) {
        if (camStreamBeginCapture(stream, CAM_CAPTURE_MODE_RELAXED) != ACLNN_SUCCESS) return nullptr;
        uint64_t wsSize = 0;
        aclOpExecutor* ex = nullptr;
        void* ws = nullptr;
        const bool ok = aclnnCamGmmMultiLayerGetWorkspaceSize(ty, tys, tw, tws, tgl, tli, 1, tout, &wsSize, &ex) ==
                            ACLNN_SUCCESS &&
                        camStreamCaptureAllocWorkspace(stream, wsSize, &ws) == ACLNN_SUCCESS &&
                        aclnnCamGmmMultiLayer(ws, wsSize, ex, stream) == ACLNN_SUCCESS;
        camGraph* graph = nullptr;
        const bool ended = camStreamEndCapture(stream, &graph) == ACLNN_SUCCESS;
        return ok && ended ? graph : nullptr;
    }
};

// A synchronize that must succeed; a timeout here would leave work running on this program's buffers: stop.
void Drain(aclrtStream stream, const char* what) {
    const aclnnStatus st = camSynchronizeStream(stream, 120000);
    if (st == CAM_ERR_SYNC_TIMEOUT) {
        std::printf("FAIL: %s: the stream did not drain: %s\n", what, camGetLastErrorMessage());
        std::fflush(stdout);
        std::_Exit(1);
    }
    Expect(st == ACLNN_SUCCESS, std::string(what) + ": " + camGetLastErrorMessage());
}

}  // namespace

int main() {
    auto* f = new Fixture();
    aclrtStream stream = nullptr;
    Expect(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream");
    camGraph* graph = f->Capture(stream);
    Expect(graph != nullptr, std::string("capture: ") + camGetLastErrorMessage());
    if (!graph) return 1;

    // Back-pressure: 200 bounded launches never leave more than 2 queued.
    uint64_t peak = 0, queued = 0;
    for (int i = 0; i < 200; ++i) {
        Expect(camGraphLaunchBounded(graph, stream, 2, 60000) == ACLNN_SUCCESS,
               std::string("bounded launch: ") + camGetLastErrorMessage());
        Expect(camGraphQueuedReplays(graph, &queued) == ACLNN_SUCCESS, "queued");
        peak = queued > peak ? queued : peak;
    }
    Expect(peak >= 1 && peak <= 2, "at most 2 queued, got " + std::to_string(peak));
    Drain(stream, "after bounded launches");
    Expect(camGraphQueuedReplays(graph, &queued) == ACLNN_SUCCESS && queued == 0, "none queued after a synchronize");
    Expect(camGraphLaunchBounded(graph, stream, 0, 0) == ACLNN_ERR_PARAM_INVALID, "maxQueued 0 refused");

    // A full queue with a zero timeout: refused, nothing queued.
    for (int i = 0; i < 50; ++i) camGraphLaunch(graph, stream);
    const aclnnStatus full = camGraphLaunchBounded(graph, stream, 1, 0);
    Expect(camGraphQueuedReplays(graph, &queued) == ACLNN_SUCCESS, "queued");
    if (queued >= 1) {  // the 50 are not all done yet (the usual case): the bounded launch must have been refused
        Expect(full == CAM_ERR_SYNC_TIMEOUT || full == ACLNN_SUCCESS, "full queue: timeout or a slot came free");
    }

    // A synchronize that gives up (0 ms) with replays queued, then the graph destroyed at once: the pool lives until
    // the last replay ran; the stream is then drained before anything it uses is freed.
    for (int i = 0; i < 200; ++i) camGraphLaunch(graph, stream);
    const aclnnStatus gaveUp = camSynchronizeStream(stream, 0);
    Expect(gaveUp == CAM_ERR_SYNC_TIMEOUT || gaveUp == ACLNN_SUCCESS, "a 0 ms synchronize");
    Expect(camGraphDestroy(graph) == ACLNN_SUCCESS, "destroy under queued replays");
    Expect(camGraphLaunch(graph, stream) == CAM_ERR_GRAPH_INVALID, "a destroyed graph is refused");
    Drain(stream, "drain after destroy");

    // Two threads replay one graph on two streams at once (the registry, the queue count, the launched lists).
    graph = f->Capture(stream);
    Expect(graph != nullptr, "capture 2");
    aclrtStream other = nullptr;
    Expect(aclrtCreateStream(&other) == ACL_SUCCESS, "second stream");
    std::atomic<int> bad{0};
    auto replay = [&](aclrtStream s) {
        for (int i = 0; i < 100; ++i)
            if (camGraphLaunchBounded(graph, s, 3, 60000) != ACLNN_SUCCESS) ++bad;
        if (camSynchronizeStream(s, 120000) != ACLNN_SUCCESS) ++bad;
    };
    std::thread a(replay, stream), b(replay, other);
    a.join();
    b.join();
    Expect(bad == 0, "concurrent replays on two streams");

    // Teardown with replays queued: destroying the stream runs what it queued first, then the graph goes.
    for (int i = 0; i < 50; ++i) camGraphLaunch(graph, other);
    Expect(aclrtDestroyStream(other) == ACL_SUCCESS, "destroy a stream with replays queued");
    Expect(camGraphDestroy(graph) == ACLNN_SUCCESS, "destroy graph 2");
    Drain(stream, "final");
    aclrtDestroyStream(stream);
    delete f;  // every replay ended: nothing of the fixture is in use
    std::printf("backend %s: %s\n", camBackendName(), failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
