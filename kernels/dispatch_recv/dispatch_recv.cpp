// dispatch_recv (FFN rank A+f), docs/protocol.md §6.2: select ready replicas round robin (§7), wait with a bound,
// validate the P records of each before writing any output, then gather the rows expert-major into the static
// outputs. One work item per launch, or (batched) a snapshot: every replica ready at scan time whose next chunk
// still fits the row budget, taken in round-robin order, never waiting for one that is not ready. A round routed by
// a newer placement table than this rank's slot weights hold (or any, while the weights move) is not ready yet; one
// routed by an older table is a fault naming both epochs (§15). When nothing is ready within the idle bound the
// outputs describe no work: idle is not a fault.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/dataplane.h"
#include "common/work_item_check.h"
#include "dispatch_recv/dispatch_recv_tiling_data.h"

namespace cam::kernels {

class DispatchRecv {
public:
    __aicore__ inline void Init(GM_ADDR peers, GM_ADDR expandX, GM_ADDR scales, GM_ADDR expertCounts,
                                GM_ADDR groupTable, GM_ADDR origin, GM_ADDR workItem, GM_ADDR workspace,
                                const DispatchRecvTilingData& tiling) {
        tiling_ = tiling;
        plane_.Init(peers, tiling.comm, pipe_);
        decision_.Init(workspace);
        expandX_ = expandX;
        scales_ = scales;
        counts_ = expertCounts;
        groups_ = groupTable;
        origin_ = origin;
        wi_ = workItem;
        maxItems_ = tiling.maxItems < 1 ? 1 : tiling.maxItems > kDispatchRecvMaxItems ? kDispatchRecvMaxItems
                                                                                      : tiling.maxItems;
        mover_.Init(pipe_, tiling.copyChunkBytes);
        rows_.Init(pipe_, dp::kRowBatchUbBytes);
        idx_.Init(pipe_, dp::kTableWindowElems);
        scalesIn_.Init(pipe_, dp::kTableWindowElems);
        seals_.Init(pipe_, dp::kSealRunElems);
        pipe_.InitBuffer(scalesOutBuf_, dp::kTableWindowUbBytes);
        scalesOut_ = scalesOutBuf_.Get<float>();
    }

    __aicore__ inline void Process() {
        const bool go = decision_.Decide(ControlStep{this}, tiling_.comm.followerCycles);
        if (!go) return;
        Gather();
        AscendC::PipeBarrier<PIPE_ALL>();
        AscendC::SyncAll();
        if (AscendC::GetBlockIdx() == 0) Consume();
    }

private:
    // A selected chunk (block 0), for the outputs and for Consume: never read back from the output tensors.
    // Rows [lo, hi) of replica d's round q (slot s, `layer`, `total` rows), at rows [base, base + hi - lo) of
    // expand_x.
    struct Item {
        int64_t d = 0, q = 0, s = 0, layer = 0, lo = 0, hi = 0, total = 0, base = 0, epoch = 0;
    };

    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct ControlStep {
        DispatchRecv* op;
        __aicore__ inline bool operator()() const {
            const bool ready = op->Control();
            op->WriteOutputs();
            dp::FlushScalarStores(op->wi_);
            return ready;
        }
    };
    struct GatherRow {
        DispatchRecv* op;
        int64_t d, s, rowBytes, base;
        __aicore__ inline void operator()(int64_t o, int64_t p, int64_t entry) const {
            op->GatherOne(d, s, rowBytes, base + o, p, entry);
        }
    };

    __aicore__ inline const CamTopology& Topo() const { return plane_.Topo(); }
    // An error record's round; the replica, layer and seq are added where they are known.
    __aicore__ static inline dp::Round ErrRound() { return dp::Round{op::kDispatchRecv}; }
    __aicore__ inline int64_t A() const { return Topo().D * Topo().P; }

    __aicore__ inline int64_t DoneSeq(int64_t d) const {
        return dp::LoadWordAt(plane_.Own(), layout::ffn_done_seq_off(Topo()), d);
    }
    __aicore__ inline bool Fenced(int64_t d) const {
        return dp::LoadWordAt(plane_.Own(), layout::ffn_fence_off(Topo()), d) != 0;
    }
    __aicore__ inline int64_t Ready(int64_t attnRank, int64_t slot) const {
        return plane_.Signals().Poll(plane_.Own(), layout::ffn_ready_signal_off(Topo(), attnRank, slot));
    }
    __aicore__ inline GM_ADDR Region(int64_t attnRank, int64_t slot) const {
        return plane_.Own() + layout::ffn_region_off(Topo(), attnRank, slot);
    }
    __aicore__ inline int64_t Hdr(int64_t attnRank, int64_t slot, int64_t word) const {
        return dp::LoadWordAt(Region(attnRank, slot), word);
    }
    // Participant a's round q (its ready word seen) has arrived whole: its record and index table are sealed with q,
    // and then every token slot its record names (docs/protocol.md §10.2). Another core's ready word says nothing
    // about when this core's writes land, so nothing of the region is read before its seal. A record naming more
    // token slots than the region has is not awaited but refused by Validate.
    __aicore__ inline bool Arrived(int64_t a, int64_t s, int64_t q) {
        const CamTopology& t = Topo();
        GM_ADDR region = Region(a, s);
        if (!dp::Sealed(seals_, region + layout::region_tables_seal_off(t), 1, q)) return false;
        const int64_t n = Hdr(a, s, kHdrTokenSlots);
        if (n > layout::region_token_slots(t)) return true;
        return dp::Sealed(seals_, region + layout::region_token_seal_off(t, 0), n < 0 ? 0 : n, q);
    }
    // The epoch of the slot weights this rank serves with (host-written, docs/protocol.md §15).
    __aicore__ inline int64_t WeightsEpoch() const {
        return dp::LoadWord(plane_.Own(), layout::ffn_weights_epoch_off(Topo()));
    }
    // Round q of replica d (slot s, every participant published) was routed by a table newer than the weights, or
    // the weights are being moved (-1): it is not ready yet, as if unpublished. The records' epochs are bounded
    // and compared with the weights' in Validate; an older epoch is a fault there, not a hold-back.
    __aicore__ inline bool HeldBack(int64_t d, int64_t s) const {
        if (w_ == -1) return true;
        if (w_ < 0) return false;
        for (int64_t p = 0; p < Topo().P; ++p)
            if (Hdr(layout::attn_rank_of(Topo(), d, p), s, kHdrEpoch) > w_) return true;
        return false;
    }

    // The stop word is memory its owner writes from the host at any time: only whether it is zero is used, never
    // its value, and its place is the layout's, not an argument.
    __aicore__ inline bool Stopped() const {
        if (tiling_.stop == 0) return false;
        AscendC::GlobalTensor<int32_t> word = dp::TensorAt<int32_t>(plane_.Own(), layout::ffn_stop_off(Topo()), 1);
        AscendC::DataCacheCleanAndInvalid<int32_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(word);
        return word.GetValue(0) != 0;
    }

    // ---- block 0 ----
    // Replicas are polled round robin from rr_next; the first whose next round every participant published is
    // selected. Idle (nothing begun) ends the wait after idleCycles without an error; a begun round that stays
    // partial for timeoutCycles is a fault naming the missing participant.
    struct ReadyPoll {
        DispatchRecv* op;
        int64_t rr, start;
        int64_t partialSince = -1;
        bool selected = false;
        __aicore__ inline dp::PollResult operator()() { return op->PollReplicas(this); }
    };

    __aicore__ inline bool Control() {
        const CamTopology& t = Topo();
        if (!plane_.EntryOk(op::kDispatchRecv)) return false;
        ReadyPoll poll{this, dp::LoadWordAt(plane_.Own(), layout::ffn_state_off(t), kFfnRrNext),
                       AscendC::GetSystemCycle()};
        // ready[a][s] of every Attention rank and slot: one block of lines, any of which may select a replica.
        dp::BoundedWait(plane_, ErrRound(), plane_.Own() + layout::ffn_ready_signal_off(t, 0, 0),
                        layout::ffn_ready_signal_off(t, A(), 0) - layout::ffn_ready_signal_off(t, 0, 0),
                        dp::kNoDeadline, poll);
        return poll.selected;
    }

    __aicore__ inline dp::PollResult PollReplicas(ReadyPoll* st) {
        const CamTopology& t = Topo();
        // A stopped loop takes nothing more: the wait ends now, without an error, and the outputs are empty.
        if (Stopped()) return dp::PollResult::kStop;
        int64_t partial = -1, partialMissing = -1, partialPublished = -1;
        w_ = WeightsEpoch();  // one value per poll: the hold-back and the checks of this selection agree
        for (int64_t n = 0; n < t.D; ++n) {
            const int64_t d = (st->rr + n) % t.D;
            // A fenced replica (an Attention rank of it died, §9) is never selected, however much of its next
            // round was published: its rounds are dropped, and a partial one is not waited for.
            if (Fenced(d)) continue;
            const int64_t q = DoneSeq(d) + 1;
            const int64_t s = layout::slot_of_seq(t, q);
            int64_t published = 0, begun = 0, missing = -1, first = -1;
            for (int64_t p = 0; p < t.P; ++p) {
                const int64_t a = layout::attn_rank_of(t, d, p);
                const int64_t v = Ready(a, s);
                if (v > q) {
                    plane_.Fail(status::kProtocol, a, ErrRound().Replica(d).Seq(q), detail::kProtoSignalAhead);
                    return dp::PollResult::kStop;
                }
                if (v == q) {
                    ++begun;
                    if (first < 0) first = a;
                }
                // Published: the ready word and every seal of the round (§10.2); a participant whose writes are
                // still landing is awaited like one that has not signalled, under the same timeout.
                if (v == q && Arrived(a, s, q)) {
                    ++published;
                } else if (missing < 0) {
                    missing = a;
                }
            }
            if (published == t.P) {
                if (HeldBack(d, s)) continue;  // not ready for these weights: neither selected nor partial
                st->selected = Snapshot(st->rr);
                return st->selected ? dp::PollResult::kDone : dp::PollResult::kStop;
            }
            if (begun > 0 && partial < 0) {
                partial = d;
                partialMissing = missing;
                partialPublished = first;
            }
        }
        const int64_t now = AscendC::GetSystemCycle();
        if (partial >= 0) {
            // A begun round: some participants published, so waiting is bounded by the timeout, not idle.
            if (st->partialSince < 0) st->partialSince = now;
            if (now - st->partialSince > tiling_.comm.timeoutCycles) {
                const int64_t q = DoneSeq(partial) + 1;
                const int64_t layer = Hdr(partialPublished, layout::slot_of_seq(t, q), kHdrLayer);
                plane_.Fail(status::kTimeout, partialMissing, ErrRound().Replica(partial).Layer(layer).Seq(q),
                            detail::kAwaitReplica);
                return dp::PollResult::kStop;
            }
        } else {
            st->partialSince = -1;
            if (now - st->start > tiling_.comm.idleCycles) return dp::PollResult::kStop;  // idle: not a fault
        }
        return dp::PollResult::kWait;
    }

    // A record of participant a is bad: fatal, the plane is inconsistent.
    __aicore__ inline bool FailRecord(int64_t code, int64_t a, int64_t d, int64_t layer, int64_t q, int64_t det) {
        return plane_.Fail(code, a, ErrRound().Replica(d).Layer(layer).Seq(q), det);
    }

    // Every participant of replica d published round q (slot s)? A signal past q is a protocol fault (*bad).
    __aicore__ inline bool FullyPublished(int64_t d, int64_t q, int64_t s, bool* bad) {
        const CamTopology& t = Topo();
        for (int64_t p = 0; p < t.P; ++p) {
            const int64_t a = layout::attn_rank_of(t, d, p);
            const int64_t v = Ready(a, s);
            if (v > q) {
                *bad = true;
                return plane_.Fail(status::kProtocol, a, ErrRound().Replica(d).Seq(q), detail::kProtoSignalAhead);
            }
            if (v != q || !Arrived(a, s, q)) return false;
        }
        return true;
    }

    // The selection, in round-robin order from rr: every replica ready now, while the item count and the row
    // budget allow, each one chunk of its next round. A ready replica whose chunk does not fit ends the scan, so
    // the next selection starts at or before it: with the first item always fitting (the budget holds a whole
    // chunk), a replica ready at a scan is served within D selections, as in the one-item mode (§7).
    __aicore__ inline bool Snapshot(int64_t rr) {
        const CamTopology& t = Topo();
        nItems_ = 0;
        int64_t used = 0;
        for (int64_t n = 0; n < t.D && nItems_ < int64_t(maxItems_); ++n) {
            const int64_t d = (rr + n) % t.D;
            if (Fenced(d)) continue;
            const int64_t q = DoneSeq(d) + 1;
            const int64_t s = layout::slot_of_seq(t, q);
            bool bad = false;
            if (!FullyPublished(d, q, s, &bad)) {
                if (!bad) continue;
                nItems_ = 0;
                return false;
            }
            if (HeldBack(d, s)) continue;
            Item it{};
            if (!Validate(d, q, s, &it)) {
                nItems_ = 0;  // a fault: nothing was selected
                return false;
            }
            if (it.hi - it.lo > tiling_.rowBudget - used) break;
            it.base = used;
            used += it.hi - it.lo;
            items_[nItems_++] = it;
        }
        return nItems_ > 0;
    }

    // Replica d's round q is ready on every participant: validate all P records, and fix the chunk it serves.
    __aicore__ inline bool Validate(int64_t d, int64_t q, int64_t s, Item* it) {
        const CamTopology& t = Topo();
        const int64_t R = layout::experts_per_ffn(t);
        const int64_t fp = layout::fingerprint(t);
        int64_t layer = -1, total = 0, epoch = 0;
        for (int64_t p = 0; p < t.P; ++p) {
            const int64_t a = layout::attn_rank_of(t, d, p);
            if (Hdr(a, s, kHdrFingerprint) != fp)
                return FailRecord(status::kTopologyMismatch, a, d, layer, q, Hdr(a, s, kHdrFingerprint));
            if (Hdr(a, s, kHdrSeq) != q) return FailRecord(status::kProtocol, a, d, layer, q, detail::kProtoRecordSeq);
            const int64_t l = Hdr(a, s, kHdrLayer);
            if (l < 0 || l >= t.L) return FailRecord(status::kBadInput, a, d, layer, q, detail::kArgLayer);
            if (p > 0 && l != layer) return FailRecord(status::kProtocol, a, d, layer, q, detail::kProtoLayerDiffers);
            layer = l;
            const int64_t rows = Hdr(a, s, kHdrRows);
            int64_t sum = 0;
            for (int64_t j = 0; j < R; ++j) {
                const int64_t c = Hdr(a, s, kHdrCounts + j);
                if (c < 0) return FailRecord(status::kProtocol, a, d, layer, q, detail::kProtoCounts);
                sum += c;
            }
            if (sum != rows) return FailRecord(status::kProtocol, a, d, layer, q, detail::kProtoCounts);
            if (rows > layout::region_index_entries(t) ||
                Hdr(a, s, kHdrTokenSlots) > layout::region_token_slots(t))
                return FailRecord(status::kCapacity, a, d, layer, q, rows);
            if (!dp::RecordInRange(t, Region(a, s), q, idx_))
                return FailRecord(status::kProtocol, a, d, layer, q, detail::kProtoIndexEntry);
            // Routed by the table whose slots these weights hold, or a fault naming both epochs (a newer one was
            // held back; an older one was routed by a table whose experts these slots no longer hold).
            epoch = Hdr(a, s, kHdrEpoch);
            if (epoch != w_)
                return plane_.Fail(status::kProtocol, a, ErrRound().Replica(d).Layer(layer).Seq(q),
                                   detail::kProtoPlacementEpoch, dp::Epochs(epoch, w_));
            total += rows;
        }
        // The round is served as chunks of at most capacity rows (§8); the cursor says where the next one starts.
        // It is our own state, but a peer that rewrote its records since the previous chunk could have shrunk
        // the round below it: that is a protocol fault, never an out-of-range chunk.
        const int64_t lo = dp::LoadWordAt(plane_.Own(), layout::ffn_chunk_cursor_off(t), d);
        if (!dp::ChunkStartValid(lo, total))
            return plane_.Fail(status::kProtocol, dp::kNoPeer, ErrRound().Replica(d).Layer(layer).Seq(q),
                               detail::kProtoIndexEntry);
        const int64_t hi = dp::ChunkEnd(plane_, d, s, lo);
        *it = Item{d, q, s, layer, lo, hi, total, 0, epoch};
        return true;
    }

    // Block 0, after Control: the work item(s), and the counts (one item) or the group table (a batch). Slots past
    // the selected items are empty work items; their groups are {layer 0, expert j, 0 rows} (in range, no rows).
    __aicore__ inline void WriteOutputs() {
        const CamTopology& t = Topo();
        const int64_t R = layout::experts_per_ffn(t), W = layout::work_item_words(t);
        for (int64_t i = 0; i < int64_t(maxItems_); ++i) {
            GM_ADDR wi = wi_ + i * W * int64_t(sizeof(int64_t));
            if (i < nItems_) {
                const Item& it = items_[i];
                dp::StoreWords store{wi};
                dp::WorkItemWords(plane_, it.d, it.q, it.s, it.layer, it.lo, it.hi, it.total, it.epoch, store);
            } else {
                WriteEmpty(wi);
            }
            for (int64_t j = 0; j < R; ++j) {
                const int64_t c = i < nItems_ ? dp::LoadWordAt(wi, kWiCounts + j) : 0;
                if (tiling_.batched) {
                    const int64_t g = (i * R + j) * kGroupWords;
                    dp::StoreWordAt(groups_, g + kGroupLayer, i < nItems_ ? items_[i].layer : 0);
                    dp::StoreWordAt(groups_, g + kGroupExpert, j);
                    dp::StoreWordAt(groups_, g + kGroupRows, c);
                } else {
                    dp::StoreWordAt(counts_, j, c);
                }
            }
        }
    }

    // Empty work item (protocol §4.2): layer 0 keeps a layer-select op in range; zero counts make it a no-op.
    __aicore__ inline void WriteEmpty(GM_ADDR wi) {
        const int64_t words = layout::work_item_words(Topo());
        for (int64_t w = 0; w < words; ++w) dp::StoreWordAt(wi, w, 0);
        dp::StoreWordAt(wi, kWiKind, kWiEmpty);
        dp::StoreWordAt(wi, kWiReplica, -1);
        dp::StoreWordAt(wi, kWiFfnRank, plane_.Rank());
        dp::StoreWordAt(wi, kWiFingerprint, plane_.Args().planeId);
    }

    // ---- all blocks: expand_x[o] = token store row of the entry's token slot ----
    // The items' rows are consecutive in item order; a block's share [lo, hi) of all of them comes in increasing
    // o, item by item, cell by cell. Index entries and source scales are read through UB windows, and the block's
    // output scales are staged in UB and written in runs, not 4 bytes per row. The work items were written by
    // block 0 in this launch, but they are a user tensor: replica, slot and rows are bounded again before use.
    __aicore__ inline void Gather() {
        const CamTopology& t = Topo();
        const int64_t W = layout::work_item_words(t);
        int64_t total = 0;
        for (int64_t i = 0; i < int64_t(maxItems_); ++i) total += ItemRows(wi_ + i * W * int64_t(sizeof(int64_t)));
        const int64_t rowBytes = t.H * layout::dispatch_elem_bytes(t);
        int64_t lo, hi;
        dp::BlockShare(total, &lo, &hi);
        idx_.Forget();
        scalesIn_.Forget();
        scalesOutLo_ = lo;
        scalesOutN_ = 0;
        batched_ = rows_.Start(rowBytes);
        int64_t base = 0;
        for (int64_t i = 0; i < int64_t(maxItems_); ++i) {
            GM_ADDR wi = wi_ + i * W * int64_t(sizeof(int64_t));
            const int64_t n = ItemRows(wi);
            if (n == 0) continue;
            const int64_t d = dp::LoadWordAt(wi, kWiReplica), s = dp::LoadWordAt(wi, kWiSlot);
            const int64_t a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
            if (a < b && d >= 0 && d < t.D && s >= 0 && s < t.slots)
                dp::ForEachRow(t, wi, a, b, GatherRow{this, d, s, rowBytes, base});
            base += n;
        }
        rows_.FlushGather();
        rows_.Drain();
        FlushScales();
        if (tiling_.batched) dp::FlushScalarStores(origin_);
    }

    // Rows of the work item at wi, 0 unless it is a work item whose rows fit what is left of the budget.
    __aicore__ inline int64_t ItemRows(GM_ADDR wi) const {
        if (dp::LoadWordAt(wi, kWiKind) != kWiWork) return 0;
        const int64_t n = dp::LoadWordAt(wi, kWiRows);
        return n > 0 && n <= layout::recv_rows(Topo()) ? n : 0;
    }

    __aicore__ inline void GatherOne(int64_t d, int64_t s, int64_t rowBytes, int64_t o, int64_t p, int64_t entry) {
        const CamTopology& t = Topo();
        GM_ADDR region = Region(layout::attn_rank_of(t, d, p), s);
        // Both checked in Validate; bounding them again keeps a racing peer inside the region.
        if (entry < 0 || entry >= layout::region_index_entries(t)) return;
        dp::UseIndexTable(idx_, region, t);
        const int64_t slot = idx_.Get(2 * entry);
        if (slot < 0 || slot >= layout::region_token_slots(t) || o >= tiling_.rowBudget) return;
        if (tiling_.batched) {
            AscendC::GlobalTensor<int64_t> org = dp::WordsAt(origin_, o * kOriginWords * 8, kOriginWords);
            org.SetValue(0, d);
            org.SetValue(1, p);
            org.SetValue(2, idx_.Get(2 * entry + 1));
        }
        GM_ADDR src = region + layout::region_tokens_off(t) + slot * layout::dispatch_row_bytes(t);
        if (batched_) {
            rows_.Gather(expandX_ + o * rowBytes, src);
        } else {
            mover_.Copy(expandX_ + o * rowBytes, src, rowBytes);
        }
        if (!t.quantized) return;
        if (o != scalesOutLo_ + scalesOutN_ || scalesOutN_ == int64_t(dp::kTableWindowElems)) {
            FlushScales();
            scalesOutLo_ = o;
        }
        scalesIn_.Use(region + layout::region_scales_off(t), layout::region_token_slots(t));
        scalesOut_.SetValue(static_cast<uint32_t>(scalesOutN_++), scalesIn_.Get(slot));
    }

    // Output scales [scalesOutLo_, + scalesOutN_) from UB to GM.
    __aicore__ inline void FlushScales() {
        if (scalesOutN_ == 0) return;
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(EVENT_ID1);
        AscendC::DataCopyPad(dp::TensorAt<float>(scales_, 4 * scalesOutLo_, scalesOutN_), scalesOut_,
                             {1, static_cast<uint32_t>(4 * scalesOutN_), 0, 0, 0});
        // The scalar unit refills the buffer only after MTE3 read it.
        AscendC::SetFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID1);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_S>(EVENT_ID1);
        scalesOutLo_ += scalesOutN_;
        scalesOutN_ = 0;
    }

    // ---- block 0 after the gather drained: the round is consumed ----
    __aicore__ inline void Consume() {
        const CamTopology& t = Topo();
        GM_ADDR own = plane_.Own();
        for (int64_t i = 0; i < nItems_; ++i) {
            const Item& it = items_[i];
            if (it.hi >= it.total) {  // the round's last chunk: the round is consumed
                dp::StoreWordAt(own, layout::ffn_chunk_cursor_off(t), it.d, 0);
                dp::StoreWordAt(own, layout::ffn_done_seq_off(t), it.d, it.q);
            } else {
                dp::StoreWordAt(own, layout::ffn_chunk_cursor_off(t), it.d, it.hi);
            }
        }
        // Round robin moves on past the last replica taken, after every chunk, so other ready replicas are served
        // between two chunks of one round (§7).
        dp::StoreWordAt(own, layout::ffn_state_off(t), kFfnRrNext, (items_[nItems_ - 1].d + 1) % t.D);
        dp::StoreWordAt(own, layout::ffn_state_off(t), kFfnServed,
                        dp::LoadWordAt(own, layout::ffn_state_off(t), kFfnServed) + nItems_);
    }

    DispatchRecvTilingData tiling_{};
    Item items_[kDispatchRecvMaxItems];
    int64_t nItems_ = 0;
    int64_t w_ = 0;  // block 0: the weights epoch read by the current poll
    uint32_t maxItems_ = 1;
    dp::Plane plane_;
    dp::Decision decision_;
    GM_ADDR expandX_ = nullptr;
    GM_ADDR scales_ = nullptr;
    GM_ADDR counts_ = nullptr;  // one item: rows per local expert
    GM_ADDR groups_ = nullptr;  // a batch: the group table, maxItems x R groups (common/group_table.h)
    GM_ADDR origin_ = nullptr;  // a batch: per row {replica, participant, t*K + k}
    GM_ADDR wi_ = nullptr;      // maxItems work items of work_item_words
    AscendC::TPipe pipe_;
    dp::ByteMover mover_;
    dp::RowBatch rows_;             // the block's rows, gathered into consecutive expand_x rows
    bool batched_ = false;          // a row fits rows_ (else mover_ moves it)
    dp::UbWindow<int32_t> idx_;     // index entries of the region being read
    dp::UbWindow<float> scalesIn_;  // scales of the region being read
    dp::UbWindow<int64_t> seals_;   // block 0: the seals of the region whose arrival is checked
    AscendC::TBuf<AscendC::TPosition::VECCALC> scalesOutBuf_;
    AscendC::LocalTensor<float> scalesOut_;  // output scales [scalesOutLo_, + scalesOutN_) not yet written
    int64_t scalesOutLo_ = 0, scalesOutN_ = 0;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_dispatch_recv(GM_ADDR peers, GM_ADDR expandX, GM_ADDR scales,
                                                        GM_ADDR expertCounts, GM_ADDR groupTable, GM_ADDR origin,
                                                        GM_ADDR workItem, GM_ADDR workspace,
                                                        cam::kernels::DispatchRecvTilingData tiling) {
    // Vector-only, but the hard SyncAll needs a mixed launch (docs/protocol.md, "Launch requirements").
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    cam::kernels::DispatchRecv op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(peers, expandX, scales, expertCounts, groupTable, origin, workItem, workspace, tiling);
    op.Process();
}

#include "common/launch.h"
#include "dispatch_recv/dispatch_recv.h"

void cam::kernels::LaunchDispatchRecv(uint32_t blockDim, void* stream, uint8_t* peers, uint8_t* expandX,
                                      uint8_t* scales, uint8_t* expertCounts, uint8_t* groupTable, uint8_t* origin,
                                      uint8_t* workItem, uint8_t* workspace, const DispatchRecvTilingData& tiling) {
    CAM_DATAPLANE_LAUNCH(tiling.comm, peers, cam_dispatch_recv, blockDim, stream, peers, expandX, scales, expertCounts,
                         groupTable, origin, workItem, workspace, tiling);
}
