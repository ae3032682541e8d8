#include "twin/pipes.h"
#include "twin/crosscore.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "twin/runtime.h"
#include "twin/timing.h"
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
    uint64_t born;  // the seq it was made with (seq moves when it widens): of several conflicts the oldest is reported
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

// The MTE2, MTE3 and vector pipes' ops on UB and GM: nearly all of a vector kernel's ops (every operand of every
// vector instruction, both sides of every copy), all plain (no cache clean), so each (space, pipe) keeps them as a
// log instead of a list. Entries are in issue (seq) order, so those done with (ordered before every pipe they could
// conflict with) are a prefix, dropped by moving `head`, and those not yet ordered before a given pipe are a suffix,
// found by bisection: all a check of that pipe reads, its first conflicting entry the oldest. A new op widens the
// newest entry when it is of the same kind, overlaps or abuts it and that entry is ordered before none of the pipes
// it could conflict with (a stream of row copies stays one entry; exact, as for the lists); V ops never do (their
// append is kept to a few stores: they are the most frequent). kLogDepth entries, the oldest taken as complete beyond
// that (a pipe's queue is finite).
constexpr uint32_t kLogDepth = 64;

struct LogEntry {
    uintptr_t lo, hi;
    uint64_t seq;   // the newest op merged into it
    uint64_t born;  // the seq it was made with: of several conflicting ops the oldest is reported
    std::source_location where;
    bool write;
};

struct OpLog {
    uint64_t head = 0, tail = 0;  // entries [head, tail), at index % kLogDepth
    uintptr_t lo = UINTPTR_MAX, hi = 0;  // covers every live entry (reset when the log empties)
    bool anyWrite = false;
    bool merges = true;
    uint8_t pipe = 0, space = 0;
    LogEntry* e = nullptr;  // into State::logEntries: the headers stay a few cache lines

    const LogEntry& At(uint64_t i) const { return e[i % kLogDepth]; }
    LogEntry& At(uint64_t i) { return e[i % kLogDepth]; }
    bool Empty() const { return head == tail; }
    void Clear() {
        head = tail;
        lo = UINTPTR_MAX;
        hi = 0;
        anyWrite = false;
    }
};

// The (space, pipe) pairs kept as logs; every other pair keeps a PipeList.
struct LogPair {
    Space space;
    Pipe pipe;
    bool merges;
};
constexpr LogPair kLogPairs[] = {
    {Space::UB, Pipe::V, false}, {Space::UB, Pipe::MTE2, true}, {Space::UB, Pipe::MTE3, true},
    {Space::GM, Pipe::MTE2, true}, {Space::GM, Pipe::MTE3, true},
};
constexpr int kLogCount = sizeof(kLogPairs) / sizeof(kLogPairs[0]);
constexpr int kVLog = 0;  // kLogPairs[0]: V on UB
constexpr int kUb = static_cast<int>(Space::UB);
constexpr int kV = static_cast<int>(Pipe::V);

// What is ordered is kept as a vector clock, not as marks on the pending ops: frontier[b][a] is the seq below which
// every op of pipe a is ordered before pipe b. Ops of one pipe are issued in seq order, so "everything issued on a
// before the SetFlag, and everything ordered before a then" is one min and one max per pipe: a flag or a queue
// hand-off costs O(pipes), whatever is in flight, and an op is ordered before b iff its seq is below the frontier.
// A clean's write-back is never ordered by a frontier (only PipeBarrier<PIPE_ALL> is documented to wait for it).
struct State {
    PipeList lists[kSpaces][kPipes];
    uint64_t seq = 1;
    uint64_t frontier[kPipes][kPipes] = {};
    // Per pipe, the seq of its latest SetFlag: an op issued before it is never widened into a later one (a WaitFlag
    // of that flag orders the earlier op only, as two ping-pong buffers side by side in UB rely on).
    uint64_t flagSet[kPipes] = {};
    uint8_t busy[kSpaces] = {};  // per space, the pipes whose list is not empty: checks visit only these
    uint8_t corePipes = kVectorCorePipes;
    // Between PipeBlockStart and PipeBlockEnd (the thread is running a block, the model is not switched off):
    // the one test every entry point makes, instead of also asking the runtime whether a block is running.
    bool on = false;
    uint8_t needed[kSpaces][kPipes][2] = {};  // Needed(corePipes, pipe, space, clean), set with the core kind
    FlagSnapshot flags[kHardEventCount][kEventIds];
    OpLog logs[kLogCount];           // their slots of `lists` stay empty
    int8_t logOf[kSpaces][kPipes];   // index into logs, or -1
    LogEntry logEntries[kLogCount][kLogDepth];
    State() {
        for (auto& row : logOf)
            for (int8_t& i : row) i = -1;
        for (int i = 0; i < kLogCount; ++i) {
            const int sp = static_cast<int>(kLogPairs[i].space), pp = static_cast<int>(kLogPairs[i].pipe);
            logOf[sp][pp] = static_cast<int8_t>(i);
            logs[i].merges = kLogPairs[i].merges;
            logs[i].space = static_cast<uint8_t>(sp);
            logs[i].pipe = static_cast<uint8_t>(pp);
            logs[i].e = logEntries[i];
        }
    }
    // Ops added on UB by other pipes than V, and what a V op has to check against as of that count:
    // the range (and whether a write is among them) of the lists not wholly ordered before V. Until the next op is
    // added it stays a superset of what a V op can conflict with (ordering only ever grows), so a V op outside it
    // checks nothing.
    uint64_t ubAdds = 1;
    struct {
        uint64_t at = 0;
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        bool anyWrite = false;
    } vCheck;
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


// Drops a log's prefix done with: ordered before every pipe its ops have to be ordered before.
void PruneLog(State& st, OpLog& log) {
    uint64_t doneBelow = UINT64_MAX;
    for (unsigned rest = st.needed[log.space][log.pipe][0]; rest != 0; rest &= rest - 1) {
        const uint64_t f = st.frontier[__builtin_ctz(rest)][log.pipe];
        if (f < doneBelow) doneBelow = f;
    }
    uint64_t a = log.head, b = log.tail;  // seqs ascend from head to tail: the first not done with, by bisection
    while (a < b) {
        const uint64_t m = a + (b - a) / 2;
        if (log.At(m).seq < doneBelow) a = m + 1;
        else b = m;
    }
    log.head = a;
    if (log.Empty()) {
        log.Clear();
        st.busy[log.space] &= static_cast<uint8_t>(~(1u << log.pipe));
    }
}

// The oldest op of a log that pipe `pi` touching [lo, hi) (a write or not) conflicts with, or nullptr. Only the
// suffix not yet ordered before pi can.
const LogEntry* CheckLog(const State& st, const OpLog& log, int pi, uintptr_t lo, uintptr_t hi, bool write) {
    const uint64_t frontier = st.frontier[pi][log.pipe];
    if (log.Empty() || log.At(log.tail - 1).seq < frontier) return nullptr;  // all ordered before pi
    uint64_t i = log.head, b = log.tail;  // the first entry not ordered before pi, by bisection (seqs ascend)
    while (i < b) {
        const uint64_t m = i + (b - i) / 2;
        if (log.At(m).seq < frontier) i = m + 1;
        else b = m;
    }
    for (; i < log.tail; ++i) {
        const LogEntry& e = log.At(i);
        if (e.hi <= lo || hi <= e.lo || (!e.write && !write)) continue;
        return &e;  // issue order: the first is the oldest
    }
    return nullptr;
}

// A new entry at the log's tail; a full log is pruned first, and if nothing could go its oldest is taken as complete.
inline void PushEntry(State& st, OpLog& log, uintptr_t lo, uintptr_t hi, bool write,
                      const std::source_location& where) {
    if (log.tail - log.head == kLogDepth) {
        PruneLog(st, log);
        if (log.tail - log.head == kLogDepth) ++log.head;
    }
    LogEntry& e = log.At(log.tail);
    e.lo = lo;
    e.hi = hi;
    e.seq = e.born = st.seq++;
    e.where = where;
    e.write = write;
    ++log.tail;
}

// V's append: no merging, nothing but the stores. Its summary is "everything" while it holds an entry (set when it
// stops being empty), so an append keeps none: a check of it goes by its newest seq and then its unordered suffix,
// which is empty whenever V was ordered before the checking pipe.
inline void AppendVLog(State& st, uintptr_t lo, uintptr_t hi, bool write, const std::source_location& where) {
    OpLog& log = st.logs[kVLog];
    if (log.Empty()) {
        log.lo = 0;
        log.hi = UINTPTR_MAX;
        log.anyWrite = true;
        st.busy[kUb] |= Bit(Pipe::V);
    }
    PushEntry(st, log, lo, hi, write, where);
}

inline void AppendLog(State& st, OpLog& log, uintptr_t lo, uintptr_t hi, bool write,
                      const std::source_location& where) {
    if (log.merges && !log.Empty()) {
        LogEntry& t = log.At(log.tail - 1);
        if (t.write == write && lo <= t.hi && t.lo <= hi) {
            // Widened only while ordered before none of the pipes it could conflict with (`needed`): no ordering
            // is lost.
            bool unordered = t.seq > st.flagSet[log.pipe];
            for (unsigned rest = st.needed[log.space][log.pipe][0]; rest != 0; rest &= rest - 1)
                unordered &= t.seq >= st.frontier[__builtin_ctz(rest)][log.pipe];
            if (unordered) {
                if (lo < t.lo) t.lo = lo;
                if (hi > t.hi) t.hi = hi;
                t.seq = st.seq++;
                if (lo < log.lo) log.lo = lo;
                if (hi > log.hi) log.hi = hi;
                if (log.space == kUb) ++st.ubAdds;
                return;
            }
        }
    }
    PushEntry(st, log, lo, hi, write, where);
    if (lo < log.lo) log.lo = lo;
    if (hi > log.hi) log.hi = hi;
    log.anyWrite |= write;
    st.busy[log.space] |= static_cast<uint8_t>(1u << log.pipe);
    if (log.space == kUb && log.pipe != kV) ++st.ubAdds;
}

// The lists (bit q: pipe q's) whose summary admits a conflict with pipe pi touching [lo, hi) of space si: they
// overlap it, one side writes, and not all their ops are ordered before pi (or the compiler orders the two here).
// Every op checks this; it is inlined, and the walk of the few lists it names (CheckLists) is not.
inline unsigned Candidates(const State& st, int si, int pi, uintptr_t lo, uintptr_t hi, bool write) {
    const uint8_t autom = kAuto.m[si][pi];
    unsigned cand = 0;
    for (unsigned rest = st.busy[si] & ~(1u << pi) & 0xffu; rest != 0; rest &= rest - 1) {
        const int q = __builtin_ctz(rest);
        if (st.logOf[si][q] >= 0) {  // busy: the log is not empty
            const OpLog& log = st.logs[st.logOf[si][q]];
            if ((autom & (1u << q)) || log.hi <= lo || hi <= log.lo || (!write && !log.anyWrite) ||
                log.At(log.tail - 1).seq < st.frontier[pi][q])
                continue;
        } else {
            const PipeList& list = st.lists[si][q];
            if (list.hi <= lo || hi <= list.lo) continue;
            if (!write && !list.anyWrite) continue;
            if (!list.anyClean) {
                if (list.maxSeq < st.frontier[pi][q]) continue;  // all ordered before p
                if (autom & (1u << q)) continue;                 // the compiler orders q and p here
            }
        }
        cand |= 1u << q;
    }
    return cand;
}

// The candidate lists' ops: the oldest that conflicts is reported, naming both call sites.
__attribute__((noinline)) void CheckLists(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write,
                                          const std::source_location& where, unsigned cand) {
    const int pi = static_cast<int>(p);
    const int si = static_cast<int>(s);
    const uint8_t autom = kAuto.m[si][pi];
    const Pending* first = nullptr;
    const LogEntry* firstLog = nullptr;
    const OpLog* firstLogOf = nullptr;
    for (unsigned rest = cand; rest != 0; rest &= rest - 1) {
        const int q = __builtin_ctz(rest);
        if (st.logOf[si][q] >= 0) {  // a candidate: the compiler does not order q and pi here
            const OpLog& log = st.logs[st.logOf[si][q]];
            const LogEntry* e = CheckLog(st, log, pi, lo, hi, write);
            if (e != nullptr && (first == nullptr || e->born < first->born) &&
                (firstLog == nullptr || e->born < firstLog->born)) {
                firstLog = e;
                firstLogOf = &log;
                first = nullptr;
            }
            continue;
        }
        const PipeList& list = st.lists[si][q];
        const bool compilerOrders = (autom & (1u << q)) != 0;
        const uint64_t frontier = st.frontier[pi][q];
        for (const Pending& e : list.ops) {
            if (e.hi <= lo || hi <= e.lo) continue;
            if (!e.write && !write) continue;
            if (!e.clean && (compilerOrders || e.seq < frontier)) continue;
            if ((first == nullptr || e.born < first->born) && (firstLog == nullptr || e.born < firstLog->born)) {
                first = &e;
                firstLog = nullptr;
            }
            break;  // the list is oldest first
        }
    }
    if (first != nullptr) Report(*first, p, lo, hi, write, where);
    if (firstLog != nullptr) {
        Pending e{firstLog->lo, firstLog->hi, firstLog->seq, firstLog->born, firstLog->where, firstLogOf->pipe,
                  firstLogOf->space, firstLog->write, false, 0};
        Report(e, p, lo, hi, write, where);
    }
}

inline void Check(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write,
                  const std::source_location& where) {
    const unsigned cand = Candidates(st, static_cast<int>(s), static_cast<int>(p), lo, hi, write);
    if (cand != 0) CheckLists(st, p, s, lo, hi, write, where, cand);
}

// Check for a V op on UB, through State::vCheck.
inline void CheckV(State& st, uintptr_t lo, uintptr_t hi, bool write, const std::source_location& where) {
    const uint8_t autom = kAuto.m[kUb][kV];
    auto& c = st.vCheck;
    if (c.at != st.ubAdds) {
        c.at = st.ubAdds;
        c.lo = UINTPTR_MAX;
        c.hi = 0;
        c.anyWrite = false;
        for (unsigned rest = st.busy[kUb] & ~(1u << kV) & 0xffu; rest != 0; rest &= rest - 1) {
            const int q = __builtin_ctz(rest);
            if (autom & (1u << q)) continue;
            uintptr_t qlo, qhi;
            bool qWrite;
            if (st.logOf[kUb][q] >= 0) {
                const OpLog& log = st.logs[st.logOf[kUb][q]];
                if (log.At(log.tail - 1).seq < st.frontier[kV][q]) continue;
                qlo = log.lo, qhi = log.hi, qWrite = log.anyWrite;
            } else {
                const PipeList& list = st.lists[kUb][q];
                if (!list.anyClean && list.maxSeq < st.frontier[kV][q]) continue;
                qlo = list.lo, qhi = list.hi, qWrite = list.anyWrite;
            }
            if (qlo < c.lo) c.lo = qlo;
            if (qhi > c.hi) c.hi = qhi;
            c.anyWrite |= qWrite;
        }
    }
    if (c.hi <= lo || hi <= c.lo || (!write && !c.anyWrite)) return;
    const unsigned cand = Candidates(st, kUb, kV, lo, hi, write);
    if (cand != 0) CheckLists(st, Pipe::V, Space::UB, lo, hi, write, where, cand);
}

void Add(State& st, Pipe p, Space s, uintptr_t lo, uintptr_t hi, bool write, bool clean,
         const std::source_location& where) {
    const uint8_t needed = st.needed[static_cast<int>(s)][static_cast<int>(p)][clean ? 1 : 0];
    if (needed == 0) return;  // nothing could ever conflict with it
    if (s == Space::UB) ++st.ubAdds;
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
    if (near && (clean || list.maxSeq >= unordered)) {  // below it no plain entry may widen (maxSeq: the newest)
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
    // The kept ops' summary is gathered in the same pass (the new op joins it below).
    size_t w = 0;
    uintptr_t sumLo = UINTPTR_MAX, sumHi = 0;
    bool sumWrite = false, sumClean = false;
    for (size_t i = 0; i < n; ++i) {
        const Pending& o = ops[i];
        const bool superseded = near && o.clean == clean && (write || !o.write) && lo <= o.lo && o.hi <= hi;
        const bool done = o.clean ? o.needed == 0 : o.seq < doneBelow;
        if (!superseded && !done) {
            if (w != i) ops[w] = o;
            ++w;
            if (o.lo < sumLo) sumLo = o.lo;
            if (o.hi > sumHi) sumHi = o.hi;
            sumWrite |= o.write;
            sumClean |= o.clean;
        }
    }
    bool removed = w != n;
    if (w >= static_cast<size_t>(kDepthPerPipe)) {  // at the depth limit the oldest go
        removed = true;
        const size_t from = w - kDepthPerPipe + 1;
        for (size_t i = from; i < w; ++i) ops[i - from] = ops[i];
        w -= from;
        sumLo = UINTPTR_MAX;
        sumHi = 0;
        sumWrite = sumClean = false;
        for (size_t i = 0; i < w; ++i) {
            if (ops[i].lo < sumLo) sumLo = ops[i].lo;
            if (ops[i].hi > sumHi) sumHi = ops[i].hi;
            sumWrite |= ops[i].write;
            sumClean |= ops[i].clean;
        }
    }
    ops.resize(w);
    // Field by field into the new slot: a braced temporary is built on the stack with narrow stores and copied
    // with wide loads that cannot take them forwarded (a stall per new entry).
    Pending& ne = ops.emplace_back();
    ne.lo = lo;
    ne.hi = hi;
    ne.seq = ne.born = st.seq++;
    ne.where = where;
    ne.pipe = static_cast<uint8_t>(p);
    ne.space = static_cast<uint8_t>(s);
    ne.write = write;
    ne.clean = clean;
    ne.needed = needed;
    st.busy[static_cast<int>(s)] |= Bit(p);
    if (removed) {  // the kept ops' summary, the new op's seq the newest
        list.lo = lo < sumLo ? lo : sumLo;
        list.hi = hi > sumHi ? hi : sumHi;
        list.maxSeq = ne.seq;
        list.anyWrite = sumWrite | write;
        list.anyClean = sumClean | clean;
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
    // Pipes absent from the core issue nothing: their frontiers stay as they are.
    for (unsigned rest = st.corePipes & ~(1u << t); rest != 0; rest &= rest - 1) {
        const int a = __builtin_ctz(rest);
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

bool HardEventPipes(HardEvent e, Pipe* src, Pipe* dst) { return EventPipes(e, src, dst); }
bool QueuePositionPipes(TPosition pos, Pipe* producer, Pipe* consumer) { return QueuePipes(pos, producer, consumer); }

void PipeTouch(Pipe p, Space s, const void* addr, uint64_t bytes, bool write, const std::source_location& where) {
    if (s == Space::GM) CrossCoreGmTouch(p, addr, bytes, write, where);
    State* sp = tState;
    if (bytes == 0 || sp == nullptr || !sp->on) return;
    State& st = *sp;
    const auto lo = reinterpret_cast<uintptr_t>(addr);
    if (p == Pipe::V && s == Space::UB) {  // the most frequent op: its own path
        CheckV(st, lo, lo + bytes, write, where);
        if (st.needed[kUb][kV][0] != 0) AppendVLog(st, lo, lo + bytes, write, where);
        return;
    }
    const int si = static_cast<int>(s), pi = static_cast<int>(p);
    Check(st, p, s, lo, lo + bytes, write, where);
    const int li = st.logOf[si][pi];
    if (li < 0) {
        Add(st, p, s, lo, lo + bytes, write, false, where);
    } else if (st.needed[si][pi][0] != 0) {
        AppendLog(st, st.logs[li], lo, lo + bytes, write, where);
    }
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
    TimeFlagSet(event, id);
    State* sp = tState;
    if (sp == nullptr || !sp->on) return;
    State& st = *sp;
    Pipe src, dst;
    if (EventPipes(event, &src, &dst)) st.flagSet[static_cast<int>(src)] = st.seq;
    st.flags[static_cast<int>(event)][id & (kEventIds - 1)].seq = st.seq++;
}

void PipeFlagWait(HardEvent event, int32_t id) {
    TimeFlagWait(event, id);
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
    if (InKernel()) TimeBarrierAll();
    State* sp = tState;
    if (sp == nullptr || !InKernel()) return;
    State& st = *sp;
    for (auto& row : st.lists)
        for (PipeList& list : row) list.Clear();
    for (OpLog& log : st.logs) log.Clear();
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
    for (OpLog& log : st.logs) {
        if (st.needed[log.space][log.pipe][0] == 0) {  // absent from this core, or nothing it could conflict with
            log.Clear();
            st.busy[log.space] &= static_cast<uint8_t>(~(1u << log.pipe));
        } else if (!log.Empty()) {
            PruneLog(st, log);
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
    for (OpLog& log : st.logs) log.Clear();
    st.vCheck.at = 0;
    st.ubAdds = 1;
    for (uint8_t& b : st.busy) b = 0;
    for (auto& row : st.frontier)
        for (uint64_t& f : row) f = 0;
    st.seq = 1;
    SetCorePipes(st, kVectorCorePipes);
    // benchmarks/twin_speed.py --pipe-model-ab measures the model's cost against runs without it; nothing else
    // sets this (tests/test_twin_pipes.py checks), so every test and every other benchmark runs under the model.
    const char* off = std::getenv("CAM_TWIN_PIPE_MODEL_BENCH_OFF");
    st.on = !(off != nullptr && off[0] == '1' && off[1] == '\0');
    for (auto& row : st.flags)
        for (auto& f : row) f.seq = 0;
    for (uint64_t& f : st.flagSet) f = 0;
}

}  // namespace cam::twin
