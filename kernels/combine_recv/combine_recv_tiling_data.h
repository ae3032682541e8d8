// Tiling of combine_recv, passed by value to the kernel. Filled by tiling/src/combine_recv_tiling.cpp.
#pragma once

#include <cstdint>

#include "common/dataplane_args.h"
#include "common/ub_math.h"

namespace cam::kernels {

enum CombineRecvKey : uint32_t { kCombineRecvBf16 = 0, kCombineRecvFp16 = 1 };

struct CombineRecvTilingData {
    dp::CommArgs comm;
    int64_t tokens;        // B of this round (must equal the B dispatch_send recorded for it)
    uint32_t key;
    uint32_t blockDim;
    uint32_t colsPerPass;  // the fp32 accumulator covers this many columns at a time (multiple of 32)
    uint32_t reserved;
};

constexpr uint32_t kCombineRecvMaxCols = 4096;

__aicore__ inline int64_t CombineRecvWorkspaceBytes() { return dp::kWsDecisionBytes; }

__aicore__ constexpr uint32_t CombineRecvUbBytes(uint32_t colsPerPass) {
    return 2 * UbBytes(uint64_t(colsPerPass) * 2) + 2 * UbBytes(uint64_t(colsPerPass) * 2) +
           2 * UbBytes(uint64_t(colsPerPass) * 4) + dp::kSignalUbBytes + 2 * dp::kTableWindowUbBytes +
           dp::kSealUbBytes;
}

}  // namespace cam::kernels
