// What the SDK data-plane tests share: bf16 conversions, an aclTensor over host memory, a status CHECK and one op
// run through its two phases with a bounded synchronize.
#pragma once

#include <cam/cam.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sdk_test {

inline uint16_t Bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
inline float FromBf16(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline aclTensor* Tensor(std::vector<int64_t> shape, aclDataType dtype, void* data) {
    return aclCreateTensor(shape.data(), shape.size(), dtype, nullptr, 0, ACL_FORMAT_ND, shape.data(), shape.size(),
                           data);
}

#define CHECK(expr)                                                                                     \
    do {                                                                                                \
        aclnnStatus s_ = (expr);                                                                        \
        if (s_ != ACLNN_SUCCESS) {                                                                      \
            std::printf("%s failed: %d %s\n", #expr, s_, camGetLastErrorMessage());                     \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

template <typename Get, typename Run>
aclnnStatus RunOp(Get get, Run run, aclrtStream stream) {
    uint64_t ws = 0;
    aclOpExecutor* ex = nullptr;
    aclnnStatus st = get(&ws, &ex);
    if (st != ACLNN_SUCCESS) return st;
    std::vector<uint8_t> workspace(ws);
    st = run(workspace.data(), ws, ex, stream);
    if (st != ACLNN_SUCCESS) return st;
    st = camSynchronizeStream(stream, 60000);
    if (st == CAM_ERR_SYNC_TIMEOUT) {
        // The op still runs and may touch its workspace: never free it. Leave without returning.
        std::fprintf(stderr, "synchronize timed out: %s\n", camGetLastErrorMessage());
        std::_Exit(1);
    }
    return st;
}

}  // namespace sdk_test
