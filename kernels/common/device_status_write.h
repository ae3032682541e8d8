// Kernel side of the device status record (common/device_status_record.h).
#pragma once

#include "kernel_operator.h"

#include "common/device_status_record.h"

namespace cam::kernels {

// The first error wins: the record is written only while its code is clear. Eager launches start from a record the
// host zeroed, but a captured op's record lives in the graph's pool and is never reset between replays
// (docs/graph.md), so without this the last bad replay before a synchronize would hide the first. The line is
// dropped from the scalar cache before the code is read, so the read sees GM (an earlier launch or replay, run on
// another core, may have set it). Fields first, code last with a flush, so a reader that sees the code also sees
// the fields. Only block 0 of a launch reports (GmmPrePass), so no two cores of one launch race for the line.
// A workspace the caller allocated need not be 64-byte aligned, so the record (one line's worth of words) may
// straddle two lines. A single-line clean writes back from its address to the end of that line, so the second line
// is cleaned from its own start, before the code's line (the fields leave the cache no later than the code).
__aicore__ inline void CleanStatusLines(const AscendC::GlobalTensor<int64_t>& s) {
    const uint64_t a = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.GetPhyAddr()));
    const uint64_t next = (a + kDeviceStatusBytes - 1) / kDeviceStatusBytes * kDeviceStatusBytes;
    if (next != a) {
        AscendC::GlobalTensor<int64_t> second = s[(next - a) / sizeof(int64_t)];
        AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(second);
        AscendC::DataSyncBarrier<AscendC::MemDsbT::ALL>();
    }
    AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE, AscendC::DcciDst::CACHELINE_OUT>(s);
    // The code word is written back last and must not land before the rest (a dcci does not wait for its
    // write-back; docs/twin.md, "a clean and dsb").
    AscendC::DataSyncBarrier<AscendC::MemDsbT::ALL>();
}

__aicore__ inline void WriteDeviceStatus(GM_ADDR record, int64_t code, int64_t argument, int64_t index, int64_t value,
                                         int64_t bound) {
    AscendC::GlobalTensor<int64_t> s;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(record), kDeviceStatusWords);
    CleanStatusLines(s);
    if (s.GetValue(0) != kDeviceStatusOk) return;
    s.SetValue(1, argument);
    s.SetValue(2, index);
    s.SetValue(3, value);
    s.SetValue(4, bound);
    s.SetValue(0, code);
    CleanStatusLines(s);
}

}  // namespace cam::kernels
