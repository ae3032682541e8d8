// The timing model (docs/twin.md, "Timing model"): each block records what it issues; each launch's record is
// costed at its end for every device of timing_constants.h.
#include "twin/timing.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/timing_constants.h"
#include "twin/types.h"

namespace cam::twin {

using AscendC::HardEvent;
using AscendC::TPosition;

namespace {

const char* EnvTimingPath() {
    const char* p = std::getenv("CAM_TWIN_TIMING");
    return p != nullptr && p[0] != '\0' && std::strcmp(p, "0") != 0 ? p : nullptr;
}

}  // namespace

bool gTimingOn = EnvTimingPath() != nullptr;

namespace {

constexpr int kPipes = static_cast<int>(Pipe::kCount);

enum class Kind : uint8_t { GmCopy, LocalCopy, Vector, Mmad, Scalar, FlagSet, FlagWait, Barrier, QueueSet, QueueWait,
                            SyncAll, PeerWait, CrossSet, CrossWait };

struct Rec {
    Kind kind;
    uint8_t pipe;   // GmCopy / LocalCopy: the pipe; Flag*: the event; Queue*: the position; Scalar: 1 = GM
    uint8_t flag;   // Queue*: toConsumer; Flag*, Cross*: the event / flag id
    uint8_t pad = 0;  // Cross*: the mode
    uint64_t a;     // bytes (per burst for GmCopy), m for Mmad, buffer for Queue*
    uint64_t b;     // bursts, n
    uint64_t c;     // GM address, k
    uint64_t d;     // GM pitch
    uint64_t w = 0; // GmCopy of a signal word: the write's token (MTE3 / FIX) or the token of the write a read saw
};

struct BlockTrace {
    uint32_t idx = 0;
    uint8_t coreKind = 0;
    int32_t group = -1;  // a 1:2 mixed launch's AI core (-1: not mixed)
    int8_t sub = -1;     // -1: its cube core; 0 / 1: a vector core
    std::vector<Rec> recs;
};

thread_local std::vector<Rec>* tRecs = nullptr;
thread_local std::unique_ptr<std::vector<Rec>> tOwned;
thread_local int64_t tVector = -1;  // index of the vector instruction whose operands are being seen
thread_local size_t tPollMark = 0;   // record count after a wait's first poll
thread_local int64_t tPendingRead = -1;  // a signal-word read whose observed write is looked up after it ran

std::mutex gMutex;
std::unordered_map<const void*, std::vector<BlockTrace>> gLaunches;  // blocks ended, by launch
std::deque<LaunchCost> gCosts;  // a deque: a long run drops the oldest at every launch
// Record buffers of costed launches, kept with their capacity for the next blocks: a fresh buffer per block and
// launch was page faults on every record it grew into.
std::vector<std::vector<Rec>> gSpare;

// ---- time through GM words ----
// A signal word is a GM copy of at most kSignalBytes in one burst (the data plane's ready / done words travel by
// MTE as 8-byte copies). Every such write takes a token, logged per 8-byte word before the bytes move; a read of
// such a word records the newest token on its words once the bytes have moved (looked up at the block's next
// record), so it names the write whose value it saw. The tokens are the twin-only timestamps beside the signal
// words: a write's landing time is known once its launch is costed.
constexpr uint64_t kSignalBytes = 64;
std::mutex gWordMutex;
std::unordered_map<uint64_t, uint64_t> gWordToken;  // GM word (address / 8) -> newest write's token
uint64_t gNextToken = 1;

bool SignalCopy(uint64_t burstBytes, uint64_t bursts) { return bursts == 1 && burstBytes <= kSignalBytes; }

uint64_t LogSignalWrite(uint64_t addr, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(gWordMutex);
    const uint64_t t = gNextToken++;
    for (uint64_t word = addr >> 3; word <= (addr + bytes - 1) >> 3; ++word) gWordToken[word] = t;
    return t;
}

void ResolvePendingRead() {
    if (tPendingRead < 0) return;
    const size_t i = size_t(tPendingRead);
    tPendingRead = -1;
    if (tRecs == nullptr || i >= tRecs->size()) return;
    Rec& r = (*tRecs)[i];
    uint64_t newest = 0;
    std::lock_guard<std::mutex> lock(gWordMutex);
    for (uint64_t word = r.c >> 3; word <= (r.c + r.a - 1) >> 3; ++word)
        if (auto it = gWordToken.find(word); it != gWordToken.end()) newest = std::max(newest, it->second);
    r.w = newest;
}

void Push(const Rec& r) {
    if (tRecs == nullptr) return;
    ResolvePendingRead();
    tRecs->push_back(r);
}

// One device's figures, read by name from the one table.
struct Device {
    double clock, mte2, mte3, mte1, fix, mteLat, burst, vecRepeat, vecBytes, vecStart, cubeStart, cubeMacs, cubeMacsInt4, issue,
        scalarUb, scalarGm, hbm, l2Bytes, l2Bw, sync, launch, link, pollLat, crossFlag;
};

double Lookup(const char* name, bool a3) {
    for (const auto& c : timing::kConstants)
        if (std::strcmp(c.name, name) == 0) return a3 ? c.a3 : c.a2;
    throw std::invalid_argument(std::string("timing constant ") + name + " is not in timing_constants.h");
}

Device MakeDevice(bool a3, bool l2hi) {
    Device d;
    d.clock = Lookup("core_clock_hz", a3);
    d.mte2 = Lookup("mte2_bytes_per_cycle", a3);
    d.mte3 = Lookup("mte3_bytes_per_cycle", a3);
    d.mte1 = Lookup("mte1_bytes_per_cycle", a3);
    d.fix = Lookup("fixpipe_bytes_per_cycle", a3);
    d.mteLat = Lookup("mte_latency_cycles", a3);
    d.burst = Lookup("mte_burst_cycles", a3);
    d.vecRepeat = Lookup("vector_cycles_per_repeat", a3);
    d.vecBytes = Lookup("vector_bytes_per_repeat", a3);
    d.vecStart = Lookup("vector_startup_cycles", a3);
    d.cubeStart = Lookup("cube_startup_cycles", a3);
    d.cubeMacs = Lookup("cube_int8_macs_per_cycle", a3);
    d.cubeMacsInt4 = Lookup("cube_int4_macs_per_cycle", a3);
    d.issue = Lookup("scalar_issue_cycles", a3);
    d.scalarUb = Lookup("scalar_ub_access_cycles", a3);
    d.scalarGm = Lookup("scalar_gm_access_cycles", a3);
    d.hbm = Lookup("hbm_bytes_per_s_die", a3);
    d.l2Bytes = Lookup("l2_bytes", a3);
    d.l2Bw = Lookup(l2hi ? "l2_bytes_per_s_die_hi" : "l2_bytes_per_s_die_lo", a3);
    d.sync = Lookup("syncall_cycles", a3);
    d.launch = Lookup("launch_seconds", a3);
    d.link = Lookup("link_bytes_per_s_rank", a3);
    d.pollLat = Lookup("poll_latency_cycles", a3);
    d.crossFlag = Lookup("crosscore_flag_cycles", a3);
    return d;
}

// The four devices of a costing, read from the table once: a plane launch of a few hundred instructions is costed
// at least four times, and reading 22 constants by name each time was a measurable part of it.
const Device& DeviceOf(bool a3, bool l2hi) {
    static const Device devices[4] = {MakeDevice(false, false), MakeDevice(false, true), MakeDevice(true, false),
                                      MakeDevice(true, true)};
    return devices[(a3 ? 2 : 0) + (l2hi ? 1 : 0)];
}

const char* PositionName(uint8_t pos) {
    static const char* const names[] = {"GM", "VECIN", "VECOUT", "VECCALC", "A1", "A2", "B1",
                                        "B2", "C1", "C2", "CO1", "CO2", "LCM"};
    return pos < sizeof(names) / sizeof(names[0]) ? names[pos] : "?";
}

const char* EventName(uint8_t e) {
    static const char* const names[] = {"MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "MTE2_MTE3", "MTE3_MTE2",
                                        "S_V",    "V_S",    "MTE2_S", "S_MTE2", "MTE3_S",    "S_MTE3",
                                        "M_V",    "V_M",    "FIX_V",  "MTE1_M", "M_MTE1"};
    return e < sizeof(names) / sizeof(names[0]) ? names[e] : "?";
}

// Cycles an instruction occupies its pipe.
double Cycles(const Rec& r, const Device& d) {
    switch (r.kind) {
        case Kind::GmCopy: {
            const double bw = r.pipe == uint8_t(Pipe::MTE2) ? d.mte2 : r.pipe == uint8_t(Pipe::MTE3) ? d.mte3 : d.fix;
            return d.mteLat + double(r.b - 1) * d.burst + double(r.a) * double(r.b) / bw;
        }
        case Kind::LocalCopy: return d.cubeStart + double(r.a) / d.mte1;
        case Kind::Vector: return d.vecStart + double((r.a + uint64_t(d.vecBytes) - 1) / uint64_t(d.vecBytes)) * d.vecRepeat;
        case Kind::Mmad:  // r.d: the operands' element bits
            return d.cubeStart + double(r.a) * double(r.b) * double(r.c) / (r.d == 4 ? d.cubeMacsInt4 : d.cubeMacs);
        default: return 0;
    }
}

// A copy of GM bytes, as the L2 policy keys reads: same GM start, burst bytes, bursts and pitch (a GEMM re-reads its
// A and B tiles exactly). The same bytes read in another shape are another copy: the model errs towards misses.
struct CopyKey {
    uint64_t addr, burst, bursts, pitch;
    bool operator==(const CopyKey&) const = default;
};
struct CopyKeyHash {
    size_t operator()(const CopyKey& k) const {
        uint64_t h = k.addr * 0x9E3779B97F4A7C15ull;
        h ^= (k.burst + (h << 6) + (h >> 2)) * 0xBF58476D1CE4E5B9ull;
        h ^= (k.bursts + (h << 6) + (h >> 2)) * 0x94D049BB133111EBull;
        h ^= k.pitch + (h << 6) + (h >> 2);
        return size_t(h);
    }
};

// The launch's MTE2 reads by copy: each block's reads (the blocks in index order, the reads in program order) carry
// their copy's dense id. Computed once per launch, before any costing.
struct Reads {
    std::vector<std::vector<uint32_t>> copy;  // per block, per MTE2 read: its copy
    std::vector<int64_t> bytes;               // per copy
    size_t count = 0;                         // the launch's MTE2 reads
};

Reads LaunchReads(const std::vector<BlockTrace>& blocks) {
    std::unordered_map<CopyKey, uint32_t, CopyKeyHash> ids;
    Reads out;
    out.copy.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i)
        for (const Rec& r : blocks[i].recs) {
            if (r.kind != Kind::GmCopy || r.pipe != uint8_t(Pipe::MTE2)) continue;
            const auto [it, fresh] = ids.try_emplace(CopyKey{r.c, r.a, r.b, r.d}, uint32_t(out.bytes.size()));
            if (fresh) out.bytes.push_back(int64_t(r.a * r.b));
            out.copy[i].push_back(it->second);
            ++out.count;
        }
    return out;
}

// A read of this die's memory as the L2 policy orders them: when it starts on its core's MTE2 pipe, then the core's
// place in the launch and the read's place in the core's program (a fixed order for reads starting together).
struct L2Read {
    double start;
    uint32_t core, seq, copy;
    int64_t bytes;
    bool operator<(const L2Read& o) const {
        return start != o.start ? start < o.start : core != o.core ? core < o.core : seq < o.seq;
    }
};

// The L2 policy (docs/twin.md, "Memory."): a fully associative LRU cache of l2_bytes, judged by stack distance
// (Mattson et al. 1970). Every costing starts cold; a copy's first read misses; a re-read hits when its own bytes
// and those of the distinct copies read since its previous read fit in l2_bytes. A Fenwick tree over the access
// positions holds each copy's bytes at its latest read, so the distinct bytes read since a position are a suffix
// sum: O(log n) a read.
class L2Stack {
public:
    void Reset(const Reads& reads, double capacity) {
        capacity_ = capacity;
        tree_.assign(reads.count + 1, 0);
        last_.assign(reads.bytes.size(), 0);
        next_ = 0;
        live_ = 0;
    }
    // The read's bytes that hit: all of them or none.
    int64_t Read(uint32_t copy, int64_t bytes) {
        const uint32_t pos = ++next_;  // positions from 1; 0: never read
        uint32_t& prev = last_[copy];
        int64_t hit = 0;
        if (prev != 0) {
            const int64_t since = live_ - Prefix(prev);  // the copies whose latest read came after this one's
            if (double(since + bytes) <= capacity_) hit = bytes;
            Add(prev, -bytes);
            live_ -= bytes;
        }
        Add(pos, bytes);
        live_ += bytes;
        prev = pos;
        return hit;
    }

private:
    void Add(uint32_t i, int64_t v) {
        for (; i < tree_.size(); i += i & (~i + 1)) tree_[i] += v;
    }
    int64_t Prefix(uint32_t i) const {
        int64_t s = 0;
        for (; i > 0; i -= i & (~i + 1)) s += tree_[i];
        return s;
    }
    double capacity_ = 0;
    std::vector<int64_t> tree_;
    std::vector<uint32_t> last_;  // per copy: the position of its latest read
    uint32_t next_ = 0;
    int64_t live_ = 0;  // the bytes in the tree: every copy read so far, once
};

// A segment's hit bytes: its reads through the launch's stack in the order they start. Each RunSegment call appends
// one core's reads in that order (a core's MTE2 copies start one after another), so the segment's reads are sorted
// runs (`runs`: where each begins), merged here in O(n log runs) rather than sorted. Empties both.
int64_t SegmentHits(std::vector<L2Read>& reads, std::vector<size_t>& runs, L2Stack& l2) {
    runs.push_back(reads.size());
    std::vector<std::pair<size_t, size_t>> heap;  // (next read, end) of each run not yet merged
    for (size_t k = 0; k + 1 < runs.size(); ++k)
        if (runs[k] < runs[k + 1]) heap.push_back({runs[k], runs[k + 1]});
    const auto later = [&](const std::pair<size_t, size_t>& x, const std::pair<size_t, size_t>& y) {
        return reads[y.first] < reads[x.first];
    };
    std::make_heap(heap.begin(), heap.end(), later);
    int64_t hit = 0;
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        std::pair<size_t, size_t>& run = heap.back();
        hit += l2.Read(reads[run.first].copy, reads[run.first].bytes);
        if (++run.first < run.second) std::push_heap(heap.begin(), heap.end(), later);
        else heap.pop_back();
    }
    reads.clear();
    runs.clear();
    return hit;
}

// One instruction's span on its pipe, for the Perfetto trace.
struct Span {
    uint32_t core;
    uint8_t pipe;
    Kind kind;
    double start, end;  // cycles
    uint64_t a, b, c;
};
constexpr size_t kMaxSpans = 400000;  // a trace stays a file Perfetto opens (the first spans of a long launch)

// A launch's stalls by what they waited on, summed in the order they occur (the same sums LaunchCost::stalls
// holds): a name is a static prefix and argument (`arg` null: the prefix alone), so a stall costs no string until
// the launch's costing ends, when they become LaunchCost::stalls.
class Stalls {
public:
    void Add(const char* what, const char* arg, double seconds) {
        for (Sum& x : sums_)
            if (x.what == what && x.arg == arg) {
                x.seconds += seconds;
                return;
            }
        sums_.push_back({what, arg, seconds});
    }
    void Into(std::map<std::string, double>& out) const {
        for (const Sum& x : sums_) out[x.arg == nullptr ? std::string(x.what) : std::string(x.what) + x.arg + ">"] += x.seconds;
    }

private:
    struct Sum {
        const char* what;
        const char* arg;
        double seconds;
    };
    std::vector<Sum> sums_;
};

struct Core {
    uint32_t idx = 0;
    uint32_t slot = 0;  // the core's place in the launch's blocks
    const std::vector<uint32_t>* copies = nullptr;  // its MTE2 reads' copies (Reads)
    uint32_t reads = 0;  // MTE2 reads run so far
    std::vector<Span>* spans = nullptr;  // non-null: record every instruction's span
    Stalls* stalls = nullptr;           // the launch's
    double tS = 0;
    double t[kPipes] = {};
    double busy[kPipes] = {};
    // A core uses a handful of flags and queues: flat lists searched in order, whose storage a core keeps from one
    // costing to the next (Reset), rather than hash maps built per costing.
    std::vector<std::pair<uint32_t, double>> flags;  // (event * 8 + id, when the last SetFlag fired)
    struct QueueEvents {
        uint64_t key = 0;
        std::vector<double> sets;  // when each set (EnQue / FreeTensor) fired, in order
        uint64_t waits = 0;        // waits (DeQue / AllocTensor) seen
    };
    std::vector<QueueEvents> queues;  // the first `queueCount` are this costing's
    size_t queueCount = 0;
    size_t pos = 0;
    bool done = false;
    bool atSync = false;  // stopped at a SyncAll: the segment's end
    // A 1:2 mixed launch: the AI core and the core's place in it; the launch's cross-core set times by
    // (group, flag id, direction); this core's waits seen by the same key.
    int32_t group = -1;
    int8_t sub = -1;
    std::unordered_map<uint64_t, std::vector<double>>* cross = nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> crossWaits;
    uint64_t& CrossWaits(uint64_t key) {
        for (auto& w : crossWaits)
            if (w.first == key) return w.second;
        crossWaits.push_back({key, 0});
        return crossWaits.back().second;
    }
    void Reset(uint32_t i, std::vector<Span>* s, Stalls* st) {
        idx = i;
        reads = 0;
        atSync = false;
        crossWaits.clear();
        spans = s;
        stalls = st;
        tS = 0;
        std::fill(std::begin(t), std::end(t), 0.0);
        std::fill(std::begin(busy), std::end(busy), 0.0);
        flags.clear();
        queueCount = 0;
        pos = 0;
        done = false;
    }
    double* Flag(uint32_t key) {
        for (auto& f : flags)
            if (f.first == key) return &f.second;
        return nullptr;
    }
    void SetFlag(uint32_t key, double at) {
        if (double* f = Flag(key)) *f = at;
        else flags.push_back({key, at});
    }
    QueueEvents& Queue(uint64_t key) {
        for (size_t i = 0; i < queueCount; ++i)
            if (queues[i].key == key) return queues[i];
        if (queueCount == queues.size()) queues.emplace_back();
        QueueEvents& q = queues[queueCount++];
        q.key = key;
        q.sets.clear();
        q.waits = 0;
        return q;
    }
    double Now() const {
        double m = tS;
        for (double x : t) m = std::max(m, x);
        return m;
    }
};

void Wait(Core& c, Pipe p, double at, const char* what, const char* arg, const Device& d) {
    double& cur = p == Pipe::S ? c.tS : c.t[int(p)];
    const double ready = p == Pipe::S ? c.tS : std::max(cur, c.tS);
    if (at > ready) c.stalls->Add(what, arg, (at - ready) / d.clock);
    cur = std::max(cur, at);
}

// The base of the peer's window (not the launching rank's own) a GM address lies in, 0 when none: the peer's
// ingress is named by its window.
uint64_t PeerWindow(const LaunchWindows* w, uint64_t addr) {
    if (w == nullptr) return 0;
    for (size_t i = 0; i < w->windows.size(); ++i) {
        if (int64_t(i) == w->own) continue;
        if (addr >= w->windows[i].first && addr < w->windows[i].first + w->windows[i].second)
            return w->windows[i].first;
    }
    return 0;
}

// Virtual time shared by the launches of one group (launches whose host lifetimes overlap: the ranks of a plane
// round), all of which start at cycle 0. landIn: each signal write's landing time from the previous pass over the
// group (a write of a launch outside the group landed before the group began: absent, 0); landOut: this pass's.
// writes: the pass's copies into peers' windows, put through the links once every launch of the pass has run.
struct LinkWrite {
    double start, end, bytes;  // cycles on the writer's pipe
    size_t launch;
    uint64_t peer;   // the receiver's window
    uint64_t token;  // a signal word's, else 0
};
struct PlaneTime {
    const std::unordered_map<uint64_t, double>* landIn = nullptr;
    std::unordered_map<uint64_t, double> landOut;
    std::vector<LinkWrite> writes;
    std::vector<std::pair<uint64_t, double>> ownLand;  // the landOut entries of writes into no peer, in order
    size_t launch = 0;  // the launch being costed
};

// The pass's peer writes in the order they start: each crosses its launch's egress and its receiver's ingress
// (shared by every sender of the group) one after the other at link_bytes_per_s_rank, and lands when both have
// carried it and its copy is done. Fills the signal writes' landing times; returns each launch's last landing.
std::vector<double> RunLinks(PlaneTime& plane, size_t launches, double linkBytesPerCycle) {
    std::vector<double> last(launches, 0.0), egress(launches, 0.0);
    std::unordered_map<uint64_t, double> ingress;
    std::stable_sort(plane.writes.begin(), plane.writes.end(),
                     [](const LinkWrite& x, const LinkWrite& y) { return x.start < y.start; });
    for (const LinkWrite& w : plane.writes) {
        double& in = ingress[w.peer];
        const double done = std::max({w.start, egress[w.launch], in}) + w.bytes / linkBytesPerCycle;
        egress[w.launch] = in = done;
        const double land = std::max(w.end, done);
        last[w.launch] = std::max(last[w.launch], land);
        if (w.token != 0) plane.landOut[w.token] = land;
    }
    return last;
}

// Runs one core's records up to its next SyncAll (or its end); adds the bytes it moved to / from GM and over the
// peer link, and its reads of this die's memory to `l2` (the L2 policy orders them at the segment's end).
void RunSegment(Core& c, const BlockTrace& b, const Device& d, LaunchCost& out, const LaunchWindows* w, double* rd,
                double* wr, double* link, std::vector<L2Read>& l2, PlaneTime& plane) {
    while (c.pos < b.recs.size()) {
        const Rec& r = b.recs[c.pos++];
        switch (r.kind) {
            case Kind::GmCopy: case Kind::LocalCopy: case Kind::Vector: case Kind::Mmad: {
                const Pipe p = r.kind == Kind::Vector ? Pipe::V : r.kind == Kind::Mmad ? Pipe::M : Pipe(r.pipe);
                c.tS += d.issue;
                c.busy[int(Pipe::S)] += d.issue;
                const double cyc = Cycles(r, d);
                const double start = std::max(c.tS, c.t[int(p)]);
                double end = start + cyc;
                // A read that saw a signal write completes no earlier than that write's landing plus the poll
                // latency.
                if (r.kind == Kind::GmCopy && p == Pipe::MTE2 && r.w != 0 && plane.landIn != nullptr) {
                    auto it = plane.landIn->find(r.w);
                    if (it != plane.landIn->end() && it->second + d.pollLat > end) {
                        c.stalls->Add("GM word landing", nullptr, (it->second + d.pollLat - end) / d.clock);
                        end = it->second + d.pollLat;
                    }
                }
                c.t[int(p)] = end;
                c.busy[int(p)] += cyc;
                if (c.spans != nullptr && c.spans->size() < kMaxSpans)
                    c.spans->push_back({c.idx, uint8_t(p), r.kind, start, start + cyc, r.a, r.b, r.c});
                ++out.instructions;
                if (r.kind == Kind::GmCopy) {  // a peer's window is the peer's HBM: this die's link, not its HBM
                    const double bytes = double(r.a) * double(r.b);
                    const uint64_t peer = PeerWindow(w, r.c);
                    if (peer != 0) *link += bytes;
                    else (p == Pipe::MTE2 ? *rd : *wr) += bytes;
                    if (p == Pipe::MTE2) {
                        const uint32_t seq = c.reads++;
                        if (peer == 0) l2.push_back({start, c.slot, seq, (*c.copies)[seq], int64_t(r.a * r.b)});
                    }
                    // Writes into a peer go through the link queues (RunLinks); reads out of one count to the floor.
                    if (peer != 0 && p != Pipe::MTE2)
                        plane.writes.push_back({start, end, bytes, plane.launch, peer, r.w});
                    else if (p != Pipe::MTE2 && r.w != 0) {
                        plane.landOut[r.w] = end;
                        plane.ownLand.push_back({r.w, end});
                    }
                }
                break;
            }
            case Kind::Scalar: {
                // One add per access, as they were issued (a product would round differently).
                const double cyc = r.pipe ? d.scalarGm : d.scalarUb;
                for (uint64_t n = 0; n < r.a; ++n) {
                    c.tS += cyc;
                    c.busy[int(Pipe::S)] += cyc;
                }
                break;
            }
            case Kind::FlagSet: case Kind::FlagWait: {
                Pipe src, dst;
                if (!HardEventPipes(HardEvent(r.pipe), &src, &dst)) break;
                const uint32_t key = uint32_t(r.pipe) * 8u + r.flag;
                if (r.kind == Kind::FlagSet) {
                    c.SetFlag(key, src == Pipe::S ? c.tS : std::max(c.t[int(src)], c.tS));
                } else if (const double* at = c.Flag(key)) {
                    Wait(c, dst, *at, "WaitFlag<", EventName(r.pipe), d);
                }
                break;
            }
            case Kind::QueueSet: case Kind::QueueWait: {
                Pipe producer, consumer;
                if (!QueuePositionPipes(TPosition(r.pipe), &producer, &consumer)) break;
                const bool toConsumer = r.flag != 0;
                const uint64_t key = r.a * 2 + (toConsumer ? 1 : 0);
                Core::QueueEvents& q = c.Queue(key);
                if (r.kind == Kind::QueueSet) {
                    const Pipe from = toConsumer ? producer : consumer;
                    q.sets.push_back(from == Pipe::S ? c.tS : std::max(c.t[int(from)], c.tS));
                } else {
                    // DeQue j pairs with EnQue j; AllocTensor j with FreeTensor j - buffers (none before that).
                    const uint64_t j = q.waits++;
                    const uint64_t lag = toConsumer ? 0 : r.b;
                    if (j < lag || j - lag >= q.sets.size()) break;
                    Wait(c, toConsumer ? consumer : producer, q.sets[j - lag], toConsumer ? "DeQue<" : "AllocTensor<",
                         PositionName(r.pipe), d);
                }
                break;
            }
            case Kind::Barrier: {
                const double now = c.Now();
                if (now > c.tS) c.stalls->Add("PipeBarrier<PIPE_ALL>", nullptr, (now - c.tS) / d.clock);
                c.tS = now;
                for (double& x : c.t) x = now;
                break;
            }
            case Kind::SyncAll: c.atSync = true; return;
            case Kind::PeerWait: ++out.peerWaits; break;
            case Kind::CrossSet: case Kind::CrossWait: {
                if (c.cross == nullptr) break;
                const Pipe p = Pipe(r.pipe);
                const int mode = r.pad;
                // Directions: 0 cube -> its vector cores (mode 2), 1 + v vector core v -> the cube (mode 2),
                // 3 + v vector core v -> its sibling (mode 1).
                auto key = [&](uint32_t dir) { return (uint64_t(uint32_t(c.group)) << 16) | (uint64_t(r.flag) << 4) | dir; };
                if (r.kind == Kind::CrossSet) {
                    const uint32_t dir = mode == 1 ? 3u + uint32_t(c.sub) : c.sub < 0 ? 0u : 1u + uint32_t(c.sub);
                    (*c.cross)[key(dir)].push_back(p == Pipe::S ? c.tS : std::max(c.t[int(p)], c.tS));
                    break;
                }
                // The j-th wait takes the j-th set of the counter's source (both vector cores' j-th, where the
                // counter counts their pairs); not costed yet: this core waits for the others to run on.
                const uint32_t dirA = mode == 1 ? 3u : c.sub < 0 ? 1u : 0u;
                const uint32_t dirB = mode == 1 ? 4u : c.sub < 0 ? 2u : 0u;
                uint64_t& j = c.CrossWaits(key(dirA) | (uint64_t(mode) << 60));
                const auto a = c.cross->find(key(dirA)), b = c.cross->find(key(dirB));
                if (a == c.cross->end() || b == c.cross->end() || a->second.size() <= j || b->second.size() <= j) {
                    --c.pos;
                    return;
                }
                const double at = std::max(a->second[j], b->second[j]) + d.crossFlag;
                ++j;
                // Every instruction after the wait is held (not only its pipe's): the scalar unit stops issuing.
                const double now = std::max(c.tS, c.t[int(p)]);
                if (at > now) {
                    c.stalls->Add("CrossCoreWaitFlag<", c.sub < 0 ? "AIC" : "AIV", (at - now) / d.clock);
                    if (c.spans != nullptr && c.spans->size() < kMaxSpans)
                        c.spans->push_back({c.idx, uint8_t(Pipe::S), Kind::CrossWait, now, at, r.flag, uint64_t(mode), 0});
                }
                c.tS = std::max(c.tS, at);
                c.t[int(p)] = std::max(c.t[int(p)], at);
                break;
            }
        }
    }
    c.done = true;
}

// A segment's floor: what the die's memory and the rank's link alone would need for its bytes (seconds).
double SegmentFloor(double rd, double wr, double link, double hit, const Device& d) {
    // The die's memory: misses and writes share HBM, hits (of the `rd` read bytes) share L2 (a floor on the segment,
    // not a per-core slowdown: stated in docs/twin.md). The peer link is a resource of its own: the rank's copies to
    // / from peers share link_bytes_per_s_rank.
    return std::max((rd - hit + wr) / d.hbm + hit / d.l2Bw, link / d.link);
}

// One segment of a costing (between SyncAlls): its start, the cores' latest arrival, its bytes (`hit`: of its read
// bytes, those the L2 policy hit) and its end (cycles, before the SyncAll's own cost).
struct Segment {
    double start, arrive, rd, wr, link, hit, end;
};

LaunchCost Cost(const char* kernel, uint32_t blockDim, std::vector<BlockTrace>& blocks, const Reads& reads,
               const LaunchWindows* w, bool a3, bool l2hi, PlaneTime& plane, std::vector<Span>* spans = nullptr,
               std::vector<Segment>* segments = nullptr) {
    const Device& d = DeviceOf(a3, l2hi);
    LaunchCost out;
    out.kernel = kernel;
    out.device = a3 ? "a3" : "a2";
    out.l2 = l2hi ? "hi" : "lo";
    out.blockDim = blockDim;
    std::sort(blocks.begin(), blocks.end(), [](const BlockTrace& x, const BlockTrace& y) { return x.idx < y.idx; });
    // The cores' state is kept from one costing to the next on this thread (its lists' storage).
    static thread_local std::vector<Core> pool;
    if (pool.size() < blocks.size()) pool.resize(blocks.size());
    Stalls stalls;
    std::unordered_map<uint64_t, std::vector<double>> cross;
    for (size_t i = 0; i < blocks.size(); ++i) {
        pool[i].Reset(blocks[i].idx, spans, &stalls);
        pool[i].slot = uint32_t(i);
        pool[i].copies = &reads.copy[i];
        pool[i].group = blocks[i].group;
        pool[i].sub = blocks[i].sub;
        pool[i].cross = blocks[i].group >= 0 ? &cross : nullptr;
    }
    const auto cores = std::span<Core>(pool.data(), blocks.size());
    // The L2 is one stack over the launch (its segments in turn); a segment's reads go through it in the order they
    // start, once the segment's cores have run. The order within a segment does not depend on its floor (the floor
    // only moves its end), so its hits are known before its floor: one run, no pass more.
    static thread_local L2Stack l2;
    static thread_local std::vector<L2Read> segReads;
    static thread_local std::vector<size_t> segRuns;
    l2.Reset(reads, d.l2Bytes);
    double hits = 0;
    double segStart = 0;  // cycles
    bool more = true;
    while (more) {
        double rd = 0, wr = 0, link = 0, arrive = segStart;
        more = false;
        for (Core& c : cores) c.atSync = false;
        // Each core runs until the segment's SyncAll, its end, or a cross-core wait whose set is not costed yet;
        // the passes repeat while any core moves on (one pass more than the cores need without cross-core flags).
        for (bool moved = true; moved;) {
            moved = false;
            for (size_t i = 0; i < blocks.size(); ++i) {
                Core& c = cores[i];
                if (c.done || c.atSync) continue;
                const size_t before = c.pos;
                const size_t run = segReads.size();
                RunSegment(c, blocks[i], d, out, w, &rd, &wr, &link, segReads, plane);
                if (segReads.size() > run) segRuns.push_back(run);
                moved = moved || c.pos != before || c.done || c.atSync;
            }
        }
        for (Core& c : cores) {
            // A core still waiting has no set to wait for in the records (the twin's run refused such a launch):
            // it ends where it stopped.
            if (!c.done && !c.atSync) c.done = true;
            arrive = std::max(arrive, c.Now());
            if (!c.done) more = true;
        }
        out.gmReadBytes += rd;
        out.gmWriteBytes += wr;
        out.linkBytes += link;
        const int64_t hit = SegmentHits(segReads, segRuns, l2);
        hits += double(hit);
        const double floorS = SegmentFloor(rd, wr, link, double(hit), d);
        out.bandwidthFloorSeconds += floorS;
        double end = std::max(arrive, segStart + floorS * d.clock);
        if (segments != nullptr) segments->push_back({segStart, arrive, rd, wr, link, double(hit), end});
        if (more) end += d.sync;
        for (Core& c : cores) {
            if (more && c.Now() < end - d.sync) stalls.Add("SyncAll", nullptr, (end - d.sync - c.Now()) / d.clock);
            if (more) {
                c.tS = end;
                for (double& x : c.t) x = end;
            }
        }
        segStart = end;
    }
    double last = 0;
    for (size_t i = 0; i < cores.size(); ++i) {
        for (int p = 0; p < kPipes; ++p) out.busy[p] += cores[i].busy[p] / d.clock;
        if (blocks[i].coreKind != 0) ++out.cubeBlocks;
        if (cores[i].Now() > last) {
            last = cores[i].Now();
            out.criticalCore = blocks[i].idx;
            for (int p = 0; p < kPipes; ++p) out.criticalBusy[p] = cores[i].busy[p] / d.clock;
        }
    }
    stalls.Into(out.stalls);
    out.l2HitFraction = out.gmReadBytes > 0 ? hits / out.gmReadBytes : 0;
    out.seconds = std::max(last, segStart) / d.clock + d.launch;  // the launch's peer writes landing: CostGroup
    return out;
}

std::string Num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

std::string Quote(const std::string& s) {
    std::string o = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') o += '\\';
        o += ch;
    }
    return o + "\"";
}

const char* EnvTracePath() {
    const char* p = std::getenv("CAM_TWIN_TIMING_TRACE");
    return p != nullptr && p[0] != '\0' ? p : nullptr;
}

// Chrome trace JSON (Perfetto opens it): one process per core, one thread per pipe, one slice per instruction.
void WriteTrace(const char* path, const char* kernel, const std::vector<Span>& spans, uint32_t cores,
                const Device& d) {
    FILE* f = std::fopen(path, "w");
    if (f == nullptr) return;
    std::fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"kernel\":%s,\"label\":\"timing model prediction "
                    "(A3, L2 low end), not a measurement\"},\"traceEvents\":[",
                 Quote(kernel).c_str());
    bool first = true;
    for (uint32_t c = 0; c < cores; ++c) {
        for (int p = 0; p < kPipes; ++p) {
            std::fprintf(f, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                         first ? "" : ",", c, p, PipeName(Pipe(p)));
            first = false;
        }
        std::fprintf(f, ",{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%u,\"args\":{\"name\":\"core %u\"}}", c, c);
    }
    static const char* const kinds[] = {"DataCopy", "LoadData", "Vector", "Mmad", "Scalar"};
    for (const Span& s : spans) {
        const char* name = int(s.kind) < 5 ? kinds[int(s.kind)] : s.kind == Kind::CrossWait ? "CrossCoreWaitFlag" : "?";
        std::fprintf(f, ",{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%u,\"tid\":%d,\"ts\":%.4f,\"dur\":%.4f,"
                        "\"args\":{\"a\":%llu,\"b\":%llu}}",
                     name, s.core, int(s.pipe), s.start / d.clock * 1e6, (s.end - s.start) / d.clock * 1e6,
                     static_cast<unsigned long long>(s.a), static_cast<unsigned long long>(s.b));
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

// A launch ended, waiting for the others of its group to end.
struct Pending {
    std::string kernel;
    uint32_t blockDim = 0;
    std::vector<BlockTrace> blocks;
    bool hasWindows = false;
    LaunchWindows windows;  // a copy: the launch's own lives on its stack
};
std::unordered_set<const void*> gStarted;  // launches with a block started and no end seen
uint32_t gRunning = 0;
std::vector<Pending> gGroup;  // ended launches of the group still running

// Passes over a group until no landing time a read saw moves (each pass can only delay a wait, so they settle; a
// chain of waits through k launches settles in k + 1 passes, a group whose reads saw no signal write in one).
constexpr int kMaxPasses = 8;

// Whether this pass's landings of the tokens the group's reads saw equal the previous pass's (the other writes'
// landings change nothing).
bool SameLandings(const std::unordered_set<uint64_t>& read, const std::unordered_map<uint64_t, double>& a,
                  const std::unordered_map<uint64_t, double>& b) {
    for (uint64_t t : read) {
        auto x = a.find(t), y = b.find(t);
        const double va = x == a.end() ? 0.0 : x->second, vb = y == b.end() ? 0.0 : y->second;
        if (std::fabs(va - vb) > 1e-6) return false;
    }
    return true;
}

// Every Device field is either compared by SameCores or read after the cores have run (the floor's hbm, l2Bw and
// link; l2Bytes, which decides the hits a costing's segments keep, compared where a costing is reused): a field
// added without being named there fails this count.
static_assert(sizeof(Device) == 24 * sizeof(double), "a Device field is missing from SameCores or the floor's figures");

// Whether two devices differ only in figures a costing reads after its cores have run (the segments' floors: HBM,
// L2, link): then the cores run the same instructions at the same cycles on both, as long as every segment ends at
// the same cycle and the landings their reads wait for are the same.
bool SameCores(const Device& a, const Device& b) {
    return a.clock == b.clock && a.mte2 == b.mte2 && a.mte3 == b.mte3 && a.mte1 == b.mte1 && a.fix == b.fix &&
           a.mteLat == b.mteLat && a.burst == b.burst && a.vecRepeat == b.vecRepeat && a.vecBytes == b.vecBytes &&
           a.vecStart == b.vecStart && a.cubeStart == b.cubeStart && a.cubeMacs == b.cubeMacs &&
           a.cubeMacsInt4 == b.cubeMacsInt4 && a.issue == b.issue &&
           a.scalarUb == b.scalarUb && a.scalarGm == b.scalarGm && a.sync == b.sync && a.launch == b.launch &&
           a.pollLat == b.pollLat && a.crossFlag == b.crossFlag;
}

// One launch's costing kept for the next device: its cost before its peer writes landed, its segments, and what it
// put into the pass's virtual time (its writes into peers, its own signal writes' landings).
struct Costing {
    LaunchCost cost;
    std::vector<Segment> segments;
    std::vector<LinkWrite> writes;
    std::vector<std::pair<uint64_t, double>> ownLand;
};
// A pass of a device's costing, kept for the next device: the device, the landings its reads saw (the group's read
// tokens in one order: whether each was known, and when it landed) and each launch's costing.
struct PassMemo {
    const Device* device = nullptr;
    std::vector<std::pair<bool, double>> landRead;
    std::vector<Costing> launches;
};

std::atomic<bool> gSelfCheck{false};
std::atomic<uint64_t> gDerived{0}, gRecosted{0}, gMismatches{0};

// Launch `c`'s cost on device `d` from its costing on another device whose cores run the same (SameCores, same
// landings read, the same l2_bytes: the same reads in the same order, so the same hits), when each segment ends at
// the cycle it ended there; false when one does not (its floor binds differently), and the launch is costed afresh.
bool Derive(const Costing& c, const Device& d, bool a3, bool hi, LaunchCost* out) {
    double floors = 0;
    for (const Segment& s : c.segments) {
        const double floorS = SegmentFloor(s.rd, s.wr, s.link, s.hit, d);
        floors += floorS;
        if (std::max(s.arrive, s.start + floorS * d.clock) != s.end) return false;
    }
    *out = c.cost;
    out->device = a3 ? "a3" : "a2";
    out->l2 = hi ? "hi" : "lo";
    out->bandwidthFloorSeconds = floors;
    return true;
}

// Every launch of a group costed for each device and end of the L2 range, in one virtual time (PlaneTime): costs[i]
// holds launch i's (A2 lo, A2 hi, A3 lo, A3 hi). With `share`, a pass whose device runs the cores as a previous
// device's same pass did (SameCores, the same landings read) takes each launch's cost from that costing where every
// segment ends at the same cycle (Derive), the cores' run not repeated; the costs are the same as without.
std::vector<std::vector<LaunchCost>> CostDevices(std::vector<Pending>& group, const std::vector<Reads>& reads,
                                                 const std::unordered_set<uint64_t>& readTokens, bool share,
                                                 std::unordered_map<uint64_t, double>* traceLand) {
    auto win = [](const Pending& p) { return p.hasWindows ? &p.windows : nullptr; };
    std::vector<std::vector<LaunchCost>> costs(group.size());
    std::vector<PassMemo> memo(kMaxPasses);
    std::vector<std::pair<bool, double>> landRead;
    for (bool a3 : {false, true})
        for (bool hi : {false, true}) {
            const Device& d = DeviceOf(a3, hi);
            std::unordered_map<uint64_t, double> land;
            std::vector<LaunchCost> pass(group.size());
            for (int k = 0; k < kMaxPasses; ++k) {
                PlaneTime plane;
                plane.landIn = &land;
                landRead.clear();
                for (uint64_t t : readTokens) {
                    auto it = land.find(t);
                    landRead.push_back(it == land.end() ? std::pair<bool, double>{false, 0.0}
                                                        : std::pair<bool, double>{true, it->second});
                }
                PassMemo& m = memo[k];
                const bool reuse = share && m.device != nullptr && SameCores(*m.device, d) &&
                                   m.device->l2Bytes == d.l2Bytes && m.landRead == landRead;
                if (!reuse) {
                    m.device = &d;
                    m.landRead = landRead;
                    m.launches.assign(group.size(), Costing{});
                }
                for (size_t i = 0; i < group.size(); ++i) {
                    plane.launch = i;
                    Costing& c = m.launches[i];
                    if (reuse && Derive(c, d, a3, hi, &pass[i])) {
                        plane.writes.insert(plane.writes.end(), c.writes.begin(), c.writes.end());
                        for (const auto& [token, at] : c.ownLand) {
                            plane.landOut[token] = at;
                            plane.ownLand.push_back({token, at});
                        }
                        ++gDerived;
                        continue;
                    }
                    const size_t w0 = plane.writes.size(), o0 = plane.ownLand.size();
                    c.segments.clear();
                    pass[i] = Cost(group[i].kernel.c_str(), group[i].blockDim, group[i].blocks, reads[i],
                                   win(group[i]), a3, hi, plane, nullptr, share ? &c.segments : nullptr);
                    ++gRecosted;
                    if (share) {
                        c.cost = pass[i];
                        c.writes.assign(plane.writes.begin() + w0, plane.writes.end());
                        c.ownLand.assign(plane.ownLand.begin() + o0, plane.ownLand.end());
                    }
                }
                // A launch ends when its writes into peers have landed.
                const std::vector<double> landed = RunLinks(plane, group.size(), d.link / d.clock);
                for (size_t i = 0; i < group.size(); ++i)
                    pass[i].seconds = std::max(pass[i].seconds, landed[i] / d.clock + d.launch);
                const bool settled = SameLandings(readTokens, land, plane.landOut);
                land.swap(plane.landOut);
                if (settled) break;
            }
            for (size_t i = 0; i < group.size(); ++i) costs[i].push_back(std::move(pass[i]));
            if (a3 && !hi && traceLand != nullptr) *traceLand = land;
        }
    return costs;
}

bool SameCost(const LaunchCost& a, const LaunchCost& b) {
    bool same = a.kernel == b.kernel && a.device == b.device && a.l2 == b.l2 && a.blockDim == b.blockDim &&
                a.cubeBlocks == b.cubeBlocks && a.seconds == b.seconds && a.criticalCore == b.criticalCore &&
                a.stalls == b.stalls && a.gmReadBytes == b.gmReadBytes && a.gmWriteBytes == b.gmWriteBytes &&
                a.l2HitFraction == b.l2HitFraction && a.linkBytes == b.linkBytes &&
                a.bandwidthFloorSeconds == b.bandwidthFloorSeconds && a.instructions == b.instructions &&
                a.peerWaits == b.peerWaits;
    for (int p = 0; p < kPipes; ++p) same = same && a.busy[p] == b.busy[p] && a.criticalBusy[p] == b.criticalBusy[p];
    return same;
}

// Costs every launch of a group (CostDevices) and files the costs (and the trace, the first time its kernel is
// seen).
void CostGroup(std::vector<Pending>& group) {
    if (group.empty()) return;
    std::vector<Reads> reads;
    std::unordered_set<uint64_t> readTokens;  // the signal writes whose values the group's reads saw
    for (Pending& p : group) {
        // In index order, as Cost runs them: Reads numbers each block's reads in that order.
        std::sort(p.blocks.begin(), p.blocks.end(),
                  [](const BlockTrace& x, const BlockTrace& y) { return x.idx < y.idx; });
        reads.push_back(LaunchReads(p.blocks));
        for (const BlockTrace& b : p.blocks)
            for (const Rec& r : b.recs)
                if (r.kind == Kind::GmCopy && r.pipe == uint8_t(Pipe::MTE2) && r.w != 0) readTokens.insert(r.w);
    }
    auto win = [](const Pending& p) { return p.hasWindows ? &p.windows : nullptr; };
    std::unordered_map<uint64_t, double> traceLand;  // A3, L2 low end: the trace's landing times
    std::vector<std::vector<LaunchCost>> costs = CostDevices(group, reads, readTokens, true, &traceLand);
    if (gSelfCheck.load()) {  // SetTimingSelfCheck: the same record costed without sharing gives the same costs
        const std::vector<std::vector<LaunchCost>> fresh = CostDevices(group, reads, readTokens, false, nullptr);
        for (size_t i = 0; i < costs.size(); ++i)
            for (size_t v = 0; v < costs[i].size(); ++v)
                if (!SameCost(costs[i][v], fresh[i][v])) ++gMismatches;
    }
    // CAM_TWIN_TIMING_TRACE=<file>: the first launch whose kernel is CAM_TWIN_TIMING_TRACE_KERNEL (any, unset) is
    // written as a Perfetto trace, costed on A3 at the L2 range's low end.
    if (const char* tracePath = EnvTracePath(); tracePath != nullptr) {
        static std::atomic<bool> traced{false};
        const char* want = std::getenv("CAM_TWIN_TIMING_TRACE_KERNEL");
        for (size_t i = 0; i < group.size(); ++i) {
            if (want != nullptr && group[i].kernel != want) continue;
            if (traced.exchange(true)) break;
            std::vector<Span> spans;
            PlaneTime plane;
            plane.landIn = &traceLand;
            Cost(group[i].kernel.c_str(), group[i].blockDim, group[i].blocks, reads[i], win(group[i]), true, false,
                 plane, &spans);
            WriteTrace(tracePath, group[i].kernel.c_str(), spans, uint32_t(group[i].blocks.size()),
                       DeviceOf(true, false));
            break;
        }
    }
    if (const char* path = EnvTimingPath(); path != nullptr && std::strcmp(path, "1") != 0) {
        std::lock_guard<std::mutex> lock(gMutex);
        // The file stays open from one group to the next (an open and a close per launch were a measurable part of
        // a small launch's costing); each group's lines are flushed as they are written.
        static FILE* f = nullptr;
        static std::string openPath;
        if (f == nullptr || openPath != path) {
            if (f != nullptr) std::fclose(f);
            f = std::fopen(path, "a");
            openPath = path;
        }
        if (f != nullptr) {
            // The table itself, once per process: what a reader of the file computes bounds with (one source).
            static bool wroteConstants = false;
            if (!wroteConstants) {
                wroteConstants = true;
                std::string line = "{\"constants\":{";
                for (int dev = 0; dev < 2; ++dev) {
                    line += std::string(dev ? "," : "") + (dev ? "\"a3\"" : "\"a2\"") + ":{";
                    for (int i = 0; i < timing::kConstantCount; ++i)
                        line += std::string(i ? "," : "") + Quote(timing::kConstants[i].name) + ":" +
                                Num(dev ? timing::kConstants[i].a3 : timing::kConstants[i].a2);
                    line += "}";
                }
                std::fprintf(f, "%s}}\n", line.c_str());
            }
            for (const auto& launchCosts : costs)
                for (const LaunchCost& c : launchCosts) std::fprintf(f, "%s\n", LaunchCostJson(c).c_str());
            std::fflush(f);
        }
    }
    std::lock_guard<std::mutex> lock(gMutex);
    for (Pending& p : group)
        for (BlockTrace& b : p.blocks)
            if (gSpare.size() < 256) gSpare.push_back(std::move(b.recs));
    for (auto& launchCosts : costs)
        for (LaunchCost& c : launchCosts) gCosts.push_back(std::move(c));
    // Kept for TakeLaunchCosts until taken; a long run with a file named never takes them, so only the newest stay.
    constexpr size_t kKept = 4096;
    while (gCosts.size() > kKept) gCosts.pop_front();
}

}  // namespace

std::string LaunchCostJson(const LaunchCost& c) {
    std::string s = "{\"kernel\":" + Quote(c.kernel) + ",\"device\":" + Quote(c.device) + ",\"l2\":" + Quote(c.l2) +
                    ",\"block_dim\":" + std::to_string(c.blockDim) + ",\"cube_blocks\":" +
                    std::to_string(c.cubeBlocks) + ",\"seconds\":" + Num(c.seconds) + ",\"busy\":{";
    for (int p = 0; p < kPipes; ++p)
        s += std::string(p ? "," : "") + Quote(PipeName(Pipe(p))) + ":" + Num(c.busy[p]);
    s += "},\"critical_busy\":{";
    for (int p = 0; p < kPipes; ++p)
        s += std::string(p ? "," : "") + Quote(PipeName(Pipe(p))) + ":" + Num(c.criticalBusy[p]);
    s += "},\"critical_core\":" + std::to_string(c.criticalCore) + ",\"stalls\":{";
    bool first = true;
    for (const auto& [k, v] : c.stalls) {
        s += std::string(first ? "" : ",") + Quote(k) + ":" + Num(v);
        first = false;
    }
    s += "},\"gm_read_bytes\":" + Num(c.gmReadBytes) + ",\"gm_write_bytes\":" + Num(c.gmWriteBytes) +
         ",\"l2_hit_fraction\":" + Num(c.l2HitFraction) + ",\"bandwidth_floor_seconds\":" +
         Num(c.bandwidthFloorSeconds) + ",\"instructions\":" + std::to_string(c.instructions) +
         ",\"peer_waits\":" + std::to_string(c.peerWaits) + ",\"link_bytes\":" + Num(c.linkBytes) + "}";
    return s;
}

void SetTimingEnabled(bool on) { gTimingOn = on; }

void SetTimingSelfCheck(bool on) { gSelfCheck = on; }

TimingSharing TakeTimingSharing() {
    return {gDerived.exchange(0), gRecosted.exchange(0), gMismatches.exchange(0)};
}

std::vector<LaunchCost> TakeLaunchCosts() {
    std::lock_guard<std::mutex> lock(gMutex);
    std::vector<LaunchCost> out(std::make_move_iterator(gCosts.begin()), std::make_move_iterator(gCosts.end()));
    gCosts.clear();
    return out;
}

double TimingConstant(const char* name, const char* device) {
    if (std::strcmp(device, "a2") != 0 && std::strcmp(device, "a3") != 0)
        throw std::invalid_argument(std::string("timing device ") + device + " is neither a2 nor a3");
    return Lookup(name, std::strcmp(device, "a3") == 0);
}

void TimeGmCopyRecord(Pipe p, const void* gm, uint64_t burstBytes, uint64_t bursts, uint64_t pitch) {
    if (!gTimingOn || bursts == 0 || burstBytes == 0 || tRecs == nullptr) return;
    const uint64_t addr = reinterpret_cast<uintptr_t>(gm);
    Rec r{Kind::GmCopy, uint8_t(p), 0, 0, burstBytes, bursts, addr, pitch};
    const bool signal = SignalCopy(burstBytes, bursts);
    if (signal && p != Pipe::MTE2) r.w = LogSignalWrite(addr, burstBytes);  // before the bytes move
    Push(r);
    if (signal && p == Pipe::MTE2) tPendingRead = int64_t(tRecs->size()) - 1;  // after they moved
}

void TimeLocalCopyRecord(Pipe p, uint64_t bytes) {
    if (!gTimingOn) return;
    Push({Kind::LocalCopy, uint8_t(p), 0, 0, bytes, 1, 0, 0});
}

void TimeVectorOperandRecord(const char* role, uint64_t bytes) {
    if (!gTimingOn || tRecs == nullptr) return;
    if (role[0] == 'd') {
        tVector = int64_t(tRecs->size());
        Push({Kind::Vector, uint8_t(Pipe::V), 0, 0, bytes, 1, 0, 0});
    } else if (tVector >= 0 && size_t(tVector) < tRecs->size()) {
        Rec& r = (*tRecs)[size_t(tVector)];
        r.a = std::max(r.a, bytes);
    }
}

void TimeMmadRecord(uint32_t m, uint32_t n, uint32_t k, uint32_t elemBits) {
    if (!gTimingOn) return;
    Push({Kind::Mmad, uint8_t(Pipe::M), 0, 0, m, n, k, elemBits});
}

void TimeScalarRecord(bool gm) {
    if (!gTimingOn || tRecs == nullptr) return;
    ResolvePendingRead();
    // A run of scalar accesses of one kind is one record counting them (most of a data-plane kernel's records), but
    // never one that reaches back before a wait's first poll (the repeats after it are dropped: TimeWaitPollRecord).
    if (tRecs->size() > tPollMark) {
        Rec& last = tRecs->back();
        if (last.kind == Kind::Scalar && last.pipe == uint8_t(gm ? 1 : 0)) {
            ++last.a;
            return;
        }
    }
    tRecs->push_back({Kind::Scalar, uint8_t(gm ? 1 : 0), 0, 0, 1, 0, 0, 0});
}

void TimeFlagSetRecord(HardEvent e, int32_t id) {
    if (!gTimingOn) return;
    Push({Kind::FlagSet, uint8_t(e), uint8_t(id & 7), 0, 0, 0, 0, 0});
}

void TimeFlagWaitRecord(HardEvent e, int32_t id) {
    if (!gTimingOn) return;
    Push({Kind::FlagWait, uint8_t(e), uint8_t(id & 7), 0, 0, 0, 0, 0});
}

void TimeBarrierAllRecord() {
    if (!gTimingOn) return;
    Push({Kind::Barrier, 0, 0, 0, 0, 0, 0, 0});
}

void TimeQueueRecord(TPosition pos, bool toConsumer, bool set, const void* queue, int buffers) {
    if (!gTimingOn) return;
    Push({set ? Kind::QueueSet : Kind::QueueWait, uint8_t(pos), uint8_t(toConsumer ? 1 : 0), 0,
          reinterpret_cast<uintptr_t>(queue), uint64_t(buffers), 0, 0});
}

void TimeSyncAllRecord() {
    if (!gTimingOn) return;
    Push({Kind::SyncAll, 0, 0, 0, 0, 0, 0, 0});
}

void TimeWaitPollRecord(uint32_t iteration) {
    if (!gTimingOn || tRecs == nullptr) return;
    ResolvePendingRead();
    if (iteration == 0) {
        tRecs->push_back({Kind::PeerWait, 0, 0, 0, 0, 0, 0, 0});
        tPollMark = tRecs->size();
    } else if (tPollMark <= tRecs->size()) {
        tRecs->resize(tPollMark);  // the repeated poll
        tVector = -1;
    }
}

void TimeBlockStartRecord() {
    if (!gTimingOn) return;
    if (!tOwned) tOwned = std::make_unique<std::vector<Rec>>();
    if (tOwned->capacity() == 0) {
        std::lock_guard<std::mutex> lock(gMutex);
        if (!gSpare.empty()) {
            tOwned->swap(gSpare.back());
            gSpare.pop_back();
        }
    }
    tOwned->clear();
    tRecs = tOwned.get();
    tVector = -1;
    tPendingRead = -1;
    tPollMark = 0;
    std::lock_guard<std::mutex> lock(gMutex);
    if (gStarted.insert(CurrentBlock().launch).second) ++gRunning;
}

void TimeCrossCoreRecord(bool set, int mode, Pipe pipe, uint16_t flagId) {
    if (!gTimingOn) return;
    Push({set ? Kind::CrossSet : Kind::CrossWait, uint8_t(pipe), uint8_t(flagId), uint8_t(mode), 0, 0, 0, 0});
}

void TimeBlockEndRecord(uint32_t blockIdx, uint8_t coreKind, int32_t group, int8_t sub) {
    if (!gTimingOn || tRecs == nullptr) return;
    ResolvePendingRead();
    BlockTrace b;
    b.idx = blockIdx;
    b.coreKind = coreKind;
    b.group = group;
    b.sub = sub;
    b.recs.swap(*tRecs);
    tRecs = nullptr;
    const void* launch = CurrentBlock().launch;
    std::lock_guard<std::mutex> lock(gMutex);
    gLaunches[launch].push_back(std::move(b));
}

void TimeLaunchEndRecord(const void* launch, const char* kernel, uint32_t blockDim, const LaunchWindows* windows) {
    if (!gTimingOn) return;
    std::vector<Pending> group;
    {
        std::lock_guard<std::mutex> lock(gMutex);
        auto it = gLaunches.find(launch);
        if (it != gLaunches.end()) {
            Pending p;
            p.kernel = kernel;
            p.blockDim = blockDim;
            p.blocks.swap(it->second);
            gLaunches.erase(it);
            if (windows != nullptr) {
                p.hasWindows = true;
                p.windows.windows = windows->windows;
                p.windows.own = windows->own;
            }
            gGroup.push_back(std::move(p));
        }
        if (gStarted.erase(launch) != 0 && gRunning > 0) --gRunning;
        if (gRunning != 0) return;  // a launch of the group still runs: its writes may be what these waited for
        group.swap(gGroup);
    }
    CostGroup(group);
}

}  // namespace cam::twin
