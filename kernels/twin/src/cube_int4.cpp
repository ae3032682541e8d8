// The int4 fractals of the twin's cube path (twin/cube_int4.h): unpacked to the int8 fractal layouts the int8
// matrix unit reads. Element 2i of a byte pair is the low nibble.
#include <memory>

#include "kernel_operator.h"

namespace cam::twin {

namespace {

// Row (A) or column (B) of one int4 fractal: 64 elements in 32 bytes -> the first `count` of them as int8.
inline void UnpackRun(int8_t* dst, const uint8_t* src, uint32_t count) {
    for (uint32_t i = 0; i < count / 2; ++i) {
        const uint8_t v = src[i];
        dst[2 * i] = static_cast<int8_t>(((v & 0x0F) ^ 0x08) - 0x08);
        dst[2 * i + 1] = static_cast<int8_t>(((v >> 4) ^ 0x08) - 0x08);
    }
}

}  // namespace

int8_t* Int4Staging(int which, uint64_t bytes) {
    thread_local std::unique_ptr<int8_t[]> buffers[2];
    thread_local uint64_t capacity[2] = {0, 0};
    if (capacity[which] < bytes) {
        buffers[which].reset(new int8_t[bytes]);
        capacity[which] = bytes;
    }
    return buffers[which].get();
}

// int4 ZZ: fractal (ib, kb4) of 16 rows x 64 k at (ib * k4 / 64 + kb4) * 512 bytes, row r at r * 32.
// int8 ZZ: fractal (ib, kb8) of 16 rows x 32 k at (ib * k8 / 32 + kb8) * 512 bytes, row r at r * 32.
void UnpackInt4A(int8_t* dst, const uint8_t* src, uint32_t m, uint32_t k8, uint32_t k4) {
    for (uint32_t ib = 0; ib < m / 16; ++ib)
        for (uint32_t kb8 = 0; kb8 < k8 / 32; ++kb8) {
            const uint8_t* in = src + (uint64_t(ib) * (k4 / 64) + kb8 / 2) * 512 + (kb8 % 2) * 16;
            int8_t* out = dst + (uint64_t(ib) * (k8 / 32) + kb8) * 512;
            for (uint32_t r = 0; r < 16; ++r) UnpackRun(out + r * 32, in + r * 32, 32);
        }
}

// int4 ZN: fractal (kb4, jb) of 64 k x 16 columns at (kb4 * n / 16 + jb) * 512 bytes, column c at c * 32.
// int8 ZN: fractal (kb8, jb) of 32 k x 16 columns at (kb8 * n / 16 + jb) * 512 bytes, column c at c * 32.
void UnpackInt4B(int8_t* dst, const uint8_t* src, uint32_t k8, uint32_t k4, uint32_t n) {
    (void)k4;  // the int4 fractal rows past k8 are padding; the layout's stride depends only on n
    const uint32_t nb = n / 16;
    for (uint32_t kb8 = 0; kb8 < k8 / 32; ++kb8)
        for (uint32_t jb = 0; jb < nb; ++jb) {
            const uint8_t* in = src + (uint64_t(kb8 / 2) * nb + jb) * 512 + (kb8 % 2) * 16;
            int8_t* out = dst + (uint64_t(kb8) * nb + jb) * 512;
            for (uint32_t c = 0; c < 16; ++c) UnpackRun(out + c * 32, in + c * 32, 32);
        }
}

}  // namespace cam::twin
