// window_table through the installed SDK on the twin: a registered HCCL context is turned into the peer table
// exactly; a context with the wrong rank count, the wrong rank id or a null window is refused by the synchronize
// with a sentence naming it and the table is left as it was; an unknown group is refused before anything runs; and
// the table of a plane built by camCommCreateInProcess (through this op) is every rank's window, as before; the
// op gives the client the init tiling of each SoC's context layout (A2 and A3 descriptions); a plane larger than
// the table's 32 ranks is refused when it is created.
// Prints "ok" or what differed.
#include <cam/cam.h>
#include <cam/window_layout.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr CamTopology kTopo{1, 1, 1, 4, 2, 64, 4, 2, 1, 2, 0, 8};  // world size 2
constexpr int64_t kSentinel = 0x5a5a5a5a;

// Runs the op for (group, rank) into `peers`; returns its status (the message is camGetLastErrorMessage()).
aclnnStatus Run(const char* group, int64_t rank, std::vector<int64_t>* peers) {
    const int64_t world = cam::layout::world_size(kTopo);
    peers->assign(world, kSentinel);
    int64_t shape[1] = {world};
    aclTensor* t = aclCreateTensor(shape, 1, ACL_INT64, nullptr, 0, ACL_FORMAT_ND, shape, 1, peers->data());
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    aclnnStatus st = aclnnCamWindowTableGetWorkspaceSize(&kTopo, rank, group, t, &ws, &ex);
    if (st == ACLNN_SUCCESS) {
        aclrtStream stream = nullptr;
        aclrtCreateStream(&stream);
        std::vector<uint8_t> workspace(ws);
        st = aclnnCamWindowTable(workspace.data(), ws, ex, stream);
        if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 60000);
        if (st == CAM_ERR_SYNC_TIMEOUT) {
            std::printf("synchronize timed out: %s\n", camGetLastErrorMessage());
            std::_Exit(1);  // the kernel may still write its workspace: never free it
        }
        aclrtDestroyStream(stream);
    }
    aclDestroyTensor(t);
    return st;
}

int Expect(const char* what, aclnnStatus st, aclnnStatus want, const char* text, const std::vector<int64_t>& peers,
           const std::vector<int64_t>& table) {
    const std::string message = st ? camGetLastErrorMessage() : "";
    if (st != want || (text && message.find(text) == std::string::npos) || peers != table) {
        std::printf("%s: status %d (want %d), message '%s', table %s\n", what, st, want, message.c_str(),
                    peers == table ? "as expected" : "differs");
        return 1;
    }
    return 0;
}

}  // namespace

int main() {
    alignas(64) static uint8_t w0[64], w1[64];
    const uint64_t windows[2] = {reinterpret_cast<uintptr_t>(w0), reinterpret_cast<uintptr_t>(w1)};
    const std::vector<int64_t> good = {static_cast<int64_t>(windows[0]), static_cast<int64_t>(windows[1])};
    const std::vector<int64_t> untouched(2, kSentinel);
    std::vector<int64_t> peers;
    int bad = 0;

    camTwinHcclRegisterContext("g-good", 1, 2, windows, 2);
    bad += Expect("control", Run("g-good", 1, &peers), ACLNN_SUCCESS, nullptr, peers, good);
    // The host fills the init tiling for the SoC: the client reads A2's flat context on Ascend910B and A3's per-rank
    // records on Ascend910_93 (a zeroed tiling makes it read A3's on A2: twin rule hccl-init-device-type).
    for (const char* soc : {"ascend910b", "ascend910_93"}) {
        camSetTwinPlatform(soc);
        bad += Expect(soc, Run("g-good", 1, &peers), ACLNN_SUCCESS, nullptr, peers, good);
    }
    camSetTwinPlatform("twin");

    camTwinHcclRegisterContext("g-dim", 1, 3, windows, 2);
    bad += Expect("rank count", Run("g-dim", 1, &peers), CAM_ERR_DEVICE_ARGUMENT,
                  "window_table: the HCCL context's rank count is 3, expected 2", peers, untouched);

    camTwinHcclRegisterContext("g-id", 0, 2, windows, 2);  // registered as rank 0's, with rank id 0 ...
    camTwinHcclRegisterContext("g-id", 1, 2, windows, 2);  // ... and rank 1's with rank id 1: a control
    bad += Expect("rank id control", Run("g-id", 0, &peers), ACLNN_SUCCESS, nullptr, peers, good);

    const uint64_t holed[2] = {windows[0], 0};
    camTwinHcclRegisterContext("g-null", 0, 2, holed, 2);
    bad += Expect("null window", Run("g-null", 0, &peers), CAM_ERR_DEVICE_ARGUMENT,
                  "the HCCL context's window of rank[1] is null", peers, untouched);

    bad += Expect("unknown group", Run("g-none", 0, &peers), ACLNN_ERR_PARAM_INVALID,
                  "group 'g-none': no HCCL context is registered for rank 0", peers, untouched);

    // The group goes away between the two phases. The executor used to keep the context's address from
    // phase 1 and launch on freed memory; now the second phase looks the group up again and refuses.
    {
        camTwinHcclRegisterContext("g-gone", 1, 2, windows, 2);
        std::vector<int64_t> table(2, kSentinel);
        int64_t shape[1] = {2};
        aclTensor* t = aclCreateTensor(shape, 1, ACL_INT64, nullptr, 0, ACL_FORMAT_ND, shape, 1, table.data());
        uint64_t ws = 0;
        aclOpExecutor* ex = nullptr;
        aclnnStatus st = aclnnCamWindowTableGetWorkspaceSize(&kTopo, 1, "g-gone", t, &ws, &ex);
        camTwinHcclUnregisterContext("g-gone", 1);
        for (int i = 0; i < 64; ++i) {  // reuse the freed context's memory, as a later plane would
            camTwinHcclRegisterContext(("g-other-" + std::to_string(i)).c_str(), 1, 2, holed, 2);
        }
        aclrtStream stream = nullptr;
        aclrtCreateStream(&stream);
        std::vector<uint8_t> workspace(ws);
        if (st == ACLNN_SUCCESS) st = aclnnCamWindowTable(workspace.data(), ws, ex, stream);
        if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 60000);
        bad += Expect("group withdrawn between the phases", st, ACLNN_ERR_PARAM_INVALID,
                      "group 'g-gone': no HCCL context is registered for rank 1", table, untouched);
        // Control: the same two phases with the group still registered.
        camTwinHcclRegisterContext("g-stays", 1, 2, windows, 2);
        st = aclnnCamWindowTableGetWorkspaceSize(&kTopo, 1, "g-stays", t, &ws, &ex);
        if (st == ACLNN_SUCCESS) st = aclnnCamWindowTable(workspace.data(), ws, ex, stream);
        if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 60000);
        bad += Expect("group kept between the phases", st, ACLNN_SUCCESS, nullptr, table, good);
        aclrtDestroyStream(stream);
        aclDestroyTensor(t);
    }

    // A plane built through the op: its table is every rank's window, the table the transports gave before.
    camComm* comms[2] = {nullptr, nullptr};
    aclnnStatus created[2] = {-1, -1};
    camCommConfig cfg{2'000'000'000, 50'000'000, ACL_BF16};
    std::thread t0([&] { created[0] = camCommCreateInProcess("wt-plane", &kTopo, 0, &cfg, 10000, &comms[0]); });
    std::thread t1([&] { created[1] = camCommCreateInProcess("wt-plane", &kTopo, 1, &cfg, 10000, &comms[1]); });
    t0.join();
    t1.join();
    if (created[0] || created[1]) {
        std::printf("plane creation failed: %d %d\n", created[0], created[1]);
        return 1;
    }
    uint64_t bases[2];
    for (int r = 0; r < 2; ++r) {
        void* base = nullptr;
        uint64_t bytes = 0;
        camCommGetWindow(comms[r], &base, &bytes);
        bases[r] = reinterpret_cast<uintptr_t>(base);
    }
    for (int r = 0; r < 2; ++r) {
        int64_t table[2] = {0, 0};
        const aclnnStatus st = camCommGetPeerTable(comms[r], table, 2);
        if (st || table[0] != static_cast<int64_t>(bases[0]) || table[1] != static_cast<int64_t>(bases[1])) {
            std::printf("rank %d's peer table differs from the windows (status %d)\n", r, st);
            ++bad;
        }
    }
    for (camComm* c : comms) camCommDestroy(c);
    // A plane past the 32 windows the table is read from is refused by name before any window is created (the
    // 2-rank plane above is the control).
    {
        constexpr CamTopology big{32, 1, 1, 4, 2, 64, 4, 2, 1, 2, 0, 8};  // world size 33
        camComm* c = nullptr;
        const aclnnStatus st = camCommCreateInProcess("wt-big", &big, 0, &cfg, 1000, &c);
        const std::string message = st ? camGetLastErrorMessage() : "";
        if (st != ACLNN_ERR_PARAM_INVALID || c != nullptr ||
            message.find("camCommCreateInProcess: world size 33 exceeds 32") == std::string::npos) {
            std::printf("world 33: status %d, message '%s'\n", st, message.c_str());
            ++bad;
        }
    }
    for (const char* g : {"g-good", "g-dim", "g-id", "g-null"})
        for (int r = 0; r < 2; ++r) camTwinHcclUnregisterContext(g, r);
    if (bad) return 1;
    std::printf("ok\n");
    return 0;
}
