// Device code shared by the four data-plane kernels (docs/protocol.md): window access, signal words with the
// memory-ordering rules of §10, the status/abort record of §9, the block-0 decision hand-off, and a GM->UB->GM
// byte mover. Every offset comes from common/window_layout.h.
#pragma once

#include <cstdint>

#include "kernel_operator.h"

#include "common/dataplane_args.h"
#include "common/spin.h"
#include "common/ub_math.h"
#include "common/window_layout.h"

namespace cam::kernels::dp {

__aicore__ inline AscendC::GlobalTensor<int64_t> WordsAt(GM_ADDR base, int64_t byteOff, int64_t count) {
    AscendC::GlobalTensor<int64_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(base + byteOff), count);
    return g;
}

template <typename T>
__aicore__ inline AscendC::GlobalTensor<T> TensorAt(GM_ADDR base, int64_t byteOff, int64_t count) {
    AscendC::GlobalTensor<T> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(base + byteOff), count);
    return g;
}

// A state word of this rank (or a record a peer or block 0 wrote): invalidate the line, then load (so a stale
// scalar-cache copy is never re-read); store, then clean the line (so the value leaves this core's scalar cache).
// The twin models that cache (docs/twin.md), so a missing dcci fails there too. Signals to or from peers are not
// scalar: see SignalPort.
__aicore__ inline int64_t LoadWord(GM_ADDR base, int64_t byteOff) {
    AscendC::GlobalTensor<int64_t> g = WordsAt(base, byteOff, 1);
    AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE, AscendC::DcciDst::CACHELINE_OUT>(g);
    return g.GetValue(0);
}

__aicore__ inline void StoreWord(GM_ADDR base, int64_t byteOff, int64_t value) {
    AscendC::GlobalTensor<int64_t> g = WordsAt(base, byteOff, 1);
    g.SetValue(0, value);
    AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE, AscendC::DcciDst::CACHELINE_OUT>(g);
    // The dcci does not wait for its write-back: a later clean's could land first (docs/twin.md, "a clean and dsb").
    AscendC::DataSyncBarrier<AscendC::MemDsbT::ALL>();
}

// Word `index` of the int64 array that starts at base + arrayOff, with the same cache maintenance.
__aicore__ inline int64_t LoadWordAt(GM_ADDR base, int64_t arrayOff, int64_t index) {
    return LoadWord(base, arrayOff + int64_t(sizeof(int64_t)) * index);
}
__aicore__ inline void StoreWordAt(GM_ADDR base, int64_t arrayOff, int64_t index, int64_t value) {
    StoreWord(base, arrayOff + int64_t(sizeof(int64_t)) * index, value);
}
// Word `index` of an int64 record that starts at base (work item, region header).
__aicore__ inline int64_t LoadWordAt(GM_ADDR base, int64_t index) { return LoadWordAt(base, 0, index); }
__aicore__ inline void StoreWordAt(GM_ADDR base, int64_t index, int64_t value) { StoreWordAt(base, 0, index, value); }

// What an error record says about the round an op was working on; a field not known yet stays kUnknown.
inline constexpr int64_t kUnknown = -1;
inline constexpr int64_t kNoPeer = -1;

struct Round {
    int64_t op = op::kNone;
    int64_t replica = kUnknown;
    int64_t layer = kUnknown;
    int64_t seq = 0;

    __aicore__ inline Round Replica(int64_t v) const {
        Round r = *this;
        r.replica = v;
        return r;
    }
    __aicore__ inline Round Layer(int64_t v) const {
        Round r = *this;
        r.layer = v;
        return r;
    }
    __aicore__ inline Round Seq(int64_t v) const {
        Round r = *this;
        r.seq = v;
        return r;
    }
};

// The status arguments a detail names beyond the record (window_layout.h kStatusArgsOff): none by default.
struct StatusArgs {
    int64_t kind = kStatusArgsNone;
    int64_t a = 0, b = 0;
};
// Two placement epochs (kStatusArgsEpochs): the round's (or the table's first read) and the weights' (or its second).
__aicore__ inline StatusArgs Epochs(int64_t a, int64_t b) { return StatusArgs{kStatusArgsEpochs, a, b}; }

// Signal words that cross ranks (ready, done, abort) travel by MTE through one 32-byte UB block, as production
// kernels publish them: never a scalar store into a peer's window (its clean would write back the whole 64-byte
// line from this core's cache), and a poll is an MTE2 read, so no scalar cache line of a peer-written word exists.
class SignalPort {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe) {
        pipe.InitBuffer(buf_, kSignalUbBytes);
        word_ = buf_.Get<int64_t>();
    }

    // window[off] = value by MTE3. Callers have drained their payload writes before (PIPE_ALL, then SyncAll).
    __aicore__ inline void Send(GM_ADDR window, int64_t byteOff, int64_t value) const {
        word_.SetValue(0, value);
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID0);
        AscendC::DataCopyPad(WordsAt(window, byteOff, 1), word_, {1, 8, 0, 0, 0});
        // The next Poll's MTE2 copy lands in this same UB word: MTE3 must have read it first. A PIPE_MTE3 barrier
        // orders MTE3 against itself only, and the compiler's automatic sync covers the scalar unit, not
        // MTE3 -> MTE2 (docs/twin.md, "Pipe ordering"), so without this flag the abort value can be overwritten
        // before it leaves and the peer never sees it.
        AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID0);
    }

    // window[off] by MTE2.
    __aicore__ inline int64_t Poll(GM_ADDR window, int64_t byteOff) const {
        AscendC::DataCopyPad(word_, WordsAt(window, byteOff, 1), {1, 8, 0, 0, 0}, {false, 0, 0, 0});
        AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(EVENT_ID0);
        return word_.GetValue(0);
    }

private:
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
    AscendC::LocalTensor<int64_t> word_;
};

// Makes scalar stores to a scratch area visible to MTE reads of it (and to other blocks). The write-back of a
// clean runs beside the MTEs: nothing but a full pipe barrier orders it before a copy that reads or writes the
// same bytes (production kernels put PipeBarrier<PIPE_ALL> after such a clean; docs/twin.md, "Pipe ordering").
__aicore__ inline void FlushScalarStores(GM_ADDR base) {
    AscendC::GlobalTensor<int64_t> g = WordsAt(base, 0, 1);
    AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::ENTIRE_DATA_CACHE, AscendC::DcciDst::CACHELINE_OUT>(g);
    AscendC::DataSyncBarrier<AscendC::MemDsbT::ALL>();  // the write-back has landed before anything this block publishes next
    AscendC::PipeBarrier<PIPE_ALL>();
}

// The windows of a data plane as this rank sees them: peers[r] is the base address of rank r's window.
class Plane {
public:
    __aicore__ inline void Init(GM_ADDR peers, const CommArgs& args, AscendC::TPipe& pipe) {
        args_ = args;
        const int64_t world = layout::world_size(args.topo);
        peers_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(peers), world);
        // The host writes the table once per Comm, and a later Comm's table may sit where an earlier one's was; the
        // scalar cache is not emptied between launches, so a line of it may still hold the earlier Comm's
        // addresses. Every line is invalidated before the first read (Window reads it with GetValue).
        const uintptr_t first = reinterpret_cast<uintptr_t>(peers) & ~uintptr_t(kLine - 1);
        const uintptr_t end = reinterpret_cast<uintptr_t>(peers) + uintptr_t(world) * sizeof(int64_t);
        for (uintptr_t line = first; line < end; line += kLine) {
            AscendC::GlobalTensor<int64_t> g = WordsAt(reinterpret_cast<GM_ADDR>(line), 0, 1);
            AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                              AscendC::DcciDst::CACHELINE_OUT>(g);
        }
        signals_.Init(pipe);
    }

    // Cross-rank signals (ready, done, abort): see SignalPort.
    __aicore__ inline const SignalPort& Signals() const { return signals_; }

    __aicore__ inline const CamTopology& Topo() const { return args_.topo; }
    __aicore__ inline const CommArgs& Args() const { return args_; }
    __aicore__ inline int64_t Rank() const { return args_.rank; }
    __aicore__ inline GM_ADDR Window(int64_t rank) const {
        return reinterpret_cast<GM_ADDR>(static_cast<uintptr_t>(peers_.GetValue(rank)));
    }
    __aicore__ inline GM_ADDR Own() const { return Window(args_.rank); }

    __aicore__ inline int64_t AbortWord() const { return signals_.Poll(Own(), kAbortOff); }

    // Records the first error of this rank (protocol §9) and returns false, so a control step can
    // `return plane_.Refuse(...)`. A refusal is found before the op wrote or waited: the plane stays usable and the
    // host clears the record after reporting it.
    __aicore__ inline bool Refuse(int64_t code, int64_t peer, const Round& round, int64_t detail,
                                  const StatusArgs& args = StatusArgs{}) const {
        Record(code, peer, round, detail, args);
        return false;
    }

    // A fault: recorded as above, and every rank's abort word is raised so every waiter on every rank ends promptly.
    __aicore__ inline bool Fail(int64_t code, int64_t peer, const Round& round, int64_t detail,
                                const StatusArgs& args = StatusArgs{}) const {
        Record(code, peer, round, detail, args);
        const int64_t world = layout::world_size(args_.topo);
        for (int64_t r = 0; r < world; ++r) {
            GM_ADDR w = Window(r);
            if (signals_.Poll(w, kAbortOff) == 0) signals_.Send(w, kAbortOff, 1 + args_.rank);
        }
        return false;
    }

    // Entry check of every op: a raised abort word or an unreported status means the op must not touch any window.
    __aicore__ inline bool EntryOk(int64_t op) const {
        const int64_t abort = AbortWord();
        if (abort != 0) return Refuse(status::kAborted, abort - 1, Round{op}, abort);
        return LoadWordAt(Own(), kStatusOff, kStatusCode) == status::kOk;
    }

private:
    __aicore__ inline void Record(int64_t code, int64_t peer, const Round& round, int64_t detail,
                                  const StatusArgs& args) const {
        GM_ADDR own = Own();
        if (LoadWordAt(own, kStatusOff, kStatusCode) != status::kOk) return;  // the first error stays
        StoreWordAt(own, kStatusArgsOff, kStatusArgKind, args.kind);
        StoreWordAt(own, kStatusArgsOff, kStatusArgA, args.a);
        StoreWordAt(own, kStatusArgsOff, kStatusArgB, args.b);
        StoreWordAt(own, kStatusOff, kStatusOp, round.op);
        StoreWordAt(own, kStatusOff, kStatusRank, args_.rank);
        StoreWordAt(own, kStatusOff, kStatusPeer, peer);
        StoreWordAt(own, kStatusOff, kStatusReplica, round.replica);
        StoreWordAt(own, kStatusOff, kStatusLayer, round.layer);
        StoreWordAt(own, kStatusOff, kStatusSeq, round.seq);
        StoreWordAt(own, kStatusOff, kStatusDetail, detail);
        StoreWordAt(own, kStatusOff, kStatusCode, code);  // last: a reader that sees the code sees the rest
    }

    CommArgs args_{};
    AscendC::GlobalTensor<int64_t> peers_;
    SignalPort signals_;
};

// One poll of a bounded wait, and how the wait ended.
enum class PollResult : uint8_t { kWait, kDone, kStop };
enum class WaitEnd : uint8_t { kDone, kStop, kAborted, kExpired };
inline constexpr int64_t kNoDeadline = INT64_MAX;  // the poll bounds the wait itself (dispatch_recv's idle bound)

// The data plane's one bounded wait. `poll()` reads what the wait is for (signal words in [watched, watched +
// watchedBytes): every line it polls) and answers kDone, kStop (it has recorded why) or kWait. The wait also ends
// when this rank's abort word is raised (recorded as a refusal of `round`, kAborted) or when the system cycle passes
// `deadline` (kExpired: the caller records the timeout, naming what it still missed). Between polls it backs off on
// the watched lines: a no-op on Ascend, on the twin the block parks until one of them is written.
template <typename Poll>
__aicore__ inline WaitEnd BoundedWait(const Plane& plane, const Round& round, GM_ADDR watched, int64_t watchedBytes,
                                      int64_t deadline, Poll& poll) {
    for (uint32_t i = 0;; ++i) {
        const int64_t abort = plane.AbortWord();
        if (abort != 0) {
            plane.Refuse(status::kAborted, abort - 1, round, abort);
            return WaitEnd::kAborted;
        }
        const PollResult r = poll();
        if (r == PollResult::kDone) return WaitEnd::kDone;
        if (r == PollResult::kStop) return WaitEnd::kStop;
        if (AscendC::GetSystemCycle() > deadline) return WaitEnd::kExpired;
        WaitPause(watched, static_cast<uint64_t>(watchedBytes), i);
    }
}

// Block 0 runs the waits and checks; the other blocks learn the outcome through a workspace word instead of
// sitting in SyncAll for as long as a wait may last.
class Decision {
public:
    __aicore__ inline void Init(GM_ADDR workspace) { ws_ = workspace; }

    // The whole exchange: every block clears the word, block 0 runs leader() (which decides go/stop and does what
    // must precede the others' reads) and publishes, the other blocks wait for it.
    template <typename Leader>
    __aicore__ inline bool Decide(Leader&& leader, int64_t followerCycles) {
        Clear();
        AscendC::SyncAll();  // the word is clear before anyone can read it
        return Settle(leader, followerCycles);
    }

    // The same exchange in two steps, for an op whose blocks pass a SyncAll of their own between them: Clear before
    // that SyncAll, Settle after it.
    __aicore__ inline void Clear() {
        if (AscendC::GetBlockIdx() == 0) StoreWord(ws_, 0, kDecisionUndecided);
    }
    template <typename Leader>
    __aicore__ inline bool Settle(Leader&& leader, int64_t followerCycles) {
        if (AscendC::GetBlockIdx() != 0) return Await(followerCycles);
        const bool go = leader();
        Publish(go);
        return go;
    }

private:
    __aicore__ inline void Publish(bool go) { StoreWord(ws_, 0, go ? kDecisionGo : kDecisionStop); }

    // Non-zero blocks: true to proceed. Block 0 always decides within followerCycles, so expiry means a broken
    // kernel; the block then leaves, and a later SyncAll of block 0 reports it loudly on the twin. The abort
    // word is deliberately not consulted here: block 0 watches it and says stop, and the blocks must never
    // disagree on go/stop (a block that left early would strand the others in the closing SyncAll).
    __aicore__ inline bool Await(int64_t followerCycles) const {
        const int64_t deadline = AscendC::GetSystemCycle() + followerCycles;
        for (uint32_t i = 0;; ++i) {
            const int64_t d = LoadWord(ws_, 0);
            if (d == kDecisionGo) {
                // Block 0 built tables with scalar stores; drop any line this core cached from an earlier launch
                // that used the same workspace before reading them.
                FlushScalarStores(ws_);
                return true;
            }
            if (d != kDecisionUndecided) return false;
            if (AscendC::GetSystemCycle() > deadline) return false;
            WaitPause(ws_, i);
        }
    }

    GM_ADDR ws_ = nullptr;
};

// [lo, hi) of n items for the calling block.
__aicore__ inline void BlockShare(int64_t n, int64_t* lo, int64_t* hi) {
    const int64_t b = AscendC::GetBlockIdx(), nb = AscendC::GetBlockNum();
    *lo = n * b / nb;
    *hi = n * (b + 1) / nb;
}

// Moves bytes GM -> UB -> GM in chunks through a double-buffered queue (MTE2 in, MTE3 out).
class ByteMover {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t chunkBytes) {
        chunk_ = chunkBytes;
        pipe.InitBuffer(que_, 2, chunkBytes);
    }

    __aicore__ inline void Copy(GM_ADDR dst, GM_ADDR src, uint64_t bytes) {
        for (uint64_t done = 0; done < bytes;) {
            const uint32_t n = static_cast<uint32_t>(bytes - done < chunk_ ? bytes - done : chunk_);
            AscendC::GlobalTensor<uint8_t> s = TensorAt<uint8_t>(src, done, n);
            AscendC::GlobalTensor<uint8_t> d = TensorAt<uint8_t>(dst, done, n);
            AscendC::LocalTensor<uint8_t> buf = que_.AllocTensor<uint8_t>();
            AscendC::DataCopyPad(buf, s, {1, n, 0, 0, 0}, {false, 0, 0, 0});
            que_.EnQue(buf);
            buf = que_.DeQue<uint8_t>();
            // A VECIN hand-off orders MTE2 before V, not before MTE3.
            AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE3>(0);
            AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE3>(0);
            AscendC::DataCopyPad(d, buf, {1, n, 0, 0, 0});
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(0);
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(0);
            que_.FreeTensor(buf);
            done += n;
        }
    }

private:
    uint32_t chunk_ = 0;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> que_;
};

// Two UB buffers taken in turn by an MTE2 fill and the MTE3 copies out of it: a buffer is refilled only after
// MTE3 read it, each buffer on its own event (EVENT_ID4 / EVENT_ID5) so the other buffer's writes run on while one
// waits. CopyStream and RowBatch take their turns through it.
class BufferTurns {
public:
    // The buffer the next fill goes to.
    __aicore__ inline int Current() const { return cur_; }

    // Before MTE2 fills the current buffer: MTE3 has finished reading it.
    __aicore__ inline void WaitCurrent() { Wait(cur_); }

    // After the MTE3 copies out of the current buffer are issued: it is handed back, the other one is current.
    __aicore__ inline void HandBack() {
        if (cur_ == 0) {
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID4);
        } else {
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID5);
        }
        pending_[cur_] = true;
        cur_ ^= 1;
    }

    // Waits for the MTE3 reads of both buffers still in flight.
    __aicore__ inline void Drain() {
        for (int b = 0; b < 2; ++b) Wait(b);
    }

private:
    __aicore__ inline void Wait(int b) {
        if (!pending_[b]) return;
        if (b == 0) {
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID4);
        } else {
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID5);
        }
        pending_[b] = false;
    }

    int cur_ = 0;
    bool pending_[2] = {false, false};  // an MTE3 read of that buffer not yet waited for
};

// Copies GM -> UB -> GM through two buffers of a chunk taken in turn: a copy's MTE3 write runs while the next
// copy's MTE2 read fills the other buffer (a ByteMover waits for each write before its next read). Drain() before
// the buffers' last writes are waited on by anything else (the launch's end, a SyncAll); a seal after the copies
// still needs its own AfterData (Drain orders the buffers' reuse, not the writes' completion before a seal's).
class CopyStream {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t chunkBytes) {
        chunk_ = chunkBytes;
        pipe.InitBuffer(buf_, 2 * chunkBytes);
        ub_ = buf_.Get<uint8_t>();
    }

    __aicore__ inline void Copy(GM_ADDR dst, GM_ADDR src, uint64_t bytes) {
        for (uint64_t done = 0; done < bytes;) {
            const uint32_t n = static_cast<uint32_t>(bytes - done < chunk_ ? bytes - done : chunk_);
            turns_.WaitCurrent();
            AscendC::LocalTensor<uint8_t> b = ub_[static_cast<uint32_t>(turns_.Current() * chunk_)];
            AscendC::DataCopyPad(b, TensorAt<uint8_t>(src, done, n), {1, n, 0, 0, 0}, {false, 0, 0, 0});
            AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE3>(EVENT_ID2);
            AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE3>(EVENT_ID2);
            AscendC::DataCopyPad(TensorAt<uint8_t>(dst, done, n), b, {1, n, 0, 0, 0});
            turns_.HandBack();
            done += n;
        }
    }

    // Waits for the MTE3 reads of both buffers still in flight.
    __aicore__ inline void Drain() { turns_.Drain(); }

private:
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
    AscendC::LocalTensor<uint8_t> ub_;
    uint32_t chunk_ = 0;
    BufferTurns turns_;
};

// Moves rows between scattered GM rows and consecutive GM rows through two UB buffers taken in turn, as many rows
// per pass as fit one (each row at a 32-byte aligned UB offset): a pass's MTE3 writes run while the next pass's
// MTE2 reads fill the other buffer. A gather (scattered -> consecutive) costs one MTE2 copy per row and one MTE3 copy
// per pass; a scatter (consecutive -> scattered) one MTE2 copy per pass and one MTE3 copy per row; a ByteMover costs
// two copies per row. Rows must be offered in order; a row that does not continue the pass's consecutive side ends
// the pass first. Drain() after the last pass: nothing of the buffers is in flight after it.
class RowBatch {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t bufBytes) {
        halfBytes_ = bufBytes / 2 / kUbBlockBytes * kUbBlockBytes;
        pipe.InitBuffer(buf_, 2 * halfBytes_);
        ub_ = buf_.Get<uint8_t>();
    }

    // Rows of rowBytes from now on. False when one row does not fit a buffer (move it with a ByteMover).
    __aicore__ inline bool Start(int64_t rowBytes) {
        rowBytes_ = rowBytes;
        stride_ = static_cast<int64_t>(AlignUp(static_cast<uint64_t>(rowBytes), kUbBlockBytes));
        cap_ = stride_ > 0 ? int64_t(halfBytes_) / stride_ : 0;
        n_ = 0;
        return cap_ > 0 && rowBytes > 0;
    }

    // The row at src goes to dst; consecutive calls give consecutive dst rows.
    __aicore__ inline void Gather(GM_ADDR dst, GM_ADDR src) {
        if (n_ > 0 && (dst != base_ + n_ * rowBytes_ || n_ == cap_)) FlushGather();
        if (n_ == 0) Open(dst);
        AscendC::DataCopyPad(Half()[static_cast<uint32_t>(n_ * stride_)], TensorAt<uint8_t>(src, 0, rowBytes_),
                             {1, static_cast<uint32_t>(rowBytes_), 0, 0, 0}, {false, 0, 0, 0});
        ++n_;
    }

    __aicore__ inline void FlushGather() {
        if (n_ == 0) return;
        ToMte3();
        AscendC::DataCopyPad(TensorAt<uint8_t>(base_, 0, n_ * rowBytes_), Half(),
                             {static_cast<uint16_t>(n_), static_cast<uint32_t>(rowBytes_), 0, 0, 0});
        Close();
    }

    // The row at src goes to dst; consecutive calls give consecutive src rows.
    __aicore__ inline void Scatter(GM_ADDR dst, GM_ADDR src) {
        if (n_ > 0 && (src != base_ + n_ * rowBytes_ || n_ == cap_ || n_ == kMaxScatter)) FlushScatter();
        if (n_ == 0) Open(src);
        dst_[n_++] = dst;
    }

    // One MTE2 copy of the pass's consecutive source rows, then an MTE3 copy per destination row.
    __aicore__ inline void FlushScatter() {
        if (n_ == 0) return;
        AscendC::DataCopyPad(Half(), TensorAt<uint8_t>(base_, 0, n_ * rowBytes_),
                             {static_cast<uint16_t>(n_), static_cast<uint32_t>(rowBytes_), 0, 0, 0},
                             {false, 0, 0, 0});
        ToMte3();
        for (int64_t i = 0; i < n_; ++i)
            AscendC::DataCopyPad(TensorAt<uint8_t>(dst_[i], 0, rowBytes_), Half()[static_cast<uint32_t>(i * stride_)],
                                 {1, static_cast<uint32_t>(rowBytes_), 0, 0, 0});
        Close();
    }

    // Waits for the MTE3 reads of both buffers still in flight.
    __aicore__ inline void Drain() { turns_.Drain(); }

private:
    static constexpr int64_t kMaxScatter = 64;  // destinations remembered per scatter pass

    __aicore__ inline AscendC::LocalTensor<uint8_t> Half() const {
        return ub_[static_cast<uint32_t>(turns_.Current() * halfBytes_)];
    }
    __aicore__ inline void Open(GM_ADDR base) {
        turns_.WaitCurrent();
        base_ = base;
    }
    __aicore__ inline void ToMte3() {
        AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE3>(EVENT_ID2);
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE3>(EVENT_ID2);
    }
    __aicore__ inline void Close() {
        turns_.HandBack();
        n_ = 0;
    }

    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
    AscendC::LocalTensor<uint8_t> ub_;
    GM_ADDR base_ = nullptr;
    GM_ADDR dst_[kMaxScatter] = {};
    int64_t rowBytes_ = 0, stride_ = 0, cap_ = 0, n_ = 0;
    uint32_t halfBytes_ = 0;
    BufferTurns turns_;  // its current buffer is the one the open pass fills
};

// Reads of a GM table a peer wrote (index entries, scales) through a UB window filled by MTE2: one copy per
// kTableWindowElems entries instead of a scalar GM read, with its line invalidate, per entry. An MTE read bypasses
// the scalar cache, so what it returns is what GM holds when it runs, as the invalidate-then-load did. Entries are
// read in increasing order mostly (a cell's index entries, a cell's token slots), so a miss refills from the
// entry asked for.
template <typename T>
class UbWindow {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t capElems) {
        cap_ = capElems;
        pipe.InitBuffer(buf_, UbBytes(uint64_t(capElems) * sizeof(T)));
        ub_ = buf_.Get<T>();
    }

    // Reads go to the table of `count` elements at `base` from now on; a different table forgets the window.
    __aicore__ inline void Use(GM_ADDR base, int64_t count) {
        if (base == base_ && count == count_) return;
        base_ = base;
        count_ = count;
        Forget();
    }
    // The next read fetches from GM again (a peer may have rewritten the table since).
    __aicore__ inline void Forget() { n_ = 0; }

    // Element i, 0 <= i < count (the caller bounds i).
    __aicore__ inline T Get(int64_t i) {
        if (i < lo_ || i >= lo_ + n_) Fill(i);
        return ub_.GetValue(static_cast<uint32_t>(i - lo_));
    }

private:
    __aicore__ inline void Fill(int64_t i) {
        const int64_t left = count_ - i;
        n_ = left < int64_t(cap_) ? left : int64_t(cap_);
        lo_ = i;
        // The scalar reads of the previous fill are done before MTE2 overwrites the buffer.
        AscendC::SetFlag<AscendC::HardEvent::S_MTE2>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE2>(EVENT_ID1);
        AscendC::DataCopyPad(ub_, TensorAt<T>(base_, i * int64_t(sizeof(T)), n_),
                             {1, static_cast<uint32_t>(n_ * int64_t(sizeof(T))), 0, 0, 0}, {false, 0, 0, T()});
        AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(EVENT_ID1);
    }

    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
    AscendC::LocalTensor<T> ub_;
    GM_ADDR base_ = nullptr;
    int64_t count_ = 0, lo_ = 0, n_ = 0;
    uint32_t cap_ = 0;
};

// Seals (docs/protocol.md §10.2): the int64 seq of a round, written after the data it covers by the block that
// wrote that data, on the same MTE3 queue, so a receiver that reads the seal equal to its round's seq reads that
// data complete. It relies only on one core's writes to one peer arriving in order, not on another core's signal.
class SealPort {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe) {
        pipe.InitBuffer(buf_, kSealUbBytes);
        ub_ = buf_.Get<int64_t>();
    }

    // Every MTE3 copy this block issued so far has completed: the data the next seals cover is out first.
    __aicore__ inline void AfterData() const { AscendC::PipeBarrier<PIPE_MTE3>(); }

    // n consecutive seals at dst, each = seq, by MTE3 (call AfterData after the covered copies first).
    __aicore__ inline void Write(GM_ADDR dst, int64_t n, int64_t seq) {
        if (seq != staged_) {
            // The scalar unit refills the run only after MTE3 read the previous one.
            AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID3);
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID3);
            for (uint32_t i = 0; i < kSealRunElems; ++i) ub_.SetValue(i, seq);
            staged_ = seq;
            AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID3);
            AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID3);
        }
        for (int64_t i = 0; i < n; i += kSealRunElems) {
            const int64_t m = n - i < int64_t(kSealRunElems) ? n - i : int64_t(kSealRunElems);
            AscendC::DataCopyPad(WordsAt(dst, i * layout::kSealBytes, m), ub_,
                                 {1, static_cast<uint32_t>(m * layout::kSealBytes), 0, 0, 0});
        }
    }

private:
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
    AscendC::LocalTensor<int64_t> ub_;
    int64_t staged_ = 0;  // the value ub_ holds; 0 (never a round's seq) until the first Write
};

// The n seals at `base` all equal seq, read afresh through w by MTE2 (a peer writes them: never a scalar read).
__aicore__ inline bool Sealed(UbWindow<int64_t>& w, GM_ADDR base, int64_t n, int64_t seq) {
    w.Use(base, n);
    w.Forget();
    for (int64_t i = 0; i < n; ++i)
        if (w.Get(i) != seq) return false;
    return true;
}

// A region's index table as int32 pairs {token slot, t*K + k}, through a UB window.
__aicore__ inline void UseIndexTable(UbWindow<int32_t>& w, GM_ADDR region, const CamTopology& t) {
    w.Use(region + layout::region_index_off(t), 2 * layout::region_index_entries(t));
}

// Visits the rows [lo, hi) of a work item cell by cell: fn(outRow, participant, indexEntry) for each row, where
// indexEntry is the position in that participant's index table (protocol §4.3).
template <typename Fn>
__aicore__ inline void ForEachRow(const CamTopology& t, GM_ADDR workItem, int64_t lo, int64_t hi, Fn&& fn) {
    const int64_t R = layout::experts_per_ffn(t);
    for (int64_t j = 0; j < R; ++j) {
        for (int64_t p = 0; p < t.P; ++p) {
            const int64_t out = LoadWordAt(workItem, 0, layout::work_item_cell_out_off(t, j, p));
            const int64_t count = LoadWordAt(workItem, 0, layout::work_item_cell_count(t, j, p));
            const int64_t src = LoadWordAt(workItem, 0, layout::work_item_cell_src_off(t, j, p));
            const int64_t a = out > lo ? out : lo;
            const int64_t b = out + count < hi ? out + count : hi;
            for (int64_t o = a; o < b; ++o) fn(o, p, src + (o - out));
        }
    }
}

}  // namespace cam::kernels::dp
