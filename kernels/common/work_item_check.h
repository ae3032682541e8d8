// Checks of the words a data-plane kernel dereferences but did not write itself (docs/protocol.md §9): the work
// item (a user tensor: whatever dispatch_recv wrote may have been changed since), the dispatch records and index
// tables (written by peers), and the topk_ids a combine_recv gets. Each is bounded before the op writes anything.
// No checksum stands in for a bound: whoever can write these words can write a matching checksum too.
#pragma once

#include "common/dataplane.h"

namespace cam::kernels::dp {

// Index entries [0, rows) of a dispatch region: token slot in [0, tokenSlots), t*K + k in [0, tokens*K). The
// callers bounded rows, tokenSlots and tokens by the region's capacity first.
__aicore__ inline bool IndexEntriesInRange(const CamTopology& t, GM_ADDR region, int64_t rows, int64_t tokenSlots,
                                           int64_t tokens) {
    for (int64_t e = 0; e < rows; ++e) {
        const int64_t slot = IndexField(region, t, e, 0);
        const int64_t tk = IndexField(region, t, e, 1);
        if (slot < 0 || slot >= tokenSlots || tk < 0 || tk >= tokens * t.K) return false;
    }
    return true;
}

// The bounds of one participant's record of round q (its header in this FFN rank's window) and of its index
// table: rows, distinct tokens and B within the region's capacity, counts non-negative and summing to rows.
__aicore__ inline bool RecordInRange(const CamTopology& t, GM_ADDR region, int64_t q) {
    const int64_t rows = LoadWordAt(region, kHdrRows), slots = LoadWordAt(region, kHdrTokenSlots);
    const int64_t tokens = LoadWordAt(region, kHdrTokens);
    if (LoadWordAt(region, kHdrSeq) != q || LoadWordAt(region, kHdrFingerprint) != layout::fingerprint(t)) return false;
    if (rows < 0 || rows > layout::region_index_entries(t) || slots < 0 || slots > layout::region_token_slots(t) ||
        tokens < 0 || tokens > t.Bmax)
        return false;
    int64_t sum = 0;
    for (int64_t j = 0; j < layout::experts_per_ffn(t); ++j) {
        const int64_t c = LoadWordAt(region, kHdrCounts + j);
        if (c < 0 || c > rows) return false;
        sum += c;
    }
    return sum == rows && IndexEntriesInRange(t, region, rows, slots, tokens);
}

// Participant p's dispatch region of replica d, slot s, in this FFN rank's own window.
__aicore__ inline GM_ADDR RecordRegion(const Plane& plane, int64_t d, int64_t p, int64_t s) {
    const CamTopology& t = plane.Topo();
    return plane.Own() + layout::ffn_region_off(t, layout::attn_rank_of(t, d, p), s);
}

// True when every word of the work item (padding included) is what dispatch_recv writes for round q of replica d
// in slot s, recomputed from the records in this FFN rank's own window, and those records are in range. The
// caller checked kind, replica, seq and slot against the FFN state first, so d, q and s index the window safely.
__aicore__ inline bool WorkItemMatchesRecords(const Plane& plane, GM_ADDR wi, int64_t d, int64_t q, int64_t s) {
    const CamTopology& t = plane.Topo();
    const int64_t R = layout::experts_per_ffn(t);
    int64_t layer = -1, total = 0;
    for (int64_t p = 0; p < t.P; ++p) {
        if (!RecordInRange(t, RecordRegion(plane, d, p, s), q)) return false;
        const int64_t l = LoadWordAt(RecordRegion(plane, d, p, s), kHdrLayer);
        if (l < 0 || l >= t.L || (p > 0 && l != layer)) return false;
        layer = l;
        total += LoadWordAt(RecordRegion(plane, d, p, s), kHdrRows);
    }
    if (total > layout::recv_rows(t)) return false;
    if (LoadWordAt(wi, kWiKind) != kWiWork || LoadWordAt(wi, kWiReplica) != d || LoadWordAt(wi, kWiLayer) != layer ||
        LoadWordAt(wi, kWiSeq) != q || LoadWordAt(wi, kWiSlot) != s || LoadWordAt(wi, kWiRows) != total ||
        LoadWordAt(wi, kWiFfnRank) != plane.Rank() || LoadWordAt(wi, kWiFingerprint) != plane.Args().planeId)
        return false;
    // Cells expert-major, participants inside: out is the running row, src the participant's running entry.
    int64_t out = 0;
    for (int64_t j = 0; j < R; ++j) {
        int64_t expertRows = 0;
        for (int64_t p = 0; p < t.P; ++p) {
            const int64_t c = LoadWordAt(RecordRegion(plane, d, p, s), kHdrCounts + j);
            if (LoadWordAt(wi, layout::work_item_cell_out_off(t, j, p)) != out ||
                LoadWordAt(wi, layout::work_item_cell_count(t, j, p)) != c)
                return false;
            out += c;
            expertRows += c;
        }
        if (LoadWordAt(wi, kWiCounts + j) != expertRows) return false;
    }
    for (int64_t p = 0; p < t.P; ++p) {
        int64_t src = 0;
        for (int64_t j = 0; j < R; ++j) {
            if (LoadWordAt(wi, layout::work_item_cell_src_off(t, j, p)) != src) return false;
            src += LoadWordAt(RecordRegion(plane, d, p, s), kHdrCounts + j);
        }
    }
    for (int64_t w = layout::work_item_cell_src_off(t, R - 1, t.P - 1) + 1; w < layout::work_item_words(t); ++w)
        if (LoadWordAt(wi, w) != 0) return false;
    return true;
}

// An empty work item exactly as dispatch_recv writes it (protocol §4.2): anything else is not one of ours.
__aicore__ inline bool EmptyWorkItemIsCanonical(const Plane& plane, GM_ADDR wi) {
    for (int64_t w = 0; w < layout::work_item_words(plane.Topo()); ++w) {
        const int64_t v = LoadWordAt(wi, w);
        const int64_t want = w == kWiReplica ? -1 : w == kWiFfnRank ? plane.Rank()
                                                  : w == kWiFingerprint ? plane.Args().planeId : 0;
        if (v != want) return false;
    }
    return true;
}

// Digest of a round's topk_ids (FNV-1a over the int32 values), kept in the Attention slot state by dispatch_send
// and compared by combine_recv: ids other than the dispatched ones would read rows of other (token, slot) pairs.
__aicore__ inline int64_t IdsDigest(const AscendC::GlobalTensor<int32_t>& ids, int64_t n) {
    uint64_t h = 14695981039346656037ull;
    for (int64_t i = 0; i < n; ++i)
        h = layout::fnv1a_word(h, static_cast<uint64_t>(static_cast<int64_t>(ids.GetValue(i))));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

}  // namespace cam::kernels::dp
