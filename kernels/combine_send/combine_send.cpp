// combine_send (FFN rank A+f), docs/protocol.md §6.3: write each expert output row back to the combine row of its
// (token, slot) on its source Attention rank, then signal done[s][f] = seq on every participant of the replica,
// including those that got no rows. An empty work item is a no-op.
#include "kernel_operator.h"

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
        mover_.Init(pipe_, tiling.copyChunkBytes);
        rows_.Init(pipe_, dp::kRowBatchUbBytes);
        idx_.Init(pipe_, dp::kTableWindowElems);
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
    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct ControlStep {
        CombineSend* op;
        __aicore__ inline bool operator()() const { return op->Control(); }
    };
    struct ScatterRow {
        CombineSend* op;
        int64_t d, s, rowBytes;
        __aicore__ inline void operator()(int64_t o, int64_t p, int64_t entry) const {
            op->ScatterOne(d, s, rowBytes, o, p, entry);
        }
    };

    __aicore__ inline const CamTopology& Topo() const { return plane_.Topo(); }
    __aicore__ inline int64_t Wi(int64_t word) const { return dp::LoadWordAt(wi_, word); }

    __aicore__ inline bool Control() {
        const CamTopology& t = Topo();
        if (!plane_.EntryOk(op::kCombineSend)) return false;
        // A bad or stale work item is refused before anything is written: the plane stays usable.
        if (Wi(kWiFingerprint) != plane_.Args().planeId || Wi(kWiFfnRank) != plane_.Rank())
            return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
        if (Wi(kWiKind) == kWiEmpty) {
            if (!dp::EmptyWorkItemIsCanonical(plane_, wi_)) return Refuse(status::kBadInput, -1, detail::kArgWorkItem);
            return false;
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
        int64_t hi = 0, roundRows = 0;
        if (!dp::WorkItemMatchesRecords(plane_, wi_, d, q, s, lo, &hi, &roundRows, idx_))
            return Refuse(status::kBadInput, d, detail::kArgWorkItem);
        // Block 0 keeps what it recomputed: the state it advances after the scatter never comes from the user
        // tensor again, so a caller rewriting the item meanwhile cannot move this rank's state or signals.
        item_ = Item{d, s, q, hi, hi >= roundRows};
        if (dp::LoadWordAt(own, layout::ffn_fence_off(t), d) != 0) {
            // Replica d was fenced after this item was handed out (§9): nobody waits for its rows. The chunk is
            // dropped, not an error (the host reports the fenced replica); it counts as combined so the
            // replica's state stays ordered.
            Advance();
            return false;
        }
        return true;
    }

    // A bad or stale work item is refused before anything is written: the plane stays usable.
    __aicore__ inline bool Refuse(int64_t code, int64_t d, int64_t det) {
        return plane_.Refuse(code, dp::kNoPeer, dp::Round{op::kCombineSend}.Replica(d).Seq(Wi(kWiSeq)), det);
    }

    __aicore__ inline void Scatter() {
        const CamTopology& t = Topo();
        const int64_t d = Wi(kWiReplica), s = Wi(kWiSlot), n = Wi(kWiRows);
        const int64_t rowBytes = t.H * t.act_dtype_bytes;
        int64_t lo, hi;
        dp::BlockShare(n, &lo, &hi);
        idx_.Forget();
        batched_ = rows_.Start(rowBytes);
        dp::ForEachRow(t, wi_, lo, hi, ScatterRow{this, d, s, rowBytes});
        rows_.FlushScatter();
    }

    __aicore__ inline void ScatterOne(int64_t d, int64_t s, int64_t rowBytes, int64_t o, int64_t p, int64_t entry) {
        const CamTopology& t = Topo();
        const int64_t a = layout::attn_rank_of(t, d, p);
        GM_ADDR region = plane_.Own() + layout::ffn_region_off(t, a, s);
        // Both checked in Control; bounding them again keeps a peer racing it inside the region and the slot.
        if (entry < 0 || entry >= layout::region_index_entries(t)) return;
        dp::UseIndexTable(idx_, region, t);
        const int64_t tk = idx_.Get(2 * entry + 1);
        if (tk < 0 || tk >= t.Bmax * t.K) return;
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
        if (item_.last) {
            const int64_t f = layout::ffn_index(t, plane_.Rank());
            for (int64_t p = 0; p < t.P; ++p) {
                plane_.Signals().Send(plane_.Window(layout::attn_rank_of(t, item_.d, p)),
                                      layout::attn_completion_signal_off(t, item_.s, f), item_.q);
            }
        }
        Advance();
    }

    // combined_rows moves past this chunk; the last chunk resets it and records the round as combined.
    __aicore__ inline void Advance() {
        const CamTopology& t = Topo();
        GM_ADDR own = plane_.Own();
        if (item_.last) {
            dp::StoreWordAt(own, layout::ffn_combined_rows_off(t), item_.d, 0);
            dp::StoreWordAt(own, layout::ffn_combined_seq_off(t), item_.d, item_.q);
        } else {
            dp::StoreWordAt(own, layout::ffn_combined_rows_off(t), item_.d, item_.next);
        }
    }

    // The checked item (block 0): replica, slot, seq, the row after its last, whether it ends its round.
    struct Item {
        int64_t d = 0, s = 0, q = 0, next = 0;
        bool last = false;
    };

    CombineSendTilingData tiling_{};
    Item item_{};
    dp::Plane plane_;
    dp::Decision decision_;
    GM_ADDR expertOut_ = nullptr;
    GM_ADDR wi_ = nullptr;
    AscendC::TPipe pipe_;
    dp::ByteMover mover_;
    dp::RowBatch rows_;          // the block's consecutive expert_out rows, scattered to their combine rows
    bool batched_ = false;       // a row fits rows_ (else mover_ moves it)
    dp::UbWindow<int32_t> idx_;  // index entries of the region being read
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_combine_send(GM_ADDR expertOut, GM_ADDR workItem, GM_ADDR peers,
                                                       GM_ADDR workspace, cam::kernels::CombineSendTilingData tiling) {
    // Vector-only, but the hard SyncAll needs a mixed launch (docs/protocol.md, "Launch requirements").
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    cam::kernels::CombineSend op;
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
