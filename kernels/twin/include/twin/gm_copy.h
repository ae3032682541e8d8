// The GM side of every MTE copy (DataCopy, DataCopyPad, the cube copies, Fixpipe): docs/twin.md, "Copies".
//
// The copy engines' callers check a whole copy once (alignment, bounds, pads, block counts, queue state, dirty
// scalar-cache lines) and then hand each contiguous run to GmRead / GmWrite, which only move bytes. They move them
// with the widest naturally aligned accesses that fit, so every naturally aligned 2-, 4- or 8-byte word inside the
// run is read or written by exactly one access and is never torn: a flag word another block polls while a copy
// overwrites it is seen either old or new, never half of each.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cam::twin {

enum class GmCopyPath : uint8_t {
    // 16-byte aligned moves (VMOVDQA xmm, VEX.128) for the body. Only where CPUID reports AVX: Intel and AMD
    // guarantee those 16-byte accesses atomic on such CPUs (Intel SDM vol. 3A "Guaranteed Atomic Operations",
    // AMD APM vol. 2 §7.3.2), so each 8-byte word inside is a single untorn access.
    Sse16 = 0,
    // 8-byte atomic accesses for the body (any x86-64; every other ISA): the reference path, and what a
    // ThreadSanitizer build must use (it does not see the sse16 path's inline assembly).
    Word8 = 1,
};

// CAM_TWIN_COPY=auto|sse16|word8, resolved at the first copy; auto (or unset) takes sse16 where the CPU has AVX,
// word8 otherwise. An unknown name, or sse16 on a CPU without AVX, is a `copy-path` violation at the first copy.
GmCopyPath ActiveGmCopyPath();
bool GmCopyPathSupported(GmCopyPath path);
const char* GmCopyPathName(GmCopyPath path);

// `bytes` from GM to local memory (UB, L1, a staging row) and back. GmRead ends with an acquire fence and GmWrite
// starts with a release fence: what a block wrote before a GmWrite (earlier copies included) is visible to a block
// whose GmRead returned any word of it, which is what a drained MTE3 queue gives on the hardware. The order of the
// words inside one copy is not defined (the MTE engines do not define it either).
void GmRead(void* local, const void* gm, size_t bytes);
void GmWrite(void* gm, const void* local, size_t bytes);

// The same, on a named path (tests compare the paths and drive each against a concurrent reader).
void GmReadVia(GmCopyPath path, void* local, const void* gm, size_t bytes);
void GmWriteVia(GmCopyPath path, void* gm, const void* local, size_t bytes);

}  // namespace cam::twin
