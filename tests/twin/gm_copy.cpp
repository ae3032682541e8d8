// The GM side of the twin's MTE copies (kernels/twin/src/gm_copy.cpp), driven by tests/test_twin_copy.py. Each mode
// prints "OK ..." or what went wrong and exits non-zero.
//   paths                       the copy paths this machine supports
//   identity PATH               GmRead / GmWrite against memcpy: every GM misalignment 0..31, lengths 0..300 and a
//                               few large ones; bytes outside the run untouched on both sides
//   tear-write PATH|bytewise S  a writer copies runs over a region again and again (alternating all-0x00 and
//                               all-0xFF sources) while a reader polls every naturally aligned 2/4/8-byte word
//                               inside it with one atomic load; a word holding both 0x00 and 0xFF bytes is torn.
//                               At most S seconds; `bytewise` is the control: a copy one byte at a time
//   tear-read PATH|bytewise S   the other direction: a writer stores whole 8-byte words atomically, the reader
//                               copies the region out with GmRead and checks the words of its copy
//   bench                       GB/s of each path and of memcpy (16 MiB: out of the L2; no assertion; printed)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include "twin/gm_copy.h"

// gm_copy.cpp reports a bad CAM_TWIN_COPY through the twin's Violation; this binary links gm_copy.cpp alone.
namespace cam::twin {
[[noreturn]] void Violation(const char* rule, const std::string& detail, const std::source_location&) {
    std::printf("VIOLATION %s: %s\n", rule, detail.c_str());
    std::exit(3);
}
}  // namespace cam::twin

namespace {

using cam::twin::GmCopyPath;
using Clock = std::chrono::steady_clock;

bool ParsePath(const std::string& name, GmCopyPath* path) {
    if (name == "sse16") return *path = GmCopyPath::Sse16, true;
    if (name == "word8") return *path = GmCopyPath::Word8, true;
    return false;
}

int Identity(GmCopyPath path) {
    constexpr size_t kGuard = 64;
    std::mt19937_64 rng(7);
    std::vector<size_t> lengths;
    for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
    for (size_t n : {1000, 4095, 4096, 4097, 65536 + 13, (1 << 20) + 7}) lengths.push_back(n);
    for (size_t len : lengths) {
        for (size_t mis = 0; mis < 32; ++mis) {
            if (len > 4096 && mis % 7 != 0) continue;  // large runs: a few misalignments are enough
            // 64-byte aligned backing so `mis` is the GM address's misalignment; the local side at an odd offset.
            std::vector<uint8_t> gmBack(len + 2 * kGuard + 128), local(len + 2 * kGuard + 1), want;
            for (auto& b : gmBack) b = uint8_t(rng());
            for (auto& b : local) b = uint8_t(rng());
            uint8_t* gmBase = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(gmBack.data()) + 63) & ~63ull);
            uint8_t* gm = gmBase + kGuard + mis;
            uint8_t* loc = local.data() + kGuard + 1;
            // Write: GM gets exactly the run, nothing around it changes.
            want.assign(gmBack.begin(), gmBack.end());
            const size_t off = gm - gmBack.data();
            std::memcpy(want.data() + off, loc, len);
            cam::twin::GmWriteVia(path, gm, loc, len);
            if (std::memcmp(want.data(), gmBack.data(), gmBack.size()) != 0) {
                std::printf("MISMATCH GmWrite %s len %zu misalignment %zu\n", cam::twin::GmCopyPathName(path), len,
                            mis);
                return 1;
            }
            // Read: the local side gets exactly the run.
            for (size_t i = 0; i < len; ++i) gm[i] = uint8_t(rng());
            want.assign(local.begin(), local.end());
            std::memcpy(want.data() + kGuard + 1, gm, len);
            cam::twin::GmReadVia(path, loc, gm, len);
            if (std::memcmp(want.data(), local.data(), local.size()) != 0) {
                std::printf("MISMATCH GmRead %s len %zu misalignment %zu\n", cam::twin::GmCopyPathName(path), len, mis);
                return 1;
            }
        }
    }
    std::printf("OK identity %s\n", cam::twin::GmCopyPathName(path));
    return 0;
}

// The control's copy: one byte at a time (what a copy with no word atomicity may do).
void BytewiseCopy(uint8_t* dst, const uint8_t* src, size_t n) {
    for (size_t i = 0; i < n; ++i)
        __atomic_store_n(dst + i, __atomic_load_n(src + i, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

// A word read whole: torn when it holds both a 0x00 and a 0xFF byte (the two sources' only values).
template <typename W>
bool Torn(W w) {
    return w != W(0) && w != W(~W(0));
}

// Every naturally aligned 2/4/8-byte word fully inside [b, e), each read with one atomic load; returns torn ones.
// `midCopy` counts scans that saw whole words of both values: the reader caught a copy in progress, which is what
// gives a clean run its power (a reader that only ever ran between copies proves nothing).
uint64_t CheckWords(const uint8_t* b, const uint8_t* e, uint64_t* midCopy) {
    uint64_t torn = 0;
    bool zero = false, full = false;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(b), hi = reinterpret_cast<uintptr_t>(e);
    for (uintptr_t a = (lo + 7) & ~uintptr_t(7); a + 8 <= hi; a += 8) {
        const uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t*>(a), __ATOMIC_RELAXED);
        torn += Torn(v);
        zero |= v == 0;
        full |= v == ~uint64_t(0);
    }
    *midCopy += zero && full;
    for (uintptr_t a = (lo + 3) & ~uintptr_t(3); a + 4 <= hi; a += 4)
        torn += Torn(__atomic_load_n(reinterpret_cast<const uint32_t*>(a), __ATOMIC_RELAXED));
    for (uintptr_t a = (lo + 1) & ~uintptr_t(1); a + 2 <= hi; a += 2)
        torn += Torn(__atomic_load_n(reinterpret_cast<const uint16_t*>(a), __ATOMIC_RELAXED));
    return torn;
}

// The copied region starts 3 bytes past a 64-byte boundary and ends 5 bytes before one, so its head and tail take
// the 1/2/4/8-byte edge accesses and its body the wide moves: every kind of access is under test.
constexpr size_t kRegionOffset = 3;
constexpr size_t kRegionBytes = 512 - 3 - 5;

int Tear(bool writeSide, const std::string& which, double seconds) {
    GmCopyPath path = GmCopyPath::Word8;
    const bool control = which == "bytewise";
    if (!control && !ParsePath(which, &path)) {
        std::printf("unknown path %s\n", which.c_str());
        return 1;
    }
    alignas(64) static uint8_t gm[1024];
    alignas(64) static uint8_t zeros[1024];
    alignas(64) static uint8_t ones[1024];
    std::memset(gm, 0, sizeof(gm));
    std::memset(zeros, 0, sizeof(zeros));
    std::memset(ones, 0xFF, sizeof(ones));
    uint8_t* region = gm + kRegionOffset;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> torn{0}, writes{0}, reads{0}, midCopies{0};

    std::thread writer([&] {
        uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            const uint8_t* src = (n & 1) ? ones : zeros;
            if (writeSide) {
                if (control) {
                    BytewiseCopy(region, src, kRegionBytes);
                } else {
                    cam::twin::GmWriteVia(path, region, src, kRegionBytes);
                }
            } else {
                // Whole aligned words, each one atomic store, over the 64-byte lines holding the region.
                const uint64_t v = (n & 1) ? ~uint64_t(0) : 0;
                for (size_t i = 0; i < 512; i += 8)
                    __atomic_store_n(reinterpret_cast<uint64_t*>(gm + i), v, __ATOMIC_RELAXED);
            }
            ++n;
            if ((n & 255) == 0 && Clock::now() > deadline) break;
        }
        writes = n;
    });
    std::thread reader([&] {
        uint64_t n = 0, mid = 0, bad = 0;
        alignas(64) uint8_t copy[1024];
        while (Clock::now() < deadline) {
            for (int k = 0; k < 64; ++k, ++n) {
                if (writeSide) {
                    bad += CheckWords(region, region + kRegionBytes, &mid);
                } else {
                    // The copy keeps the region's alignment mod 64, so its words are the region's words.
                    uint8_t* out = copy + kRegionOffset;
                    if (control) {
                        BytewiseCopy(out, region, kRegionBytes);
                    } else {
                        cam::twin::GmReadVia(path, out, region, kRegionBytes);
                    }
                    bad += CheckWords(out, out + kRegionBytes, &mid);
                }
            }
            if (control && bad > 0) break;  // the control has shown what it must show
        }
        stop = true;
        torn = bad;
        reads = n;
        midCopies = mid;
    });
    reader.join();  // the reader stops at the deadline; the writer at `stop` or at the deadline
    writer.join();
    std::printf("%s %s %s: %llu torn words, %llu copies, %llu reads, %llu scans caught a copy in progress\n",
                torn.load() ? "TORN" : "OK", writeSide ? "tear-write" : "tear-read", which.c_str(),
                static_cast<unsigned long long>(torn.load()), static_cast<unsigned long long>(writes.load()),
                static_cast<unsigned long long>(reads.load()), static_cast<unsigned long long>(midCopies.load()));
    return torn.load() ? 2 : 0;
}

// Each size: 15 rounds, each timing every mode once in turn (a loaded machine slows all modes alike), the median
// round per mode.
int Bench() {
    const char* names[] = {"memcpy", "word8-read", "word8-write", "sse16-read", "sse16-write"};
    const int modes = cam::twin::GmCopyPathSupported(GmCopyPath::Sse16) ? 5 : 3;
    for (size_t bytes : {size_t(256), size_t(4096), size_t(65536), size_t(1) << 20, size_t(16) << 20}) {
        std::vector<uint8_t> a(bytes + 64, 1), b(bytes + 64, 2);
        const int reps = int(std::max<size_t>(2, (size_t(16) << 20) / bytes));
        std::vector<std::vector<double>> gbps(modes);
        for (int round = 0; round < 15; ++round) {
            for (int mode = 0; mode < modes; ++mode) {
                const auto t0 = Clock::now();
                for (int r = 0; r < reps; ++r) {
                    uint8_t* gm = a.data() + 8;  // 8-byte aligned, not 16: the head takes an edge access
                    switch (mode) {
                        case 0: std::memcpy(b.data(), gm, bytes); break;
                        case 1: cam::twin::GmReadVia(GmCopyPath::Word8, b.data(), gm, bytes); break;
                        case 2: cam::twin::GmWriteVia(GmCopyPath::Word8, gm, b.data(), bytes); break;
                        case 3: cam::twin::GmReadVia(GmCopyPath::Sse16, b.data(), gm, bytes); break;
                        case 4: cam::twin::GmWriteVia(GmCopyPath::Sse16, gm, b.data(), bytes); break;
                    }
                    asm volatile("" : : : "memory");
                }
                const std::chrono::duration<double> d = Clock::now() - t0;
                gbps[mode].push_back(bytes * double(reps) / d.count() / 1e9);
            }
        }
        std::printf("bytes %zu", bytes);
        for (int mode = 0; mode < modes; ++mode) {
            std::sort(gbps[mode].begin(), gbps[mode].end());
            std::printf("  %s %.2f", names[mode], gbps[mode][gbps[mode].size() / 2]);
        }
        std::printf("\n");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "paths") {
        for (GmCopyPath p : {GmCopyPath::Sse16, GmCopyPath::Word8})
            if (cam::twin::GmCopyPathSupported(p)) std::printf("%s ", cam::twin::GmCopyPathName(p));
        std::printf("\nactive %s\n", cam::twin::GmCopyPathName(cam::twin::ActiveGmCopyPath()));
        return 0;
    }
    if (mode == "identity" && argc > 2) {
        GmCopyPath path;
        if (!ParsePath(argv[2], &path)) return std::printf("unknown path %s\n", argv[2]), 1;
        return Identity(path);
    }
    if ((mode == "tear-write" || mode == "tear-read") && argc > 3)
        return Tear(mode == "tear-write", argv[2], std::atof(argv[3]));
    if (mode == "bench") return Bench();
    std::printf("usage: %s paths | identity PATH | tear-write|tear-read PATH|bytewise SECONDS | bench\n", argv[0]);
    return 1;
}
