// DataCopyPad's strided, padded and multi-block forms on the twin against a reference written here from the
// semantics docs/twin.md states ("Semantics chosen where the docs are silent"): GM -> UB puts block b at
// b * (ceil32(left + len + right) + dstStride * 32) bytes, fills the left / right pad and the rest of the 32-byte
// block with the pad value when isPad, else poisons the rest with 0xA5, and leaves the dstStride gap as it was;
// GM-side strides are bytes. UB -> GM writes exactly blockLen bytes per block, blocks blockLen + dstStride bytes
// apart in GM, from UB blocks ceil32(blockLen) + srcStride * 32 bytes apart. Prints "OK <cases>" or the first
// mismatch (exit 1). Driven by tests/test_twin_copy.py.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/launch.h"
#include "twin/runtime.h"

using namespace AscendC;

namespace {

constexpr uint32_t kUbBytes = 16384;
constexpr uint8_t kOld = 0x3C;     // what UB holds before the copy (gaps must keep it)
constexpr uint8_t kPoison = 0xA5;  // the twin's pad-less tail
constexpr uint8_t kGmOld = 0x5A;   // what GM holds before a UB -> GM copy (only the blocks may change)

struct Case {
    uint16_t count;
    uint32_t lenElems;
    uint32_t srcStride;  // GM -> UB: bytes in GM; UB -> GM: 32-byte blocks in UB
    uint32_t dstStride;  // GM -> UB: 32-byte blocks in UB; UB -> GM: bytes in GM
    bool isPad;
    uint8_t left, right;
    uint32_t gmOffsetElems;  // a GM start that is not 32-byte aligned
};

uint64_t Ceil32(uint64_t v) { return (v + 31) / 32 * 32; }

template <typename T>
std::vector<uint8_t> ExpectIn(const Case& c, const uint8_t* gm, T padValue) {
    std::vector<uint8_t> ub(kUbBytes, kOld);
    const uint64_t len = uint64_t(c.lenElems) * sizeof(T);
    const uint32_t left = c.isPad ? c.left : 0, right = c.isPad ? c.right : 0;
    const uint64_t block = Ceil32((left + c.lenElems + right) * sizeof(T));
    for (uint32_t b = 0; b < c.count; ++b) {
        uint8_t* row = ub.data() + b * (block + uint64_t(c.dstStride) * 32);
        const uint8_t* src = gm + uint64_t(c.gmOffsetElems) * sizeof(T) + b * (len + c.srcStride);
        for (uint64_t i = 0; i < block; i += sizeof(T)) {
            if (c.isPad) {
                std::memcpy(row + i, &padValue, sizeof(T));
            } else {
                std::memset(row + i, kPoison, sizeof(T));
            }
        }
        std::memcpy(row + left * sizeof(T), src, len);
    }
    return ub;
}

template <typename T>
std::vector<uint8_t> ExpectOut(const Case& c, const uint8_t* ub, size_t gmBytes) {
    std::vector<uint8_t> gm(gmBytes, kGmOld);
    const uint64_t len = uint64_t(c.lenElems) * sizeof(T);
    for (uint32_t b = 0; b < c.count; ++b)
        std::memcpy(gm.data() + uint64_t(c.gmOffsetElems) * sizeof(T) + b * (len + c.dstStride),
                    ub + b * (Ceil32(len) + uint64_t(c.srcStride) * 32), len);
    return gm;
}

template <typename T>
int RunIn(const Case& c, std::mt19937& rng, T padValue) {
    std::vector<uint8_t> gm(kUbBytes * 2);
    for (auto& v : gm) v = uint8_t(rng());
    std::vector<uint8_t> got(kUbBytes);
    cam::twin::RunLaunch("copy_pad_in", 1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, kUbBytes);
        LocalTensor<uint8_t> raw = buf.Get<uint8_t>();
        for (uint32_t i = 0; i < kUbBytes; ++i) raw.SetValue(i, kOld);
        GlobalTensor<T> src;
        src.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gm.data()) + c.gmOffsetElems);
        DataCopyPad(buf.Get<T>(), src,
                    {c.count, uint32_t(c.lenElems * sizeof(T)), uint32_t(c.srcStride), c.dstStride, 0},
                    {c.isPad, c.left, c.right, padValue});
        for (uint32_t i = 0; i < kUbBytes; ++i) got[i] = raw.GetValue(i);
    });
    const std::vector<uint8_t> want = ExpectIn<T>(c, gm.data(), padValue);
    for (uint32_t i = 0; i < kUbBytes; ++i) {
        if (got[i] != want[i]) {
            std::printf("MISMATCH GM->UB sizeof(T)=%zu count %u len %u srcStride %u dstStride %u isPad %d left %u "
                        "right %u: UB byte %u is 0x%02x, want 0x%02x\n",
                        sizeof(T), c.count, c.lenElems, c.srcStride, c.dstStride, c.isPad, c.left, c.right, i, got[i],
                        want[i]);
            return 1;
        }
    }
    return 0;
}

template <typename T>
int RunOut(const Case& c, std::mt19937& rng) {
    std::vector<uint8_t> ubInit(kUbBytes);
    for (auto& v : ubInit) v = uint8_t(rng());
    std::vector<uint8_t> gm(kUbBytes * 2, kGmOld);
    cam::twin::RunLaunch("copy_pad_out", 1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, kUbBytes);
        LocalTensor<uint8_t> raw = buf.Get<uint8_t>();
        for (uint32_t i = 0; i < kUbBytes; ++i) raw.SetValue(i, ubInit[i]);
        GlobalTensor<T> dst;
        dst.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gm.data()) + c.gmOffsetElems);
        DataCopyPad(dst, buf.Get<T>(), {c.count, uint32_t(c.lenElems * sizeof(T)), c.srcStride, c.dstStride, 0});
    });
    const std::vector<uint8_t> want = ExpectOut<T>(c, ubInit.data(), gm.size());
    for (size_t i = 0; i < gm.size(); ++i) {
        if (gm[i] != want[i]) {
            std::printf("MISMATCH UB->GM sizeof(T)=%zu count %u len %u srcStride %u dstStride %u: GM byte %zu is "
                        "0x%02x, want 0x%02x\n",
                        sizeof(T), c.count, c.lenElems, c.srcStride, c.dstStride, i, gm[i], want[i]);
            return 1;
        }
    }
    return 0;
}

}  // namespace

int main() {
    std::mt19937 rng(11);
    // Gap-less whole 32-byte blocks (one merged run), odd lengths, GM and UB strides, pads on either side, and a
    // GM start off 32-byte alignment.
    const Case cases[] = {
        {4, 64, 0, 0, false, 0, 0, 0},   {4, 64, 0, 0, false, 0, 0, 3},  {3, 7, 0, 0, false, 0, 0, 0},
        {5, 13, 8, 0, false, 0, 0, 1},   {3, 9, 0, 2, false, 0, 0, 0},   {6, 33, 12, 1, false, 0, 0, 5},
        {2, 5, 0, 0, true, 2, 3, 0},     {4, 11, 4, 1, true, 1, 0, 2},   {3, 16, 0, 0, true, 0, 16, 0},
        {1, 100, 0, 0, true, 7, 9, 0},   {3, 24, 8, 3, false, 0, 0, 0},  {2, 64, 0, 0, true, 0, 0, 0},
    };
    int n = 0;
    try {
        for (const Case& c : cases) {
            if (RunIn<int8_t>(c, rng, int8_t(-7)) || RunIn<int16_t>(c, rng, int16_t(0x1234)) ||
                RunIn<float>(c, rng, 2.5f))
                return 1;
            // UB -> GM has no pads; its GM stride is bytes, so it must stay whole elements.
            Case o = c;
            o.isPad = false;
            o.left = o.right = 0;
            o.srcStride = c.dstStride;
            o.dstStride = c.srcStride / 4 * 4;
            if (RunOut<int8_t>(o, rng) || RunOut<int16_t>(o, rng) || RunOut<float>(o, rng)) return 1;
            n += 6;
        }
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("VIOLATION %s\n", e.what());
        return 1;
    }
    std::printf("OK %d DataCopyPad cases\n", n);
    return 0;
}
