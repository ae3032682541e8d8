// DataCopy / DataCopyPad between GM and UB, with the alignment rules of the MTE engines.
#pragma once

#include <cstring>

#include "twin/gm_race.h"
#include "twin/tensor.h"

namespace AscendC {

// blockLen is in bytes. On the GM side strides are in bytes; on the UB side strides are in 32-byte blocks.
// Constructors as in the Ascend C header, so a brace-init resolves (and narrows) the same way under g++ and bisheng.
struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                      const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;   // elements
    uint8_t rightPadding = 0;  // elements
    T paddingValue = T();
};


}  // namespace AscendC

namespace cam::twin {

// The rules both directions of a contiguous DataCopy share: whole 32-byte blocks, an aligned UB address, both
// sides in bounds, and a UB buffer the copy engine may own at this point.
template <typename T>
void CheckContiguousCopy(const AscendC::LocalTensor<T>& ub, const AscendC::GlobalTensor<T>& gm, uint32_t count,
                         Access access, const std::source_location& where) {
    const char* dir = access == Access::CopyIn ? "GM->UB" : "UB->GM";
    CAM_TWIN_CHECK((count * sizeof(T)) % kUbAlign == 0, "copy-align",
                   std::string("DataCopy ") + dir + " of " + std::to_string(count * sizeof(T)) +
                       " bytes is not a multiple of 32 (use DataCopyPad)",
                   where);
    CAM_TWIN_CHECK(ub.GetPhyAddr() % kUbAlign == 0, "copy-align",
                   std::string("DataCopy ") + dir + " with a UB address not 32-byte aligned", where);
    CAM_TWIN_CHECK(count <= ub.GetSize(), "ub-bounds",
                   "DataCopy of " + std::to_string(count) + " elements with a UB tensor of " +
                       std::to_string(ub.GetSize()),
                   where);
    gm.CheckRange(0, count, where);
    CheckBufferAccess(ub.Record(), access, where);
    if (access == Access::CopyOut) CheckMteWriteAgainstDirtyLines(gm.GetPhyAddr(), uint64_t(count) * sizeof(T), where);
    const Pipe pipe = access == Access::CopyIn ? Pipe::MTE2 : Pipe::MTE3;
    TimeGmCopy(pipe, gm.GetPhyAddr(), uint64_t(count) * sizeof(T), 1, 0);
    PipeTouch(pipe, Space::GM, gm.GetPhyAddr(), uint64_t(count) * sizeof(T), access == Access::CopyOut, where);
    PipeTouch(pipe, Space::UB, ub.Data(), uint64_t(count) * sizeof(T), access == Access::CopyIn, where);
}

// Documented DataCopyPad ranges: blockCount in [1, 4095], blockLen in [1, 2097151] bytes.
constexpr uint32_t kDataCopyPadMaxBlockCount = 4095;
constexpr uint32_t kDataCopyPadMaxBlockLen = 2097151;

// A zero blockCount or blockLen moves nothing (the DataCopyPad pages call it a no-op); the callers return before
// touching anything then.
inline void CheckPadParams(const AscendC::DataCopyExtParams& p, const std::source_location& where) {
    CAM_TWIN_CHECK(p.blockCount <= kDataCopyPadMaxBlockCount, "copy-range",
                   "DataCopyPad blockCount " + std::to_string(p.blockCount) + " outside [0, 4095]", where);
    CAM_TWIN_CHECK(p.blockLen <= kDataCopyPadMaxBlockLen, "copy-range",
                   "DataCopyPad blockLen " + std::to_string(p.blockLen) + " bytes outside [0, 2097151]", where);
}
inline bool PadCopyIsEmpty(const AscendC::DataCopyExtParams& p) { return p.blockCount == 0 || p.blockLen == 0; }

// What a pad-less DataCopyPad leaves in the rest of a 32-byte UB block: unspecified on hardware, poison here.
constexpr uint8_t kPadPoison = 0xA5;

}  // namespace cam::twin

namespace AscendC {

// Contiguous copies: count * sizeof(T) must be a multiple of 32 bytes and the UB address 32-byte aligned.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count,
              const std::source_location where = std::source_location::current()) {
    cam::twin::CheckContiguousCopy(dst, src, count, cam::twin::Access::CopyIn, where);
    const cam::twin::GmRaceCopy race(cam::twin::Pipe::MTE2, src.GetPhyAddr(), uint64_t(count) * sizeof(T), 1, 0, where);
    cam::twin::GmRead(dst.Data(), src.GetPhyAddr(), count * sizeof(T));
}

template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count,
              const std::source_location where = std::source_location::current()) {
    cam::twin::CheckContiguousCopy(src, dst, count, cam::twin::Access::CopyOut, where);
    const cam::twin::GmRaceCopy race(cam::twin::Pipe::MTE3, dst.GetPhyAddr(), uint64_t(count) * sizeof(T), 1, 0, where);
    cam::twin::GmWrite(dst.GetPhyAddr(), src.Data(), count * sizeof(T));
    cam::twin::WakeParked(dst.GetPhyAddr(), uint64_t(count) * sizeof(T));
}

// GM -> UB, any byte length. Each block lands at a 32-byte boundary in UB; the pad fills the rest of the
// block when isPad (otherwise those bytes are left as they were, as on hardware).
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad,
                 const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CAM_TWIN_CHECK(dst.GetPhyAddr() % kUbAlign == 0, "copy-align", "DataCopyPad into a UB address not 32-byte aligned",
                   where);
    CAM_TWIN_CHECK(p.blockLen % sizeof(T) == 0, "copy-align", "DataCopyPad blockLen is not a whole element", where);
    CheckBufferAccess(dst.Record(), Access::CopyIn, where);
    CheckPadParams(p, where);
    if (PadCopyIsEmpty(p)) return;
    const uint32_t elems = p.blockLen / sizeof(T);
    const uint32_t left = pad.isPad ? pad.leftPadding : 0;
    const uint32_t right = pad.isPad ? pad.rightPadding : 0;
    const uint32_t ubBlockBytes = ((left + elems + right) * sizeof(T) + kUbAlign - 1) / kUbAlign * kUbAlign;
    const uint64_t srcPitch = p.blockLen / sizeof(T) + p.srcStride / sizeof(T);
    CAM_TWIN_CHECK(p.srcStride % sizeof(T) == 0, "copy-align", "DataCopyPad srcStride is not a whole element", where);
    uint8_t* out = reinterpret_cast<uint8_t*>(dst.Data());
    const uint64_t ubSpan = static_cast<uint64_t>(p.blockCount) * ubBlockBytes +
                            (p.blockCount ? (p.blockCount - 1ull) * p.dstStride * kUbAlign : 0);
    CAM_TWIN_CHECK(ubSpan <= dst.GetSize() * sizeof(T), "ub-bounds",
                   "DataCopyPad writes " + std::to_string(ubSpan) + " UB bytes into a tensor of " +
                       std::to_string(dst.GetSize() * sizeof(T)),
                   where);
    src.CheckRange((p.blockCount - 1ull) * srcPitch, elems, where);  // blocks ascend: the last bounds them all
    PipeTouch(Pipe::MTE2, Space::GM, src.GetPhyAddr(), ((p.blockCount - 1ull) * srcPitch + elems) * sizeof(T), false,
              where);
    PipeTouch(Pipe::MTE2, Space::UB, out, ubSpan, true, where);
    TimeGmCopy(Pipe::MTE2, src.GetPhyAddr(), p.blockLen, p.blockCount, srcPitch * sizeof(T));
    const GmRaceCopy race(Pipe::MTE2, src.GetPhyAddr(), p.blockLen, p.blockCount, srcPitch * sizeof(T), where);
    // Checked: from here on only bytes move. Whole 32-byte blocks with no gaps on either side are one run.
    if (left == 0 && right == 0 && p.blockLen % kUbAlign == 0 && p.srcStride == 0 && p.dstStride == 0) {
        GmRead(out, src.GetPhyAddr(), uint64_t(p.blockCount) * p.blockLen);
        return;
    }
    const uint32_t rowElems = ubBlockBytes / sizeof(T);
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        T* row = reinterpret_cast<T*>(out);
        if (pad.isPad) {
            for (uint32_t i = 0; i < left; ++i) row[i] = pad.paddingValue;
            for (uint32_t i = left + elems; i < rowElems; ++i) row[i] = pad.paddingValue;
        } else {
            std::memset(out + p.blockLen, kPadPoison, ubBlockBytes - p.blockLen);
        }
        GmRead(row + left, src.GetPhyAddr() + b * srcPitch, p.blockLen);
        out += ubBlockBytes + static_cast<uint64_t>(p.dstStride) * kUbAlign;
    }
}

// UB -> GM, any byte length: writes exactly blockLen bytes per block, nothing past them.
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p,
                 const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CAM_TWIN_CHECK(src.GetPhyAddr() % kUbAlign == 0, "copy-align", "DataCopyPad from a UB address not 32-byte aligned",
                   where);
    CAM_TWIN_CHECK(p.blockLen % sizeof(T) == 0, "copy-align", "DataCopyPad blockLen is not a whole element", where);
    CAM_TWIN_CHECK(p.dstStride % sizeof(T) == 0, "copy-align", "DataCopyPad dstStride is not a whole element", where);
    CheckBufferAccess(src.Record(), Access::CopyOut, where);
    CheckPadParams(p, where);
    if (PadCopyIsEmpty(p)) return;
    const uint32_t elems = p.blockLen / sizeof(T);
    const uint32_t ubBlockBytes = (p.blockLen + kUbAlign - 1) / kUbAlign * kUbAlign;
    const uint64_t dstPitch = elems + p.dstStride / sizeof(T);
    const uint64_t ubSpan = static_cast<uint64_t>(p.blockCount) * ubBlockBytes +
                            (p.blockCount ? (p.blockCount - 1ull) * p.srcStride * kUbAlign : 0);
    CAM_TWIN_CHECK(ubSpan <= src.GetSize() * sizeof(T), "ub-bounds",
                   "DataCopyPad reads " + std::to_string(ubSpan) + " UB bytes from a tensor of " +
                       std::to_string(src.GetSize() * sizeof(T)),
                   where);
    // Every block is checked before the first one is written.
    dst.CheckRange((p.blockCount - 1ull) * dstPitch, elems, where);  // blocks ascend: the last bounds them all
    for (uint32_t b = 0; b < p.blockCount; ++b)
        CheckMteWriteAgainstDirtyLines(dst.GetPhyAddr() + b * dstPitch, p.blockLen, where);
    PipeTouch(Pipe::MTE3, Space::UB, src.Data(), ubSpan, false, where);
    TimeGmCopy(Pipe::MTE3, dst.GetPhyAddr(), p.blockLen, p.blockCount, dstPitch * sizeof(T));
    const GmRaceCopy race(Pipe::MTE3, dst.GetPhyAddr(), p.blockLen, p.blockCount, dstPitch * sizeof(T), where);
    PipeTouch(Pipe::MTE3, Space::GM, dst.GetPhyAddr(), ((p.blockCount - 1ull) * dstPitch + elems) * sizeof(T), true,
              where);
    const uint8_t* in = reinterpret_cast<const uint8_t*>(src.Data());
    // Checked: from here on only bytes move. Whole 32-byte blocks with no gaps on either side are one run.
    if (p.blockLen % kUbAlign == 0 && p.srcStride == 0 && p.dstStride == 0) {
        GmWrite(dst.GetPhyAddr(), in, uint64_t(p.blockCount) * p.blockLen);
        WakeParked(dst.GetPhyAddr(), uint64_t(p.blockCount) * p.blockLen);
        return;
    }
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        GmWrite(dst.GetPhyAddr() + b * dstPitch, in, p.blockLen);
        in += ubBlockBytes + static_cast<uint64_t>(p.srcStride) * kUbAlign;
    }
    // One wake-up for the lines of all blocks (a waiter woken for a gap's line only polls again).
    WakeParked(dst.GetPhyAddr(), (p.blockCount - 1ull) * dstPitch * sizeof(T) + p.blockLen);
}

}  // namespace AscendC
