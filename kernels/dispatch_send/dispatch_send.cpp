// dispatch_send (Attention rank a = (replica d, participant p)), docs/protocol.md §6.1: every block routes its own
// tokens (ids and placement words bounded, destinations, counts), a sum across the blocks' summaries places each
// block's rows and token slots; block 0 checks the round (ids, the placement table's words and its epoch before and
// after they were read, the window bound) before any remote write and waits (bounded) for the round's slot to be
// free; then every block writes its tokens once per destination FFN rank (quantized once with the shared quant
// code, or as is) and its runs of index entries, the records follow, and block 0 publishes ready[a][s] = seq on
// every FFN rank after a fence.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/dataplane.h"
#include "common/work_item_check.h"
#include "common/quant.h"
#include "dispatch_send/dispatch_send_tiling_data.h"

namespace cam::kernels {

template <typename T>
class DispatchSend {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR ids, GM_ADDR placement, GM_ADDR peers, GM_ADDR workspace,
                                const DispatchSendTilingData& tiling) {
        tiling_ = tiling;
        plane_.Init(peers, tiling.comm, pipe_);
        decision_.Init(workspace);
        ws_ = workspace;
        const CamTopology& t = plane_.Topo();
        wsl_ = DispatchSendWorkspaceLayout(t, tiling.blockDim, tiling.stageTokens);
        sum_ = DispatchSendSummaryLayout(layout::plane_slots(t), t.F);
        x_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), uint64_t(tiling.tokens) * t.H);
        xRaw_ = x;
        // topk_ids are read more than once (checks, a replicated expert's first top-k index in the token, digest):
        // through UB, not scalar GM reads.
        ids_.Init(pipe_, dp::kTableWindowElems);
        ids_.Use(ids, tiling.tokens * t.K);
        if (tiling.placed != 0) {
            // This layer's rows of the table: all of them in UB for the whole launch when tiling found room
            // (placeUbWords), else a window. Bounded word by word before any row is routed by them.
            const int64_t words = t.E * layout::placement_width(t);
            place_.Init(pipe_, tiling.placeUbWords);
            place_.Use(placement + 8 * layout::placement_layer_word(t, tiling.layer), words);
            table_ = placement;
        }

        quant_.Init(pipe_, tiling.colsPerPass);
        pipe_.InitBuffer(scalesBuf_, dp::kTableWindowUbBytes);
        pipe_.InitBuffer(runBuf_, dp::kTableWindowUbBytes);
        mover_.Init(pipe_, tiling.copyChunkBytes);
        if (tiling.staggered != 0) {
            stream_.Init(pipe_, DispatchSendStreamChunk(tiling.staggered, t.H * layout::dispatch_elem_bytes(t),
                                                        tiling.copyChunkBytes));
        }
        seals_.Init(pipe_);
        if (tiling.tablesInUb != 0) {
            // Sizes as DispatchSendTablesUbBytes counts them (tiling checked they fit), for this block's tokens.
            int64_t lo, hi;
            dp::BlockShare(tiling.tokens, &lo, &hi);
            const uint64_t n = uint64_t(hi - lo);
            const uint32_t row = DispatchSendTableUbBytes(uint64_t(4 * sum_.words));
            pipe_.InitBuffer(sumBuf_, row);
            pipe_.InitBuffer(baseBuf_, row);
            pipe_.InitBuffer(accBuf_, row);
            pipe_.InitBuffer(addBuf_, row);
            pipe_.InitBuffer(cursorBuf_, DispatchSendTableUbBytes(uint64_t(4 * layout::plane_slots(t))));
            pipe_.InitBuffer(destsBuf_, DispatchSendTableUbBytes(4 * n * t.K));
            pipe_.InitBuffer(slotsBuf_, DispatchSendTableUbBytes(4 * n * t.F));
            pipe_.InitBuffer(entriesBuf_, DispatchSendTableUbBytes(8 * (n * t.K + 3 * layout::plane_slots(t))));
            sumUb_ = sumBuf_.Get<int32_t>();
            baseUb_ = baseBuf_.Get<int32_t>();
            accUb_ = accBuf_.Get<int32_t>();
            addUb_ = addBuf_.Get<int32_t>();
            cursorUb_ = cursorBuf_.Get<int32_t>();
            destsUb_ = destsBuf_.Get<int32_t>();
            slotsUb_ = slotsBuf_.Get<int32_t>();
            entriesUb_ = entriesBuf_.Get<int32_t>();
        }
    }

    __aicore__ inline void Process() {
        // The table's epoch before any block reads its rows (a seqlock, docs/protocol.md §15: a rebalance writes -1,
        // the rows, then the new epoch); the second read is block 0's, after every block routed.
        decision_.Clear();
        if (AscendC::GetBlockIdx() == 0 && tiling_.placed != 0) epoch_ = TableEpoch();
        AscendC::SyncAll();
        Route();
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::SyncAll();
        SumSummaries();
        const bool go = decision_.Settle(ControlStep{this}, tiling_.comm.followerCycles);
        if (!go) return;
        RoundFromOwnState();
        MoveTokens();
        if (AscendC::GetBlockIdx() == 0) idsDigest_ = dp::IdsDigest(ids_, tiling_.tokens * plane_.Topo().K);
        if (!indexRunsSent_) WriteIndexRuns();
        // This block's index runs have landed before the SyncAll (another block may copy its FFN rank's table out)
        // and before its own MTE2 reads them; the records' clean was ordered by FlushScalarStores before the go.
        AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID6);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID6);
        AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID6);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(EVENT_ID6);
        AscendC::SyncAll();
        MoveTables();
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::SyncAll();
        if (AscendC::GetBlockIdx() == 0) Publish();
    }

private:
    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct ControlStep {
        DispatchSend* op;
        __aicore__ inline bool operator()() const { return op->Control(); }
    };
    struct LoadChunk {
        DispatchSend* op;
        uint64_t rowOffset;
        __aicore__ inline void operator()(uint32_t col, uint32_t n, const AscendC::LocalTensor<float>& xf) const {
            op->quant_.LoadWidened(op->x_[rowOffset + col], n, xf);
        }
    };
    struct StoreChunk {
        DispatchSend* op;
        int64_t tok;
        GM_ADDR stage;  // the staged row (the staggered order), else nullptr: straight to every destination
        int64_t first;  // the staggered order: the FFN rank of step 0, written straight from UB too
        __aicore__ inline void operator()(uint32_t col, uint32_t n, const AscendC::LocalTensor<float>& xf,
                                          const QuantParams& q) const {
            op->StoreQuantChunk(tok, stage, first, col, n, xf, q);
        }
    };

    // ---- block 0, after every block routed: checks, slot-free wait, records ----
    __aicore__ inline bool Control() {
        const CamTopology& t = plane_.Topo();
        if (!plane_.EntryOk(op::kDispatchSend)) return false;
        GM_ADDR own = plane_.Own();
        RoundFromOwnState();
        const int64_t d = layout::replica_of(t, plane_.Rank());
        const int64_t R = layout::experts_per_ffn(t);
        const int64_t B = tiling_.tokens;

        // A negative epoch (read before any block read the rows) is a table being rewritten, or not an epoch at all.
        if (tiling_.placed != 0 && epoch_ < 0)
            return plane_.Refuse(status::kBadInput, dp::kNoPeer, ThisRound(), detail::kArgPlacement,
                                 dp::Epochs(epoch_, epoch_));
        // The routing blocks' verdicts: a placement word out of bounds, an id outside [-1, E). Nothing remote is
        // written yet.
        if (TotalOf(sum_.flagsAt + kSummaryBadPlacement) != 0)
            return plane_.Refuse(status::kBadInput, dp::kNoPeer, ThisRound(), detail::kArgPlacement);
        if (TotalOf(sum_.flagsAt + kSummaryBadIds) != 0)
            return plane_.Refuse(status::kBadInput, dp::kNoPeer, ThisRound(), detail::kArgTopkIds);
        // The window bound, not capacity: a round with more rows than capacity is served in chunks (§8), but its
        // distinct tokens per FFN rank must fit that rank's region.
        for (int64_t f = 0; f < t.F; ++f) {
            const int64_t tokens = TotalOf(sum_.tokensAt + f);
            if (tokens > layout::window_token_slots(t)) {
                return plane_.Refuse(status::kCapacity, layout::ffn_rank(t, f), ThisRound(), tokens);
            }
        }

        if (round_ >= t.slots && !WaitSlotFree(own)) return false;

        // Records: written to workspace, copied to each FFN rank by MoveTables.
        for (int64_t f = 0; f < t.F; ++f) {
            AscendC::GlobalTensor<int64_t> h = Header(f);
            int64_t rows = 0;
            for (int64_t j = 0; j < R; ++j) {
                h.SetValue(kHdrCounts + j, TotalOf(f * R + j));
                rows += TotalOf(f * R + j);
            }
            h.SetValue(kHdrSeq, seq_);
            h.SetValue(kHdrLayer, tiling_.layer);
            h.SetValue(kHdrReplica, d);
            h.SetValue(kHdrParticipant, layout::participant_of(t, plane_.Rank()));
            h.SetValue(kHdrTokens, B);
            h.SetValue(kHdrRows, rows);
            h.SetValue(kHdrTokenSlots, TotalOf(sum_.tokensAt + f));
            h.SetValue(kHdrFingerprint, layout::fingerprint(t));
            h.SetValue(kHdrEpoch, epoch_);
        }
        dp::FlushScalarStores(ws_);
        // The epoch again, after every block's reads of the rows (they routed before the SyncAll this step follows)
        // and before any remote write: a different value means the table was rewritten meanwhile, so the rows read
        // may mix two tables (or name the old one while the FFN ranks move to the new). Refused: nothing published,
        // the round is sent again under the table as it is.
        if (tiling_.placed != 0) {
            const int64_t again = TableEpoch();
            if (again != epoch_)
                return plane_.Refuse(status::kBadInput, dp::kNoPeer, ThisRound(), detail::kArgPlacement,
                                     dp::Epochs(epoch_, again));
        }
        return true;
    }

    // The table's epoch word (user memory: read fresh from GM each time).
    __aicore__ inline int64_t TableEpoch() const { return dp::LoadWordAt(table_, layout::kPlacementEpochWord); }

    // ---- placement (docs/protocol.md §15) ----
    // Every word of this layer's table that DestSlot may read: n in [1, F], each of the first n replicas on an FFN
    // index in [0, F) and a slot in [0, R). A tampered word is refused here, before the table steers any write.
    __aicore__ inline bool PlacementInBounds() {
        const CamTopology& t = plane_.Topo();
        const int64_t W = layout::placement_width(t), R = layout::experts_per_ffn(t);
        for (int64_t e = 0; e < t.E; ++e) {
            const int64_t n = place_.Get(e * W);
            if (n < 1 || n > t.F) return false;
            for (int64_t i = 0; i < n; ++i) {
                const int64_t f = place_.Get(e * W + 1 + 2 * i), j = place_.Get(e * W + 2 + 2 * i);
                if (f < 0 || f >= t.F || j < 0 || j >= R) return false;
            }
        }
        return true;
    }
    // Plane slot f * R + j of the row (token tok, top-k index k) of expert id: the contiguous placement without a
    // table, else replica (tok + k0) % n of the expert, k0 the token's first top-k index whose id is this one
    // (docs/protocol.md §15), so all of a token's rows for one expert go to one replica. k0 comes from the ids at
    // top-k indices below k, each already checked by the pre-pass, and only compared here: whatever they hold now,
    // 0 <= k0 <= k. The table words it reads were bounded by PlacementInBounds, but user memory may change under a
    // running kernel: bounded again, so even then the slot is a real one (a row then lands on a wrong expert, never
    // outside a window).
    __aicore__ inline int64_t DestSlot(int64_t id, int64_t tok, int64_t k) {
        const CamTopology& t = plane_.Topo();
        if (tiling_.placed == 0) return id;
        const int64_t W = layout::placement_width(t), R = layout::experts_per_ffn(t);
        const int64_t n = place_.Get(id * W);
        int64_t r = 0;
        if (n > 1 && n <= t.F) {  // one replica: the first whatever k0 is
            int64_t k0 = 0;
            while (k0 < k && ids_.Get(tok * t.K + k0) != id) ++k0;
            r = (tok + k0) % n;
        }
        const int64_t f = place_.Get(id * W + 1 + 2 * r), j = place_.Get(id * W + 2 + 2 * r);
        return (f < 0 || f >= t.F ? 0 : f) * R + (j < 0 || j >= R ? 0 : j);
    }

    // ---- routing: every block its own tokens (tablesInUb), else block 0 the whole round ----
    __aicore__ inline bool Routes() const { return tiling_.tablesInUb != 0 || AscendC::GetBlockIdx() == 0; }
    // The tokens this block routes: the ones it moves when every block routes, the whole round for block 0 alone.
    __aicore__ inline void RouteShare(int64_t* lo, int64_t* hi) const {
        if (tiling_.tablesInUb != 0) {
            dp::BlockShare(tiling_.tokens, lo, hi);
            return;
        }
        *lo = 0;
        *hi = AscendC::GetBlockIdx() == 0 ? tiling_.tokens : 0;
    }

    // The pre-pass of this block's tokens, before any remote write: the placement words bounded, every id in
    // [-1, E), each row's destination plane slot computed once and kept (no later pass reads user memory again),
    // rows per plane slot, distinct tokens per FFN rank and their token slots counted from 0 in this block. The
    // verdicts and counts leave as the block's summary row.
    __aicore__ inline void Route() {
        if (!Routes()) return;
        const CamTopology& t = plane_.Topo();
        const int64_t R = layout::experts_per_ffn(t);
        int64_t lo, hi;
        RouteShare(&lo, &hi);
        routeLo_ = lo;
        ClearTables(hi - lo);
        // Every routing block bounds every word it may read (the table is resident: no refill per lookup).
        const int64_t badPlacement = tiling_.placed != 0 && !PlacementInBounds() ? 1 : 0;
        int64_t badIds = 0;
        for (int64_t tok = lo; tok < hi && badIds == 0; ++tok) {
            for (int64_t k = 0; k < t.K; ++k) {
                const int64_t id = ids_.Get(tok * t.K + k);
                if (id < -1 || id >= t.E) {
                    badIds = 1;
                    break;
                }
                const int64_t g = id == -1 ? -1 : DestSlot(id, tok, k);
                SetDest((tok - lo) * t.K + k, g);
                if (g == -1) continue;
                SetSummary(g, CountOf(g) + 1);
                const int64_t f = g / R;
                if (LocalSlotOf(tok, f) < 0) {
                    const int64_t slot = CountOf(sum_.tokensAt + f);
                    SetLocalSlot(tok, f, slot);
                    SetSummary(sum_.tokensAt + f, slot + 1);
                }
            }
        }
        SetSummary(sum_.flagsAt + kSummaryBadIds, badIds);
        SetSummary(sum_.flagsAt + kSummaryBadPlacement, badPlacement);
        if (tiling_.tablesInUb == 0) {
            dp::FlushScalarStores(ws_);
            return;
        }
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID2);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID2);
        AscendC::DataCopyPad(SummaryRow(AscendC::GetBlockIdx()), sumUb_,
                             {1, static_cast<uint32_t>(4 * sum_.words), 0, 0, 0});
    }

    // Every block, tables in UB: the sum of the summary rows of the blocks before it (where its rows of each plane
    // slot and its token slots on each FFN rank start) and of all of them (the round's), one vector add per row.
    __aicore__ inline void SumSummaries() {
        if (tiling_.tablesInUb == 0) return;
        const uint32_t w = static_cast<uint32_t>(sum_.words);
        AscendC::Duplicate(accUb_, int32_t(0), w);
        for (int64_t b = 0; b < AscendC::GetBlockNum(); ++b) {
            if (b == AscendC::GetBlockIdx()) AscendC::Adds(baseUb_, accUb_, int32_t(0), w);
            AscendC::DataCopyPad(addUb_, SummaryRow(b), {1, 4 * w, 0, 0, 0}, {false, 0, 0, 0});
            AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(EVENT_ID3);
            AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(EVENT_ID3);
            AscendC::Add(accUb_, accUb_, addUb_, w);
            // The next row's copy overwrites addUb_ only after the add read it.
            AscendC::SetFlag<AscendC::HardEvent::V_MTE2>(EVENT_ID3);
            AscendC::WaitFlag<AscendC::HardEvent::V_MTE2>(EVENT_ID3);
        }
        AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID3);
        AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID3);
    }

    // Word i of the round's summary (the sum over the routing blocks; block 0's own row when it routes alone).
    __aicore__ inline int64_t TotalOf(int64_t i) const {
        return tiling_.tablesInUb != 0 ? static_cast<int64_t>(accUb_.GetValue(static_cast<uint32_t>(i))) : CountOf(i);
    }
    // Word i of the sum of the summaries before this block's (0 when block 0 routes alone).
    __aicore__ inline int64_t BaseOf(int64_t i) const {
        return tiling_.tablesInUb != 0 ? static_cast<int64_t>(baseUb_.GetValue(static_cast<uint32_t>(i))) : 0;
    }

    // Routing blocks, after every block moved its tokens: the index entries of this block's rows in row order
    // (plane slot, token, top-k index) to each FFN rank's index table in the workspace (MoveTables sends them on).
    // In UB each plane slot's entries form a run from a 32-byte block, and the run goes to its place by one copy:
    // after the rows of the rank's experts before the slot, then after the slot's rows of the blocks before this one.
    __aicore__ inline void WriteIndexRuns() {
        if (!Routes() || !StageIndexRuns()) return;
        for (int64_t f = 0; f < plane_.Topo().F; ++f) SendIndexRuns(f);
    }

    // The entries of WriteIndexRuns in row order: in UB, each plane slot's run from a 32-byte block (true: the runs
    // wait there for SendIndexRuns), or by scalar stores into the workspace when block 0 routes alone (false: done).
    __aicore__ inline bool StageIndexRuns() {
        const CamTopology& t = plane_.Topo();
        const int64_t R = layout::experts_per_ffn(t);
        const bool ub = tiling_.tablesInUb != 0;
        int64_t lo, hi;
        RouteShare(&lo, &hi);
        int64_t run = 0;
        for (int64_t f = 0; f < t.F; ++f) {
            int64_t pos = 0;
            for (int64_t j = 0; j < R; ++j) {
                const int64_t c = CountOf(f * R + j);
                if (ub) {
                    cursorUb_.SetValue(static_cast<uint32_t>(f * R + j), static_cast<int32_t>(run));
                    run = NextRunStart(run + c);
                } else {
                    SetSummary(f * R + j, pos);  // block 0 alone: its counts become each slot's running position
                    pos += c;
                }
            }
        }
        for (int64_t tok = lo; tok < hi; ++tok) {
            for (int64_t k = 0; k < t.K; ++k) {
                const int64_t g = DestOf((tok - lo) * t.K + k);
                if (g == -1) continue;
                const int64_t f = g / R;
                if (ub) {
                    const int64_t l = cursorUb_.GetValue(static_cast<uint32_t>(g));
                    cursorUb_.SetValue(static_cast<uint32_t>(g), static_cast<int32_t>(l + 1));
                    entriesUb_.SetValue(static_cast<uint32_t>(2 * l), SlotOf(tok, f));
                    entriesUb_.SetValue(static_cast<uint32_t>(2 * l + 1), static_cast<int32_t>(tok * t.K + k));
                    continue;
                }
                const int64_t pos = CountOf(g);
                SetSummary(g, pos + 1);
                AscendC::GlobalTensor<int32_t> entry = dp::TensorAt<int32_t>(
                    ws_, wsl_.indexOff + f * layout::index_bytes(t) + pos * layout::kIndexEntryBytes, 2);
                entry.SetValue(0, SlotOf(tok, f));
                entry.SetValue(1, static_cast<int32_t>(tok * t.K + k));
            }
        }
        if (!ub) {
            dp::FlushScalarStores(ws_);
            return false;
        }
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID2);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID2);
        return true;
    }

    // FFN rank f's runs of staged entries, one copy per plane slot with rows: a slot's run starts where its cursor
    // stood before the entries were placed (its cursor now, less its count).
    __aicore__ inline void SendIndexRuns(int64_t f) {
        const CamTopology& t = plane_.Topo();
        const int64_t R = layout::experts_per_ffn(t);
        int64_t pos = 0;
        for (int64_t j = 0; j < R; ++j) {
            const int64_t g = f * R + j, c = CountOf(g);
            if (c > 0) {
                const int64_t run = cursorUb_.GetValue(static_cast<uint32_t>(g)) - c;
                AscendC::DataCopyPad(
                    dp::TensorAt<int32_t>(ws_, wsl_.indexOff + f * layout::index_bytes(t) +
                                                   (pos + BaseOf(g)) * layout::kIndexEntryBytes, 2 * c),
                    entriesUb_[static_cast<uint32_t>(2 * run)],
                    {1, static_cast<uint32_t>(c * layout::kIndexEntryBytes), 0, 0, 0});
            }
            pos += TotalOf(g);
        }
    }

    // ---- a routing block's tables: in UB (tablesInUb) or in the workspace (block 0 alone) ----
    __aicore__ inline void ClearTables(int64_t tokens) {
        const CamTopology& t = plane_.Topo();
        if (tiling_.tablesInUb != 0) {
            AscendC::Duplicate(sumUb_, int32_t(0), static_cast<uint32_t>(sum_.words));
            if (tokens > 0) AscendC::Duplicate(slotsUb_, int32_t(-1), static_cast<uint32_t>(tokens * t.F));
            // The scalar pre-pass reads and writes what the vector unit just filled.
            AscendC::SetFlag<AscendC::HardEvent::V_S>(EVENT_ID2);
            AscendC::WaitFlag<AscendC::HardEvent::V_S>(EVENT_ID2);
            return;
        }
        for (int64_t i = 0; i < sum_.words; ++i) SummaryRow(0).SetValue(i, 0);
        for (int64_t i = 0; i < tokens * t.F; ++i) Slots().SetValue(i, -1);
    }

    // A table is a UB tensor when tiling says the tables fit, else its workspace copy in GM.
    __aicore__ inline int64_t TableGet(const AscendC::LocalTensor<int32_t>& ub, const AscendC::GlobalTensor<int32_t>& gm,
                                       int64_t i) const {
        return tiling_.tablesInUb != 0 ? static_cast<int64_t>(ub.GetValue(static_cast<uint32_t>(i)))
                                       : static_cast<int64_t>(gm.GetValue(i));
    }
    __aicore__ inline void TableSet(AscendC::LocalTensor<int32_t>& ub, AscendC::GlobalTensor<int32_t> gm, int64_t i,
                                    int64_t v) {
        if (tiling_.tablesInUb != 0) {
            ub.SetValue(static_cast<uint32_t>(i), static_cast<int32_t>(v));
        } else {
            gm.SetValue(i, static_cast<int32_t>(v));
        }
    }
    // Word i of this block's summary row (DispatchSendSummaryLayout): rows per plane slot f * R + j (after the index
    // pass of block 0 alone, each slot's running position), distinct tokens per FFN rank, verdicts. Protocol rows
    // fit int32: a round has at most Bmax * K of them.
    __aicore__ inline int64_t CountOf(int64_t i) const { return TableGet(sumUb_, SummaryRow(0), i); }
    __aicore__ inline void SetSummary(int64_t i, int64_t v) { TableSet(sumUb_, SummaryRow(0), i, v); }
    // Plane slot of row tok * K + k (-1: an empty slot), fixed by the pre-pass; i counts from the block's first.
    __aicore__ inline int64_t DestOf(int64_t i) const { return TableGet(destsUb_, Dests(), i); }
    __aicore__ inline void SetDest(int64_t i, int64_t g) { TableSet(destsUb_, Dests(), i, g); }
    // Token slot of token tok on FFN rank f counted in its routing block, or -1.
    __aicore__ inline int64_t LocalSlotOf(int64_t tok, int64_t f) const {
        return TableGet(slotsUb_, Slots(), (tok - routeLo_) * plane_.Topo().F + f);
    }
    __aicore__ inline void SetLocalSlot(int64_t tok, int64_t f, int64_t slot) {
        TableSet(slotsUb_, Slots(), (tok - routeLo_) * plane_.Topo().F + f, slot);
    }
    // Token slot of token tok on FFN rank f in the region, or -1: the block's count, after the blocks before it.
    __aicore__ inline int32_t SlotOf(int64_t tok, int64_t f) const {
        const int64_t local = LocalSlotOf(tok, f);
        return static_cast<int32_t>(local < 0 ? -1 : local + BaseOf(sum_.tokensAt + f));
    }
    // Where the next plane slot's run of UB index entries starts: on a 32-byte block after the end of this one.
    __aicore__ static inline int64_t NextRunStart(int64_t end) {
        return (end + kIndexEntriesPerUbBlock - 1) / kIndexEntriesPerUbBlock * kIndexEntriesPerUbBlock;
    }

    // Slot s is free once this rank's combine_recv of round r - slots has run (its combine rows are read) and
    // every FFN rank completed that round (none reads region (a, s) any more).
    struct SlotFreePoll {
        DispatchSend* op;
        int64_t missing = dp::kNoPeer;  // who the wait still misses, for the timeout record
        __aicore__ inline dp::PollResult operator()() { return op->PollSlotFree(&missing); }
    };

    __aicore__ inline dp::PollResult PollSlotFree(int64_t* missing) {
        const CamTopology& t = plane_.Topo();
        GM_ADDR own = plane_.Own();
        const int64_t prevSeq = seq_ - t.slots;
        *missing = dp::kNoPeer;
        if (dp::LoadWord(own, layout::attn_recv_count_off(t)) < round_ - t.slots + 1) *missing = plane_.Rank();
        for (int64_t f = 0; f < t.F && *missing == dp::kNoPeer; ++f) {
            const int64_t done = plane_.Signals().Poll(own, layout::attn_completion_signal_off(t, slot_, f));
            if (done > prevSeq) {
                plane_.Fail(status::kProtocol, layout::ffn_rank(t, f), ThisRound(), detail::kProtoSignalAhead);
                return dp::PollResult::kStop;
            }
            if (done < prevSeq) *missing = layout::ffn_rank(t, f);
        }
        return *missing == dp::kNoPeer ? dp::PollResult::kDone : dp::PollResult::kWait;
    }

    __aicore__ inline bool WaitSlotFree(GM_ADDR own) {
        SlotFreePoll poll{this};
        // done[slot][f] of every FFN rank: F lines in a row.
        const CamTopology& t = plane_.Topo();
        const dp::WaitEnd end = dp::BoundedWait(
            plane_, ThisRound(), own + layout::attn_completion_signal_off(t, slot_, 0),
            layout::attn_completion_signal_off(t, slot_, t.F) - layout::attn_completion_signal_off(t, slot_, 0),
            AscendC::GetSystemCycle() + tiling_.comm.timeoutCycles, poll);
        if (end == dp::WaitEnd::kExpired)
            return plane_.Fail(status::kTimeout, poll.missing, ThisRound(), detail::kAwaitSlotFree);
        return end == dp::WaitEnd::kDone;
    }

    // What an error record says about this call.
    __aicore__ inline dp::Round ThisRound() const {
        return dp::Round{op::kDispatchSend}
            .Replica(layout::replica_of(plane_.Topo(), plane_.Rank()))
            .Layer(tiling_.layer)
            .Seq(seq_);
    }

    // ---- all blocks ----
    __aicore__ inline void RoundFromOwnState() {
        round_ = dp::LoadWord(plane_.Own(), layout::attn_send_count_off(plane_.Topo()));
        seq_ = layout::seq_of_round(round_);
        slot_ = layout::slot_of_seq(plane_.Topo(), seq_);
    }

    __aicore__ inline GM_ADDR Region(int64_t f) const {
        const CamTopology& t = plane_.Topo();
        return plane_.Window(layout::ffn_rank(t, f)) + layout::ffn_region_off(t, plane_.Rank(), slot_);
    }

    // Records and index tables, one FFN rank per block in turn.
    __aicore__ inline void MoveTables() {
        const CamTopology& t = plane_.Topo();
        for (int64_t f = AscendC::GetBlockIdx(); f < t.F; f += AscendC::GetBlockNum()) {
            const int64_t rows = dp::LoadWordAt(ws_, wsl_.headerOff + f * layout::header_bytes(t), kHdrRows);
            GM_ADDR region = Region(f);
            mover_.Copy(region + layout::region_index_off(t), ws_ + wsl_.indexOff + f * layout::index_bytes(t),
                        uint64_t(rows) * layout::kIndexEntryBytes);
            mover_.Copy(region, ws_ + wsl_.headerOff + f * layout::header_bytes(t),
                        uint64_t(layout::header_words(t)) * 8);
            seals_.AfterData();
            seals_.Write(region + layout::region_tables_seal_off(t), 1, seq_);
        }
    }

    // A block's tokens [lo, hi), in groups of at most kTableWindowElems: each token's scale is kept in UB and a
    // group's scales go out per FFN rank in runs (a token's slots on one FFN rank follow token order, so a block's
    // tokens for rank f hold consecutive slots there), not as one 4-byte copy per token and destination.
    __aicore__ inline void MoveTokens() {
        if (tiling_.staggered != 0) {
            MoveTokensStaggered();
            return;
        }
        int64_t lo, hi;
        dp::BlockShare(tiling_.tokens, &lo, &hi);
        for (int64_t g = lo; g < hi; g += dp::kTableWindowElems) {
            const int64_t gEnd = hi - g < int64_t(dp::kTableWindowElems) ? hi : g + dp::kTableWindowElems;
            for (int64_t tok = g; tok < gEnd; ++tok) {
                if (!HasDestination(tok)) continue;
                if (plane_.Topo().quantized) {
                    QuantizeToken(tok, g);
                } else {
                    CopyToken(tok);
                }
            }
            if (plane_.Topo().quantized) SendScales(g, gEnd);
            SealTokens(g, gEnd);
        }
    }

    // More than one Attention rank (tiling's staggered): the block's tokens in stageGroups groups of stageTokens,
    // each quantized once into its staged row, then sent destination-major: in step j every block of Attention rank
    // a writes the group's rows, scales and seals for FFN rank (a + j) % F only, and a SyncAll ends the step. So
    // while ranks a and a' are in the same step they write different FFN ranks (when A <= F), and no receiver's
    // ingress serves two senders at once (token-major, every sender wrote every receiver token by token: an incast,
    // where a write queued behind another sender's on a receiver's ingress holds its own sender's egress idle,
    // docs/protocol.md §6.1). The bytes, and where each lands, are the token-major order's; only the order differs.
    __aicore__ inline void MoveTokensStaggered() {
        const CamTopology& t = plane_.Topo();
        int64_t lo, hi;
        dp::BlockShare(tiling_.tokens, &lo, &hi);
        const int64_t G = tiling_.stageTokens;
        const int64_t rowBytes = t.H * layout::dispatch_elem_bytes(t);
        GM_ADDR stage = ws_ + wsl_.stageOff + AscendC::GetBlockIdx() * G * layout::dispatch_row_bytes(t);
        const int64_t first = plane_.Rank() % t.F;  // step 0's FFN rank: this Attention rank's own turn
        for (int64_t i = 0; i < int64_t(tiling_.stageGroups); ++i) {
            const int64_t g = lo + i * G < hi ? lo + i * G : hi;
            const int64_t gEnd = hi - g < G ? hi : g + G;
            // Step 0's rows of a quantized round leave while the group is quantized, straight from UB: the first
            // step costs no staged read, and the link starts with the quant pass.
            if (t.quantized) {
                for (int64_t tok = g; tok < gEnd; ++tok) {
                    if (HasDestination(tok)) QuantizeToken(tok, g, StagedRow(stage, tok - g), first);
                }
                // The staged rows (MTE3) are read back by MTE2 below, the scales (scalar) by SendScalesTo.
                AscendC::PipeBarrier<PIPE_ALL>();
            }
            // The index runs (workspace copies, no link bytes) go out one FFN rank per step of the first group,
            // under the step's link time instead of after the last.
            const bool runs = i == 0 && tiling_.tablesInUb != 0 && StageIndexRuns();
            indexRunsSent_ = indexRunsSent_ || runs;
            for (int64_t j = 0; j < t.F; ++j) {
                const int64_t f = (first + j) % t.F;
                const bool rowsSentFromUb = t.quantized && j == 0;
                for (int64_t tok = g; tok < gEnd && !rowsSentFromUb; ++tok) {
                    const int32_t slot = SlotOf(tok, f);
                    if (slot < 0) continue;
                    GM_ADDR src = t.quantized ? StagedRow(stage, tok - g) : xRaw_ + tok * t.H * int64_t(sizeof(T));
                    stream_.Copy(Region(f) + layout::region_tokens_off(t) + slot * layout::dispatch_row_bytes(t), src,
                                 uint64_t(rowBytes));
                }
                stream_.Drain();
                if (runs) SendIndexRuns(f);
                if (t.quantized) SendScalesTo(f, g, gEnd);
                seals_.AfterData();
                SealTokensOn(f, g, gEnd);
                // The last step needs no SyncAll of its own: the index runs' SyncAll follows.
                if (i + 1 == int64_t(tiling_.stageGroups) && j + 1 == t.F) break;
                AscendC::PipeBarrier<PIPE_ALL>();
                AscendC::SyncAll();
            }
        }
    }

    __aicore__ inline GM_ADDR StagedRow(GM_ADDR stage, int64_t i) const {
        return stage + i * layout::dispatch_row_bytes(plane_.Topo());
    }

    __aicore__ inline bool HasDestination(int64_t tok) const {
        for (int64_t f = 0; f < plane_.Topo().F; ++f)
            if (SlotOf(tok, f) >= 0) return true;
        return false;
    }

    // The seals of tokens [g, gEnd) on every FFN rank, after their rows and scales (docs/protocol.md §10.2): per
    // FFN rank in runs of consecutive token slots, as the scales go.
    __aicore__ inline void SealTokens(int64_t g, int64_t gEnd) {
        seals_.AfterData();
        for (int64_t f = 0; f < plane_.Topo().F; ++f) SealTokensOn(f, g, gEnd);
    }

    // The seals of tokens [g, gEnd) on FFN rank f (AfterData first).
    __aicore__ inline void SealTokensOn(int64_t f, int64_t g, int64_t gEnd) {
        const CamTopology& t = plane_.Topo();
        int64_t first = -1, n = 0;
        for (int64_t tok = g; tok < gEnd; ++tok) {
            const int32_t slot = SlotOf(tok, f);
            if (slot < 0) continue;
            if (n > 0 && slot != first + n) {
                seals_.Write(Region(f) + layout::region_token_seal_off(t, first), n, seq_);
                n = 0;
            }
            if (n == 0) first = slot;
            ++n;
        }
        if (n > 0) seals_.Write(Region(f) + layout::region_token_seal_off(t, first), n, seq_);
    }

    // Scales of tokens [g, gEnd) (in scalesBuf_ from index 0) to every FFN rank's scale table.
    __aicore__ inline void SendScales(int64_t g, int64_t gEnd) {
        for (int64_t f = 0; f < plane_.Topo().F; ++f) SendScalesTo(f, g, gEnd);
    }

    // Scales of tokens [g, gEnd) to FFN rank f's scale table, in runs of consecutive slots.
    __aicore__ inline void SendScalesTo(int64_t f, int64_t g, int64_t gEnd) {
        AscendC::LocalTensor<float> scales = scalesBuf_.Get<float>();
        AscendC::LocalTensor<float> run = runBuf_.Get<float>();
        int64_t first = -1, n = 0;
        for (int64_t tok = g; tok < gEnd; ++tok) {
            const int32_t slot = SlotOf(tok, f);
            if (slot < 0) continue;
            if (n > 0 && slot != first + n) {  // not the next slot: never in practice, but stay exact
                SendScaleRun(f, first, n, run);
                n = 0;
            }
            if (n == 0) first = slot;
            run.SetValue(static_cast<uint32_t>(n++), scales.GetValue(static_cast<uint32_t>(tok - g)));
        }
        if (n > 0) SendScaleRun(f, first, n, run);
    }

    __aicore__ inline void SendScaleRun(int64_t f, int64_t firstSlot, int64_t n, const AscendC::LocalTensor<float>& run) {
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
        AscendC::GlobalTensor<float> dst =
            dp::TensorAt<float>(Region(f), layout::region_scales_off(plane_.Topo()) + 4 * firstSlot, n);
        AscendC::DataCopyPad(dst, run, {1, static_cast<uint32_t>(4 * n), 0, 0, 0});
        // The scalar unit refills the run only after MTE3 read it.
        AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID1);
    }

    // Quantize chunk [col, col+n) of a token and write it to its staged row (stage), else to every destination of
    // the token.
    __aicore__ inline void StoreQuantChunk(int64_t tok, GM_ADDR stage, int64_t first, uint32_t col, uint32_t n,
                                           const AscendC::LocalTensor<float>& xf, const QuantParams& p) {
        const CamTopology& t = plane_.Topo();
        AscendC::LocalTensor<int8_t> out = quant_.Quantize(xf, n, p);
        if (stage != nullptr) AscendC::DataCopyPad(dp::TensorAt<int8_t>(stage, col, n), out, {1, n, 0, 0, 0});
        for (int64_t f = 0; f < t.F; ++f) {
            if (stage != nullptr && f != first) continue;
            const int32_t slot = SlotOf(tok, f);
            if (slot < 0) continue;
            AscendC::GlobalTensor<int8_t> dst = dp::TensorAt<int8_t>(
                Region(f), layout::region_tokens_off(t) + slot * layout::dispatch_row_bytes(t) + col, n);
            AscendC::DataCopyPad(dst, out, {1, n, 0, 0, 0});
        }
        quant_.FreeOut(out);
    }

    // Token tok of the group starting at token g: its rows go out now (or to its staged row, stage, and FFN rank
    // `first` only), its scale waits in UB (SendScales).
    __aicore__ inline void QuantizeToken(int64_t tok, int64_t g, GM_ADDR stage = nullptr, int64_t first = -1) {
        const CamTopology& t = plane_.Topo();
        const QuantParams p =
            QuantizeRowInPasses(static_cast<uint32_t>(t.H), tiling_.colsPerPass, quant_.Row(), quant_.Scratch(),
                                LoadChunk{this, uint64_t(tok) * t.H}, StoreChunk{this, tok, stage, first});
        scalesBuf_.Get<float>().SetValue(static_cast<uint32_t>(tok - g), p.scale);
    }

    __aicore__ inline void CopyToken(int64_t tok) {
        const CamTopology& t = plane_.Topo();
        for (uint32_t c = 0; c < t.H; c += tiling_.colsPerPass) {
            const uint32_t n = t.H - c < tiling_.colsPerPass ? static_cast<uint32_t>(t.H - c) : tiling_.colsPerPass;
            AscendC::TQue<AscendC::TPosition::VECIN, 2>& inQue = quant_.InQue();
            AscendC::LocalTensor<T> in = inQue.template AllocTensor<T>();
            AscendC::DataCopyPad(in, x_[uint64_t(tok) * t.H + c], {1, uint32_t(n * sizeof(T)), 0, 0, 0},
                                 {false, 0, 0, T()});
            inQue.EnQue(in);
            in = inQue.template DeQue<T>();
            AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE3>(0);
            AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE3>(0);
            for (int64_t f = 0; f < t.F; ++f) {
                const int32_t slot = SlotOf(tok, f);
                if (slot < 0) continue;
                AscendC::GlobalTensor<T> dst = dp::TensorAt<T>(
                    Region(f), layout::region_tokens_off(t) + slot * layout::dispatch_row_bytes(t) + c * sizeof(T), n);
                AscendC::DataCopyPad(dst, in, {1, uint32_t(n * sizeof(T)), 0, 0, 0});
            }
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(0);
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(0);
            inQue.FreeTensor(in);
        }
    }

    // ---- block 0, after every block's writes drained (PipeBarrier + SyncAll) ----
    __aicore__ inline void Publish() {
        const CamTopology& t = plane_.Topo();
        for (int64_t f = 0; f < t.F; ++f) {
            plane_.Signals().Send(plane_.Window(layout::ffn_rank(t, f)), layout::ffn_ready_signal_off(t, plane_.Rank(), slot_),
                                  seq_);
        }
        GM_ADDR own = plane_.Own();
        dp::StoreWordAt(own, layout::attn_slot_state_off(t, slot_), kSlotSeq, seq_);
        dp::StoreWordAt(own, layout::attn_slot_state_off(t, slot_), kSlotLayer, tiling_.layer);
        dp::StoreWordAt(own, layout::attn_slot_state_off(t, slot_), kSlotTokens, tiling_.tokens);
        dp::StoreWordAt(own, layout::attn_slot_state_off(t, slot_), kSlotIdsDigest, idsDigest_);
        dp::StoreWord(own, layout::attn_send_count_off(t), round_ + 1);
    }

    // Summary row of routing block b (block 0's when it routes alone).
    __aicore__ inline AscendC::GlobalTensor<int32_t> SummaryRow(int64_t b) const {
        return dp::TensorAt<int32_t>(ws_, wsl_.summaryOff + 4 * b * sum_.words, sum_.words);
    }
    __aicore__ inline AscendC::GlobalTensor<int32_t> Dests() const {
        return dp::TensorAt<int32_t>(ws_, wsl_.destsOff, plane_.Topo().Bmax * plane_.Topo().K);
    }
    __aicore__ inline AscendC::GlobalTensor<int32_t> Slots() const {
        return dp::TensorAt<int32_t>(ws_, wsl_.slotsOff, plane_.Topo().Bmax * plane_.Topo().F);
    }
    __aicore__ inline AscendC::GlobalTensor<int64_t> Header(int64_t f) const {
        return dp::WordsAt(ws_, wsl_.headerOff + f * layout::header_bytes(plane_.Topo()),
                           layout::header_words(plane_.Topo()));
    }

    DispatchSendTilingData tiling_{};
    dp::Plane plane_;
    dp::Decision decision_;
    GM_ADDR ws_ = nullptr;
    DispatchSendWorkspace wsl_{};
    DispatchSendSummary sum_{};
    int64_t round_ = 0, seq_ = 0, slot_ = 0;
    int64_t routeLo_ = 0;      // first token this block routed (its tables count from it)
    bool indexRunsSent_ = false;  // the staggered order sent the index runs with its steps
    int64_t idsDigest_ = 0;  // block 0 only: computed after the go, published with the slot state
    int64_t epoch_ = 0;      // the table's epoch before any block read the rows (0 without a table), in every record
    GM_ADDR table_ = nullptr;  // the placement table (tiling_.placed): its epoch line, then the layers' rows
    AscendC::TPipe pipe_;
    QuantWorkingSet<T> quant_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> scalesBuf_;  // scales of the current group of tokens
    AscendC::TBuf<AscendC::TPosition::VECCALC> runBuf_;     // one FFN rank's run of them, in slot order
    // A routing block's tables when tiling put them in UB (tablesInUb): see DispatchSendTablesUbBytes.
    AscendC::TBuf<AscendC::TPosition::VECCALC> sumBuf_, baseBuf_, accBuf_, addBuf_, cursorBuf_, destsBuf_, slotsBuf_,
        entriesBuf_;
    AscendC::LocalTensor<int32_t> sumUb_, baseUb_, accUb_, addUb_, cursorUb_, destsUb_, slotsUb_, entriesUb_;
    dp::ByteMover mover_;
    dp::CopyStream stream_;  // the staggered order's row copies, each write overlapping the next read
    dp::SealPort seals_;  // this block's seals after its rows, scales and tables (docs/protocol.md §10.2)
    AscendC::GlobalTensor<T> x_;
    GM_ADDR xRaw_ = nullptr;  // x's bytes: an unquantized token's row is copied from there in the staggered order
    dp::UbWindow<int32_t> ids_;
    dp::UbWindow<int64_t> place_;  // this layer's placement table (tiling_.placed), resident when it fits
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_dispatch_send(GM_ADDR x, GM_ADDR topkIds, GM_ADDR placement, GM_ADDR peers,
                                                        GM_ADDR workspace,
                                                        cam::kernels::DispatchSendTilingData tiling) {
    // Vector-only, but the hard SyncAll needs a mixed launch (docs/protocol.md, "Launch requirements").
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    if (tiling.key == cam::kernels::kDispatchSendBf16) {
        cam::kernels::DispatchSend<bfloat16_t> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Init(x, topkIds, placement, peers, workspace, tiling);
        op.Process();
    } else {
        cam::kernels::DispatchSend<half> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Init(x, topkIds, placement, peers, workspace, tiling);
        op.Process();
    }
}

#include "common/launch.h"
#include "dispatch_send/dispatch_send.h"

void cam::kernels::LaunchDispatchSend(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* topkIds,
                                      uint8_t* placement, uint8_t* peers, uint8_t* workspace,
                                      const DispatchSendTilingData& tiling) {
    CAM_DATAPLANE_LAUNCH(tiling.comm, peers, cam_dispatch_send, blockDim, stream, x, topkIds, placement, peers,
                         workspace, tiling);
}
