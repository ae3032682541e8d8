// combine_send (FFN rank A+f), docs/protocol.md §6.3: write each expert output row back to the combine row of its
// (token, slot) on its source Attention rank, then signal done[s][f] = seq on every participant of the replica,
// including those that got no rows. An empty work item is a no-op. A dispatch_recv batch is its items, each
// exactly as if served alone (its rows at its place in expert_out, its own replica, its own done signal); every
// item is checked before any is written, and an item whose slot weights moved to another placement epoch since it
// was received fails before anything is written (§15).
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "combine_send/combine_send_tiling_data.h"
#include "common/dataplane.h"
#include "common/work_item_check.h"

namespace cam::kernels {

class CombineSend {
public:
    __aicore__ inline void Init(GM_ADDR expertOut, GM_ADDR workItem, GM_ADDR peers, GM_ADDR workspace,
                                const CombineSendTilingData& tiling) {
        tiling_ = tiling;
        plane_.Init(peers, tiling.comm, pipe_);
        decision_.Init(workspace);
        expertOut_ = expertOut;
        wi_ = workItem;
        plan_ = workspace + dp::kWsDecisionBytes;
        items_ = tiling.items < 1 ? 1 : tiling.items > kCombineSendMaxItems ? kCombineSendMaxItems : tiling.items;
        mover_.Init(pipe_, tiling.copyChunkBytes);
        rows_.Init(pipe_, dp::kRowBatchUbBytes);
        idx_.Init(pipe_, dp::kTableWindowElems);
        seals_.Init(pipe_);
    }

    __aicore__ inline void Process() {
        const bool go = decision_.Decide(ControlStep{this}, tiling_.comm.followerCycles);
        if (!go) return;
        Scatter();
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::SyncAll();
        if (AscendC::GetBlockIdx() == 0) Complete();
    }

private:
    // A checked item (block 0): replica, slot, seq, the row after its last, whether it ends its round, whether it
    // is a work item to scatter, its rows and its first row in expert_out.
    struct Item {
        int64_t d = 0, s = 0, q = 0, next = 0;
        bool last = false, work = false;
        int64_t n = 0, base = 0;
    };

    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct ControlStep {
        CombineSend* op;
        __aicore__ inline bool operator()() const { return op->Control(); }
    };
    struct ScatterRow {
        CombineSend* op;
        int64_t d, s, rowBytes, base;
        __aicore__ inline void operator()(int64_t o, int64_t p, int64_t entry) const {
            op->ScatterOne(d, s, rowBytes, base + o, p, entry);
        }
    };
    struct SealRow {
        CombineSend* op;
        int64_t d, s, q, base;
        __aicore__ inline void operator()(int64_t o, int64_t p, int64_t entry) const {
            op->SealOne(d, s, q, base + o, p, entry);
        }
    };

    __aicore__ inline const CamTopology& Topo() const { return plane_.Topo(); }
    __aicore__ inline GM_ADDR ItemAt(int64_t i) const {
        return wi_ + i * layout::work_item_words(Topo()) * int64_t(sizeof(int64_t));
    }
    __aicore__ inline int64_t Wi(int64_t word) const { return dp::LoadWordAt(cur_, word); }

    // Every item is checked (and its chunk recomputed) before any is written or any state moves: one bad item
    // refuses the whole call with the plane usable. Then fenced items are dropped, and the plan goes out.
    __aicore__ inline bool Control() {
        if (!plane_.EntryOk(op::kCombineSend)) return false;
        int64_t base = 0;
        for (int64_t i = 0; i < int64_t(items_); ++i) {
            cur_ = ItemAt(i);
            Item& it = item_[i];
            it = Item{};
            if (!CheckItem(&it)) return false;
            for (int64_t k = 0; k < i; ++k)  // one chunk per replica per call: a repeat would combine twice
                if (it.work && item_[k].work && item_[k].d == it.d)
                    return Refuse(status::kProtocol, it.d, detail::kProtoStaleWorkItem);
            it.base = base;
            base += it.n;
        }
        if (base > tiling_.rowBudget) return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
        const CamTopology& t = Topo();
        bool any = false;
        for (int64_t i = 0; i < int64_t(items_); ++i) {
            Item& it = item_[i];
            if (it.work && dp::LoadWordAt(plane_.Own(), layout::ffn_fence_off(t), it.d) != 0) {
                // Replica d was fenced after this item was handed out (§9): nobody waits for its rows. The chunk
                // is dropped, not an error (the host reports the fenced replica); it counts as combined so the
                // replica's state stays ordered.
                Advance(it);
                it.work = false;
            }
            any = any || it.work;
            const int64_t w = i * kCombinePlanWords;
            dp::StoreWordAt(plan_, w + 0, it.work ? it.d : 0);
            dp::StoreWordAt(plan_, w + 1, it.work ? it.s : 0);
            dp::StoreWordAt(plan_, w + 2, it.work ? it.n : 0);
            dp::StoreWordAt(plan_, w + 3, it.base);
            dp::StoreWordAt(plan_, w + 4, it.work ? it.q : 0);
        }
        return any;
    }

    // Item cur_: an empty item (canonical) leaves it.work false; a work item is checked against this rank's state
    // and records, and `it` gets what was recomputed.
    __aicore__ inline bool CheckItem(Item* it) {
        const CamTopology& t = Topo();
        // A bad or stale work item is refused before anything is written: the plane stays usable.
        if (Wi(kWiFingerprint) != plane_.Args().planeId || Wi(kWiFfnRank) != plane_.Rank())
            return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
        if (Wi(kWiKind) == kWiEmpty) {
            if (!dp::EmptyWorkItemIsCanonical(plane_, cur_)) return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
            return true;
        }
        if (Wi(kWiKind) != kWiWork) return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
        const int64_t d = Wi(kWiReplica), q = Wi(kWiSeq);
        if (d < 0 || d >= t.D || q < 1 || Wi(kWiSlot) != layout::slot_of_seq(t, q) || Wi(kWiRows) < 0 ||
            Wi(kWiRows) > layout::recv_rows(t))
            return Refuse(status::kBadInput, d, detail::kArgWorkItem);
        GM_ADDR own = plane_.Own();
        const int64_t combined = dp::LoadWordAt(own, layout::ffn_combined_seq_off(t), d);
        const int64_t consumed = dp::LoadWordAt(own, layout::ffn_done_seq_off(t), d);
        // Chunks of a round are combined in the order they were handed out, each once: this item must start where
        // the combined rows end, and dispatch_recv must have moved past it (the whole round, or its cursor).
        const int64_t lo = dp::LoadWordAt(own, layout::ffn_combined_rows_off(t), d);
        const int64_t cursor = dp::LoadWordAt(own, layout::ffn_chunk_cursor_off(t), d);
        const bool handedOut = q <= consumed || (q == consumed + 1 && cursor > lo);
        if (combined != q - 1 || !handedOut || Wi(layout::work_item_chunk_off(t) + kWcFirstRow) != lo)
            return Refuse(status::kProtocol, d, detail::kProtoStaleWorkItem);
        const int64_t s = layout::slot_of_seq(t, q);
        int64_t hi = 0, roundRows = 0, epoch = 0;
        if (!dp::WorkItemMatchesRecords(plane_, cur_, d, q, s, lo, &hi, &roundRows, &epoch, idx_))
            return Refuse(status::kBadInput, d, detail::kArgWorkItem);
        // The item was computed with the slot weights of its round's epoch only if they are still that epoch's
        // (docs/protocol.md §15): a rebalance that moved (or is moving, -1) the weights since dispatch_recv checked
        // them makes these rows another expert's. A fault, before anything is written: the round cannot be
        // completed right any more, and every rank learns it. (An item of a fenced replica is dropped below:
        // nobody waits for its rows.)
        const int64_t w = dp::LoadWord(own, layout::ffn_weights_epoch_off(t));
        if (epoch != w && dp::LoadWordAt(own, layout::ffn_fence_off(t), d) == 0)
            return plane_.Fail(status::kProtocol, dp::kNoPeer,
                               dp::Round{op::kCombineSend}.Replica(d).Layer(Wi(kWiLayer)).Seq(q),
                               detail::kProtoPlacementEpoch, dp::Epochs(epoch, w));
        // Block 0 keeps what it recomputed: the state it advances after the scatter never comes from the user
        // tensor again, so a caller rewriting the item meanwhile cannot move this rank's state or signals.
        *it = Item{d, s, q, hi, hi >= roundRows, true, hi - lo, 0};
        return true;
    }

    // A bad or stale work item is refused before anything is written: the plane stays usable.
    __aicore__ inline bool Refuse(int64_t code, int64_t d, int64_t det) {
        return plane_.Refuse(code, dp::kNoPeer, dp::Round{op::kCombineSend}.Replica(d).Seq(Wi(kWiSeq)), det);
    }

    // All blocks, from block 0's plan: a block's share of all items' rows, item by item. The cell tables come from
    // the user's tensor again (checked by block 0); the rows each may address are the plan's.
    __aicore__ inline void Scatter() {
        const CamTopology& t = Topo();
        const int64_t rowBytes = t.H * t.act_dtype_bytes;
        int64_t total = 0;
        for (int64_t i = 0; i < int64_t(items_); ++i) total += Plan(i, 2);
        int64_t lo, hi;
        dp::BlockShare(total, &lo, &hi);
        idx_.Forget();
        batched_ = rows_.Start(rowBytes);
        for (int64_t i = 0; i < int64_t(items_); ++i) {
            const int64_t d = Plan(i, 0), s = Plan(i, 1), n = Plan(i, 2), base = Plan(i, 3);
            const int64_t a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
            if (a < b) dp::ForEachRow(t, ItemAt(i), a, b, ScatterRow{this, d, s, rowBytes, base});
        }
        rows_.FlushScatter();
        rows_.Drain();
        // Each row's seal after every row of this block (docs/protocol.md §10.2): combine_recv reads a row only once
        // its seal is the round's seq.
        seals_.AfterData();
        for (int64_t i = 0; i < int64_t(items_); ++i) {
            const int64_t d = Plan(i, 0), s = Plan(i, 1), n = Plan(i, 2), base = Plan(i, 3), q = Plan(i, 4);
            const int64_t a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
            if (a < b) dp::ForEachRow(t, ItemAt(i), a, b, SealRow{this, d, s, q, base});
        }
    }

    // The combine row's destination (token t, slot k) = tk of index entry `entry`, or -1 when out of range.
    __aicore__ inline int64_t RowTk(GM_ADDR region, int64_t o, int64_t entry) {
        const CamTopology& t = Topo();
        // Both checked in Control; bounding them again keeps a peer racing it inside the region and the slot.
        if (entry < 0 || entry >= layout::region_index_entries(t) || o >= tiling_.rowBudget) return -1;
        dp::UseIndexTable(idx_, region, t);
        const int64_t tk = idx_.Get(2 * entry + 1);
        return tk < 0 || tk >= t.Bmax * t.K ? -1 : tk;
    }

    __aicore__ inline void SealOne(int64_t d, int64_t s, int64_t q, int64_t o, int64_t p, int64_t entry) {
        const CamTopology& t = Topo();
        const int64_t a = layout::attn_rank_of(t, d, p);
        const int64_t tk = RowTk(plane_.Own() + layout::ffn_region_off(t, a, s), o, entry);
        if (tk < 0) return;
        seals_.Write(plane_.Window(a) + layout::attn_combine_seal_off(t, s, tk), 1, q);
    }

    __aicore__ inline int64_t Plan(int64_t i, int64_t w) const {
        return dp::LoadWordAt(plan_, i * kCombinePlanWords + w);
    }

    __aicore__ inline void ScatterOne(int64_t d, int64_t s, int64_t rowBytes, int64_t o, int64_t p, int64_t entry) {
        const CamTopology& t = Topo();
        const int64_t a = layout::attn_rank_of(t, d, p);
        const int64_t tk = RowTk(plane_.Own() + layout::ffn_region_off(t, a, s), o, entry);
        if (tk < 0) return;
        GM_ADDR dst = plane_.Window(a) + layout::attn_combine_row_off(t, s, tk);
        if (batched_) {
            rows_.Scatter(dst, expertOut_ + o * rowBytes);
        } else {
            mover_.Copy(dst, expertOut_ + o * rowBytes, rowBytes);
        }
    }

    // Only the round's last chunk completes it: Attention waits for done[s][f] == seq, so a round is in on the
    // Attention side only when every chunk of every FFN rank is.
    __aicore__ inline void Complete() {
        const CamTopology& t = Topo();
        const int64_t f = layout::ffn_index(t, plane_.Rank());
        for (int64_t i = 0; i < int64_t(items_); ++i) {
            const Item& it = item_[i];
            if (!it.work) continue;
            if (it.last) {
                for (int64_t p = 0; p < t.P; ++p) {
                    plane_.Signals().Send(plane_.Window(layout::attn_rank_of(t, it.d, p)),
                                          layout::attn_completion_signal_off(t, it.s, f), it.q);
                }
            }
            Advance(it);
        }
    }

    // combined_rows moves past this chunk; the last chunk resets it and records the round as combined.
    __aicore__ inline void Advance(const Item& it) {
        const CamTopology& t = Topo();
        GM_ADDR own = plane_.Own();
        if (it.last) {
            dp::StoreWordAt(own, layout::ffn_combined_rows_off(t), it.d, 0);
            dp::StoreWordAt(own, layout::ffn_combined_seq_off(t), it.d, it.q);
        } else {
            dp::StoreWordAt(own, layout::ffn_combined_rows_off(t), it.d, it.next);
        }
    }

    CombineSendTilingData tiling_{};
    Item item_[kCombineSendMaxItems];
    uint32_t items_ = 1;
    GM_ADDR cur_ = nullptr;   // the item Control is checking
    GM_ADDR plan_ = nullptr;  // block 0's plan (workspace)
    dp::Plane plane_;
    dp::Decision decision_;
    GM_ADDR expertOut_ = nullptr;
    GM_ADDR wi_ = nullptr;
    AscendC::TPipe pipe_;
    dp::ByteMover mover_;
    dp::RowBatch rows_;          // the block's consecutive expert_out rows, scattered to their combine rows
    bool batched_ = false;       // a row fits rows_ (else mover_ moves it)
    dp::UbWindow<int32_t> idx_;  // index entries of the region being read
    dp::SealPort seals_;         // the seals of this block's combine rows
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_combine_send(GM_ADDR expertOut, GM_ADDR workItem, GM_ADDR peers,
                                                       GM_ADDR workspace, cam::kernels::CombineSendTilingData tiling) {
    // Vector-only, but the hard SyncAll needs a mixed launch (docs/protocol.md, "Launch requirements").
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    cam::kernels::CombineSend op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(expertOut, workItem, peers, workspace, tiling);
    op.Process();
}

#include "common/launch.h"
#include "combine_send/combine_send.h"

void cam::kernels::LaunchCombineSend(uint32_t blockDim, void* stream, uint8_t* expertOut, uint8_t* workItem,
                                     uint8_t* peers, uint8_t* workspace, const CombineSendTilingData& tiling) {
    CAM_DATAPLANE_LAUNCH(tiling.comm, peers, cam_combine_send, blockDim, stream, expertOut, workItem, peers, workspace,
                         tiling);
}
