// GM side of the MTE copies (twin/gm_copy.h, docs/twin.md "Copies").
#include "twin/gm_copy.h"

#include <cstdlib>
#include <cstring>
#include <source_location>
#include <string>

#include "twin/env_path.h"
#include "twin/runtime.h"

namespace cam::twin {

namespace {

// One naturally aligned access of 1, 2, 4 or 8 bytes. Relaxed: the ordering of a copy against other copies comes
// from the fence at its start (GmWrite) or end (GmRead), not from each word.
inline void LoadWord(uint8_t* out, const uint8_t* gm, size_t n) {
    switch (n) {
        case 8: {
            const uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t*>(gm), __ATOMIC_RELAXED);
            std::memcpy(out, &v, 8);
            break;
        }
        case 4: {
            const uint32_t v = __atomic_load_n(reinterpret_cast<const uint32_t*>(gm), __ATOMIC_RELAXED);
            std::memcpy(out, &v, 4);
            break;
        }
        case 2: {
            const uint16_t v = __atomic_load_n(reinterpret_cast<const uint16_t*>(gm), __ATOMIC_RELAXED);
            std::memcpy(out, &v, 2);
            break;
        }
        default: *out = __atomic_load_n(gm, __ATOMIC_RELAXED); break;
    }
}

inline void StoreWord(uint8_t* gm, const uint8_t* in, size_t n) {
    switch (n) {
        case 8: {
            uint64_t v;
            std::memcpy(&v, in, 8);
            __atomic_store_n(reinterpret_cast<uint64_t*>(gm), v, __ATOMIC_RELAXED);
            break;
        }
        case 4: {
            uint32_t v;
            std::memcpy(&v, in, 4);
            __atomic_store_n(reinterpret_cast<uint32_t*>(gm), v, __ATOMIC_RELAXED);
            break;
        }
        case 2: {
            uint16_t v;
            std::memcpy(&v, in, 2);
            __atomic_store_n(reinterpret_cast<uint16_t*>(gm), v, __ATOMIC_RELAXED);
            break;
        }
        default: __atomic_store_n(gm, *in, __ATOMIC_RELAXED); break;
    }
}

// The widest access (at most 8 bytes) that is naturally aligned at `addr` and fits in `left` bytes. Walking a run
// with it, the address only gains alignment up to 8 and then keeps it until the tail, where the sizes only shrink:
// so every naturally aligned 2/4/8-byte word inside the run is covered by one access, never split.
inline size_t EdgeStep(uintptr_t addr, size_t left) {
    size_t n = 8;
    while (n > 1 && ((addr & (n - 1)) != 0 || n > left)) n >>= 1;
    return n;
}

#if defined(__x86_64__)
// 64 bytes: the GM side with aligned 16-byte moves (VMOVDQA xmm, VEX.128: one access per 16 bytes), the local
// side unaligned.
// Inline assembly, not intrinsics: g++ may turn a loop of vector loads and stores into a memcpy call (loop
// distribution), which uses `rep movsb` or unaligned wide moves with no per-word atomicity. The memory clobber also
// keeps the compiler from moving other memory accesses across the copy.
inline void Read64Sse(uint8_t* out, const uint8_t* gm) {
    asm volatile(
        "vmovdqa   (%1), %%xmm0\n\t"
        "vmovdqa 16(%1), %%xmm1\n\t"
        "vmovdqa 32(%1), %%xmm2\n\t"
        "vmovdqa 48(%1), %%xmm3\n\t"
        "vmovdqu %%xmm0,   (%0)\n\t"
        "vmovdqu %%xmm1, 16(%0)\n\t"
        "vmovdqu %%xmm2, 32(%0)\n\t"
        "vmovdqu %%xmm3, 48(%0)\n\t"
        :
        : "r"(out), "r"(gm)
        : "xmm0", "xmm1", "xmm2", "xmm3", "memory");
}

inline void Read16Sse(uint8_t* out, const uint8_t* gm) {
    asm volatile("vmovdqa (%1), %%xmm0\n\tvmovdqu %%xmm0, (%0)\n\t" : : "r"(out), "r"(gm) : "xmm0", "memory");
}

inline void Write64Sse(uint8_t* gm, const uint8_t* in) {
    asm volatile(
        "vmovdqu   (%1), %%xmm0\n\t"
        "vmovdqu 16(%1), %%xmm1\n\t"
        "vmovdqu 32(%1), %%xmm2\n\t"
        "vmovdqu 48(%1), %%xmm3\n\t"
        "vmovdqa %%xmm0,   (%0)\n\t"
        "vmovdqa %%xmm1, 16(%0)\n\t"
        "vmovdqa %%xmm2, 32(%0)\n\t"
        "vmovdqa %%xmm3, 48(%0)\n\t"
        :
        : "r"(gm), "r"(in)
        : "xmm0", "xmm1", "xmm2", "xmm3", "memory");
}

inline void Write16Sse(uint8_t* gm, const uint8_t* in) {
    asm volatile("vmovdqu (%1), %%xmm0\n\tvmovdqa %%xmm0, (%0)\n\t" : : "r"(gm), "r"(in) : "xmm0", "memory");
}
#endif

// Head and tail with EdgeStep; the aligned body with 16-byte VEX moves (the path needs AVX anyway; VEX encoding
// also avoids the SSE/AVX transition cost after AVX-512 code) or 8-byte words.
template <bool kWrite>
void Copy(GmCopyPath path, uint8_t* gm, uint8_t* local, size_t bytes) {
    size_t i = 0;
    const auto at = [&](size_t k) { return reinterpret_cast<uintptr_t>(gm + k); };
#if defined(__x86_64__)
    if (path == GmCopyPath::Sse16 && bytes >= 16) {
        while ((at(i) & 15u) != 0) {  // at most 15 bytes, fewer than `bytes`
            const size_t n = EdgeStep(at(i), 16 - (at(i) & 15u));
            if (kWrite) {
                StoreWord(gm + i, local + i, n);
            } else {
                LoadWord(local + i, gm + i, n);
            }
            i += n;
        }
        for (; i + 64 <= bytes; i += 64) {
            if (kWrite) {
                Write64Sse(gm + i, local + i);
            } else {
                Read64Sse(local + i, gm + i);
            }
        }
        for (; i + 16 <= bytes; i += 16) {
            if (kWrite) {
                Write16Sse(gm + i, local + i);
            } else {
                Read16Sse(local + i, gm + i);
            }
        }
    }
#else
    (void)path;
#endif
    if (bytes - i >= 8) {
        while ((at(i) & 7u) != 0) {  // at most 7 bytes
            const size_t n = EdgeStep(at(i), 8 - (at(i) & 7u));
            if (kWrite) {
                StoreWord(gm + i, local + i, n);
            } else {
                LoadWord(local + i, gm + i, n);
            }
            i += n;
        }
        for (; i + 8 <= bytes; i += 8) {
            if (kWrite) {
                StoreWord(gm + i, local + i, 8);
            } else {
                LoadWord(local + i, gm + i, 8);
            }
        }
    }
    while (i < bytes) {
        const size_t n = EdgeStep(at(i), bytes - i);
        if (kWrite) {
            StoreWord(gm + i, local + i, n);
        } else {
            LoadWord(local + i, gm + i, n);
        }
        i += n;
    }
}

bool CpuHasAvx() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx");
#else
    return false;
#endif
}

// Resolved at the first copy (twin/env_path.h): sse16 where the CPU has AVX, else word8.
const EnvPath<GmCopyPath>& Resolve() {
    static const EnvPath<GmCopyPath> resolved = ResolveEnvPath(
        "CAM_TWIN_COPY", {GmCopyPath::Sse16, GmCopyPath::Word8}, GmCopyPathName, GmCopyPathSupported,
        "this CPU does not report AVX, so its 16-byte moves are not documented atomic");
    return resolved;
}

}  // namespace

bool GmCopyPathSupported(GmCopyPath path) {
    static const bool avx = CpuHasAvx();
    return path == GmCopyPath::Word8 || (path == GmCopyPath::Sse16 && avx);
}

const char* GmCopyPathName(GmCopyPath path) { return path == GmCopyPath::Sse16 ? "sse16" : "word8"; }

GmCopyPath ActiveGmCopyPath() {
    const EnvPath<GmCopyPath>& r = Resolve();
    if (!r.error.empty()) Violation("copy-path", r.error, std::source_location::current());
    return r.path;
}

void GmReadVia(GmCopyPath path, void* local, const void* gm, size_t bytes) {
    Copy<false>(path, const_cast<uint8_t*>(static_cast<const uint8_t*>(gm)), static_cast<uint8_t*>(local), bytes);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}

void GmWriteVia(GmCopyPath path, void* gm, const void* local, size_t bytes) {
    __atomic_thread_fence(__ATOMIC_RELEASE);
    Copy<true>(path, static_cast<uint8_t*>(gm), const_cast<uint8_t*>(static_cast<const uint8_t*>(local)), bytes);
}

void GmRead(void* local, const void* gm, size_t bytes) { GmReadVia(ActiveGmCopyPath(), local, gm, bytes); }

void GmWrite(void* gm, const void* local, size_t bytes) { GmWriteVia(ActiveGmCopyPath(), gm, local, bytes); }

}  // namespace cam::twin
