// combine_recv (Attention rank a), docs/protocol.md §6.4: wait (bounded) until every FFN rank completed this rank's
// oldest round in flight, then per token acc = acc + w[t,k] * row(t,k) in fp32 for k = 0..K-1 (multiply, then add;
// empty slots skipped) and round once to the activation dtype.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "combine_recv/combine_recv_tiling_data.h"
#include "common/dataplane.h"
#include "common/work_item_check.h"

namespace cam::kernels {

template <typename T>
class CombineRecv {
public:
    __aicore__ inline void Init(GM_ADDR ids, GM_ADDR weights, GM_ADDR out, GM_ADDR peers, GM_ADDR workspace,
                                const CombineRecvTilingData& tiling) {
        tiling_ = tiling;
        plane_.Init(peers, tiling.comm, pipe_);
        decision_.Init(workspace);
        const CamTopology& t = plane_.Topo();
        // ids and weights are read once per (token, slot) and column pass: through UB, not scalar GM reads.
        ids_.Init(pipe_, dp::kTableWindowElems);
        ids_.Use(ids, tiling.tokens * t.K);
        w_.Init(pipe_, dp::kTableWindowElems);
        w_.Use(weights, tiling.tokens * t.K);
        seals_.Init(pipe_, dp::kSealRunElems);
        out_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), uint64_t(tiling.tokens) * t.H);
        const uint32_t n = tiling.colsPerPass;
        pipe_.InitBuffer(inQue_, 2, UbBytes(uint64_t(n) * sizeof(T)));
        pipe_.InitBuffer(outQue_, 2, UbBytes(uint64_t(n) * sizeof(T)));
        pipe_.InitBuffer(accBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(rowBuf_, UbBytes(uint64_t(n) * 4));
    }

    __aicore__ inline void Process() {
        const bool go = decision_.Decide(ControlStep{this}, tiling_.comm.followerCycles);
        if (!go) return;
        const CamTopology& t = plane_.Topo();
        round_ = dp::LoadWord(plane_.Own(), layout::attn_recv_count_off(t));
        slot_ = layout::slot_of_seq(t, layout::seq_of_round(round_));
        Reduce();
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::SyncAll();
        if (AscendC::GetBlockIdx() == 0) dp::StoreWord(plane_.Own(), layout::attn_recv_count_off(t), round_ + 1);
    }

private:
    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): a small functor instead.
    struct ControlStep {
        CombineRecv* op;
        __aicore__ inline bool operator()() const { return op->Control(); }
    };

    __aicore__ inline bool Control() {
        const CamTopology& t = plane_.Topo();
        if (!plane_.EntryOk(op::kCombineRecv)) return false;
        GM_ADDR own = plane_.Own();
        const int64_t d = layout::replica_of(t, plane_.Rank());
        const int64_t r = dp::LoadWord(own, layout::attn_recv_count_off(t));
        const int64_t seq = layout::seq_of_round(r), s = layout::slot_of_seq(t, seq);
        dp::Round round = dp::Round{op::kCombineRecv}.Replica(d).Seq(seq);
        // Refusals: found before anything is written or awaited, so the round stays receivable.
        if (r >= dp::LoadWord(own, layout::attn_send_count_off(t))) {
            return plane_.Refuse(status::kProtocol, dp::kNoPeer, round, detail::kProtoNothingInFlight);
        }
        const int64_t layer = dp::LoadWordAt(own, layout::attn_slot_state_off(t, s), kSlotLayer);
        round = round.Layer(layer);
        if (dp::LoadWordAt(own, layout::attn_slot_state_off(t, s), kSlotSeq) != seq) {
            return plane_.Fail(status::kProtocol, dp::kNoPeer, round, detail::kProtoRecordSeq);
        }
        if (dp::LoadWordAt(own, layout::attn_slot_state_off(t, s), kSlotTokens) != tiling_.tokens) {
            return plane_.Refuse(status::kBadInput, dp::kNoPeer, round, detail::kArgTokens);
        }
        for (int64_t i = 0; i < tiling_.tokens * t.K; ++i) {
            const int64_t id = ids_.Get(i);
            if (id < -1 || id >= t.E) {
                return plane_.Refuse(status::kBadInput, dp::kNoPeer, round, detail::kArgTopkIds);
            }
        }
        if (dp::IdsDigest(ids_, tiling_.tokens * t.K) !=
            dp::LoadWordAt(own, layout::attn_slot_state_off(t, s), kSlotIdsDigest)) {
            return plane_.Refuse(status::kBadInput, dp::kNoPeer, round, detail::kArgIdsDiffer);
        }
        CompletionPoll poll{this, round, seq, s};
        // done[s][f] of every FFN rank: F lines in a row.
        const dp::WaitEnd end = dp::BoundedWait(
            plane_, round, own + layout::attn_completion_signal_off(t, s, 0),
            layout::attn_completion_signal_off(t, s, t.F) - layout::attn_completion_signal_off(t, s, 0),
            AscendC::GetSystemCycle() + tiling_.comm.timeoutCycles, poll);
        if (end != dp::WaitEnd::kExpired) return end == dp::WaitEnd::kDone;
        // Every FFN rank signalled, but a row's seal never came (docs/protocol.md §10.2): which rank owes it is not
        // known here (a placement table may put the expert anywhere), so no peer is named.
        if (poll.missing == dp::kNoPeer)
            return plane_.Fail(status::kTimeout, dp::kNoPeer, round, detail::kAwaitCompletion);
        // Name the real fault: if a participant of this replica never published the round on the FFN rank we
        // wait for, that rank could never serve it.
        for (int64_t p = 0; p < t.P; ++p) {
            const int64_t a = layout::attn_rank_of(t, d, p);
            if (plane_.Signals().Poll(plane_.Window(poll.missing), layout::ffn_ready_signal_off(t, a, s)) < seq)
                return plane_.Fail(status::kTimeout, a, round, detail::kAwaitReplicaMate);
        }
        return plane_.Fail(status::kTimeout, poll.missing, round, detail::kAwaitCompletion);
    }

    // Every FFN rank completed round seq (slot s) for this rank: done[s][f] == seq for all f.
    struct CompletionPoll {
        CombineRecv* op;
        dp::Round round;
        int64_t seq, slot;
        int64_t missing = dp::kNoPeer;  // the first FFN rank not done yet, for the timeout record
        __aicore__ inline dp::PollResult operator()() { return op->PollCompletion(round, seq, slot, &missing); }
    };

    __aicore__ inline dp::PollResult PollCompletion(const dp::Round& round, int64_t seq, int64_t s,
                                                    int64_t* missing) {
        const CamTopology& t = plane_.Topo();
        *missing = dp::kNoPeer;
        for (int64_t f = 0; f < t.F && *missing == dp::kNoPeer; ++f) {
            const int64_t done = plane_.Signals().Poll(plane_.Own(), layout::attn_completion_signal_off(t, s, f));
            if (done > seq) {
                plane_.Fail(status::kProtocol, layout::ffn_rank(t, f), round, detail::kProtoSignalAhead);
                return dp::PollResult::kStop;
            }
            if (done < seq) *missing = layout::ffn_rank(t, f);
        }
        if (*missing != dp::kNoPeer) return dp::PollResult::kWait;
        return RowsSealed(seq, s) ? dp::PollResult::kDone : dp::PollResult::kWait;
    }

    // Every combine row this round has (a slot whose id is not -1) carries the round's seal: its FFN rank's writes
    // of it are in, whatever the order in which other cores' writes (the done signal) arrived (§10.2).
    __aicore__ inline bool RowsSealed(int64_t seq, int64_t s) {
        const CamTopology& t = plane_.Topo();
        const int64_t n = tiling_.tokens * t.K;
        seals_.Use(plane_.Own() + layout::attn_combine_seal_off(t, s, 0), n);
        seals_.Forget();
        for (int64_t i = 0; i < n; ++i)
            if (ids_.Get(i) != -1 && seals_.Get(i) != seq) return false;
        return true;
    }

    __aicore__ inline void Reduce() {
        const CamTopology& t = plane_.Topo();
        int64_t lo, hi;
        dp::BlockShare(tiling_.tokens, &lo, &hi);
        AscendC::LocalTensor<float> acc = accBuf_.Get<float>();
        AscendC::LocalTensor<float> rowf = rowBuf_.Get<float>();
        for (int64_t tok = lo; tok < hi; ++tok) {
            for (uint32_t c = 0; c < t.H; c += tiling_.colsPerPass) {
                const uint32_t left = static_cast<uint32_t>(t.H) - c;
                const uint32_t n = left < tiling_.colsPerPass ? left : tiling_.colsPerPass;
                AscendC::Duplicate(acc, 0.0f, n);
                for (int64_t k = 0; k < t.K; ++k) {
                    if (ids_.Get(tok * t.K + k) == -1) continue;
                    const float w = w_.Get(tok * t.K + k);
                    AscendC::GlobalTensor<T> row = dp::TensorAt<T>(
                        plane_.Own(), layout::attn_combine_row_off(t, slot_, tok * t.K + k) + c * sizeof(T), n);
                    AscendC::LocalTensor<T> in = inQue_.AllocTensor<T>();
                    AscendC::DataCopyPad(in, row, {1, uint32_t(n * sizeof(T)), 0, 0, 0}, {false, 0, 0, T()});
                    inQue_.EnQue(in);
                    in = inQue_.DeQue<T>();
                    AscendC::Cast(rowf, in, AscendC::RoundMode::CAST_NONE, n);
                    inQue_.FreeTensor(in);
                    AscendC::Muls(rowf, rowf, w, n);   // fp32 product, rounded
                    AscendC::Add(acc, acc, rowf, n);   // then fp32 sum, rounded: never fused
                }
                AscendC::LocalTensor<T> o = outQue_.AllocTensor<T>();
                AscendC::Cast(o, acc, AscendC::RoundMode::CAST_RINT, n);
                outQue_.EnQue(o);
                o = outQue_.DeQue<T>();
                AscendC::DataCopyPad(out_[uint64_t(tok) * t.H + c], o, {1, uint32_t(n * sizeof(T)), 0, 0, 0});
                outQue_.FreeTensor(o);
            }
        }
    }

    CombineRecvTilingData tiling_{};
    dp::Plane plane_;
    dp::Decision decision_;
    int64_t round_ = 0, slot_ = 0;
    AscendC::TPipe pipe_;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> accBuf_, rowBuf_;
    dp::UbWindow<int32_t> ids_;
    dp::UbWindow<float> w_;
    dp::UbWindow<int64_t> seals_;  // the combine rows' seals of the round awaited
    AscendC::GlobalTensor<T> out_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_combine_recv(GM_ADDR topkIds, GM_ADDR topkWeights, GM_ADDR out,
                                                       GM_ADDR peers, GM_ADDR workspace,
                                                       cam::kernels::CombineRecvTilingData tiling) {
    // Vector-only, but the hard SyncAll needs a mixed launch (docs/protocol.md, "Launch requirements").
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    if (tiling.key == cam::kernels::kCombineRecvBf16) {
        cam::kernels::CombineRecv<bfloat16_t> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Init(topkIds, topkWeights, out, peers, workspace, tiling);
        op.Process();
    } else {
        cam::kernels::CombineRecv<half> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Init(topkIds, topkWeights, out, peers, workspace, tiling);
        op.Process();
    }
}

#include "common/launch.h"
#include "combine_recv/combine_recv.h"

void cam::kernels::LaunchCombineRecv(uint32_t blockDim, void* stream, uint8_t* topkIds, uint8_t* topkWeights,
                                     uint8_t* out, uint8_t* peers, uint8_t* workspace,
                                     const CombineRecvTilingData& tiling) {
    CAM_DATAPLANE_LAUNCH(tiling.comm, peers, cam_combine_recv, blockDim, stream, topkIds, topkWeights, out, peers,
                         workspace, tiling);
}
