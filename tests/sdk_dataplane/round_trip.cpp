// The data plane through the C API only (no Python): two threads as ranks (one Attention, one FFN) over the
// in-process transport, one unquantized round trip with an identity expert, then a bounded wait that expires.
// Exit code 0 on success; failures print what differed.
#include <cam/cam.h>
#include <cam/window_layout.h>

#include "sdk_test_util.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace sdk_test;

// H = 8192 bf16: 16 KiB rows, so a 64 KiB RowBatch (kRowBatchUbBytes) holds 4 of them and the round's routed rows
// take further passes in dispatch_recv's gather and combine_send's scatter. B = 20 tokens: on a description without
// a byte floor per block (CAM_TWIN_PLATFORM=ascend910b4) tiling gives a block per 16 rows, so dispatch_send runs two
// blocks that both write the FFN rank's window before block 0 signals it.
constexpr CamTopology kTopo{1, 1, 1, 4, 2, 8192, 20, 2, 1, 2, 0, 64};  // D P F E K H Bmax L slots bytes quant cap
constexpr int64_t B = 20;

// Token t's experts: t % 4 and (t + 1) % 4, the second slot empty for every fifth token.
int32_t ExpertOf(int64_t t, int64_t k) { return k == 1 && t % 5 == 4 ? -1 : static_cast<int32_t>((t + k) % 4); }

int Attention(int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, ACL_BF16};
    camComm* comm = nullptr;
    CHECK(camCommCreateInProcess("sdk-plane", &kTopo, 0, &cfg, 10000, &comm));
    aclrtStream stream = nullptr;
    aclrtCreateStream(&stream);
    std::vector<uint16_t> x(B * kTopo.H);
    for (size_t i = 0; i < x.size(); ++i) x[i] = Bf16(static_cast<float>(i % 7) - 3.0f);
    std::vector<int32_t> ids(B * kTopo.K);
    std::vector<float> w(B * kTopo.K);
    for (int64_t i = 0; i < B * kTopo.K; ++i) {
        ids[i] = ExpertOf(i / kTopo.K, i % kTopo.K);
        w[i] = 0.25f * static_cast<float>(1 + i % 7);
    }
    std::vector<uint16_t> out(B * kTopo.H);
    aclTensor* tx = Tensor({B, kTopo.H}, ACL_BF16, x.data());
    aclTensor* ti = Tensor({B, kTopo.K}, ACL_INT32, ids.data());
    aclTensor* tw = Tensor({B, kTopo.K}, ACL_FLOAT, w.data());
    aclTensor* to = Tensor({B, kTopo.H}, ACL_BF16, out.data());
    CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamDispatchSendGetWorkspaceSize(comm, tx, ti, 1, ws, ex);
    }, aclnnCamDispatchSend, stream));
    CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, ws, ex);
    }, aclnnCamCombineRecv, stream));
    int bad = 0;
    for (int64_t t = 0; t < B; ++t) {
        for (int64_t h = 0; h < kTopo.H; ++h) {
            float acc = 0.0f;
            for (int64_t k = 0; k < kTopo.K; ++k) {
                if (ids[t * kTopo.K + k] == -1) continue;
                const float prod = w[t * kTopo.K + k] * FromBf16(x[t * kTopo.H + h]);
                acc = acc + prod;
            }
            if (out[t * kTopo.H + h] != Bf16(acc)) ++bad;
        }
    }
    if (bad) std::printf("combine output: %d elements differ\n", bad);
    // A second combine_recv has nothing in flight: refused before anything happens, the comm stays usable.
    aclnnStatus st = RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, ws, ex);
    }, aclnnCamCombineRecv, stream);
    if (st != CAM_ERR_COMM_PROTOCOL) {
        std::printf("expected CAM_ERR_COMM_PROTOCOL, got %d\n", st);
        ++bad;
    }
    // Dispatch a round no FFN rank will complete: combine_recv's bounded wait expires naming FFN rank 1.
    CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamDispatchSendGetWorkspaceSize(comm, tx, ti, 0, ws, ex);
    }, aclnnCamDispatchSend, stream));
    st = RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, ws, ex);
    }, aclnnCamCombineRecv, stream);
    if (st != CAM_ERR_COMM_TIMEOUT || !std::strstr(camGetLastErrorMessage(), "FFN rank 1")) {
        std::printf("expected a timeout naming FFN rank 1, got %d: %s\n", st, camGetLastErrorMessage());
        ++bad;
    }
    for (aclTensor* t : {tx, ti, tw, to}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    camCommDestroy(comm);
    *result = bad;
    return 0;
}

int Ffn(int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, ACL_BF16};
    camComm* comm = nullptr;
    CHECK(camCommCreateInProcess("sdk-plane", &kTopo, 1, &cfg, 10000, &comm));
    aclrtStream stream = nullptr;
    aclrtCreateStream(&stream);
    const int64_t n = cam::layout::recv_rows(kTopo), words = cam::layout::work_item_words(kTopo);
    const int64_t R = cam::layout::experts_per_ffn(kTopo);
    std::vector<uint16_t> ex(n * kTopo.H), expertOut(n * kTopo.H);
    std::vector<float> scales(1);
    std::vector<int64_t> counts(R), wi(words);
    aclTensor* te = Tensor({n, kTopo.H}, ACL_BF16, ex.data());
    aclTensor* ts = Tensor({1}, ACL_FLOAT, scales.data());
    aclTensor* tc = Tensor({R}, ACL_INT64, counts.data());
    aclTensor* tw = Tensor({words}, ACL_INT64, wi.data());
    aclTensor* to = Tensor({n, kTopo.H}, ACL_BF16, expertOut.data());
    // The same two calls every iteration (what a captured loop replays); an empty work item passes through.
    for (int served = 0, polls = 0; served < 1 && polls < 400; ++polls) {
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamDispatchRecvGetWorkspaceSize(comm, te, ts, tc, tw, ws, e);
        }, aclnnCamDispatchRecv, stream));
        expertOut = ex;  // identity expert
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamCombineSendGetWorkspaceSize(comm, to, tw, ws, e);
        }, aclnnCamCombineSend, stream));
        served += wi[cam::kWiKind] == cam::kWiWork;
    }
    int bad = 0;
    std::vector<int64_t> expected(R);
    int64_t rows = 0;
    for (int64_t t = 0; t < B; ++t) {
        for (int64_t k = 0; k < kTopo.K; ++k) {
            if (ExpertOf(t, k) < 0) continue;
            ++expected[ExpertOf(t, k)];
            ++rows;
        }
    }
    if (wi[cam::kWiLayer] != 1 || wi[cam::kWiRows] != rows || counts != expected) {
        std::printf("work item: layer %lld rows %lld\n", (long long)wi[cam::kWiLayer], (long long)wi[cam::kWiRows]);
        ++bad;
    }
    for (aclTensor* t : {te, ts, tc, tw, to}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    // Stay mapped until the Attention rank's last wait expired (windows are reference counted anyway).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    camCommDestroy(comm);
    *result = bad;
    return 0;
}

}  // namespace

int main() {
    int attnBad = -1, ffnBad = -1, attnRc = 1, ffnRc = 1;
    std::thread a([&] { attnRc = Attention(&attnBad); });
    std::thread f([&] { ffnRc = Ffn(&ffnBad); });
    a.join();
    f.join();
    if (attnRc || ffnRc || attnBad || ffnBad) return 1;
    std::printf("ok\n");
    return 0;
}
