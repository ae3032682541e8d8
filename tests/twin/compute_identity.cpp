// Bit-identity of the twin's fast compute paths against the element-by-element definitions of twin/reference.h.
// Driven by tests/twin/test_compute_identity.py; each mode prints "OK <what ran>" or the first mismatch and exits 1.
//   vector [PATH]    every 16-bit input of each 16-bit-source conversion and Cast, fp32 boundaries and random fp32,
//                    the elementwise instructions, Max / Min, ReduceMax, on one vector path (default: the active
//                    one, what CAM_TWIN_VECTOR selects)
//   vector-paths     the vector paths this machine supports
//   fp32-exhaustive [STRIDE]  every STRIDE-th (default all) of the 2^32 fp32 inputs of fp32 -> half / bf16 and of
//                    fp32 -> int32 in every round mode
//   mmad PATH        random int8 (with -128 and 127 forced in) over edge and tiling shapes, init and accumulate
//   paths            the cube paths this machine supports
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/reference.h"

namespace {

using AscendC::RoundMode;
using cam::twin::CubePath;
using cam::twin::VectorBinaryOp;
using cam::twin::VectorKernels;
using cam::twin::VectorPath;
using cam::twin::VectorScalarOp;

const RoundMode kModes[] = {RoundMode::CAST_NONE, RoundMode::CAST_RINT, RoundMode::CAST_FLOOR,
                            RoundMode::CAST_CEIL, RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC};

int Fail(const std::string& what) {
    std::printf("MISMATCH %s\n", what.c_str());
    return 1;
}

template <typename T>
bool SameBits(const T& a, const T& b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
uint64_t Bits(const T& v) {
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}

// fp32 inputs that stress every rounding path: specials, each exponent's edges and midpoints, the half / bf16 / int
// rounding boundaries +-1 ulp, and random bits.
std::vector<float> Fp32Probe(size_t randomCount) {
    std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                  0x7f800001u, 0xff812345u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x477ff000u,
                                  0x477fefffu, 0x47800000u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u,
                                  0x4effffffu, 0x4f000000u, 0xcf000000u, 0xcf000001u, 0x4b000000u, 0x4affffffu,
                                  0x5f000000u, 0xdf000000u, 0x4f800000u};
    for (uint32_t e = 0; e < 256; ++e) {
        for (uint32_t m : {0u, 1u, 0x7fffffu, 0x400000u, 0x3fffffu, 0x1000u, 0xfffu, 0x1001u, 0x3000u, 0x2fffu,
                           0x8000u, 0x7fffu, 0x8001u, 0x18000u, 0x17fffu}) {
            bits.push_back((e << 23) | m);
            bits.push_back(0x80000000u | (e << 23) | m);
        }
    }
    for (int v = -300; v <= 300; ++v)
        for (float frac : {0.0f, 0.25f, 0.5f, 0.75f}) {
            float f = float(v) + frac;
            uint32_t u;
            std::memcpy(&u, &f, 4);
            for (int d = -1; d <= 1; ++d) bits.push_back(u + uint32_t(d));
        }
    std::mt19937 rng(12345);
    for (size_t i = 0; i < randomCount; ++i) bits.push_back(rng());
    std::normal_distribution<float> normal(0.0f, 64.0f);
    std::vector<float> out;
    for (uint32_t u : bits) out.push_back(twin_detail::BitsFloat(u));
    for (size_t i = 0; i < randomCount; ++i) out.push_back(normal(rng));
    return out;
}

// The inputs also run from a few offsets, so the SIMD loops' full vectors and their element-by-element tails both
// meet every input, at every alignment.
template <typename D, typename S>
int CheckCast(const VectorKernels& k, const std::vector<S>& src, const char* name) {
    for (RoundMode mode : kModes) {
        std::vector<D> fast(src.size()), ref(src.size());
        cam::twin::ref::Cast(ref.data(), src.data(), mode, uint32_t(src.size()), false, 0.0f);
        for (uint32_t off : {0u, 1u, 3u, 7u, 13u}) {
            if (off >= src.size()) break;
            cam::twin::CastLoopWith(k, fast.data() + off, src.data() + off, mode, uint32_t(src.size() - off));
            for (size_t i = off; i < src.size(); ++i) {
                if (!SameBits(fast[i], ref[i])) {
                    char buf[240];
                    std::snprintf(buf, sizeof buf,
                                  "Cast %s mode %d offset %u input 0x%" PRIx64 ": fast 0x%" PRIx64 " ref 0x%" PRIx64,
                                  name, int(mode), off, Bits(src[i]), Bits(fast[i]), Bits(ref[i]));
                    return Fail(buf);
                }
            }
        }
    }
    return 0;
}

std::vector<half> AllHalf() {
    std::vector<half> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = half::FromBits(uint16_t(i));
    return v;
}

std::vector<bfloat16_t> AllBf16() {
    std::vector<bfloat16_t> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = bfloat16_t::FromBits(uint16_t(i));
    return v;
}

// Elementwise fp32 instructions of one path against the element-by-element definitions. Both operands NaN is the
// one case where the bits may legitimately differ between two correct IEEE implementations (which payload wins is
// operand order, which the compiler may swap for the scalar x + y); there only NaN-ness is compared.
bool SameOrBothNan(float fast, float ref, float a, float b) {
    if (a != a && b != b) return (fast != fast) == (ref != ref);
    return SameBits(fast, ref);
}

int CheckElementwise(const VectorKernels& k, const std::vector<float>& xs) {
    const size_t n = xs.size();
    std::vector<float> ys(n), fast(n), ref(n);
    for (size_t i = 0; i < n; ++i) ys[i] = xs[(i * 7919 + 13) % n];
    k.absFloat(fast.data(), xs.data(), uint32_t(n));
    for (size_t i = 0; i < n; ++i)
        if (!SameBits(fast[i], std::fabs(xs[i]))) return Fail("Abs of " + std::to_string(Bits(xs[i])));
    const VectorBinaryOp binaries[] = {VectorBinaryOp::Add, VectorBinaryOp::Sub, VectorBinaryOp::Mul,
                                       VectorBinaryOp::Div, VectorBinaryOp::Max, VectorBinaryOp::Min};
    for (VectorBinaryOp op : binaries) {
        for (uint32_t off : {0u, 5u}) {
            k.binaryFloat(op, fast.data() + off, xs.data() + off, ys.data() + off, uint32_t(n - off));
            for (size_t i = off; i < n; ++i) {
                const float a = xs[i], b = ys[i];
                float r;
                switch (op) {
                    case VectorBinaryOp::Add: r = a + b; break;
                    case VectorBinaryOp::Sub: r = a - b; break;
                    case VectorBinaryOp::Mul: r = a * b; break;
                    case VectorBinaryOp::Div: r = a / b; break;
                    case VectorBinaryOp::Max: r = cam::twin::ref::MaxPropagateNan(a, b); break;
                    default: r = cam::twin::ref::MinPropagateNan(a, b); break;
                }
                if (!SameOrBothNan(fast[i], r, a, b))
                    return Fail("binary op " + std::to_string(int(op)) + " of " + std::to_string(Bits(a)) + ", " +
                                std::to_string(Bits(b)));
            }
        }
    }
    const VectorScalarOp scalars[] = {VectorScalarOp::Adds, VectorScalarOp::Muls, VectorScalarOp::Maxs,
                                      VectorScalarOp::Mins};
    for (VectorScalarOp op : scalars) {
        for (float c : {127.0f, -127.0f, 0.0f, -0.0f, 1.0f, -1.0f, 3.0517578e-05f, 1e30f,
                        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
            k.scalarFloat(op, fast.data(), xs.data(), c, uint32_t(n));
            for (size_t i = 0; i < n; ++i) {
                const float a = xs[i];
                float r;
                switch (op) {
                    case VectorScalarOp::Adds: r = a + c; break;
                    case VectorScalarOp::Muls: r = a * c; break;
                    case VectorScalarOp::Maxs: r = cam::twin::ref::MaxPropagateNan(a, c); break;
                    default: r = cam::twin::ref::MinPropagateNan(a, c); break;
                }
                if (!SameOrBothNan(fast[i], r, a, c))
                    return Fail("scalar op " + std::to_string(int(op)) + " of " + std::to_string(Bits(a)) + ", " +
                                std::to_string(Bits(c)));
            }
        }
    }
    return 0;
}

int Vector(const char* pathName) {
    const VectorKernels* kp = &cam::twin::ActiveVectorKernels();
    if (pathName != nullptr) {
        VectorPath path;
        if (!cam::twin::ParseVectorPath(pathName, &path)) return Fail(std::string("unknown vector path ") + pathName);
        if (!cam::twin::VectorPathSupported(path)) {
            std::printf("UNSUPPORTED %s\n", pathName);
            return 2;
        }
        kp = &cam::twin::VectorKernelsFor(path);
    }
    const VectorKernels& k = *kp;
    int rc = 0;
    const auto halves = AllHalf();
    const auto bf16s = AllBf16();
    const auto floats = Fp32Probe(200000);
    std::vector<int32_t> ints;
    std::mt19937 rng(7);
    for (int32_t v : {0, 1, -1, 2147483647, -2147483647 - 1, 16777216, 16777217, -16777217, 65504, 65520, -65519})
        ints.push_back(v);
    for (int i = 0; i < 200000; ++i) ints.push_back(int32_t(rng()) >> (rng() % 31));
    std::vector<int16_t> shorts(65536);
    for (uint32_t i = 0; i < 65536; ++i) shorts[i] = int16_t(uint16_t(i));
    std::vector<int8_t> bytes(256);
    for (uint32_t i = 0; i < 256; ++i) bytes[i] = int8_t(uint8_t(i));

    // The storage types' own conversions (used by every half / bf16 operand of every instruction).
    for (const half& h : halves) {
        if (!SameBits(float(h), cam::twin::ref::HalfBitsToFloat(h.bits)))
            return Fail("half -> float of 0x" + std::to_string(h.bits));
    }
    for (float f : floats) {
        if (half(f).bits != cam::twin::ref::FloatToHalfBits(f)) return Fail("float -> half of " + std::to_string(Bits(f)));
        if (bfloat16_t(f).bits != cam::twin::ref::FloatToBf16Bits(f))
            return Fail("float -> bf16 of " + std::to_string(Bits(f)));
    }
    // Cast pairs of the A2/A3 table the kernels use, and the rest the twin accepts.
    rc |= CheckCast<float, half>(k, halves, "half->float");
    rc |= CheckCast<float, bfloat16_t>(k, bf16s, "bf16->float");
    rc |= CheckCast<int8_t, half>(k, halves, "half->int8");
    // In bit order the last vectors of a row (the one-vector loop after the groups) are all NaN; an odd stride mixes
    // finite, in-range and saturating values into them.
    std::vector<half> mixed(halves.size());
    for (size_t i = 0; i < halves.size(); ++i) mixed[i] = halves[(i * 7919) % halves.size()];
    rc |= CheckCast<int8_t, half>(k, mixed, "half->int8 (mixed order)");
    rc |= CheckCast<uint8_t, half>(k, halves, "half->uint8");
    rc |= CheckCast<int16_t, half>(k, halves, "half->int16");
    rc |= CheckCast<int32_t, half>(k, halves, "half->int32");
    rc |= CheckCast<int32_t, bfloat16_t>(k, bf16s, "bf16->int32");
    rc |= CheckCast<half, int8_t>(k, bytes, "int8->half");
    rc |= CheckCast<half, int16_t>(k, shorts, "int16->half");
    rc |= CheckCast<float, int16_t>(k, shorts, "int16->float");
    rc |= CheckCast<int32_t, float>(k, floats, "float->int32");
    rc |= CheckCast<int16_t, float>(k, floats, "float->int16");
    rc |= CheckCast<int64_t, float>(k, floats, "float->int64");
    rc |= CheckCast<half, float>(k, floats, "float->half");
    rc |= CheckCast<bfloat16_t, float>(k, floats, "float->bf16");
    rc |= CheckCast<float, float>(k, floats, "float->float");
    rc |= CheckCast<float, int32_t>(k, ints, "int32->float");
    rc |= CheckCast<int16_t, int32_t>(k, ints, "int32->int16");
    rc |= CheckCast<int64_t, int32_t>(k, ints, "int32->int64");
    if (rc) return rc;
    for (float scale : {1.0f, 0.5f, 3.0517578125e-05f, 1e-7f, 7.0f, -1.0f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<half> fast(ints.size()), ref(ints.size());
        cam::twin::DequantLoopWith(k, fast.data(), ints.data(), scale, uint32_t(ints.size()));
        cam::twin::ref::Cast(ref.data(), ints.data(), RoundMode::CAST_NONE, uint32_t(ints.size()), true, scale);
        for (size_t i = 0; i < ints.size(); ++i)
            if (fast[i].bits != ref[i].bits) return Fail("dequant int32->half of " + std::to_string(ints[i]));
    }
    // Max / Min over pairs of probe values (NaN, +-0, inf included).
    for (size_t i = 0; i + 1 < floats.size(); i += 1) {
        const float a = floats[i], b = floats[(i * 7919) % floats.size()];
        if (!SameBits(cam::twin::MaxPropagateNan(a, b), cam::twin::ref::MaxPropagateNan(a, b)))
            return Fail("Max " + std::to_string(Bits(a)) + " " + std::to_string(Bits(b)));
        if (!SameBits(cam::twin::MinPropagateNan(a, b), cam::twin::ref::MinPropagateNan(a, b)))
            return Fail("Min " + std::to_string(Bits(a)) + " " + std::to_string(Bits(b)));
    }
    // ReduceMax: value and work buffer, over lengths around the 64-element repeat, with NaN / +-0 / inf / ties.
    std::uniform_real_distribution<float> uni(-100.0f, 100.0f);
    const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                              twin_detail::BitsFloat(0xffc01234u), 100.0f, -1e30f};
    for (uint32_t count : {1u, 2u, 7u, 8u, 9u, 63u, 64u, 65u, 127u, 128u, 200u, 2048u, 7168u}) {
        for (int trial = 0; trial < 60; ++trial) {
            std::vector<float> s(count);
            const int kind = trial % 6;
            for (auto& v : s) v = kind == 3 ? (rng() % 2 ? 0.0f : -0.0f) : (kind == 4 ? std::fabs(uni(rng)) : uni(rng));
            if (kind == 1 || kind == 2 || kind == 5) {
                for (int j = 0; j < 3; ++j) s[rng() % count] = specials[rng() % (kind == 1 ? 4 : 8)];
            }
            if (kind == 4) s[rng() % count] = s[rng() % count];  // a tie
            const uint32_t workElems = cam::twin::ReduceMaxWorkElems<float>(count);
            std::vector<float> wf(workElems, 1.5f), wr(workElems, 1.5f);
            const float mf = k.reduceMaxFloat(s.data(), wf.data(), count);
            const float mr = cam::twin::ref::ReduceMax(s.data(), wr.data(), count);
            if (!SameBits(mf, mr) || std::memcmp(wf.data(), wr.data(), workElems * 4) != 0)
                return Fail("ReduceMax count " + std::to_string(count) + " trial " + std::to_string(trial));
        }
    }
    if (int e = CheckElementwise(k, floats)) return e;
    // The 16 x 16 byte transpose of LoadDataWithTranspose, against the definition (dst[c][r] = src[r][c]).
    for (size_t srcStride : {16u, 32u, 48u}) {
        for (size_t dstStride : {16u, 32u}) {
            std::vector<uint8_t> src(16 * srcStride), fast(16 * dstStride, 0xA5), ref(16 * dstStride, 0xA5);
            for (auto& v : src) v = uint8_t(rng());
            cam::twin::Transpose16x16(src.data(), srcStride, fast.data(), dstStride);
            for (size_t c = 0; c < 16; ++c)
                for (size_t r = 0; r < 16; ++r) ref[c * dstStride + r] = src[r * srcStride + c];
            if (fast != ref) return Fail("Transpose16x16 strides " + std::to_string(srcStride) + "/" + std::to_string(dstStride));
        }
    }
    std::printf("OK vector %s: %zu fp32 probes, all 65536 half and bf16 inputs, 19 Cast pairs x 6 round modes, "
                "elementwise fp32 ops, ReduceMax\n",
                cam::twin::VectorPathName(k.path), floats.size());
    return 0;
}

// stride 1: all 2^32 inputs; stride s: every s-th bit pattern (an odd s reaches every low-bit combination).
int Fp32Exhaustive(uint64_t stride, const VectorKernels& k) {
    constexpr uint32_t kChunk = 1u << 20;
    std::vector<float> src(kChunk);
    std::vector<int32_t> fi(kChunk), ri(kChunk);
    std::vector<half> fh(kChunk);
    std::vector<bfloat16_t> fb(kChunk);
    for (uint64_t base = 0; base < (1ull << 32); base += kChunk * stride) {
        for (uint32_t i = 0; i < kChunk; ++i) src[i] = twin_detail::BitsFloat(uint32_t(base + i * stride));
        for (uint32_t i = 0; i < kChunk; ++i) {
            const float f = src[i];
            if (half(f).bits != cam::twin::ref::FloatToHalfBits(f) ||
                bfloat16_t(f).bits != cam::twin::ref::FloatToBf16Bits(f))
                return Fail("fp32 -> 16-bit of 0x" + std::to_string(uint32_t(base + i * stride)));
        }
        k.castFloatToHalf(fh.data(), src.data(), kChunk);
        k.castFloatToBf16(fb.data(), src.data(), kChunk);
        for (uint32_t i = 0; i < kChunk; ++i) {
            if (fh[i].bits != cam::twin::ref::FloatToHalfBits(src[i]) || fb[i].bits != cam::twin::ref::FloatToBf16Bits(src[i]))
                return Fail("Cast fp32 -> 16-bit of 0x" + std::to_string(uint32_t(base + i * stride)));
        }
        for (RoundMode mode : kModes) {
            cam::twin::CastLoopWith(k, fi.data(), src.data(), mode, kChunk);
            for (uint32_t i = 0; i < kChunk; ++i) ri[i] = cam::twin::ref::RoundToInt<int32_t>(src[i], mode);
            if (std::memcmp(fi.data(), ri.data(), kChunk * 4) != 0)
                return Fail("fp32 -> int32 near 0x" + std::to_string(uint32_t(base)) + " mode " + std::to_string(int(mode)));
        }
    }
    std::printf("OK fp32-exhaustive %s: every %" PRIu64 "-th of the 2^32 inputs, fp32 -> half / bf16 / int32 (6 round modes)\n",
                cam::twin::VectorPathName(k.path), stride);
    return 0;
}

int Mmad(const char* name) {
    CubePath path;
    if (!cam::twin::ParseCubePath(name, &path)) return Fail(std::string("unknown cube path ") + name);
    if (!cam::twin::CubePathSupported(path)) {
        std::printf("UNSUPPORTED %s\n", name);
        return 2;
    }
    std::mt19937 rng(99);
    struct Shape {
        uint32_t m, n, k;
    };
    const Shape shapes[] = {{16, 16, 32},  {16, 16, 0},    {32, 16, 32},   {16, 32, 64},  {48, 48, 96},
                            {32, 48, 160}, {128, 256, 256}, {16, 256, 512}, {144, 80, 4096}, {64, 64, 32},
                            {0, 16, 32},   {80, 16, 1024}};
    uint64_t products = 0;
    for (const Shape& s : shapes) {
        for (int pass = 0; pass < 3; ++pass) {
            std::vector<int8_t> a(uint64_t(s.m) * s.k), b(uint64_t(s.k) * s.n);
            for (auto& v : a) v = int8_t(rng());
            for (auto& v : b) v = int8_t(rng());
            if (pass == 1) {  // the extremes: every product at its largest magnitude
                for (auto& v : a) v = -128;
                for (size_t i = 0; i < b.size(); ++i) b[i] = i % 3 ? -128 : 127;
            } else if (!a.empty() && !b.empty()) {
                a[rng() % a.size()] = -128;
                b[rng() % b.size()] = -128;
                a[rng() % a.size()] = 127;
            }
            std::vector<int32_t> cf(uint64_t(s.m) * s.n), cr;
            for (auto& v : cf) v = int32_t(rng());
            cr = cf;
            for (bool init : {true, false, false}) {
                cam::twin::MmadInt8With(path, cf.data(), a.data(), b.data(), s.m, s.n, s.k, init);
                cam::twin::ref::MmadInt8(cr.data(), a.data(), b.data(), s.m, s.n, s.k, init);
                if (cf != cr)
                    return Fail(std::string("Mmad ") + name + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                                " k=" + std::to_string(s.k) + " pass " + std::to_string(pass) +
                                (init ? " init" : " accumulate"));
                products += uint64_t(s.m) * s.n * s.k;
            }
        }
    }
    std::printf("OK mmad %s: %" PRIu64 " int8 products bit-identical\n", name, products);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "vector") return Vector(argc > 2 ? argv[2] : nullptr);
    if (mode == "vector-paths") {
        for (VectorPath p : {VectorPath::Avx512, VectorPath::Avx2, VectorPath::Portable})
            if (cam::twin::VectorPathSupported(p)) std::printf("%s\n", cam::twin::VectorPathName(p));
        return 0;
    }
    if (mode == "fp32-exhaustive") {
        const VectorKernels* k = &cam::twin::ActiveVectorKernels();
        if (argc > 3) {
            VectorPath path;
            if (!cam::twin::ParseVectorPath(argv[3], &path)) return Fail(std::string("unknown vector path ") + argv[3]);
            if (!cam::twin::VectorPathSupported(path)) return std::printf("UNSUPPORTED %s\n", argv[3]), 2;
            k = &cam::twin::VectorKernelsFor(path);
        }
        return Fp32Exhaustive(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1, *k);
    }
    if (mode == "mmad" && argc > 2) return Mmad(argv[2]);
    if (mode == "paths") {
        for (CubePath p : {CubePath::Amx, CubePath::Avx512Vnni, CubePath::Avx2, CubePath::Portable})
            if (cam::twin::CubePathSupported(p)) std::printf("%s\n", cam::twin::CubePathName(p));
        return 0;
    }
    std::printf("usage: compute_identity vector [PATH] | vector-paths | fp32-exhaustive [STRIDE [PATH]] | mmad PATH | paths\n");
    return 2;
}
