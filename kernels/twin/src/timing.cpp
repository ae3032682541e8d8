// The timing model (docs/twin.md, "Timing model"): each block records what it issues; each launch's record is
// costed at its end for every device of timing_constants.h.
#include "twin/timing.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
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
                            SyncAll, PeerWait };

struct Rec {
    Kind kind;
    uint8_t pipe;   // GmCopy / LocalCopy: the pipe; Flag*: the event; Queue*: the position; Scalar: 1 = GM
    uint8_t flag;   // Queue*: toConsumer; Flag*: the event id
    uint8_t pad = 0;
    uint64_t a;     // bytes (per burst for GmCopy), m for Mmad, buffer for Queue*
    uint64_t b;     // bursts, n
    uint64_t c;     // GM address, k
    uint64_t d;     // GM pitch
    uint64_t w = 0; // GmCopy of a signal word: the write's token (MTE3 / FIX) or the token of the write a read saw
};

struct BlockTrace {
    uint32_t idx = 0;
    uint8_t coreKind = 0;
    std::vector<Rec> recs;
};

thread_local std::vector<Rec>* tRecs = nullptr;
thread_local std::unique_ptr<std::vector<Rec>> tOwned;
thread_local int64_t tVector = -1;  // index of the vector instruction whose operands are being seen
thread_local size_t tPollMark = 0;   // record count after a wait's first poll
thread_local int64_t tPendingRead = -1;  // a signal-word read whose observed write is looked up after it ran

std::mutex gMutex;
std::unordered_map<const void*, std::vector<BlockTrace>> gLaunches;  // blocks ended, by launch
std::vector<LaunchCost> gCosts;
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
        scalarUb, scalarGm, hbm, l2Bytes, l2Bw, sync, launch, link, pollLat;
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
    return d;
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

// The launch's MTE2 reads: their bytes and their footprint, the bytes of its distinct copies (same GM start, burst
// bytes, bursts and pitch: a GEMM re-reads its A and B tiles exactly). Copies of the same bytes in another shape
// count again, so the footprint errs large and the hit fraction small. Computed once per launch.
struct Reads {
    double total = 0;
    double footprint = 0;
};

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

Reads LaunchReads(const std::vector<BlockTrace>& blocks) {
    std::unordered_set<CopyKey, CopyKeyHash> seen;
    Reads out;
    for (const BlockTrace& b : blocks)
        for (const Rec& r : b.recs) {
            if (r.kind != Kind::GmCopy || r.pipe != uint8_t(Pipe::MTE2)) continue;
            const double bytes = double(r.a) * double(r.b);
            out.total += bytes;
            if (seen.insert({r.c, r.a, r.b, r.d}).second) out.footprint += bytes;
        }
    return out;
}

// The L2 policy: every launch starts with a cold L2; the first read of a copy misses; a re-read hits when the
// launch's read footprint fits in L2, else with probability capacity / footprint.
double L2HitFraction(const Reads& r, double l2Bytes) {
    if (r.total <= 0) return 0;
    const double reread = std::max(0.0, r.total - r.footprint);
    const double keep = r.footprint <= l2Bytes ? 1.0 : l2Bytes / r.footprint;
    return reread * keep / r.total;
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

struct Core {
    uint32_t idx = 0;
    std::vector<Span>* spans = nullptr;  // non-null: record every instruction's span
    double tS = 0;
    double t[kPipes] = {};
    double busy[kPipes] = {};
    std::unordered_map<uint32_t, double> flags;
    struct QueueEvents {
        std::vector<double> sets;  // when each set (EnQue / FreeTensor) fired, in order
        uint64_t waits = 0;        // waits (DeQue / AllocTensor) seen
    };
    std::unordered_map<uint64_t, QueueEvents> queues;
    size_t pos = 0;
    bool done = false;
    double Now() const {
        double m = tS;
        for (double x : t) m = std::max(m, x);
        return m;
    }
};

// The stall's name is built only when the wait delays the pipe (this runs once per flag and queue event).
void Wait(Core& c, Pipe p, double at, const char* what, const char* arg, LaunchCost& out, const Device& d) {
    double& cur = p == Pipe::S ? c.tS : c.t[int(p)];
    const double ready = p == Pipe::S ? c.tS : std::max(cur, c.tS);
    if (at > ready) out.stalls[std::string(what) + arg + ">"] += (at - ready) / d.clock;
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
// peer link.
void RunSegment(Core& c, const BlockTrace& b, const Device& d, LaunchCost& out, const LaunchWindows* w, double* rd,
                double* wr, double* link, PlaneTime& plane) {
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
                        out.stalls["GM word landing"] += (it->second + d.pollLat - end) / d.clock;
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
                    // Writes into a peer go through the link queues (RunLinks); reads out of one count to the floor.
                    if (peer != 0 && p != Pipe::MTE2)
                        plane.writes.push_back({start, end, bytes, plane.launch, peer, r.w});
                    else if (p != Pipe::MTE2 && r.w != 0) plane.landOut[r.w] = end;
                }
                break;
            }
            case Kind::Scalar: {
                const double cyc = r.pipe ? d.scalarGm : d.scalarUb;
                c.tS += cyc;
                c.busy[int(Pipe::S)] += cyc;
                break;
            }
            case Kind::FlagSet: case Kind::FlagWait: {
                Pipe src, dst;
                if (!HardEventPipes(HardEvent(r.pipe), &src, &dst)) break;
                const uint32_t key = uint32_t(r.pipe) * 8u + r.flag;
                if (r.kind == Kind::FlagSet) {
                    c.flags[key] = src == Pipe::S ? c.tS : std::max(c.t[int(src)], c.tS);
                } else {
                    auto it = c.flags.find(key);
                    if (it != c.flags.end()) Wait(c, dst, it->second, "WaitFlag<", EventName(r.pipe), out, d);
                }
                break;
            }
            case Kind::QueueSet: case Kind::QueueWait: {
                Pipe producer, consumer;
                if (!QueuePositionPipes(TPosition(r.pipe), &producer, &consumer)) break;
                const bool toConsumer = r.flag != 0;
                const uint64_t key = r.a * 2 + (toConsumer ? 1 : 0);
                Core::QueueEvents& q = c.queues[key];
                if (r.kind == Kind::QueueSet) {
                    const Pipe from = toConsumer ? producer : consumer;
                    q.sets.push_back(from == Pipe::S ? c.tS : std::max(c.t[int(from)], c.tS));
                } else {
                    // DeQue j pairs with EnQue j; AllocTensor j with FreeTensor j - buffers (none before that).
                    const uint64_t j = q.waits++;
                    const uint64_t lag = toConsumer ? 0 : r.b;
                    if (j < lag || j - lag >= q.sets.size()) break;
                    Wait(c, toConsumer ? consumer : producer, q.sets[j - lag], toConsumer ? "DeQue<" : "AllocTensor<",
                         PositionName(r.pipe), out, d);
                }
                break;
            }
            case Kind::Barrier: {
                const double now = c.Now();
                if (now > c.tS) out.stalls["PipeBarrier<PIPE_ALL>"] += (now - c.tS) / d.clock;
                c.tS = now;
                for (double& x : c.t) x = now;
                break;
            }
            case Kind::SyncAll: return;
            case Kind::PeerWait: ++out.peerWaits; break;
        }
    }
    c.done = true;
}

LaunchCost Cost(const char* kernel, uint32_t blockDim, std::vector<BlockTrace>& blocks, const Reads& reads,
               const LaunchWindows* w, bool a3, bool l2hi, PlaneTime& plane, std::vector<Span>* spans = nullptr) {
    const Device d = MakeDevice(a3, l2hi);
    LaunchCost out;
    out.kernel = kernel;
    out.device = a3 ? "a3" : "a2";
    out.l2 = l2hi ? "hi" : "lo";
    out.blockDim = blockDim;
    std::sort(blocks.begin(), blocks.end(), [](const BlockTrace& x, const BlockTrace& y) { return x.idx < y.idx; });
    out.l2HitFraction = L2HitFraction(reads, d.l2Bytes);
    std::vector<Core> cores(blocks.size());
    for (size_t i = 0; i < cores.size(); ++i) {
        cores[i].idx = blocks[i].idx;
        cores[i].spans = spans;
    }
    double segStart = 0;  // cycles
    bool more = true;
    while (more) {
        double rd = 0, wr = 0, link = 0, arrive = segStart;
        more = false;
        for (size_t i = 0; i < blocks.size(); ++i) {
            if (cores[i].done) continue;
            RunSegment(cores[i], blocks[i], d, out, w, &rd, &wr, &link, plane);
            arrive = std::max(arrive, cores[i].Now());
            if (!cores[i].done) more = true;
        }
        out.gmReadBytes += rd;
        out.gmWriteBytes += wr;
        out.linkBytes += link;
        // The die's memory: misses and writes share HBM, hits share L2 (a floor on the segment, not a per-core
        // slowdown: stated in docs/twin.md).
        const double h = out.l2HitFraction;
        // The peer link is a resource of its own: the rank's copies to / from peers share link_bytes_per_s_rank.
        const double floorS = std::max((rd * (1 - h) + wr) / d.hbm + rd * h / d.l2Bw, link / d.link);
        out.bandwidthFloorSeconds += floorS;
        double end = std::max(arrive, segStart + floorS * d.clock);
        if (more) end += d.sync;
        for (Core& c : cores) {
            if (more && c.Now() < end - d.sync) out.stalls["SyncAll"] += (end - d.sync - c.Now()) / d.clock;
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
        const char* name = int(s.kind) < 5 ? kinds[int(s.kind)] : "?";
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

// Costs every launch of a group for each device and end of the L2 range, in one virtual time (PlaneTime), and
// files the costs (and the trace, the first time its kernel is seen).
void CostGroup(std::vector<Pending>& group) {
    if (group.empty()) return;
    std::vector<Reads> reads;
    std::unordered_set<uint64_t> readTokens;  // the signal writes whose values the group's reads saw
    for (Pending& p : group) {
        reads.push_back(LaunchReads(p.blocks));
        for (const BlockTrace& b : p.blocks)
            for (const Rec& r : b.recs)
                if (r.kind == Kind::GmCopy && r.pipe == uint8_t(Pipe::MTE2) && r.w != 0) readTokens.insert(r.w);
    }
    auto win = [](const Pending& p) { return p.hasWindows ? &p.windows : nullptr; };
    std::vector<std::vector<LaunchCost>> costs(group.size());
    std::unordered_map<uint64_t, double> traceLand;  // A3, L2 low end: the trace's landing times
    for (bool a3 : {false, true})
        for (bool hi : {false, true}) {
            std::unordered_map<uint64_t, double> land;
            std::vector<LaunchCost> pass(group.size());
            for (int k = 0; k < kMaxPasses; ++k) {
                PlaneTime plane;
                plane.landIn = &land;
                for (size_t i = 0; i < group.size(); ++i) {
                    plane.launch = i;
                    pass[i] = Cost(group[i].kernel.c_str(), group[i].blockDim, group[i].blocks, reads[i],
                                   win(group[i]), a3, hi, plane);
                }
                // A launch ends when its writes into peers have landed.
                const Device d = MakeDevice(a3, hi);
                const std::vector<double> landed = RunLinks(plane, group.size(), d.link / d.clock);
                for (size_t i = 0; i < group.size(); ++i)
                    pass[i].seconds = std::max(pass[i].seconds, landed[i] / d.clock + d.launch);
                const bool settled = SameLandings(readTokens, land, plane.landOut);
                land.swap(plane.landOut);
                if (settled) break;
            }
            for (size_t i = 0; i < group.size(); ++i) costs[i].push_back(std::move(pass[i]));
            if (a3 && !hi) traceLand = land;
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
                       MakeDevice(true, false));
            break;
        }
    }
    if (const char* path = EnvTimingPath(); path != nullptr && std::strcmp(path, "1") != 0) {
        std::lock_guard<std::mutex> lock(gMutex);
        if (FILE* f = std::fopen(path, "a")) {
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
            std::fclose(f);
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
    if (gCosts.size() > kKept) gCosts.erase(gCosts.begin(), gCosts.end() - kKept);
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

std::vector<LaunchCost> TakeLaunchCosts() {
    std::lock_guard<std::mutex> lock(gMutex);
    std::vector<LaunchCost> out;
    out.swap(gCosts);
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
    if (!gTimingOn) return;
    Push({Kind::Scalar, uint8_t(gm ? 1 : 0), 0, 0, 0, 0, 0, 0});
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
    std::lock_guard<std::mutex> lock(gMutex);
    if (gStarted.insert(CurrentBlock().launch).second) ++gRunning;
}

void TimeBlockEndRecord(uint32_t blockIdx, uint8_t coreKind) {
    if (!gTimingOn || tRecs == nullptr) return;
    ResolvePendingRead();
    BlockTrace b;
    b.idx = blockIdx;
    b.coreKind = coreKind;
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
