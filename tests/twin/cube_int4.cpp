// The twin's int4 cube path (twin/cube_int4.h): an int4 x int4 matmul through GM -> L1 (ND -> NZ for A, a burst
// of prepacked ZN fractals for B), LoadData into L0A / L0B, Mmad and Fixpipe, against the integer product; and one
// kernel per int4 rule that breaks it (docs/twin.md, "int4 operands"). Usage: cube_int4 <case>.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/launch.h"
#include "twin/runtime.h"

using namespace AscendC;

namespace {

enum class Break { None, Int8A, Int8B, ShortA, OddOffset, OddDValue };

struct Shape {
    uint32_t m, k, n;
    uint32_t k4() const { return (k + 63) / 64 * 64; }
};

// C [m, n] int32 (ND) = A [m, k] int4 (ND, packed along k) x B (int4 ZN fractals of 64 k x 16 columns, k rounded
// up to 64, prepacked). m and n multiples of 16.
void Int4Cube(GM_ADDR a, GM_ADDR b, GM_ADDR c, Shape s, Break brk) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    const uint32_t k4 = s.k4();
    TPipe pipe;
    TQue<TPosition::A1, 1> a1;
    TQue<TPosition::B1, 1> b1;
    TQue<TPosition::A2, 1> a2;
    TQue<TPosition::B2, 1> b2;
    TQue<TPosition::CO1, 1> co1;
    pipe.InitBuffer(a1, 1, s.m * k4 / 2);
    pipe.InitBuffer(b1, 1, k4 * s.n / 2);
    pipe.InitBuffer(a2, 1, s.m * k4 / 2);
    pipe.InitBuffer(b2, 1, k4 * s.n / 2);
    pipe.InitBuffer(co1, 1, s.m * s.n * 4);
    GlobalTensor<int4b_t> ga, gb;
    GlobalTensor<int32_t> gc;
    ga.SetGlobalBuffer(reinterpret_cast<__gm__ int4b_t*>(a), uint64_t(s.m) * s.k);
    gb.SetGlobalBuffer(reinterpret_cast<__gm__ int4b_t*>(b), uint64_t(k4) * s.n);
    gc.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(c), uint64_t(s.m) * s.n);

    LocalTensor<int4b_t> ta = a1.AllocTensor<int4b_t>();
    Nd2NzParams nd;
    nd.nValue = s.m;
    nd.dValue = brk == Break::OddDValue ? s.k - 1 : s.k;
    nd.srcDValue = s.k;
    nd.dstNzC0Stride = s.m;  // a 64-element column block holds all m rows
    DataCopy(ta, ga, nd);  // @case:nd2nz_odd_dvalue
    a1.EnQue(ta);
    LocalTensor<int4b_t> tb = b1.AllocTensor<int4b_t>();
    DataCopyParams burst;
    burst.blockLen = k4 * s.n / 2 / 32;
    DataCopy(tb, gb, burst);
    b1.EnQue(tb);

    ta = a1.DeQue<int4b_t>();
    LocalTensor<int4b_t> la = a2.AllocTensor<int4b_t>();
    for (uint32_t ib = 0; ib < s.m / 16; ++ib) {  // NZ in L1 -> ZZ in L0A, one 16-row block at a time
        LoadData2DParams ld;
        ld.startIndex = ib;
        ld.repeatTimes = k4 / 64;
        ld.srcStride = s.m / 16;
        const uint32_t offset = ib * 16 * k4 + (brk == Break::OddOffset ? 1 : 0);
        LoadData(la[offset], ta, ld);  // the odd offset is refused by la[] itself
    }
    a2.EnQue(la);
    a1.FreeTensor(ta);
    tb = b1.DeQue<int4b_t>();
    LocalTensor<int4b_t> lb = b2.AllocTensor<int4b_t>();
    LoadData2DParams ldb;
    ldb.repeatTimes = (k4 / 64) * (s.n / 16);
    ldb.srcStride = 1;
    LoadData(lb, tb, ldb);
    b2.EnQue(lb);
    b1.FreeTensor(tb);

    la = a2.DeQue<int4b_t>();
    lb = b2.DeQue<int4b_t>();
    LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
    MmadParams mm;
    mm.m = s.m;
    mm.n = s.n;
    mm.k = s.k;
    if (brk == Break::Int8A) {
        Mmad(lc, la.ReinterpretCast<int8_t>(), lb, mm);  // @case:mmad_int8_by_int4
    } else if (brk == Break::Int8B) {
        Mmad(lc, la, lb.ReinterpretCast<int8_t>(), mm);  // @case:mmad_int4_by_int8
    } else if (brk == Break::ShortA) {
        Mmad(lc, la[s.m * k4 - s.m * s.k], lb, mm);  // @case:mmad_int4_k   A holds m x k, not m x 64-rounded k
    } else {
        Mmad(lc, la, lb, mm);
    }
    a2.FreeTensor(la);
    b2.FreeTensor(lb);
    co1.EnQue(lc);
    lc = co1.DeQue<int32_t>();
    FixpipeParamsV220 fp;
    fp.nSize = s.n;
    fp.mSize = s.m;
    fp.srcStride = s.m;
    fp.dstStride = s.n;
    Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(gc, lc, fp);
    co1.FreeTensor(lc);
}

// One launch of Int4Cube; prints the violation and returns false if the twin refused the kernel.
bool Launch(std::vector<uint8_t>& a, std::vector<uint8_t>& b, std::vector<int32_t>& c, Shape s, Break brk) {
    try {
        cam::twin::RunLaunch("int4_cube", 1, [&] {
            Int4Cube(reinterpret_cast<GM_ADDR>(a.data()), reinterpret_cast<GM_ADDR>(b.data()),
                     reinterpret_cast<GM_ADDR>(c.data()), s, brk);
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return false;
    }
    return true;
}

// Operands packed by the caller (cam's packers): DIR/a.bin (A ND, packed along k), DIR/b.bin (B ZN fractals);
// writes DIR/c.bin (int32 [m, n]).
int FromFiles(const std::string& dir, Shape s) {
    auto load = [&](const char* name, size_t bytes) {
        std::vector<uint8_t> v(bytes);
        FILE* f = std::fopen((dir + "/" + name).c_str(), "rb");
        if (f == nullptr || std::fread(v.data(), 1, bytes, f) != bytes) v.clear();
        if (f != nullptr) std::fclose(f);
        return v;
    };
    std::vector<uint8_t> a = load("a.bin", s.m * s.k / 2), b = load("b.bin", s.k4() * s.n / 2);
    if (a.empty() || b.empty()) return std::fprintf(stderr, "cannot read a.bin / b.bin in %s\n", dir.c_str()), 2;
    std::vector<int32_t> c(s.m * s.n, 0);
    if (!Launch(a, b, c, s, Break::None)) return 1;
    FILE* f = std::fopen((dir + "/c.bin").c_str(), "wb");
    if (f == nullptr || std::fwrite(c.data(), 4, c.size(), f) != c.size())
        return std::fprintf(stderr, "cannot write c.bin in %s\n", dir.c_str()), 2;
    std::fclose(f);
    std::printf("OK\n");
    return 0;
}

// The vector Cast half -> int4b_t (the W4A8 activation split's packer): -9.5 floors to -10 and saturates to -8,
// 6.5 floors to 6; two values a byte, element 2i in the low nibble. An odd count would leave half a byte: refused.
int CastInt4(bool odd) {
    std::vector<uint8_t> out(32, 0);
    try {
        cam::twin::RunLaunch("int4_cube", 1, [&] {
            TPipe pipe;
            TBuf<TPosition::VECCALC> hb;
            TQue<TPosition::VECOUT, 1> oq;
            pipe.InitBuffer(hb, 64 * 2);
            pipe.InitBuffer(oq, 1, 32);
            LocalTensor<half> h = hb.Get<half>();
            Duplicate(h, half(-9.5f), 32);
            Duplicate(h[32], half(6.5f), 32);
            LocalTensor<int4b_t> q = oq.AllocTensor<int4b_t>();
            Cast(q, h, RoundMode::CAST_FLOOR, odd ? 63 : 64);  // @case:cast_int4_odd_count
            oq.EnQue(q);
            q = oq.DeQue<int4b_t>();
            GlobalTensor<int8_t> g;
            g.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(out.data()), 32);
            DataCopy(g, q.ReinterpretCast<int8_t>(), 32);
            oq.FreeTensor(q);
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    for (int i = 0; i < 32; ++i)
        if (out[i] != (i < 16 ? 0x88 : 0x66)) return std::printf("wrong int4 byte %d: 0x%02x\n", i, out[i]), 3;
    std::printf("OK\n");
    return 0;
}

uint8_t Nibble(int v) { return static_cast<uint8_t>(v) & 0x0F; }

// Random int4 values over [-8, 7]; A packed along k (ND), B in ZN fractals, its rows past k random too (the
// Nd2Nz copy zero-fills A's, so the products over the padding vanish).
int Run(Shape s, Break brk) {
    const uint32_t k4 = s.k4(), nb = s.n / 16;
    std::mt19937 rng(s.m * 131 + s.k * 7 + s.n);
    std::uniform_int_distribution<int> val(-8, 7);
    std::vector<int> av(s.m * s.k), bv(k4 * s.n);
    for (int& v : av) v = val(rng);
    for (int& v : bv) v = val(rng);
    std::vector<uint8_t> a(s.m * s.k / 2, 0), b(k4 * s.n / 2, 0);
    for (uint32_t r = 0; r < s.m; ++r)
        for (uint32_t k = 0; k < s.k; ++k)
            a[(r * s.k + k) / 2] |= Nibble(av[r * s.k + k]) << (4 * (k % 2));
    for (uint32_t k = 0; k < k4; ++k)
        for (uint32_t j = 0; j < s.n; ++j) {
            const uint64_t byte = (uint64_t(k / 64) * nb + j / 16) * 512 + (j % 16) * 32 + (k % 64) / 2;
            b[byte] |= Nibble(bv[k * s.n + j]) << (4 * (k % 2));
        }
    std::vector<int32_t> c(s.m * s.n, 0);
    if (!Launch(a, b, c, s, brk)) return 1;
    for (uint32_t r = 0; r < s.m; ++r)
        for (uint32_t j = 0; j < s.n; ++j) {
            int32_t want = 0;
            for (uint32_t k = 0; k < s.k; ++k) want += av[r * s.k + k] * bv[k * s.n + j];
            if (c[r * s.n + j] != want) {
                std::printf("wrong int4 product at (%u, %u): %d, want %d\n", r, j, c[r * s.n + j], want);
                return 3;
            }
        }
    std::printf("OK\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 6 && std::strcmp(argv[1], "file") == 0)
        return FromFiles(argv[2], {uint32_t(std::atoi(argv[3])), uint32_t(std::atoi(argv[4])),
                                   uint32_t(std::atoi(argv[5]))});
    if (argc != 2) return std::fprintf(stderr, "usage: cube_int4 <case> | file DIR M K N\n"), 2;
    const std::string c = argv[1];
    if (c == "good_int4") return Run({32, 128, 48}, Break::None);
    if (c == "good_int4_k96") return Run({16, 96, 32}, Break::None);  // K padded to 64 by the copy, B past K random
    if (c == "mmad_int8_by_int4") return Run({16, 128, 16}, Break::Int8A);
    if (c == "mmad_int4_by_int8") return Run({16, 128, 16}, Break::Int8B);
    if (c == "mmad_int4_k") return Run({16, 96, 16}, Break::ShortA);
    if (c == "int4_odd_offset") return Run({16, 128, 16}, Break::OddOffset);
    if (c == "nd2nz_odd_dvalue") return Run({16, 128, 16}, Break::OddDValue);
    if (c == "cast_int4") return CastInt4(false);
    if (c == "cast_int4_odd_count") return CastInt4(true);
    std::fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
