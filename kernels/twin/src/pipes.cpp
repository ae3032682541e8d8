#include "twin/pipes.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
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
const AutoMasks kAuto;  // after kAutoSync in this file, so built from it

struct Pending {
    uintptr_t lo, hi;
    uint64_t seq;   // when it (or the last op merged into it) was issued: what a flag or hand-off orders is by seq
    uint64_t born;  // when the entry was made: of several conflicting ops the oldest is reported
    std::source_location where;
    uint8_t pipe, space;
    bool write, clean;
    uint8_t needed;  // pipes it has to be ordered before to be done with (Needed)
};

// One pipe's pending ops on one space, oldest first, with a summary a check reads instead of walking the ops:
// the union of their ranges, whether any writes or is a clean, and the newest op's seq (when that one is ordered
// before a pipe, all are). A check touches only the lists of the other pipes whose summary admits a conflict.
struct PipeList {
    std::vector<Pending> ops;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    uint64_t maxSeq = 0;
    bool anyWrite = false, anyClean = false;

    void Summarize() {
        lo = UINTPTR_MAX;
        hi = 0;
        maxSeq = 0;
        anyWrite = anyClean = false;
        for (const Pending& e : ops) {
            if (e.lo < lo) lo = e.lo;
            if (e.hi > hi) hi = e.hi;
            if (e.seq > maxSeq) maxSeq = e.seq;
            anyWrite |= e.write;
            anyClean |= e.clean;
        }
    }
    void Clear() {
        ops.clear();
        Summarize();
    }
};

struct FlagSnapshot {
    uint64_t seq = 0;
};

// What is ordered is kept as a vector clock, not as marks on the pending ops: frontier[b][a] is the seq below which
// every op of pipe a is ordered before pipe b. Ops of one pipe are issued in seq order, so "everything issued on a
// before the SetFlag, and everything ordered before a then" is one min and one max per pipe: a flag or a queue
// hand-off costs O(pipes), whatever is in flight, and an op is ordered before b iff its seq is below the frontier.
// A clean's write-back is never ordered by a frontier (only PipeBarrier<PIPE_ALL> is documented to wait for it).
struct State {
    PipeList lists[kSpaces][kPipes];
    uint64_t seq = 1;
    uint64_t born = 1;
    uint64_t frontier[kPipes][kPipes] = {};
    uint8_t busy[kSpaces] = {};  // per space, the pipes whose list is not empty: checks visit only these
    uint8_t corePipes = kVectorCorePipes;
    // Between PipeBlockStart and PipeBlockEnd (the thread is running a block, the model is not switched off):
    // the one test every entry point makes, instead of also asking the runtime whether a block is running.
    bool on = false;
    uint8_t needed[kSpaces][kPipes][2] = {};  // Needed(corePipes, pipe, space, clean), set with the core kind
    FlagSnapshot flags[kHardEventCount][kEventIds];
};

// Every instruction's entry point reads the block's state: through an initial-exec pointer (a fixed offset from the
// thread pointer), not a thread_local object of this shared library, whose every access is a __tls_get_addr call
// (in a dlopen'd library's local-dynamic model). The object itself is owned by a thread_local made at the thread's
// first block, so only PipeBlockStart pays for the general model.
thread_local std::unique_ptr<State> tOwner;
__attribute__((tls_model("initial-exec"))) thread_local State* tState = nullptr;

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

// Pipes an op of pipe p on space s still has to be ordered before: every other user of the space on this core that
// the compiler does not order (a clean's write-back: the compiler orders nothing).
uint8_t Needed(uint8_t corePipes, uint8_t p, uint8_t s, bool clean) {
    const uint8_t users = kUsers[s] & corePipes & static_cast<uint8_t>(~(1u << p));
    const uint8_t autom = clean ? 0 : kAuto.m[s][p];
    return static_cast<uint8_t>(users & ~autom);
}

bool OrderedBefore(const State& st, const Pending& e, int b) {
    return !e.clean && e.seq < st.frontier[b][e.pipe];
}

bool Done(const State& st, const Pending& e) {
    if (e.clean) return e.needed == 0;
    for (unsigned rest = e.needed; rest != 0; rest &= rest - 1) {
        if (e.seq >= st.frontier[__builtin_ctz(rest)][e.pipe]) return false;
    }
    return true;
}

// Drops the list's ops that are done with.
void Compact(const State& st, PipeList& list) {
    std::vector<Pending>& ops = list.ops;
    size_t w = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
        if (!Done(st, ops[i])) ops[w++] = ops[i];
    }
    ops.resize(w);
    list.Summarize();
}

[[noreturn]] void Report(const Pending& e, Pipe p, uintptr_t lo, uintptr_t hi, bool write,
                         const std::source_location& where) {
    const char* what = write ? "write" : "read";
    const char* theirs = e.write ? (e.clean ? "cache clean write-back" : "write") : "read";
    const std::string other = PipeName(static_cast<Pipe>(e.pipe));
    std::string detail = std::string(PipeName(p)) + " " + what + " of " + SpaceName(e.space) + " bytes [" + Hex(lo) +
                         ", " + Hex(hi) + ") while " + other + "'s " + theirs + " of bytes it overlaps (at " +
                         Site(e.where) + ") may still be in flight: ";
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

void Check(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write, const std::source_location& where) {
    const uint8_t pb = Bit(p);
    const int pi = static_cast<int>(p);
    const int si = static_cast<int>(s);
    const uint8_t autom = kAuto.m[si][pi];
    const Pending* first = nullptr;
    for (unsigned rest = st.busy[si] & ~pb & 0xffu; rest != 0; rest &= rest - 1) {
        const int q = __builtin_ctz(rest);
        const PipeList& list = st.lists[si][q];
        if (list.hi <= lo || hi <= list.lo) continue;
        if (!write && !list.anyWrite) continue;
        if (!list.anyClean) {
            if (list.maxSeq < st.frontier[pi][q]) continue;  // all ordered before p
            if (autom & (1u << q)) continue;                 // the compiler orders q and p here
        }
        const bool compilerOrders = (autom & (1u << q)) != 0;
        const uint64_t frontier = st.frontier[pi][q];
        for (const Pending& e : list.ops) {
            if (e.hi <= lo || hi <= e.lo) continue;
            if (!e.write && !write) continue;
            if (!e.clean && (compilerOrders || e.seq < frontier)) continue;
            if (first == nullptr || e.born < first->born) first = &e;
            break;  // the list is oldest first
        }
    }
    if (first != nullptr) Report(*first, p, lo, hi, write, where);
}

void Add(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write, bool clean,
         const std::source_location& where) {
    const uint8_t needed = st.needed[static_cast<int>(s)][static_cast<int>(p)][clean ? 1 : 0];
    if (needed == 0) return;  // nothing could ever conflict with it
    // The same pipe runs its own ops in order: a new op over the bytes of a recent one of the same kind that is
    // ordered before nothing widens that entry instead of growing the list (loops over one buffer stay one entry).
    PipeList& list = st.lists[static_cast<int>(s)][static_cast<int>(p)];
    std::vector<Pending>& ops = list.ops;
    const size_t n = ops.size();
    const bool near = n > 0 && lo <= list.hi && list.lo <= hi;  // else no entry can widen or be superseded
    // An entry at or above this seq is ordered before none of the pipes that could conflict with it (the `needed`
    // ones; the others are the compiler's or absent from the core), so widening it loses no ordering. Not the max
    // over every pipe: a V_S flag per row (the amax read back) would otherwise stop every UB vector entry widening.
    uint64_t unordered = 0;
    for (unsigned rest = needed; rest != 0; rest &= rest - 1) {
        const uint64_t f = st.frontier[__builtin_ctz(rest)][static_cast<int>(p)];
        if (f > unordered) unordered = f;
    }
    if (near) {
        for (size_t k = 0; k < n && k < 8; ++k) {
            Pending& e = ops[n - 1 - k];
            if (e.write == write && e.clean == clean && (clean || e.seq >= unordered) && lo <= e.hi && e.lo <= hi) {
                if (lo < e.lo) e.lo = lo;
                if (hi > e.hi) e.hi = hi;
                if (lo < list.lo) list.lo = lo;
                if (hi > list.hi) list.hi = hi;
                e.seq = st.seq++;
                list.maxSeq = e.seq;
                return;
            }
        }
    }
    // The new op supersedes older ops of its pipe inside its range: it is ordered before nothing yet, so any later
    // op that would conflict with one of them conflicts with it (a write also covers reads). Ops already done with
    // go too. Keeps the list at the buffers in use, not the instructions issued. At the depth limit the oldest goes.
    // Done(o), for this list: its ops share pipe and space, so the plain ones share `needed` and are done with once
    // below every one of those frontiers: one min per Add instead of a walk of `needed` per op (a clean's
    // write-back is only cleared by PipeBarrier<PIPE_ALL>).
    const uint8_t plainNeeded = st.needed[static_cast<int>(s)][static_cast<int>(p)][0];
    uint64_t doneBelow = UINT64_MAX;
    for (unsigned rest = plainNeeded; rest != 0; rest &= rest - 1) {
        const uint64_t f = st.frontier[__builtin_ctz(rest)][static_cast<int>(p)];
        if (f < doneBelow) doneBelow = f;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; ++i) {
        const Pending& o = ops[i];
        const bool superseded = near && o.clean == clean && (write || !o.write) && lo <= o.lo && o.hi <= hi;
        const bool done = o.clean ? o.needed == 0 : o.seq < doneBelow;
        if (!superseded && !done) {
            if (w != i) ops[w] = o;
            ++w;
        }
    }
    size_t from = 0;
    if (w >= static_cast<size_t>(kDepthPerPipe)) from = w - kDepthPerPipe + 1;
    if (from > 0) {
        for (size_t i = from; i < w; ++i) ops[i - from] = ops[i];
        w -= from;
    }
    const bool removed = w != n;
    ops.resize(w);
    ops.push_back(Pending{lo, hi, st.seq++, st.born++, where, static_cast<uint8_t>(p), static_cast<uint8_t>(s), write,
                          clean, needed});
    st.busy[static_cast<int>(s)] |= Bit(p);
    if (removed) {
        list.Summarize();
    } else {
        if (lo < list.lo) list.lo = lo;
        if (hi > list.hi) list.hi = hi;
        list.maxSeq = ops.back().seq;
        list.anyWrite |= write;
        list.anyClean |= clean;
    }
}

// Every op issued on `from` before `before` (a seq), and every op already ordered before `from` then, is now ordered
// before `to`.
void Order(State& st, Pipe from, Pipe to, uint64_t before) {
    const int f = static_cast<int>(from);
    const int t = static_cast<int>(to);
    for (int a = 0; a < kPipes; ++a) {
        if (a == t) continue;
        uint64_t reach = a == f ? before : std::min(st.frontier[f][a], before);
        if (reach > st.frontier[t][a]) st.frontier[t][a] = reach;
    }
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

// The queue position's producer and consumer pipes (the TQue rows of kAutoSync), indexed by position.
struct QueueTable {
    static constexpr int kPositions = static_cast<int>(TPosition::LCM) + 1;
    bool has[kPositions] = {};
    Pipe producer[kPositions] = {};
    Pipe consumer[kPositions] = {};
    QueueTable() {
        for (int i = kAutoSyncRows - 1; i >= 0; --i) {  // backwards: the first row of a position wins
            const AutoSyncRow& r = kAutoSync[i];
            if (r.by != SyncBy::TQue) continue;
            const int k = static_cast<int>(r.position);
            has[k] = true;
            producer[k] = r.a;
            consumer[k] = r.b;
        }
    }
};
const QueueTable kQueues;  // after kAutoSync in this file, so built from it

bool QueuePipes(TPosition pos, Pipe* producer, Pipe* consumer) {
    const int k = static_cast<int>(pos);
    if (k >= QueueTable::kPositions || !kQueues.has[k]) return false;
    *producer = kQueues.producer[k];
    *consumer = kQueues.consumer[k];
    return true;
}

}  // namespace

void PipeTouch(Pipe p, Space s, const void* addr, uint64_t bytes, bool write, const std::source_location& where) {
    State* sp = tState;
    if (bytes == 0 || sp == nullptr || !sp->on) return;
    State& st = *sp;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, p, s, lo, lo + bytes, write, where);
    Add(st, p, s, lo, lo + bytes, write, false, where);
}

void PipeScalarGmLoad(const void* addr, uint64_t bytes, const std::source_location& where) {
    State* sp = tState;
    if (sp == nullptr || sp->busy[static_cast<int>(Space::GM)] == 0 || !sp->on) return;
    State& st = *sp;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, Pipe::S, Space::GM, lo, lo + bytes, false, where);
}

void PipeCleanWrite(const void* addr, uint64_t bytes, const std::source_location& where) {
    State* sp = tState;
    if (bytes == 0 || sp == nullptr || !sp->on) return;
    State& st = *sp;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    Check(st, Pipe::S, Space::GM, lo, lo + bytes, true, where);
    Add(st, Pipe::S, Space::GM, lo, lo + bytes, true, true, where);
}

void PipeFlagSet(HardEvent event, int32_t id) {
    State* sp = tState;
    if (sp == nullptr || !sp->on) return;
    State& st = *sp;
    st.flags[static_cast<int>(event)][id & (kEventIds - 1)].seq = st.seq++;
}

void PipeFlagWait(HardEvent event, int32_t id) {
    State* sp = tState;
    if (sp == nullptr || !sp->on) return;
    State& st = *sp;
    Pipe src, dst;
    if (!EventPipes(event, &src, &dst)) return;
    // Everything issued on src before the SetFlag, and everything already ordered before src then, is now
    // ordered before dst.
    Order(st, src, dst, st.flags[static_cast<int>(event)][id & (kEventIds - 1)].seq);
}

void PipeBarrierAll() {
    State* sp = tState;
    if (sp == nullptr || !InKernel()) return;
    State& st = *sp;
    for (auto& row : st.lists)
        for (PipeList& list : row) list.Clear();
    for (uint8_t& b : st.busy) b = 0;
    // Everything issued so far is ordered before every pipe (nothing is left to order; new ops may widen again).
    for (auto& row : st.frontier)
        for (uint64_t& f : row) f = st.seq;
}

// The queue's hand-off is an event between its two pipes (EnQue sets it, DeQue waits; FreeTensor / AllocTensor the
// other way), so, like a flag, it orders everything issued on the first pipe so far, and what was already ordered
// before that pipe, before the second.
void PipeQueueHandoff(TPosition position, bool toConsumer, const void* addr, uint64_t bytes) {
    (void)addr;
    (void)bytes;
    State* sp = tState;
    if (sp == nullptr || !sp->on) return;
    State& st = *sp;
    Pipe producer, consumer;
    if (!QueuePipes(position, &producer, &consumer)) return;
    // Everything issued on the first pipe so far: below the next seq.
    Order(st, toConsumer ? producer : consumer, toConsumer ? consumer : producer, st.seq);
}

static void SetCorePipes(State& st, uint8_t pipes) {
    st.corePipes = pipes;
    for (int sp = 0; sp < kSpaces; ++sp)
        for (int p = 0; p < kPipes; ++p)
            for (int c = 0; c < 2; ++c) st.needed[sp][p][c] = Needed(pipes, p, sp, c != 0);
}

void PipeCoreKind(bool cube) {
    if (tState == nullptr) return;  // outside a block: nothing to recompute
    State& st = *tState;
    SetCorePipes(st, cube ? kCubeCorePipes : kVectorCorePipes);
    // The kind is declared before any buffer is carved, so this is normally empty; recompute anyway.
    for (int sp = 0; sp < kSpaces; ++sp) {
        for (int q = 0; q < kPipes; ++q) {
            PipeList& list = st.lists[sp][q];
            for (Pending& e : list.ops) e.needed = Needed(st.corePipes, e.pipe, e.space, e.clean);
            Compact(st, list);
            if (list.ops.empty()) st.busy[sp] &= static_cast<uint8_t>(~(1u << q));
        }
    }
}

void PipeBlockEnd() {
    if (tState != nullptr) tState->on = false;
}

void PipeBlockStart() {
    if (tState == nullptr) {
        tOwner = std::make_unique<State>();
        tState = tOwner.get();
    }
    State& st = *tState;
    for (auto& row : st.lists)
        for (PipeList& list : row) list.Clear();
    for (uint8_t& b : st.busy) b = 0;
    for (auto& row : st.frontier)
        for (uint64_t& f : row) f = 0;
    st.seq = 1;
    st.born = 1;
    SetCorePipes(st, kVectorCorePipes);
    // benchmarks/twin_speed.py --pipe-model-ab measures the model's cost against runs without it; nothing else
    // sets this (tests/test_twin_pipes.py checks), so every test and every other benchmark runs under the model.
    const char* off = std::getenv("CAM_TWIN_PIPE_MODEL_BENCH_OFF");
    st.on = !(off != nullptr && off[0] == '1' && off[1] == '\0');
    for (auto& row : st.flags)
        for (auto& f : row) f.seq = 0;
}

}  // namespace cam::twin
