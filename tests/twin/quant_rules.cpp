// One dynamic_quant call through the SDK's C API on 4 rows of 1000 bf16 columns: 16 vector repeats per row, so
// ReduceMax's work buffer must hold a (value, index) pair per repeat (a buffer of one element per repeat is too
// small only past 8 repeats), and the int8 conversion goes through int32 -> half, a dequant through DEQSCALE.
// Prints "OK", or "FAIL: " and the synchronize's error message (the twin's violation: rule, kernel, block, call
// site). The mutation suite links it against a dynamic_quant kernel built with a mutant switch.
#include <cam/cam.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmm_fixture.h"

using namespace sdk_test;

int main() {
    const int64_t rows = 4, cols = 1000;
    std::vector<uint16_t> x(rows * cols);
    for (size_t j = 0; j < x.size(); ++j) x[j] = Bf16Rne(static_cast<float>(int64_t(j % 251) - 125) / 8.0f);
    std::vector<int8_t> q(rows * cols, 0);
    std::vector<float> scale(rows, 0.0f);
    aclrtStream stream = nullptr;
    if (aclrtCreateStream(&stream) != ACL_SUCCESS) return 2;
    aclTensor* tx = Make({rows, cols}, ACL_BF16, x.data());
    aclTensor* tq = Make({rows, cols}, ACL_INT8, q.data());
    aclTensor* ts = Make({rows}, ACL_FLOAT, scale.data());
    uint64_t wsSize = 0;
    aclOpExecutor* ex = nullptr;
    const aclnnStatus prepared = aclnnCamDynamicQuantGetWorkspaceSize(tx, tq, ts, &wsSize, &ex);
    return RunAndReport(prepared, wsSize, ex, stream, aclnnCamDynamicQuant);
}
