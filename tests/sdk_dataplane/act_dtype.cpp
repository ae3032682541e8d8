// The data-plane ops' activation dtype against camCommConfig.actDtype, through the C API only: for a
// plane created for bf16 and one created for fp16, each op's activation argument in the other dtype is refused by
// GetWorkspaceSize with CAM_ERR_PARAM_DTYPE and a message naming the op and the argument (nothing can have
// been launched: the launch is the second phase), and the same call in the plane's own dtype is accepted (the
// control, so a check that refuses everything cannot pass). Two threads are the two ranks (Attention 0, FFN 1)
// over the in-process transport. Exit code 0 on success; failures print what differed.
#include <cam/cam.h>
#include <cam/window_layout.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr CamTopology kTopo{1, 1, 1, 4, 2, 64, 4, 2, 1, 2, 0, 8};  // D P F E K H Bmax L slots bytes quant cap
constexpr int64_t B = 3;

aclTensor* Tensor(std::vector<int64_t> shape, aclDataType dtype, void* data) {
    return aclCreateTensor(shape.data(), shape.size(), dtype, nullptr, 0, ACL_FORMAT_ND, shape.data(), shape.size(),
                           data);
}

const char* Name(aclDataType d) { return d == ACL_BF16 ? "bfloat16" : "float16"; }

// One case: `status` and the last error of a GetWorkspaceSize call against what was expected.
bool Expect(const char* what, aclnnStatus status, bool refused, const std::string& op, const std::string& arg,
            aclDataType given, aclDataType comm) {
    const std::string message = status == ACLNN_SUCCESS ? "" : camGetLastErrorMessage();
    if (!refused) {
        if (status == ACLNN_SUCCESS) return true;
        std::printf("%s: %s in the plane's dtype was refused: %d %s\n", what, arg.c_str(), status, message.c_str());
        return false;
    }
    const std::string want = op + ": " + arg + " is " + Name(given);
    if (status == CAM_ERR_PARAM_DTYPE && message.find(want) != std::string::npos &&
        message.find(std::string(Name(comm)) + " activations") != std::string::npos)
        return true;
    std::printf("%s: %s in %s on a %s plane gave %d '%s' (want CAM_ERR_PARAM_DTYPE '%s...')\n", what,
                arg.c_str(), Name(given), Name(comm), status, message.c_str(), want.c_str());
    return false;
}

int Attention(aclDataType commDtype, const char* group, int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, commDtype};
    camComm* comm = nullptr;
    if (camCommCreateInProcess(group, &kTopo, 0, &cfg, 20000, &comm) != ACLNN_SUCCESS) {
        std::printf("attention create: %s\n", camGetLastErrorMessage());
        return *result = 1;
    }
    std::vector<uint16_t> x(B * kTopo.H), out(B * kTopo.H);
    std::vector<int32_t> ids(B * kTopo.K, 0);
    std::vector<float> w(B * kTopo.K, 1.0f);
    aclTensor* ti = Tensor({B, kTopo.K}, ACL_INT32, ids.data());
    aclTensor* tw = Tensor({B, kTopo.K}, ACL_FLOAT, w.data());
    bool ok = true;
    for (aclDataType given : {ACL_BF16, ACL_FLOAT16}) {
        const bool refused = given != commDtype;
        aclTensor* tx = Tensor({B, kTopo.H}, given, x.data());
        aclTensor* to = Tensor({B, kTopo.H}, given, out.data());
        uint64_t ws = 0;
        aclOpExecutor* ex = nullptr;
        ok &= Expect("dispatch_send", aclnnCamDispatchSendGetWorkspaceSize(comm, tx, ti, 0, &ws, &ex), refused,
                     "dispatch_send", "x", given, commDtype);
        ok &= Expect("combine_recv", aclnnCamCombineRecvGetWorkspaceSize(comm, ti, tw, to, &ws, &ex), refused,
                     "combine_recv", "out", given, commDtype);
        aclDestroyTensor(tx);
        aclDestroyTensor(to);
    }
    aclDestroyTensor(ti);
    aclDestroyTensor(tw);
    if (camCommDestroy(comm) != ACLNN_SUCCESS) {
        std::printf("attention destroy: %s\n", camGetLastErrorMessage());
        ok = false;
    }
    return *result = ok ? 0 : 1;
}

int Ffn(aclDataType commDtype, const char* group, int* result) {
    camCommConfig cfg{2'000'000'000, 50'000'000, commDtype};
    camComm* comm = nullptr;
    if (camCommCreateInProcess(group, &kTopo, 1, &cfg, 20000, &comm) != ACLNN_SUCCESS) {
        std::printf("ffn create: %s\n", camGetLastErrorMessage());
        return *result = 1;
    }
    const int64_t n = cam::layout::recv_rows(kTopo);
    std::vector<uint16_t> rows(n * kTopo.H);
    std::vector<float> scales(1);
    std::vector<int64_t> counts(cam::layout::experts_per_ffn(kTopo)), item(cam::layout::work_item_words(kTopo));
    aclTensor* ts = Tensor({1}, ACL_FLOAT, scales.data());
    aclTensor* tc = Tensor({static_cast<int64_t>(counts.size())}, ACL_INT64, counts.data());
    aclTensor* tw = Tensor({static_cast<int64_t>(item.size())}, ACL_INT64, item.data());
    bool ok = true;
    for (aclDataType given : {ACL_BF16, ACL_FLOAT16}) {
        const bool refused = given != commDtype;
        aclTensor* te = Tensor({n, kTopo.H}, given, rows.data());
        uint64_t ws = 0;
        aclOpExecutor* ex = nullptr;
        ok &= Expect("dispatch_recv", aclnnCamDispatchRecvGetWorkspaceSize(comm, te, ts, tc, tw, &ws, &ex), refused,
                     "dispatch_recv", "expand_x", given, commDtype);
        ok &= Expect("combine_send", aclnnCamCombineSendGetWorkspaceSize(comm, te, tw, &ws, &ex), refused,
                     "combine_send", "expert_out", given, commDtype);
        aclDestroyTensor(te);
    }
    aclDestroyTensor(ts);
    aclDestroyTensor(tc);
    aclDestroyTensor(tw);
    if (camCommDestroy(comm) != ACLNN_SUCCESS) {
        std::printf("ffn destroy: %s\n", camGetLastErrorMessage());
        ok = false;
    }
    return *result = ok ? 0 : 1;
}

}  // namespace

int main() {
    int failed = 0;
    for (aclDataType commDtype : {ACL_BF16, ACL_FLOAT16}) {
        const std::string group = std::string("sdk-act-dtype-") + Name(commDtype);
        int a = 1, f = 1;
        // Both threads end: camCommCreateInProcess waits at most its join timeout for the other rank.
        std::thread attention(Attention, commDtype, group.c_str(), &a);
        std::thread ffn(Ffn, commDtype, group.c_str(), &f);
        attention.join();
        ffn.join();
        failed |= a | f;
    }
    if (failed) return 1;
    std::printf("ok\n");
    return 0;
}
