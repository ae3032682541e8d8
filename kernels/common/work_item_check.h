// Checks of the words a data-plane kernel dereferences but did not write itself (docs/protocol.md §9): the work
// item (a user tensor: whatever dispatch_recv wrote may have been changed since), the dispatch records and index
// tables (written by peers), and the topk_ids a combine_recv gets. Each is bounded before the op writes anything.
// No checksum stands in for a bound: whoever can write these words can write a matching checksum too.
#pragma once

#include "common/dataplane.h"

namespace cam::kernels::dp {

// Index entries [0, rows) of a dispatch region: token slot in [0, tokenSlots), t*K + k in [0, tokens*K). The
// callers bounded rows, tokenSlots and tokens by the region's capacity first.
// The table is read through the UB window `idx` (fresh from GM: the window is made to forget first).
__aicore__ inline bool IndexEntriesInRange(const CamTopology& t, GM_ADDR region, int64_t rows, int64_t tokenSlots,
                                           int64_t tokens, UbWindow<int32_t>& idx) {
    UseIndexTable(idx, region, t);
    idx.Forget();
    for (int64_t e = 0; e < rows; ++e) {
        const int64_t slot = idx.Get(2 * e);
        const int64_t tk = idx.Get(2 * e + 1);
        if (slot < 0 || slot >= tokenSlots || tk < 0 || tk >= tokens * t.K) return false;
    }
    return true;
}

// The bounds of one participant's record of round q (its header in this FFN rank's window) and of its index
// table: rows, distinct tokens and B within the region's capacity, counts non-negative and summing to rows.
__aicore__ inline bool RecordInRange(const CamTopology& t, GM_ADDR region, int64_t q, UbWindow<int32_t>& idx) {
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
    return sum == rows && IndexEntriesInRange(t, region, rows, slots, tokens, idx);
}

// Participant p's dispatch region of replica d, slot s, in this FFN rank's own window.
__aicore__ inline GM_ADDR RecordRegion(const Plane& plane, int64_t d, int64_t p, int64_t s) {
    const CamTopology& t = plane.Topo();
    return plane.Own() + layout::ffn_region_off(t, layout::attn_rank_of(t, d, p), s);
}

// ---- a round's rows and its chunks (docs/protocol.md §4.3, §8) ----
// The rows of replica d's round for this FFN rank are the P records' rows in the dispatch row order: by local
// expert, then participant, token, slot. A work item holds one contiguous range [lo, hi) of that order.

// Rows of local expert j in the round, over its P participants.
__aicore__ inline int64_t ExpertRows(const Plane& plane, int64_t d, int64_t s, int64_t j) {
    int64_t n = 0;
    for (int64_t p = 0; p < plane.Topo().P; ++p) n += LoadWordAt(RecordRegion(plane, d, p, s), kHdrCounts + j);
    return n;
}

// End of the chunk that starts at row lo. Experts are taken in order: an expert that fits in capacity is never
// split (it joins the chunk if it fits, else the chunk ends before it); a larger one is split by rows (its first
// rows fill the chunk, then full chunks of its own, and its remainder opens the next). A pure function of lo and the
// records, so the chunk cursor is one row number and combine_send recomputes the same chunk. Every chunk but the
// last of an empty round holds at least one row, so the cursor always moves.
__aicore__ inline int64_t ChunkEnd(const Plane& plane, int64_t d, int64_t s, int64_t lo) {
    const CamTopology& t = plane.Topo();
    const int64_t cap = layout::recv_rows(t);
    int64_t start = 0, rows = 0;
    for (int64_t j = 0; j < layout::experts_per_ffn(t); ++j) {
        const int64_t end = start + ExpertRows(plane, d, s, j);
        const int64_t pos = lo + rows;
        start = end;
        if (end <= pos) continue;  // wholly before the chunk's current end
        const int64_t piece = end - pos;
        if (piece > cap) return lo + cap;  // only a split expert can cut a chunk short of a whole expert
        if (rows + piece > cap) return pos;
        rows += piece;
    }
    return lo + rows;
}

__aicore__ inline int64_t Clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

// Every word of the work item dispatch_recv writes for rows [lo, hi) of replica d's round q (slot s, `layer`,
// `roundRows` rows, placement `epoch`), padding included, in order: sink(word, value) returns false to stop. Written
// once, used to write the item (dispatch_recv) and to check it (combine_send). The records must have been bounded
// first.
template <typename Sink>
__aicore__ inline bool WorkItemWords(const Plane& plane, int64_t d, int64_t q, int64_t s, int64_t layer, int64_t lo,
                                     int64_t hi, int64_t roundRows, int64_t epoch, Sink& sink) {
    const CamTopology& t = plane.Topo();
    const int64_t R = layout::experts_per_ffn(t), n = hi - lo;
    if (!sink(kWiKind, kWiWork) || !sink(kWiReplica, d) || !sink(kWiLayer, layer) || !sink(kWiSeq, q) ||
        !sink(kWiSlot, s) || !sink(kWiRows, n) || !sink(kWiFfnRank, plane.Rank()) ||
        !sink(kWiFingerprint, plane.Args().planeId))
        return false;
    // Positions in the round's row order, clamped to the chunk: a cell wholly outside it has count 0, its output
    // row at the chunk edge and its source entry at the end (before the chunk) or start (after it) of the cell.
    int64_t expertStart = 0;
    for (int64_t j = 0; j < R; ++j) {
        int64_t cellStart = expertStart;
        for (int64_t p = 0; p < t.P; ++p) {
            GM_ADDR rec = RecordRegion(plane, d, p, s);
            const int64_t c = LoadWordAt(rec, kHdrCounts + j);
            int64_t srcBase = 0;
            for (int64_t jj = 0; jj < j; ++jj) srcBase += LoadWordAt(rec, kHdrCounts + jj);
            const int64_t out = Clamp(cellStart - lo, 0, n), outEnd = Clamp(cellStart + c - lo, 0, n);
            if (!sink(layout::work_item_cell_out_off(t, j, p), out) ||
                !sink(layout::work_item_cell_count(t, j, p), outEnd - out) ||
                !sink(layout::work_item_cell_src_off(t, j, p), srcBase + Clamp(lo - cellStart, 0, c)))
                return false;
            cellStart += c;
        }
        if (!sink(kWiCounts + j, Clamp(cellStart - lo, 0, n) - Clamp(expertStart - lo, 0, n))) return false;
        expertStart = cellStart;
    }
    const int64_t chunk = layout::work_item_chunk_off(t);
    if (!sink(chunk + kWcFirstRow, lo) || !sink(chunk + kWcRoundRows, roundRows) || !sink(chunk + kWcEpoch, epoch))
        return false;
    for (int64_t w = chunk + kWcWords; w < layout::work_item_words(t); ++w)
        if (!sink(w, 0)) return false;
    return true;
}

struct StoreWords {
    GM_ADDR wi;
    __aicore__ inline bool operator()(int64_t w, int64_t v) const {
        StoreWordAt(wi, w, v);
        return true;
    }
};
struct MatchWords {
    GM_ADDR wi;
    __aicore__ inline bool operator()(int64_t w, int64_t v) const { return LoadWordAt(wi, w) == v; }
};

// A chunk may start at lo: inside the round, or at 0 for a round without rows (still one work item, §2).
__aicore__ inline bool ChunkStartValid(int64_t lo, int64_t roundRows) {
    return lo == 0 || (lo > 0 && lo < roundRows);
}

// True when every word of the work item (padding included) is what dispatch_recv writes for the chunk starting at
// row lo of round q of replica d in slot s, recomputed from the records in this FFN rank's own window, and those
// records are in range. The caller checked kind, replica, seq, slot and lo against the FFN state first, so d, q and
// s index the window safely and lo is the chunk this rank handed out next. On success *hi is the chunk's end,
// *roundRows the round's rows and *epoch its placement epoch (equal on the P records), all recomputed (the caller
// need not read them from the work item again).
__aicore__ inline bool WorkItemMatchesRecords(const Plane& plane, GM_ADDR wi, int64_t d, int64_t q, int64_t s,
                                              int64_t lo, int64_t* hi, int64_t* roundRows, int64_t* epoch,
                                              UbWindow<int32_t>& idx) {
    const CamTopology& t = plane.Topo();
    int64_t layer = -1, total = 0, e = -1;
    for (int64_t p = 0; p < t.P; ++p) {
        if (!RecordInRange(t, RecordRegion(plane, d, p, s), q, idx)) return false;
        const int64_t l = LoadWordAt(RecordRegion(plane, d, p, s), kHdrLayer);
        if (l < 0 || l >= t.L || (p > 0 && l != layer)) return false;
        const int64_t ep = LoadWordAt(RecordRegion(plane, d, p, s), kHdrEpoch);
        if (ep < 0 || (p > 0 && ep != e)) return false;
        layer = l;
        e = ep;
        total += LoadWordAt(RecordRegion(plane, d, p, s), kHdrRows);
    }
    if (!ChunkStartValid(lo, total)) return false;
    MatchWords match{wi};
    *hi = ChunkEnd(plane, d, s, lo);
    *roundRows = total;
    *epoch = e;
    return WorkItemWords(plane, d, q, s, layer, lo, *hi, total, e, match);
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
// The ids are read through the caller's UB window over them.
__aicore__ inline int64_t IdsDigest(UbWindow<int32_t>& ids, int64_t n) {
    uint64_t h = 14695981039346656037ull;
    for (int64_t i = 0; i < n; ++i)
        h = layout::fnv1a_word(h, static_cast<uint64_t>(static_cast<int64_t>(ids.Get(i))));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

}  // namespace cam::kernels::dp
