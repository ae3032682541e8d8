// Calls the aclnn pair of dynamic_quant on host buffers through the ACL-compatible types the SDK ships, and checks
// the result against values computed here from the formula in the header (independent of the library).
#include <cam/cam.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
    if (!ok) {
        std::printf("FAIL: %s\n", what.c_str());
        ++failures;
    }
}

uint16_t ToBf16(float f) {  // inputs below are exact in bf16, so truncation is exact
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
}

aclTensor* Make(std::vector<int64_t> shape, aclDataType dtype, void* data) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
    return aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), 0, ACL_FORMAT_ND, shape.data(),
                           shape.size(), data);
}

}  // namespace

int main() {
    const int64_t rows = 3, cols = 37;
    std::vector<float> values(rows * cols);
    for (int64_t c = 0; c < cols; ++c) {
        values[c] = static_cast<float>(c - 18) / 4.0f;  // row 0: -4.5 .. 4.5
        values[cols + c] = 0.0f;                         // row 1: zero row
        values[2 * cols + c] = (c == 5) ? -254.0f : static_cast<float>(c);  // row 2: amax 254
    }
    std::vector<uint16_t> x(values.size());
    for (size_t i = 0; i < values.size(); ++i) x[i] = ToBf16(values[i]);
    std::vector<int8_t> q(values.size(), 99);
    std::vector<float> scale(rows, -1.0f);

    aclrtStream stream = nullptr;
    Expect(aclrtCreateStream(&stream) == ACL_SUCCESS, "aclrtCreateStream");
    aclTensor* tx = Make({rows, cols}, ACL_BF16, x.data());
    aclTensor* tq = Make({rows, cols}, ACL_INT8, q.data());
    aclTensor* ts = Make({rows}, ACL_FLOAT, scale.data());

    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    aclnnStatus st = aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &workspaceSize, &executor);
    Expect(st == ACLNN_SUCCESS, std::string("GetWorkspaceSize: ") + camGetLastErrorMessage());
    std::vector<uint8_t> workspace(workspaceSize);
    st = aclnnCamDynamicQuant(workspace.data(), workspaceSize, executor, stream);
    Expect(st == ACLNN_SUCCESS, std::string("launch: ") + camGetLastErrorMessage());
    st = camSynchronizeStream(stream, 60000);
    Expect(st == ACLNN_SUCCESS, std::string("synchronize: ") + camGetLastErrorMessage());

    // Expected, from the documented formula: inv = 127 / amax, q = clamp(rint(x * inv)), scale = amax / 127.
    for (int64_t r = 0; r < rows; ++r) {
        float amax = 0.0f;
        for (int64_t c = 0; c < cols; ++c) amax = std::fmax(amax, std::fabs(values[r * cols + c]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const float expectedScale = amax > 0.0f ? amax / 127.0f : 0.0f;
        Expect(scale[r] == expectedScale, "scale of row " + std::to_string(r));
        for (int64_t c = 0; c < cols; ++c) {
            const float v = std::nearbyint(values[r * cols + c] * inv);
            const int expected = static_cast<int>(std::fmax(-127.0f, std::fmin(127.0f, v)));
            if (q[r * cols + c] != expected) {
                Expect(false, "q[" + std::to_string(r) + "][" + std::to_string(c) + "] = " +
                                  std::to_string(q[r * cols + c]) + ", expected " + std::to_string(expected));
            }
        }
    }
    Expect(q[2 * cols + 5] == -127 && q[2 * cols + 36] == 18, "row 2 spot values");

    // A bad argument is refused in the first phase with a message naming it.
    aclTensor* wrong = Make({rows, cols}, ACL_FLOAT, values.data());
    st = aclnnCamDynamicQuantGetWorkspaceSize(wrong, tq, ts, &workspaceSize, &executor);
    Expect(st == CAM_ERR_PARAM_DTYPE, "float32 x must be refused as a wrong dtype");
    Expect(std::strstr(camGetLastErrorMessage(), "x must be bfloat16 or float16") != nullptr,
           std::string("message names x: ") + camGetLastErrorMessage());

    aclDestroyTensor(wrong);
    aclDestroyTensor(tx);
    aclDestroyTensor(tq);
    aclDestroyTensor(ts);
    aclrtDestroyStream(stream);
    std::printf("backend %s: %s\n", camBackendName(), failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
