// Shared by the SDK programs that run the layer-select GMMs (gmm.cpp, graph.cpp): tensor descriptors over host
// buffers, a hand-written bf16 rounding, the FRACTAL_NZ prepack and seeded per-layer weights, all written from
// docs/gmm.md with plain loops; and the OK/FAIL run of one op that the twin's rule drivers (tests/twin) print.
#pragma once

#include <cam/cam.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace sdk_test {

inline int failures = 0;

inline void Expect(bool ok, const std::string& what) {
    if (!ok) {
        std::printf("FAIL: %s\n", what.c_str());
        ++failures;
    }
}

inline aclTensor* Make(std::vector<int64_t> shape, aclDataType dtype, void* data, aclFormat format = ACL_FORMAT_ND) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
    return aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), 0, format, shape.data(), shape.size(),
                           data);
}

inline uint16_t Bf16Rne(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);  // inputs below are finite
    return static_cast<uint16_t>(u >> 16);
}

// ND [E, K, N] -> FRACTAL_NZ [E, ceil(N/32), ceil(K/16), 16, 32] (docs/gmm.md §4).
inline std::vector<int8_t> PrepackNz(const std::vector<int8_t>& w, int64_t e, int64_t k, int64_t n) {
    const int64_t kp = (k + 15) / 16 * 16, n1 = (n + 31) / 32;
    std::vector<int8_t> nz(e * n1 * kp * 32, 0);
    for (int64_t x = 0; x < e; ++x)
        for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) nz[x * n1 * kp * 32 + (c / 32) * kp * 32 + r * 32 + c % 32] = w[(x * k + r) * n + c];
    return nz;
}

struct Layers {
    std::vector<std::vector<int8_t>> nd, nz;
    std::vector<std::vector<float>> scales;
};

inline Layers MakeLayers(int64_t layers, int64_t e, int64_t k, int64_t n, uint32_t seed) {
    Layers out;
    uint32_t s = seed;
    auto next = [&s] { return s = s * 1664525u + 1013904223u; };
    for (int64_t l = 0; l < layers; ++l) {
        std::vector<int8_t> w(e * k * n);
        for (auto& v : w) v = static_cast<int8_t>(next() >> 24);
        std::vector<float> sc(e * n);
        for (auto& v : sc) v = 1e-3f * static_cast<float>(1 + (next() >> 24) % 16);
        out.nz.push_back(PrepackNz(w, e, k, n));
        out.nd.push_back(std::move(w));
        out.scales.push_back(std::move(sc));
    }
    return out;
}

inline aclTensorList* WeightList(Layers& ls, int64_t e, int64_t k, int64_t n) {
    std::vector<const aclTensor*> ts;
    for (auto& w : ls.nz) ts.push_back(Make({e, (n + 31) / 32, (k + 15) / 16, 16, 32}, ACL_INT8, w.data(), ACL_FORMAT_FRACTAL_NZ));
    return aclCreateTensorList(ts.data(), ts.size());
}

inline aclTensorList* ScaleList(Layers& ls, int64_t e, int64_t n) {
    std::vector<const aclTensor*> ts;
    for (auto& s : ls.scales) ts.push_back(Make({e, n}, ACL_FLOAT, s.data()));
    return aclCreateTensorList(ts.data(), ts.size());
}

// The second phase of an op whose first phase returned `prepared` (its executor `ex`, `wsSize` bytes of workspace):
// `launch(workspace, wsSize, ex, stream)`, then a synchronize bounded by 20 s. Prints "OK" and returns 0, or prints
// "FAIL: " and the error message (for a twin violation: rule, kernel, block, call site), the drivers' whole output.
template <class Launch>
int RunAndReport(aclnnStatus prepared, uint64_t wsSize, aclOpExecutor* ex, aclrtStream stream, Launch launch) {
    if (prepared != ACLNN_SUCCESS) {
        std::printf("FAIL: GetWorkspaceSize: %s\n", camGetLastErrorMessage());
        return 1;
    }
    std::vector<uint8_t> workspace(wsSize);
    aclnnStatus st = launch(workspace.data(), wsSize, ex, stream);
    if (st == ACLNN_SUCCESS) st = camSynchronizeStream(stream, 20000);
    if (st != ACLNN_SUCCESS) {
        const std::string message = camGetLastErrorMessage();  // read after the call, before anything else
        std::printf("FAIL: %s\n", message.c_str());
        std::fflush(stdout);
        std::_Exit(1);  // a timed-out op may still use the workspace: never free it
    }
    std::printf("OK\n");
    return 0;
}

}  // namespace sdk_test
