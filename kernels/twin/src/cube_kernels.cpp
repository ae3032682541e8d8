// The int8 matrix unit of the twin: C (NZ int32) = / += A (ZZ int8) x B (ZN int8) over whole fractals, with one
// microkernel per CPU feature set chosen at run time (docs/twin.md, "Cube path: CPU paths"). The wheel is built for
// baseline x86-64; each fast path is compiled for its own target and only called when the CPU (and, for AMX, the
// kernel) allows it. int32 accumulation is exact, so every path gives the bits of the element-by-element definition
// (twin/reference.h ref::MmadInt8) whatever its summation order; tests/twin/compute_identity.cpp proves it per path.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "twin/cube.h"
#include "twin/env_path.h"

namespace cam::twin {

namespace {

constexpr uint32_t kFrac = 512;  // bytes of an int8 fractal, int32 elements of a 16 x 16 C fractal / 2

// Geometry shared by the paths: A fractal (ib, kb) at ib * k * 16 + kb * 512 (16 rows of 32 k),
// B fractal (kb, jb) at (kb * nb + jb) * 512 (16 columns of 32 k), C fractal (ib, jb) at jb * m * 16 + ib * 256
// (16 rows of 16 int32).
struct Shape {
    uint32_t m, n, k;
    uint32_t mb() const { return m / 16; }
    uint32_t nb() const { return n / 16; }
    uint32_t kb() const { return k / 32; }
    const int8_t* A(const int8_t* a, uint32_t ib, uint32_t kb) const { return a + uint64_t(ib) * k * 16 + kb * kFrac; }
    int32_t* C(int32_t* c, uint32_t ib, uint32_t jb) const { return c + uint64_t(jb) * m * 16 + ib * 256; }
};

// Portable: per fractal pair and k-block both fractals are widened to int16 once, so each 32-term dot product is a
// contiguous int16 x int16 -> int32 reduction the compiler turns into multiply-add pairs (SSE2 pmaddwd).
void MmadPortable(int32_t* c, const int8_t* a, const int8_t* b, const Shape& s, bool init) {
    for (uint32_t ib = 0; ib < s.mb(); ++ib) {
        for (uint32_t jb = 0; jb < s.nb(); ++jb) {
            int32_t acc[16][16] = {};
            for (uint32_t kb = 0; kb < s.kb(); ++kb) {
                const int8_t* af = s.A(a, ib, kb);
                const int8_t* bf = b + (uint64_t(kb) * s.nb() + jb) * kFrac;
                int16_t aw[512], bw[512];
                for (uint32_t t = 0; t < 512; ++t) aw[t] = af[t], bw[t] = bf[t];
                for (uint32_t i = 0; i < 16; ++i)
                    for (uint32_t j = 0; j < 16; ++j) {
                        int32_t dot = 0;
                        for (uint32_t t = 0; t < 32; ++t) dot += int32_t(aw[i * 32 + t]) * int32_t(bw[j * 32 + t]);
                        acc[i][j] += dot;
                    }
            }
            int32_t* cf = s.C(c, ib, jb);
            for (uint32_t i = 0; i < 16; ++i)
                for (uint32_t j = 0; j < 16; ++j)
                    cf[i * 16 + j] = init ? acc[i][j]
                                          : int32_t(uint32_t(cf[i * 16 + j]) + uint32_t(acc[i][j]));  // wraps
        }
    }
}

#if defined(__x86_64__)

// Per thread, grown on demand and kept: each block is one thread, so this is one cube core's repack scratch.
thread_local std::vector<uint8_t> tPacked;

uint8_t* Scratch(uint64_t bytes) {
    if (tPacked.size() < bytes + 64) tPacked.resize(bytes + 64);
    const uintptr_t p = reinterpret_cast<uintptr_t>(tPacked.data());
    return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t(63));
}

// B fractal (16 columns x 32 k) -> VNNI layout (8 rows of k-quads, each row the 4 k-bytes of all 16 columns): a
// 16 x 8 -> 8 x 16 transpose of dwords. flip: xor 0x80, turning the signed bytes into (b + 128) as unsigned.
void PackBVnni(uint8_t* out, const int8_t* b, const Shape& s, bool flip) {
    const uint32_t fracs = s.kb() * s.nb();
    const uint32_t x = flip ? 0x80808080u : 0u;
    const __m128i flipBits = _mm_set1_epi32(int32_t(x));
    for (uint32_t f = 0; f < fracs; ++f) {
        const uint8_t* src = reinterpret_cast<const uint8_t*>(b) + uint64_t(f) * kFrac;
        uint8_t* dst = out + uint64_t(f) * kFrac;
        // 4 x 4 dword blocks: rows j0..j0+3 (q0..q0+3) -> rows q0..q0+3 (j0..j0+3).
        for (uint32_t j0 = 0; j0 < 16; j0 += 4) {
            for (uint32_t q0 = 0; q0 < 8; q0 += 4) {
                __m128i r[4];
                for (uint32_t i = 0; i < 4; ++i)
                    r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + ((j0 + i) * 8 + q0) * 4));
                const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]), t1 = _mm_unpackhi_epi32(r[0], r[1]);
                const __m128i t2 = _mm_unpacklo_epi32(r[2], r[3]), t3 = _mm_unpackhi_epi32(r[2], r[3]);
                const __m128i o[4] = {_mm_unpacklo_epi64(t0, t2), _mm_unpackhi_epi64(t0, t2),
                                      _mm_unpacklo_epi64(t1, t3), _mm_unpackhi_epi64(t1, t3)};
                for (uint32_t i = 0; i < 4; ++i)
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + ((q0 + i) * 16 + j0) * 4),
                                     _mm_xor_si128(o[i], flipBits));
            }
        }
    }
}

// 128 * (sum of row i of A over all k), the correction of the (b + 128) trick, per row of the whole m.
void RowSums128(int32_t* out, const int8_t* a, const Shape& s) {
    for (uint32_t ib = 0; ib < s.mb(); ++ib) {
        int32_t sum[16] = {};
        for (uint32_t kb = 0; kb < s.kb(); ++kb) {
            const int8_t* af = s.A(a, ib, kb);
            for (uint32_t i = 0; i < 16; ++i)
                for (uint32_t t = 0; t < 32; ++t) sum[i] += af[i * 32 + t];
        }
        for (uint32_t i = 0; i < 16; ++i) out[ib * 16 + i] = sum[i] * 128;
    }
}

// AVX-512 VNNI: one zmm per C row (16 int32 lanes = the 16 columns of a fractal); vpdpbusd multiplies the unsigned
// (b + 128) of 4 k-values of each column by the same 4 signed a of the row and adds the 4 products to the lane.
// sum((b + 128) * a) - 128 * sum(a) = sum(a * b), exact in int32 (|sum| <= 4096 * 255 * 128 < 2^31).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void MmadAvx512Vnni(int32_t* c, const int8_t* a,
                                                                           const int8_t* b, const Shape& s,
                                                                           bool init) {
    uint8_t* packed = Scratch(uint64_t(s.k) * s.n + uint64_t(s.m) * 4);
    PackBVnni(packed, b, s, true);
    int32_t* corr = reinterpret_cast<int32_t*>(packed + uint64_t(s.k) * s.n);
    RowSums128(corr, a, s);
    for (uint32_t ib = 0; ib < s.mb(); ++ib) {
        for (uint32_t jb = 0; jb < s.nb(); ++jb) {
            __m512i acc[16];
            for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_si512();
            for (uint32_t kb = 0; kb < s.kb(); ++kb) {
                const uint8_t* bf = packed + (uint64_t(kb) * s.nb() + jb) * kFrac;
                const int32_t* af = reinterpret_cast<const int32_t*>(s.A(a, ib, kb));
                __m512i bq[8];
                for (int q = 0; q < 8; ++q) bq[q] = _mm512_load_si512(bf + q * 64);
                for (int i = 0; i < 16; ++i)
                    for (int q = 0; q < 8; ++q)
                        acc[i] = _mm512_dpbusd_epi32(acc[i], bq[q], _mm512_set1_epi32(af[i * 8 + q]));
            }
            int32_t* cf = s.C(c, ib, jb);
            for (int i = 0; i < 16; ++i) {
                __m512i v = _mm512_sub_epi32(acc[i], _mm512_set1_epi32(corr[ib * 16 + i]));
                if (!init) v = _mm512_add_epi32(v, _mm512_loadu_si512(cf + i * 16));
                _mm512_storeu_si512(cf + i * 16, v);
            }
        }
    }
}

// AVX2 (no VNNI): A and B widened to int16; vpmaddwd multiplies pairs of k and adds each pair in int32 (exact).
// B per fractal: 16 k-pairs, each the 2 int16 of all 16 columns (two ymm of 8 columns).
__attribute__((target("avx2"))) void MmadAvx2(int32_t* c, const int8_t* a, const int8_t* b, const Shape& s,
                                              bool init) {
    const uint64_t bBytes = uint64_t(s.k) * s.n * 2, aBytes = uint64_t(s.m) * s.k * 2;
    uint8_t* scratch = Scratch(bBytes + aBytes);
    int16_t* bw = reinterpret_cast<int16_t*>(scratch);
    int16_t* aw = reinterpret_cast<int16_t*>(scratch + bBytes);
    const uint32_t fracs = s.kb() * s.nb();
    for (uint32_t f = 0; f < fracs; ++f) {
        const int8_t* src = b + uint64_t(f) * kFrac;
        int16_t* dst = bw + uint64_t(f) * kFrac;  // 512 int16 per fractal
        for (uint32_t p = 0; p < 16; ++p)
            for (uint32_t j = 0; j < 16; ++j) {
                dst[p * 32 + j * 2] = src[j * 32 + 2 * p];
                dst[p * 32 + j * 2 + 1] = src[j * 32 + 2 * p + 1];
            }
    }
    for (uint64_t i = 0; i < uint64_t(s.m) * s.k; ++i) aw[i] = a[i];  // same ZZ order, widened
    for (uint32_t ib = 0; ib < s.mb(); ++ib) {
        for (uint32_t jb = 0; jb < s.nb(); ++jb) {
            int32_t* cf = s.C(c, ib, jb);
            for (uint32_t i0 = 0; i0 < 16; i0 += 4) {
                __m256i acc[4][2];
                for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
                for (uint32_t kb = 0; kb < s.kb(); ++kb) {
                    const int16_t* bf = bw + (uint64_t(kb) * s.nb() + jb) * kFrac;
                    const int32_t* af =
                        reinterpret_cast<const int32_t*>(aw + uint64_t(ib) * s.k * 16 + uint64_t(kb) * kFrac);
                    for (uint32_t p = 0; p < 16; ++p) {
                        const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(bf + p * 32));
                        const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(bf + p * 32 + 16));
                        for (int r = 0; r < 4; ++r) {
                            const __m256i av = _mm256_set1_epi32(af[(i0 + r) * 16 + p]);
                            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, lo));
                            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, hi));
                        }
                    }
                }
                for (int r = 0; r < 4; ++r) {
                    int32_t* row = cf + (i0 + r) * 16;
                    __m256i v0 = acc[r][0], v1 = acc[r][1];
                    if (!init) {
                        v0 = _mm256_add_epi32(v0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
                        v1 = _mm256_add_epi32(v1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 8)));
                    }
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), v0);
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 8), v1);
                }
            }
        }
    }
}

// AMX: tdpbssd multiplies signed int8 tiles directly. An A fractal is a 16-row x 32-byte tile as it lies in L0A;
// B is repacked to the VNNI tile (8 rows of k-quads x 64 bytes); a C fractal is one 16 x 16 int32 tile. C fractals
// are worked in 2 x 2 blocks so each A and B tile load feeds two products.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t startRow = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

template <int MI, int NJ>
__attribute__((target("amx-tile,amx-int8"))) inline void AmxBlock(int32_t* c, const int8_t* a, const uint8_t* packed,
                                                                  const Shape& s, uint32_t ib, uint32_t jb, bool init) {
    constexpr long cStride = 64, aStride = 32, bStride = 64;
    if (init) {
        _tile_zero(0);
        if constexpr (NJ > 1) _tile_zero(1);
        if constexpr (MI > 1) _tile_zero(2);
        if constexpr (MI > 1 && NJ > 1) _tile_zero(3);
    } else {
        _tile_loadd(0, s.C(c, ib, jb), cStride);
        if constexpr (NJ > 1) _tile_loadd(1, s.C(c, ib, jb + 1), cStride);
        if constexpr (MI > 1) _tile_loadd(2, s.C(c, ib + 1, jb), cStride);
        if constexpr (MI > 1 && NJ > 1) _tile_loadd(3, s.C(c, ib + 1, jb + 1), cStride);
    }
    for (uint32_t kb = 0; kb < s.kb(); ++kb) {
        const uint8_t* bf = packed + (uint64_t(kb) * s.nb() + jb) * kFrac;
        _tile_loadd(4, s.A(a, ib, kb), aStride);
        _tile_loadd(6, bf, bStride);
        _tile_dpbssd(0, 4, 6);
        if constexpr (NJ > 1) {
            _tile_loadd(7, bf + kFrac, bStride);
            _tile_dpbssd(1, 4, 7);
        }
        if constexpr (MI > 1) {
            _tile_loadd(5, s.A(a, ib + 1, kb), aStride);
            _tile_dpbssd(2, 5, 6);
            if constexpr (NJ > 1) _tile_dpbssd(3, 5, 7);
        }
    }
    _tile_stored(0, s.C(c, ib, jb), cStride);
    if constexpr (NJ > 1) _tile_stored(1, s.C(c, ib, jb + 1), cStride);
    if constexpr (MI > 1) _tile_stored(2, s.C(c, ib + 1, jb), cStride);
    if constexpr (MI > 1 && NJ > 1) _tile_stored(3, s.C(c, ib + 1, jb + 1), cStride);
}

__attribute__((target("amx-tile,amx-int8"))) void MmadAmx(int32_t* c, const int8_t* a, const int8_t* b,
                                                          const Shape& s, bool init) {
    uint8_t* packed = Scratch(uint64_t(s.k) * s.n);
    PackBVnni(packed, b, s, false);
    TileConfig cfg;
    for (int t = 0; t < 4; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;  // C
    for (int t = 4; t < 6; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 32;  // A
    for (int t = 6; t < 8; ++t) cfg.rows[t] = 8, cfg.colsb[t] = 64;   // B
    _tile_loadconfig(&cfg);
    uint32_t ib = 0;
    for (; ib + 2 <= s.mb(); ib += 2) {
        uint32_t jb = 0;
        for (; jb + 2 <= s.nb(); jb += 2) AmxBlock<2, 2>(c, a, packed, s, ib, jb, init);
        if (jb < s.nb()) AmxBlock<2, 1>(c, a, packed, s, ib, jb, init);
    }
    if (ib < s.mb()) {
        uint32_t jb = 0;
        for (; jb + 2 <= s.nb(); jb += 2) AmxBlock<1, 2>(c, a, packed, s, ib, jb, init);
        if (jb < s.nb()) AmxBlock<1, 1>(c, a, packed, s, ib, jb, init);
    }
    _tile_release();
}

bool CpuidBit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1u;
}

// Linux hands out the AMX tile data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); without
// it the first tile instruction is a SIGILL. Asked once per process.
bool AmxPermitted() {
    static const bool permitted = [] {
        constexpr long kArchReqXcompPerm = 0x1023;
        constexpr long kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return permitted;
}

#endif  // __x86_64__

bool Probe(CubePath path) {
#if defined(__x86_64__)
    switch (path) {
        case CubePath::Portable: return true;
        case CubePath::Avx2: return __builtin_cpu_supports("avx2");
        case CubePath::Avx512Vnni:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni");
        case CubePath::Amx:
            // CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; then the kernel's permission.
            return CpuidBit(7, 0, 3, 24) && CpuidBit(7, 0, 3, 25) && AmxPermitted();
    }
    return false;
#else
    return path == CubePath::Portable;
#endif
}

// Probed once per path (the AMX probe also asks the kernel for the tile state, which every AMX call needs).
bool Supported(CubePath path) {
    static const bool supported[4] = {Probe(CubePath::Portable), Probe(CubePath::Avx2), Probe(CubePath::Avx512Vnni),
                                      Probe(CubePath::Amx)};
    return supported[static_cast<int>(path) & 3];
}

const EnvPath<CubePath>& Resolve() {
    static const EnvPath<CubePath> resolved =
        ResolveEnvPath("CAM_TWIN_CUBE", {CubePath::Amx, CubePath::Avx512Vnni, CubePath::Avx2, CubePath::Portable},
                       CubePathName, Supported, "this CPU (or the OS, for AMX) does not support it");
    return resolved;
}

}  // namespace

const char* CubePathName(CubePath path) {
    switch (path) {
        case CubePath::Amx: return "amx";
        case CubePath::Avx512Vnni: return "avx512vnni";
        case CubePath::Avx2: return "avx2";
        case CubePath::Portable: return "portable";
    }
    return "?";
}

bool ParseCubePath(const char* name, CubePath* out) {
    for (CubePath p : {CubePath::Amx, CubePath::Avx512Vnni, CubePath::Avx2, CubePath::Portable}) {
        if (std::strcmp(name, CubePathName(p)) == 0) {
            *out = p;
            return true;
        }
    }
    return false;
}

bool CubePathSupported(CubePath path) { return Supported(path); }

CubePath ActiveCubePath(const std::source_location& where) {
    const EnvPath<CubePath>& r = Resolve();
    CAM_TWIN_CHECK(r.error.empty(), "cube-path", r.error, where);
    return r.path;
}

void MmadInt8With(CubePath path, int32_t* c, const int8_t* a, const int8_t* b, uint32_t m, uint32_t n, uint32_t k,
                  bool init) {
    const Shape s{m, n, k};
    // Never run an instruction set the CPU (or, for AMX, the OS) has not granted: that is a SIGILL, not an error.
    CAM_TWIN_CHECK(static_cast<int>(path) < 4 && Supported(path), "cube-path",
                   std::string("cube path ") + CubePathName(path) + " is not supported on this machine",
                   std::source_location::current());
    if (m == 0 || n == 0) return;
    if (k == 0) {
        // No k: C = 0 (init) or unchanged.
        if (init)
            for (uint32_t jb = 0; jb < s.nb(); ++jb) std::memset(s.C(c, 0, jb), 0, uint64_t(m) * 16 * 4);
        return;
    }
    switch (path) {
#if defined(__x86_64__)
        case CubePath::Amx: return MmadAmx(c, a, b, s, init);
        case CubePath::Avx512Vnni: return MmadAvx512Vnni(c, a, b, s, init);
        case CubePath::Avx2: return MmadAvx2(c, a, b, s, init);
#endif
        default: return MmadPortable(c, a, b, s, init);
    }
}

void MmadInt8(int32_t* c, const int8_t* a, const int8_t* b, uint32_t m, uint32_t n, uint32_t k, bool init,
              const std::source_location& where) {
    MmadInt8With(ActiveCubePath(where), c, a, b, m, n, k, init);
}

}  // namespace cam::twin
