#include "twin/pipes.h"

#include <cstdio>
#include <string>
#include <vector>

#include "twin/runtime.h"
#include "twin/types.h"

namespace cam::twin {

using AscendC::HardEvent;
using AscendC::TPosition;

const AutoSyncRow kAutoSync[] = {
    {Pipe::S, Pipe::MTE2, SyncBy::Compiler, Space::UB, TPosition::VECCALC},
    {Pipe::S, Pipe::MTE3, SyncBy::Compiler, Space::UB, TPosition::VECCALC},
    {Pipe::S, Pipe::V, SyncBy::Compiler, Space::UB, TPosition::VECCALC},
    {Pipe::MTE2, Pipe::V, SyncBy::TQue, Space::UB, TPosition::VECIN},
    {Pipe::V, Pipe::MTE3, SyncBy::TQue, Space::UB, TPosition::VECOUT},
    {Pipe::MTE2, Pipe::MTE1, SyncBy::TQue, Space::L1, TPosition::A1},
    {Pipe::MTE2, Pipe::MTE1, SyncBy::TQue, Space::L1, TPosition::B1},
    {Pipe::MTE1, Pipe::M, SyncBy::TQue, Space::L0A, TPosition::A2},
    {Pipe::MTE1, Pipe::M, SyncBy::TQue, Space::L0B, TPosition::B2},
    {Pipe::M, Pipe::FIX, SyncBy::TQue, Space::L0C, TPosition::CO1},
};
const int kAutoSyncRows = sizeof(kAutoSync) / sizeof(kAutoSync[0]);

const char* PipeName(Pipe p) {
    static const char* const names[] = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX"};
    return p < Pipe::kCount ? names[static_cast<int>(p)] : "?";
}

namespace {

constexpr int kPipes = static_cast<int>(Pipe::kCount);
constexpr int kSpaces = static_cast<int>(Space::kCount);

constexpr uint8_t Bit(Pipe p) { return static_cast<uint8_t>(1u << static_cast<int>(p)); }

// The pipes of each core kind: a vector core (AIV) has no M, MTE1 or FIX, a cube core (AIC) no V.
constexpr uint8_t kVectorCorePipes = Bit(Pipe::S) | Bit(Pipe::V) | Bit(Pipe::MTE2) | Bit(Pipe::MTE3);
constexpr uint8_t kCubeCorePipes = Bit(Pipe::S) | Bit(Pipe::MTE1) | Bit(Pipe::MTE2) | Bit(Pipe::M) | Bit(Pipe::FIX);
// Pending operations remembered per pipe: older ones are taken as complete (a pipe's queue is finite; docs/twin.md
// "What it cannot check"). Keeps every check O(1) in the kernel's length.
constexpr int kDepthPerPipe = 16;

// Which pipes access each space at all (a pending op is done with once it is ordered before all of them).
constexpr uint8_t kUsers[kSpaces] = {
    /*UB*/ Bit(Pipe::S) | Bit(Pipe::V) | Bit(Pipe::MTE2) | Bit(Pipe::MTE3),
    /*L1*/ Bit(Pipe::MTE2) | Bit(Pipe::MTE1),
    /*L0A*/ Bit(Pipe::MTE1) | Bit(Pipe::M),
    /*L0B*/ Bit(Pipe::MTE1) | Bit(Pipe::M),
    /*L0C*/ Bit(Pipe::M) | Bit(Pipe::FIX),
    /*GM*/ Bit(Pipe::S) | Bit(Pipe::MTE2) | Bit(Pipe::MTE3) | Bit(Pipe::FIX),
};

// autoMask[space][pipe]: the pipes the compiler orders against `pipe` on `space` (Compiler rows of kAutoSync).
struct AutoMasks {
    uint8_t m[kSpaces][kPipes] = {};
    AutoMasks() {
        for (int i = 0; i < kAutoSyncRows; ++i) {
            const AutoSyncRow& r = kAutoSync[i];
            if (r.by != SyncBy::Compiler) continue;
            m[static_cast<int>(r.space)][static_cast<int>(r.a)] |= Bit(r.b);
            m[static_cast<int>(r.space)][static_cast<int>(r.b)] |= Bit(r.a);
        }
    }
};
const AutoMasks& Auto() {
    static const AutoMasks masks;
    return masks;
}

struct Pending {
    uintptr_t lo, hi;
    uint64_t seq;
    std::source_location where;
    uint8_t pipe, space;
    bool write, clean;
    uint8_t ordered;  // pipes this op is ordered before
};

struct FlagSnapshot {
    uint64_t seq = 0;
};

// Pending operations per space (a check only ever compares ops on one space), counted per pipe.
struct State {
    std::vector<Pending> pending[kSpaces];
    uint64_t seq = 1;
    uint8_t corePipes = kVectorCorePipes;
    int perPipe[kSpaces][kPipes] = {};
    FlagSnapshot flags[kHardEventCount][kEventIds];
};

thread_local State tState;

const char* SpaceName(uint8_t s) {
    static const char* const names[] = {"UB", "L1", "L0A", "L0B", "L0C", "GM"};
    return s < kSpaces ? names[s] : "?";
}

std::string Hex(uintptr_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

std::string Site(const std::source_location& w) {
    std::string f = w.file_name();
    const size_t k = f.find("kernels/");
    const size_t t = f.find("tests/");
    if (k != std::string::npos) f = f.substr(k);
    else if (t != std::string::npos) f = f.substr(t);
    return f + ":" + std::to_string(w.line());
}

// Pipes a pending op still has to be ordered before: every other user of its space on this core that the compiler
// does not order.
uint8_t Needed(const State& st, const Pending& e) {
    const uint8_t users = kUsers[e.space] & st.corePipes & static_cast<uint8_t>(~Bit(static_cast<Pipe>(e.pipe)));
    const uint8_t autom = e.clean ? 0 : Auto().m[e.space][e.pipe];
    return static_cast<uint8_t>(users & ~autom);
}

bool Done(const State& st, const Pending& e) { return (e.ordered & Needed(st, e)) == Needed(st, e); }

void Compact(State& st) {
    for (int s = 0; s < kSpaces; ++s) {
        std::vector<Pending>& list = st.pending[s];
        size_t w = 0;
        for (size_t i = 0; i < list.size(); ++i) {
            if (!Done(st, list[i])) {
                list[w++] = list[i];
            } else {
                --st.perPipe[s][list[i].pipe];
            }
        }
        list.resize(w);
    }
}

void Check(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write, const std::source_location& where) {
    const uint8_t pb = Bit(p);
    const uint8_t autom = Auto().m[static_cast<int>(s)][static_cast<int>(p)];
    for (const Pending& e : st.pending[static_cast<int>(s)]) {
        if (e.pipe == static_cast<uint8_t>(p)) continue;
        if (e.hi <= lo || hi <= e.lo) continue;
        if (!e.write && !write) continue;
        if (e.ordered & pb) continue;
        if (!e.clean && (autom & Bit(static_cast<Pipe>(e.pipe)))) continue;
        const char* what = write ? "write" : "read";
        const char* theirs = e.write ? (e.clean ? "cache clean write-back" : "write") : "read";
        const std::string other = PipeName(static_cast<Pipe>(e.pipe));
        std::string detail = std::string(PipeName(p)) + " " + what + " of " + SpaceName(e.space) + " bytes [" +
                             Hex(lo) + ", " + Hex(hi) + ") while " + other + "'s " + theirs +
                             " of bytes it overlaps (at " + Site(e.where) + ") may still be in flight: ";
        if (e.clean) {
            detail += "a DataCacheCleanAndInvalid write-back is ordered before the MTEs only by "
                      "PipeBarrier<PIPE_ALL> after it";
            Violation("dcache-clean-barrier", detail, where);
        }
        detail += "nothing orders " + other + " before " + PipeName(p) + " (SetFlag/WaitFlag<" + other + "_" +
                  PipeName(p) + ">, PipeBarrier<PIPE_ALL>, a TQue hand-off of this buffer, or an automatic sync of "
                  "docs/twin.md's table)";
        Violation("pipe-order", detail, where);
    }
}

void Add(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write, bool clean,
         const std::source_location& where) {
    // The same pipe runs its own ops in order: a new op over the bytes of a recent unordered one of the same kind
    // widens that entry instead of growing the list (loops over one buffer stay one entry).
    std::vector<Pending>& list = st.pending[static_cast<int>(s)];
    int* count = st.perPipe[static_cast<int>(s)];
    const size_t n = list.size();
    for (size_t k = 0; k < n && k < 8; ++k) {
        Pending& e = list[n - 1 - k];
        if (e.pipe == static_cast<uint8_t>(p) && e.write == write &&
            e.clean == clean && e.ordered == 0 && lo <= e.hi && e.lo <= hi) {
            if (lo < e.lo) e.lo = lo;
            if (hi > e.hi) e.hi = hi;
            e.seq = st.seq++;
            return;
        }
    }
    Pending e{lo, hi, st.seq++, where, static_cast<uint8_t>(p), static_cast<uint8_t>(s), write, clean, 0};
    if (Done(st, e)) return;  // nothing could ever conflict with it
    // The new op supersedes older ops of its pipe inside its range: it is ordered before nothing yet, so any later
    // op that would conflict with one of them conflicts with it (a write also covers reads). Keeps the list at the
    // buffers in use, not the instructions issued.
    size_t w = 0;
    for (size_t i = 0; i < list.size(); ++i) {
        const Pending& o = list[i];
        const bool covered =
            o.pipe == e.pipe && o.clean == clean && (write || !o.write) && lo <= o.lo && o.hi <= hi;
        if (covered) {
            --count[o.pipe];
        } else {
            list[w++] = o;
        }
    }
    list.resize(w);
    if (count[e.pipe] >= kDepthPerPipe) {
        for (auto it = list.begin(); it != list.end(); ++it) {
            if (it->pipe == e.pipe) {
                list.erase(it);
                --count[e.pipe];
                break;
            }
        }
    }
    list.push_back(e);
    ++count[e.pipe];
}

bool EventPipes(HardEvent e, Pipe* src, Pipe* dst) {
    switch (e) {
        case HardEvent::MTE2_V: *src = Pipe::MTE2; *dst = Pipe::V; return true;
        case HardEvent::V_MTE2: *src = Pipe::V; *dst = Pipe::MTE2; return true;
        case HardEvent::MTE3_V: *src = Pipe::MTE3; *dst = Pipe::V; return true;
        case HardEvent::V_MTE3: *src = Pipe::V; *dst = Pipe::MTE3; return true;
        case HardEvent::MTE2_MTE3: *src = Pipe::MTE2; *dst = Pipe::MTE3; return true;
        case HardEvent::MTE3_MTE2: *src = Pipe::MTE3; *dst = Pipe::MTE2; return true;
        case HardEvent::S_V: *src = Pipe::S; *dst = Pipe::V; return true;
        case HardEvent::V_S: *src = Pipe::V; *dst = Pipe::S; return true;
        case HardEvent::MTE2_S: *src = Pipe::MTE2; *dst = Pipe::S; return true;
        case HardEvent::S_MTE2: *src = Pipe::S; *dst = Pipe::MTE2; return true;
        case HardEvent::MTE3_S: *src = Pipe::MTE3; *dst = Pipe::S; return true;
        case HardEvent::S_MTE3: *src = Pipe::S; *dst = Pipe::MTE3; return true;
        case HardEvent::M_V: *src = Pipe::M; *dst = Pipe::V; return true;
        case HardEvent::V_M: *src = Pipe::V; *dst = Pipe::M; return true;
        case HardEvent::FIX_V: *src = Pipe::FIX; *dst = Pipe::V; return true;
        case HardEvent::MTE1_M: *src = Pipe::MTE1; *dst = Pipe::M; return true;
        case HardEvent::M_MTE1: *src = Pipe::M; *dst = Pipe::MTE1; return true;
    }
    return false;
}

// The queue position's producer and consumer pipes (the TQue rows of kAutoSync).
bool QueuePipes(TPosition pos, Pipe* producer, Pipe* consumer) {
    for (int i = 0; i < kAutoSyncRows; ++i) {
        const AutoSyncRow& r = kAutoSync[i];
        if (r.by == SyncBy::TQue && r.position == pos) {
            *producer = r.a;
            *consumer = r.b;
            return true;
        }
    }
    return false;
}

}  // namespace

void PipeTouch(Pipe p, Space s, const void* addr, uint64_t bytes, bool write, const std::source_location& where) {
    if (bytes == 0 || !InKernel()) return;
    State& st = tState;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, p, s, lo, lo + bytes, write, where);
    Add(st, p, s, lo, lo + bytes, write, false, where);
}

void PipeScalarGmLoad(const void* addr, uint64_t bytes, const std::source_location& where) {
    if (!InKernel()) return;
    State& st = tState;
    if (st.pending[static_cast<int>(Space::GM)].empty()) return;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, Pipe::S, Space::GM, lo, lo + bytes, false, where);
}

void PipeCleanWrite(const void* addr, uint64_t bytes, const std::source_location& where) {
    if (bytes == 0 || !InKernel()) return;
    State& st = tState;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, Pipe::S, Space::GM, lo, lo + bytes, true, where);
    Add(st, Pipe::S, Space::GM, lo, lo + bytes, true, true, where);
}

void PipeFlagSet(HardEvent event, int32_t id) {
    if (!InKernel()) return;
    State& st = tState;
    st.flags[static_cast<int>(event)][id & (kEventIds - 1)].seq = st.seq++;
}

void PipeFlagWait(HardEvent event, int32_t id) {
    if (!InKernel()) return;
    Pipe src, dst;
    if (!EventPipes(event, &src, &dst)) return;
    State& st = tState;
    const uint64_t at = st.flags[static_cast<int>(event)][id & (kEventIds - 1)].seq;
    const uint8_t sb = Bit(src), db = Bit(dst);
    // Everything issued on src before the SetFlag, and everything already ordered before src then, is now
    // ordered before dst. Clean write-backs are not: only a full barrier is documented to wait for them.
    for (auto& list : st.pending) {
        for (Pending& e : list) {
            if (e.seq >= at || e.clean) continue;
            if (e.pipe == static_cast<uint8_t>(src) || (e.ordered & sb)) e.ordered |= db;
        }
    }
    Compact(st);
}

void PipeBarrierAll() {
    if (!InKernel()) return;
    for (auto& list : tState.pending) list.clear();
    for (auto& row : tState.perPipe)
        for (int& n : row) n = 0;
}

// The queue's hand-off is an event between its two pipes (EnQue sets it, DeQue waits; FreeTensor / AllocTensor the
// other way), so, like a flag, it orders everything issued on the first pipe so far, and what was already ordered
// before that pipe, before the second.
void PipeQueueHandoff(TPosition position, bool toConsumer, const void* addr, uint64_t bytes) {
    (void)addr;
    (void)bytes;
    if (!InKernel()) return;
    Pipe producer, consumer;
    if (!QueuePipes(position, &producer, &consumer)) return;
    const uint8_t from = Bit(toConsumer ? producer : consumer);
    const uint8_t to = Bit(toConsumer ? consumer : producer);
    State& st = tState;
    for (auto& list : st.pending) {
        for (Pending& e : list) {
            if (e.clean) continue;
            if (Bit(static_cast<Pipe>(e.pipe)) == from || (e.ordered & from)) e.ordered |= to;
        }
    }
    Compact(st);
}

void PipeCoreKind(bool cube) { tState.corePipes = cube ? kCubeCorePipes : kVectorCorePipes; }

void PipeBlockStart() {
    State& st = tState;
    for (auto& list : st.pending) list.clear();
    st.seq = 1;
    for (auto& row : st.perPipe)
        for (int& n : row) n = 0;
    st.corePipes = kVectorCorePipes;
    for (auto& row : st.flags)
        for (auto& f : row) f.seq = 0;
}

}  // namespace cam::twin
