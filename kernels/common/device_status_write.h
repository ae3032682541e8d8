// Kernel side of the device status record (common/device_status.h).
#pragma once

#include "kernel_operator.h"

#include "common/device_status.h"

namespace cam::kernels {

// Fields first, code last with a flush, so a reader that sees the code also sees the fields.
__aicore__ inline void WriteDeviceStatus(GM_ADDR record, int64_t code, int64_t argument, int64_t index, int64_t value,
                                         int64_t bound) {
    AscendC::GlobalTensor<int64_t> s;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(record), kDeviceStatusWords);
    s.SetValue(1, argument);
    s.SetValue(2, index);
    s.SetValue(3, value);
    s.SetValue(4, bound);
    s.SetValue(0, code);
    AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE, AscendC::DcciDst::CACHELINE_OUT>(s);
}

}  // namespace cam::kernels
