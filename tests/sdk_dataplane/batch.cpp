// The batch APIs and a placement table through the C API only (no Python): two Attention ranks (two replicas) and
// two FFN ranks, threads over the in-process transport. E = 3 experts on F = 2 ranks of 2 slots (E % F != 0), expert
// 0 replicated on both ranks; each Attention rank dispatches one unquantized round with the table
// (aclnnCamDispatchSendV2), each FFN rank serves with the batched dispatch_recv and combine_send until both replicas'
// rounds went through. Checked: each FFN rank's group table holds exactly the rows the documented replica rule
// (t + k0) % n sends it, k0 the token's first top-k index naming the expert (computed here on its own; Attention
// rank 1's token 1 names the replicated expert 0 twice, so both its rows go to one FFN rank), and every Attention
// output is its routed sum with an expert that scales a row by (expert + 1), the expert read from the table by slot:
// a row sent to a wrong slot or returned to a wrong (t, k) shows. The table buffer carries its epoch line (word 0:
// the epoch, 0 here): with the epoch word -1 (a rebalance rewriting the table) dispatch_send refuses naming it; the
// FFN ranks' weights epoch is 0 at creation, refuses a value that is not an epoch, and at -1 (weights being moved) no
// poll hands out work. Exit code 0 on success; failures print what differed.
#include <cam/cam.h>
#include <cam/window_layout.h>

#include "sdk_test_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace sdk_test;

// D P F E K H Bmax L slots bytes quant capacity window_tokens expert_slots
constexpr CamTopology kTopo{2, 1, 2, 3, 2, 32, 4, 1, 1, 2, 0, 8, 0, 2};
constexpr int64_t B = 4;
constexpr int64_t kW = 1 + 2 * kTopo.F;  // placement_width
// layer 0: expert 0 in slot 0 of both ranks, expert 1 in slot 1 of rank 0, expert 2 in slot 1 of rank 1
const std::vector<int64_t> kTable = {2, 0, 0, 1, 0, 1, 0, 1, -1, -1, 1, 1, 1, -1, -1};
constexpr int64_t kHeader = 8;  // the device buffer: epoch line (word 0), then the rows (docs/protocol.md §15)

// (FFN index, slot) of the row (t, k), row = token t's top-k ids: the documented rule, from the table
void Where(const int32_t* row, int64_t t, int64_t k, int64_t* f, int64_t* j) {
    const int64_t e = row[k];
    int64_t k0 = 0;
    while (row[k0] != e) ++k0;
    const int64_t n = kTable[e * kW];
    const int64_t r = (t + k0) % n;
    *f = kTable[e * kW + 1 + 2 * r];
    *j = kTable[e * kW + 2 + 2 * r];
}
int64_t ExpertIn(int64_t f, int64_t j) {
    for (int64_t e = 0; e < kTopo.E; ++e)
        for (int64_t i = 0; i < kTable[e * kW]; ++i)
            if (kTable[e * kW + 1 + 2 * i] == f && kTable[e * kW + 2 + 2 * i] == j) return e;
    return -1;
}

std::vector<int32_t> IdsOf(int64_t a) {
    std::vector<int32_t> ids = {0, 1, 0, 2, 2, 0, -1, 0};
    if (a == 1) ids = {1, 0, 0, 0, 2, -1, 0, 2};
    return ids;
}

int Attention(int64_t a, int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, ACL_BF16};
    camComm* comm = nullptr;
    CHECK(camCommCreateInProcess("sdk-batch", &kTopo, a, &cfg, 10000, &comm));
    aclrtStream stream = nullptr;
    aclrtCreateStream(&stream);
    std::vector<uint16_t> x(B * kTopo.H), out(B * kTopo.H);
    for (size_t i = 0; i < x.size(); ++i) x[i] = Bf16(static_cast<float>((i + 3 * a) % 9) - 4.0f);
    std::vector<int32_t> ids = IdsOf(a);
    std::vector<float> w = {0.5f, 0.25f, 1.0f, 2.0f, 0.75f, 1.5f, 3.0f, 0.125f};
    std::vector<int64_t> table(kHeader, 0);
    table.insert(table.end(), kTable.begin(), kTable.end());
    if (static_cast<int64_t>(table.size()) != cam::layout::placement_words(kTopo)) {
        std::printf("the table buffer has %zu words, the layout %lld\n", table.size(),
                    (long long)cam::layout::placement_words(kTopo));
        *result = 1;
        return 0;
    }
    aclTensor* tx = Tensor({B, kTopo.H}, ACL_BF16, x.data());
    aclTensor* ti = Tensor({B, kTopo.K}, ACL_INT32, ids.data());
    aclTensor* tw = Tensor({B, kTopo.K}, ACL_FLOAT, w.data());
    aclTensor* to = Tensor({B, kTopo.H}, ACL_BF16, out.data());
    aclTensor* tp = Tensor({static_cast<int64_t>(table.size())}, ACL_INT64, table.data());
    int bad = 0;
    // This topology has no contiguous placement: without the table the call is refused naming it.
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    if (aclnnCamDispatchSendGetWorkspaceSize(comm, tx, ti, 0, &ws, &ex) != ACLNN_ERR_PARAM_INVALID ||
        !std::strstr(camGetLastErrorMessage(), "placement is required")) {
        std::printf("a dispatch_send without a table was not refused: %s\n", camGetLastErrorMessage());
        ++bad;
    }
    // A table being rewritten (epoch word -1): refused by the kernel before anything is written, the comm usable.
    table[0] = -1;
    if (RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
            return aclnnCamDispatchSendV2GetWorkspaceSize(comm, tx, ti, 0, tp, ws, ex);
        }, aclnnCamDispatchSend, stream) != CAM_ERR_DEVICE_ARGUMENT ||
        !std::strstr(camGetLastErrorMessage(), "epoch word is -1")) {
        std::printf("a table with epoch -1 was not refused: %s\n", camGetLastErrorMessage());
        ++bad;
    }
    table[0] = 0;
    if (camCommSetWeightsEpoch(comm, 0) != ACLNN_ERR_PARAM_INVALID) {
        std::printf("an Attention rank set a weights epoch\n");
        ++bad;
    }
    CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamDispatchSendV2GetWorkspaceSize(comm, tx, ti, 0, tp, ws, ex);
    }, aclnnCamDispatchSend, stream));
    CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** ex) {
        return aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, ws, ex);
    }, aclnnCamCombineRecv, stream));
    for (int64_t t = 0; t < B; ++t) {
        for (int64_t h = 0; h < kTopo.H; ++h) {
            float acc = 0.0f;
            for (int64_t k = 0; k < kTopo.K; ++k) {
                const int64_t e = ids[t * kTopo.K + k];
                if (e == -1) continue;
                // the FFN side's expert: x * (e + 1) in fp32, rounded to bf16 once
                const float row = FromBf16(Bf16(FromBf16(x[t * kTopo.H + h]) * static_cast<float>(e + 1)));
                const float prod = w[t * kTopo.K + k] * row;
                acc = acc + prod;
            }
            if (out[t * kTopo.H + h] != Bf16(acc)) ++bad;
        }
    }
    if (bad) std::printf("rank %lld: %d output elements differ\n", (long long)a, bad);
    for (aclTensor* t : {tx, ti, tw, to, tp}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    camCommDestroy(comm);
    *result = bad;
    return 0;
}

int Ffn(int64_t f, int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, ACL_BF16};
    camComm* comm = nullptr;
    const int64_t rank = kTopo.D * kTopo.P + f;
    CHECK(camCommCreateInProcess("sdk-batch", &kTopo, rank, &cfg, 10000, &comm));
    aclrtStream stream = nullptr;
    aclrtCreateStream(&stream);
    const int64_t R = cam::layout::experts_per_ffn(kTopo), words = cam::layout::work_item_words(kTopo);
    const int64_t items = kTopo.D, budget = 2 * cam::layout::recv_rows(kTopo);
    std::vector<uint16_t> ex(budget * kTopo.H), expertOut(budget * kTopo.H);
    std::vector<float> scales(1);
    std::vector<int64_t> groups(items * R * 3), origin(budget * 3), wi(items * words);
    aclTensor* te = Tensor({budget, kTopo.H}, ACL_BF16, ex.data());
    aclTensor* ts = Tensor({1}, ACL_FLOAT, scales.data());
    aclTensor* tg = Tensor({items * R, 3}, ACL_INT64, groups.data());
    aclTensor* tor = Tensor({budget, 3}, ACL_INT64, origin.data());
    aclTensor* tw = Tensor({items, words}, ACL_INT64, wi.data());
    aclTensor* to = Tensor({budget, kTopo.H}, ACL_BF16, expertOut.data());
    // rows per (replica, slot) the rule sends here, and what the batches brought
    std::vector<int64_t> want(kTopo.D * R, 0), got(kTopo.D * R, 0);
    for (int64_t d = 0; d < kTopo.D; ++d) {
        const std::vector<int32_t> ids = IdsOf(d);
        for (int64_t t = 0; t < B; ++t)
            for (int64_t k = 0; k < kTopo.K; ++k) {
                if (ids[t * kTopo.K + k] == -1) continue;
                int64_t ff, j;
                Where(&ids[t * kTopo.K], t, k, &ff, &j);
                if (ff == f) ++want[d * R + j];
            }
    }
    int64_t epoch = -2;
    CHECK(camCommGetWeightsEpoch(comm, &epoch));
    int bad = 0;
    if (epoch != 0 || camCommSetWeightsEpoch(comm, -2) != ACLNN_ERR_PARAM_INVALID) {
        std::printf("FFN index %lld: weights epoch %lld at creation, or -2 accepted\n", (long long)f, (long long)epoch);
        ++bad;
    }
    // Weights being moved (-1): whatever the Attention ranks published meanwhile, no poll hands out work.
    CHECK(camCommSetWeightsEpoch(comm, -1));
    for (int polls = 0; polls < 4; ++polls) {
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamDispatchRecvBatchGetWorkspaceSize(comm, budget, te, ts, tg, tor, tw, ws, e);
        }, aclnnCamDispatchRecv, stream));
        for (int64_t i = 0; i < items; ++i) {
            if (wi[i * words + cam::kWiKind] == cam::kWiWork) {
                std::printf("FFN index %lld: a work item while the weights epoch was -1\n", (long long)f);
                ++bad;
            }
        }
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamCombineSendBatchGetWorkspaceSize(comm, budget, to, tw, ws, e);
        }, aclnnCamCombineSend, stream));
    }
    CHECK(camCommSetWeightsEpoch(comm, 0));
    int served = 0;
    for (int polls = 0; served < kTopo.D && polls < 400; ++polls) {
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamDispatchRecvBatchGetWorkspaceSize(comm, budget, te, ts, tg, tor, tw, ws, e);
        }, aclnnCamDispatchRecv, stream));
        int64_t row = 0;
        for (int64_t i = 0; i < items; ++i) {
            if (wi[i * words + cam::kWiKind] != cam::kWiWork) continue;
            ++served;
            const int64_t d = wi[i * words + cam::kWiReplica];
            for (int64_t j = 0; j < R; ++j) {
                const int64_t n = groups[(i * R + j) * 3 + 2], e = ExpertIn(f, j);
                got[d * R + j] += n;
                for (int64_t m = row; m < row + n; ++m)
                    for (int64_t h = 0; h < kTopo.H; ++h)
                        expertOut[m * kTopo.H + h] =
                            Bf16(FromBf16(ex[m * kTopo.H + h]) * static_cast<float>(e + 1));
                row += n;
            }
        }
        CHECK(RunOp([&](uint64_t* ws, aclOpExecutor** e) {
            return aclnnCamCombineSendBatchGetWorkspaceSize(comm, budget, to, tw, ws, e);
        }, aclnnCamCombineSend, stream));
    }
    if (served != kTopo.D || got != want) {
        std::printf("FFN index %lld: served %d items; rows per (replica, slot):", (long long)f, served);
        for (size_t i = 0; i < got.size(); ++i) std::printf(" %lld/%lld", (long long)got[i], (long long)want[i]);
        std::printf(" (got/want)\n");
        ++bad;
    }
    for (aclTensor* t : {te, ts, tg, tor, tw, to}) aclDestroyTensor(t);
    aclrtDestroyStream(stream);
    camCommDestroy(comm);
    *result = bad;
    return 0;
}

}  // namespace

int main() {
    int bad[4] = {-1, -1, -1, -1}, rc[4] = {1, 1, 1, 1};
    std::thread a0([&] { rc[0] = Attention(0, &bad[0]); });
    std::thread a1([&] { rc[1] = Attention(1, &bad[1]); });
    std::thread f0([&] { rc[2] = Ffn(0, &bad[2]); });
    std::thread f1([&] { rc[3] = Ffn(1, &bad[3]); });
    for (std::thread* t : {&a0, &a1, &f0, &f1}) t->join();
    for (int i = 0; i < 4; ++i)
        if (rc[i] || bad[i]) return 1;
    std::printf("ok\n");
    return 0;
}
