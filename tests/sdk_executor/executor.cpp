// Executors and communicator lifetime through the C API only: an executor runs once, a second
// run or a handle that is not a live cam executor is refused, an executor of another op is refused and stays
// usable for its own op, a null stream is the default stream, and camCommDestroy refuses while an op of the
// communicator is in flight. Prints "ok" and exits 0 when every check held; each failure prints a line.
#include <cam/cam.h>
#include <cam/window_layout.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
    if (!ok) {
        std::printf("FAIL: %s (last error: %s)\n", what.c_str(), camGetLastErrorMessage());
        ++failures;
    }
}

bool MessageHas(const std::string& needle) { return std::strstr(camGetLastErrorMessage(), needle.c_str()) != nullptr; }

aclTensor* Tensor(std::vector<int64_t> shape, aclDataType dtype, void* data) {
    return aclCreateTensor(shape.data(), shape.size(), dtype, nullptr, 0, ACL_FORMAT_ND, shape.data(), shape.size(),
                           data);
}

void Executors() {
    const int64_t m = 2, h = 8;
    std::vector<uint16_t> x(m * h, 0x3f80);  // bf16 1.0
    x[3] = 0x4000;                            // bf16 2.0: row 0's amax
    std::vector<int8_t> q(m * h, 0);
    std::vector<float> scale(m, 0.0f);
    aclTensor* tx = Tensor({m, h}, ACL_BF16, x.data());
    aclTensor* tq = Tensor({m, h}, ACL_INT8, q.data());
    aclTensor* ts = Tensor({m}, ACL_FLOAT, scale.data());

    uint64_t ws = 1;
    aclOpExecutor* ex = nullptr;
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &ws, &ex) == ACLNN_SUCCESS, "dynamic_quant phase 1");
    Expect(aclnnCamDynamicQuant(nullptr, ws, ex, nullptr) == ACLNN_SUCCESS, "phase 2 on the default (null) stream");
    Expect(camSynchronizeStream(nullptr, 60000) == ACLNN_SUCCESS, "synchronize the default stream");
    Expect(q[3] == 127 && q[0] == 64 && q[h] == 127 && scale[0] == 2.0f / 127.0f, "dynamic_quant result");

    // The same executor again: refused, nothing launched (used to be a use-after-free).
    q.assign(q.size(), 0);
    Expect(aclnnCamDynamicQuant(nullptr, ws, ex, nullptr) == ACLNN_ERR_PARAM_INVALID && MessageHas("not live"),
           "second run of one executor is refused");
    Expect(camSynchronizeStream(nullptr, 60000) == ACLNN_SUCCESS && q[3] == 0, "the refused run wrote nothing");

    // An executor of another op: refused naming both ops, then still runs as its own op.
    aclOpExecutor* ex2 = nullptr;
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &ws, &ex2) == ACLNN_SUCCESS, "second phase 1");
    Expect(aclnnCamGmmMultiLayer(nullptr, 0, ex2, nullptr) == ACLNN_ERR_PARAM_INVALID &&
               MessageHas("made for dynamic_quant, not gmm_multi_layer"),
           "executor of another op is refused");
    Expect(aclnnCamDispatchSend(nullptr, 0, ex2, nullptr) == ACLNN_ERR_PARAM_INVALID, "also by dispatch_send");
    Expect(camSynchronizeStream(nullptr, 60000) == ACLNN_SUCCESS && q[3] == 0, "the refused op wrote nothing");
    Expect(aclnnCamDynamicQuant(nullptr, 0, ex2, nullptr) == ACLNN_SUCCESS, "it still runs as its own op");
    Expect(camSynchronizeStream(nullptr, 60000) == ACLNN_SUCCESS && q[3] == 127, "and computes");

    // An executor that will not run is released by camDestroyExecutor; it is not live afterwards.
    aclOpExecutor* ex3 = nullptr;
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &ws, &ex3) == ACLNN_SUCCESS, "third phase 1");
    Expect(camDestroyExecutor(ex3) == ACLNN_SUCCESS, "an unrun executor is destroyed");
    Expect(aclnnCamDynamicQuant(nullptr, 0, ex3, nullptr) == ACLNN_ERR_PARAM_INVALID && MessageHas("not live"),
           "a destroyed executor does not run");
    Expect(camDestroyExecutor(ex3) == ACLNN_ERR_PARAM_INVALID && MessageHas("not live"), "nor is destroyed twice");
    Expect(camDestroyExecutor(nullptr) == ACLNN_SUCCESS, "destroying null is a no-op");

    // An argument check makes no executor and writes nothing, even with data.
    camBeginArgumentCheck();
    aclOpExecutor* none = reinterpret_cast<aclOpExecutor*>(0x1);
    q.assign(q.size(), 0);
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &ws, &none) == ACLNN_SUCCESS && none == nullptr,
           "an argument check hands out no executor");
    aclTensor* noData = Tensor({m, h}, ACL_BF16, nullptr);
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(noData, tq, ts, &ws, &none) == ACLNN_SUCCESS,
           "an argument check takes tensors without data");
    aclTensor* wrongNoData = Tensor({m, h}, ACL_FLOAT, nullptr);
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(wrongNoData, tq, ts, &ws, &none) == CAM_ERR_PARAM_DTYPE &&
               MessageHas("dynamic_quant: x must be bfloat16 or float16, got float32"),
           "and refuses as the op does");
    camEndArgumentCheck();
    Expect(aclnnCamDynamicQuantGetWorkspaceSize(noData, tq, ts, &ws, &none) == ACLNN_ERR_PARAM_NULLPTR &&
               MessageHas("x has no data"),
           "outside an argument check a tensor without data is refused");
    Expect(q[3] == 0, "the argument check wrote nothing");
    aclDestroyTensor(noData);
    aclDestroyTensor(wrongNoData);

    // A view offset is caller memory too: one before the data or beyond any mappable address is refused, naming
    // the tensor; offset 0 (every call above) is the control.
    for (int64_t offset : {int64_t{-1}, int64_t{1} << 60}) {
        const int64_t dims[] = {m, h};
        aclTensor* shifted = aclCreateTensor(dims, 2, ACL_BF16, nullptr, offset, ACL_FORMAT_ND, dims, 2, x.data());
        aclOpExecutor* never = nullptr;
        Expect(shifted && aclnnCamDynamicQuantGetWorkspaceSize(shifted, tq, ts, &ws, &never) ==
                              ACLNN_ERR_PARAM_INVALID &&
                   MessageHas("dynamic_quant: x has view offset " + std::to_string(offset)) && never == nullptr,
               "view offset " + std::to_string(offset) + " is refused naming x");
        aclDestroyTensor(shifted);
    }

    // Handles that were never made by cam.
    Expect(aclnnCamDynamicQuant(nullptr, 0, reinterpret_cast<aclOpExecutor*>(0x1234), nullptr) ==
               ACLNN_ERR_PARAM_INVALID,
           "forged handle refused");
    Expect(aclnnCamDynamicQuant(nullptr, 0, nullptr, nullptr) == ACLNN_ERR_PARAM_NULLPTR, "null handle refused");
    for (aclTensor* t : {tx, tq, ts}) aclDestroyTensor(t);
}

constexpr CamTopology kTopo{1, 1, 1, 4, 2, 64, 4, 2, 1, 2, 0, 8};  // D P F E K H Bmax L slots bytes quant cap
std::atomic<bool> attentionDone{false};

void Attention() {
    camCommConfig cfg{1'000'000'000, 50'000'000, ACL_BF16};  // a 1 s bound on the wait below
    camComm* comm = nullptr;
    if (camCommCreateInProcess("sdk-executor", &kTopo, 0, &cfg, 10000, &comm) != ACLNN_SUCCESS) {
        Expect(false, "attention comm");
        attentionDone = true;
        return;
    }
    aclrtStream stream = nullptr;
    Expect(aclrtCreateStream(&stream) == ACL_SUCCESS, "create stream");
    const int64_t b = 1;
    std::vector<uint16_t> x(b * kTopo.H, 0x3f80);
    std::vector<int32_t> ids = {0, 1};
    std::vector<float> w = {1.0f, 1.0f};
    std::vector<uint16_t> out(b * kTopo.H);
    aclTensor* tx = Tensor({b, kTopo.H}, ACL_BF16, x.data());
    aclTensor* ti = Tensor({b, kTopo.K}, ACL_INT32, ids.data());
    aclTensor* tw = Tensor({b, kTopo.K}, ACL_FLOAT, w.data());
    aclTensor* to = Tensor({b, kTopo.H}, ACL_BF16, out.data());

    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    Expect(aclnnCamDispatchSendGetWorkspaceSize(comm, tx, ti, 0, &ws, &ex) == ACLNN_SUCCESS, "dispatch_send phase 1");
    std::vector<uint8_t> workspace(ws ? ws : 1);
    // A second phase refused for its workspace leaves the executor live: the corrected call runs it.
    Expect(ws > 0, "dispatch_send needs a workspace");
    Expect(aclnnCamDispatchSend(nullptr, ws, ex, stream) == ACLNN_ERR_PARAM_INVALID && MessageHas("stays usable"),
           "a null workspace is refused");
    Expect(aclnnCamDispatchSend(workspace.data(), ws - 1, ex, stream) == ACLNN_ERR_PARAM_INVALID,
           "a short workspace is refused");
    Expect(aclnnCamDispatchSend(workspace.data(), ws, ex, stream) == ACLNN_SUCCESS, "dispatch_send phase 2");
    Expect(camSynchronizeStream(stream, 60000) == ACLNN_SUCCESS, "dispatch_send synchronize");
    Expect(aclnnCamDispatchSend(workspace.data(), ws, ex, stream) == ACLNN_ERR_PARAM_INVALID && MessageHas("not live"),
           "second run of a dispatch_send executor is refused");

    // No FFN rank serves: combine_recv waits (bounded by the 1 s timeout). Meanwhile destroy must refuse.
    Expect(aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, &ws, &ex) == ACLNN_SUCCESS, "combine_recv phase 1");
    std::vector<uint8_t> workspace2(ws ? ws : 1);
    Expect(aclnnCamCombineRecv(workspace2.data(), ws, ex, stream) == ACLNN_SUCCESS, "combine_recv phase 2");
    Expect(camCommDestroy(comm) == CAM_ERR_COMM_BUSY && MessageHas("1 op(s) still queued or running"),
           "destroy refuses while an op is in flight");
    int64_t status[8];
    int64_t abortWord = -1;
    Expect(camCommGetStatus(comm, status, &abortWord) == ACLNN_SUCCESS, "the refused destroy freed nothing");
    Expect(camSynchronizeStream(stream, 60000) == CAM_ERR_COMM_TIMEOUT, "the wait expired");
    Expect(camCommDestroy(comm) == ACLNN_SUCCESS, "destroy after the stream passed the op");
    for (aclTensor* t : {tx, ti, tw, to}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    attentionDone = true;
}

void Ffn() {
    camCommConfig cfg{1'000'000'000, 50'000'000, ACL_BF16};
    camComm* comm = nullptr;
    if (camCommCreateInProcess("sdk-executor", &kTopo, 1, &cfg, 10000, &comm) != ACLNN_SUCCESS) {
        Expect(false, "ffn comm");
        return;
    }
    for (int i = 0; i < 600 && !attentionDone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Expect(camCommDestroy(comm) == ACLNN_SUCCESS, "ffn destroy with nothing in flight");
}

}  // namespace

int main() {
    Executors();
    std::thread a(Attention), f(Ffn);
    a.join();
    f.join();
    if (failures) return 1;
    std::printf("ok\n");
    return 0;
}
