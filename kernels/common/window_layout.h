// THE data-plane window layout (docs/protocol.md). Every byte offset the four data-plane kernels and the host use is
// computed here, from the topology alone, so the Attention side, the FFN side and the host can never disagree.
// cam/topology.py mirrors these formulas in Python; a test compares the two through the bindings.
//
// Header-only, <cstdint> only, no STL containers: it is included by Ascend C device code (bisheng: every helper
// is host + aicore), by the g++ twin and by plain host C++.
#pragma once

#include <cstdint>

#ifndef CAM_HOST_DEVICE
#if defined(__CCE__)
#define CAM_HOST_DEVICE __host__ __aicore__
#else
#define CAM_HOST_DEVICE
#endif
#endif

// Plain C-layout POD (int64 fields, no padding) so the C API, tiling structs and the bindings can carry it as is.
struct CamTopology {
    int64_t D;                // Attention DP replicas
    int64_t P;                // participants (Attention ranks) per replica
    int64_t F;                // FFN ranks
    int64_t E;                // routed experts; E % F == 0 unless expert_slots is set
    int64_t K;                // top-k slots per token
    int64_t H;                // hidden size
    int64_t Bmax;             // max tokens per Attention rank per layer
    int64_t L;                // MoE layers
    int64_t slots;            // rounds in flight per Attention rank (>= 1)
    int64_t act_dtype_bytes;  // activation element size (2: bf16/fp16)
    int64_t quantized;        // 1: int8 + fp32 scale per token on the wire; 0: activations as they are
    int64_t capacity;         // Nmax: rows per work item per FFN rank; a round with more is cut into chunks
    // distinct tokens one participant may send one FFN rank per round (sizes the windows); 0 means Bmax, so a
    // CamTopology initialised before this field existed keeps its meaning
    int64_t window_tokens;
    // local expert slots on every FFN rank, fixed for the plane's life; 0 means E / F (E % F == 0) with today's
    // contiguous placement. Any other value needs a placement table (docs/protocol.md §15): F * expert_slots >= E.
    int64_t expert_slots;
};

namespace cam {

// Bumped with every change of a byte's place, so ranks of two layouts are refused at the handshake. 5 (this
// layout): the seal arrays of the dispatch regions and of the combine rows (docs/protocol.md §10.2); 4: the twin's
// abort reason in the control area (kAbortReasonOff, kControlBytes 448); 3: the dispatch record's placement epoch
// (kHdrEpoch), the FFN rank's weights-epoch line, the placement table's epoch line and the status arguments line
// (docs/protocol.md §15).
inline constexpr int64_t kLayoutVersion = 5;

// DataCopy granularity: every data array starts on a 32 B boundary and every row stride is a multiple of it.
inline constexpr int64_t kAlign = 32;
// Scalar-cache line on Ascend: each signal/state word a peer or another kernel touches gets a line of its own, so
// cleaning or invalidating one line never writes back or drops a neighbour's word.
inline constexpr int64_t kLine = 64;

// ---- status record (docs/protocol.md §9) ----
namespace status {
inline constexpr int64_t kOk = 0;
inline constexpr int64_t kTimeout = 1;           // a wait inside a begun round expired
inline constexpr int64_t kAborted = 2;           // the abort word was raised (detail = abort word value)
inline constexpr int64_t kCapacity = 3;          // a work item does not fit (detail = offending row count)
inline constexpr int64_t kBadInput = 4;          // a device-resident input value is invalid (detail = kArg*)
inline constexpr int64_t kTopologyMismatch = 5;  // a record's fingerprint differs from ours
inline constexpr int64_t kProtocol = 6;          // sequence/state inconsistency (detail = kProto*)
}  // namespace status

namespace op {
inline constexpr int64_t kNone = 0;
inline constexpr int64_t kDispatchSend = 1;
inline constexpr int64_t kDispatchRecv = 2;
inline constexpr int64_t kCombineSend = 3;
inline constexpr int64_t kCombineRecv = 4;
}  // namespace op

// status.detail values
namespace detail {
// kBadInput: which argument
inline constexpr int64_t kArgTopkIds = 1;
inline constexpr int64_t kArgLayer = 2;
inline constexpr int64_t kArgWorkItem = 3;
inline constexpr int64_t kArgTokens = 4;
inline constexpr int64_t kArgIdsDiffer = 5;  // combine_recv: topk_ids are not the ones dispatched in this round
// dispatch_send: a placement table word is out of bounds, or (status arguments kStatusArgsEpochs) the table's epoch
// word was negative or changed while the op read the table
inline constexpr int64_t kArgPlacement = 6;
// kTimeout: what was awaited
inline constexpr int64_t kAwaitSlotFree = 1;
inline constexpr int64_t kAwaitReplica = 2;
inline constexpr int64_t kAwaitCompletion = 3;
// combine completion awaited, but a participant of this replica (peer) never published the round, so no FFN
// rank could serve it: the participant is the fault, not the FFN rank
inline constexpr int64_t kAwaitReplicaMate = 4;
// kProtocol: which invariant broke
inline constexpr int64_t kProtoSignalAhead = 1;       // a signal holds a seq beyond the one expected
inline constexpr int64_t kProtoRecordSeq = 2;         // record seq != signal seq
inline constexpr int64_t kProtoLayerDiffers = 3;      // participants of one round disagree on the layer
inline constexpr int64_t kProtoCounts = 4;            // per-expert counts do not sum to rows
inline constexpr int64_t kProtoStaleWorkItem = 5;     // combine_send of a work item out of order or twice
inline constexpr int64_t kProtoNothingInFlight = 6;   // combine_recv without a matching dispatch_send
inline constexpr int64_t kProtoIndexEntry = 7;        // an index entry a peer wrote points outside its round
// a round's placement epoch is not the epoch of this FFN rank's slot weights (status arguments: both epochs)
inline constexpr int64_t kProtoPlacementEpoch = 8;
}  // namespace detail

// ---- control area: first kControlBytes of every window, both roles ----
inline constexpr int64_t kControlBytes = 7 * kLine;
inline constexpr int64_t kAbortOff = 0;  // int64: 0, 1 + rank that raised it, or -(1 + rank) for a rank found dead
inline constexpr int64_t kStatusOff = kLine;      // int64[kStatusWords]
inline constexpr int64_t kIdentityOff = 2 * kLine;  // int64[kIdentityWords], written by the Comm at creation

inline constexpr int64_t kStatusCode = 0;
inline constexpr int64_t kStatusOp = 1;
inline constexpr int64_t kStatusRank = 2;
inline constexpr int64_t kStatusPeer = 3;
inline constexpr int64_t kStatusReplica = 4;
inline constexpr int64_t kStatusLayer = 5;
inline constexpr int64_t kStatusSeq = 6;
inline constexpr int64_t kStatusDetail = 7;
inline constexpr int64_t kStatusWords = 8;

inline constexpr int64_t kIdentityFingerprint = 0;
inline constexpr int64_t kIdentityVersion = 1;
inline constexpr int64_t kIdentityRank = 2;
inline constexpr int64_t kIdentityRole = 3;  // kRoleAttention / kRoleFfn
inline constexpr int64_t kIdentityWindowBytes = 4;
inline constexpr int64_t kIdentityDtype = 5;    // activation dtype (aclDataType): changes the bytes on the wire
inline constexpr int64_t kIdentityNonce = 6;    // random per rank and creation: tells plane instances apart
inline constexpr int64_t kIdentityPlaneId = 7;  // written once every window is mapped: see plane_id() below
inline constexpr int64_t kIdentityWords = 8;
inline constexpr int64_t kRoleAttention = 1;
inline constexpr int64_t kRoleFfn = 2;
// Line 3 of the control area: values a status detail names beyond the record's 8 words (the two epochs of a
// placement-epoch error). The kernel writes them with the record, before its code (kind kStatusArgsNone when the
// detail names none), so a reader that sees the code sees the arguments of that record, never of an older one.
inline constexpr int64_t kStatusArgsOff = 3 * kLine;
inline constexpr int64_t kStatusArgKind = 0;
inline constexpr int64_t kStatusArgA = 1;
inline constexpr int64_t kStatusArgB = 2;
inline constexpr int64_t kStatusArgsWords = 3;
inline constexpr int64_t kStatusArgsNone = 0;
// A = the epoch of the round (dispatch_recv, combine_send) or of the table at the pre-pass (dispatch_send); B = the
// epoch of this FFN rank's slot weights, or of the table before publishing
inline constexpr int64_t kStatusArgsEpochs = 1;
static_assert(kStatusArgsOff >= kIdentityOff + 8 * kIdentityWords && kStatusArgsOff + 8 * kStatusArgsWords <= kControlBytes,
              "the status arguments take line 3 of the control area");
// Lines 4-6: on the twin, the NUL-terminated reason of a twin violation that raised the abort word
// (kernels/common/launch.h TwinAbortPlane: rule, kernel, rank, block, call site); zero otherwise. Three lines, so
// the longest kernel and file names still fit with the block and the call site. User-reachable memory: readers
// bound and filter it.
inline constexpr int64_t kAbortReasonOff = 4 * kLine;
inline constexpr int64_t kAbortReasonBytes = 3 * kLine;
static_assert(kAbortReasonOff >= kStatusArgsOff + 8 * kStatusArgsWords &&
                  kAbortReasonOff + kAbortReasonBytes <= kControlBytes && kAbortReasonBytes % 8 == 0,
              "the abort reason lies after the status arguments, inside the control area");

// ---- dispatch record (header of each FFN-window region), int64 words ----
inline constexpr int64_t kHdrSeq = 0;
inline constexpr int64_t kHdrLayer = 1;
inline constexpr int64_t kHdrReplica = 2;
inline constexpr int64_t kHdrParticipant = 3;
inline constexpr int64_t kHdrTokens = 4;       // B of this participant
inline constexpr int64_t kHdrRows = 5;         // rows for this FFN rank
inline constexpr int64_t kHdrTokenSlots = 6;   // distinct tokens stored for this FFN rank
inline constexpr int64_t kHdrFingerprint = 7;
inline constexpr int64_t kHdrEpoch = 8;        // placement epoch of the table the round was routed by (0: no table)
inline constexpr int64_t kHdrCounts = 9;       // int64[R] rows per local expert
inline constexpr int64_t kHdrFixedWords = 9;

// ---- work item (dispatch_recv output, int64 words) ----
inline constexpr int64_t kWiKind = 0;  // kWiEmpty / kWiWork
inline constexpr int64_t kWiReplica = 1;
inline constexpr int64_t kWiLayer = 2;  // view [2:3] is the GMM layer_index; 0 when empty so it stays in range
inline constexpr int64_t kWiSeq = 3;
inline constexpr int64_t kWiSlot = 4;
inline constexpr int64_t kWiRows = 5;
inline constexpr int64_t kWiFfnRank = 6;
inline constexpr int64_t kWiFingerprint = 7;  // the plane id (CommArgs::planeId), not only the topology's
inline constexpr int64_t kWiCounts = 8;  // int64[R], then three int64[R*P] cell tables (see work_item_* below)
inline constexpr int64_t kWiFixedWords = 8;
// chunk words, after the cell tables (work_item_chunk_off): a round whose rows for this FFN rank exceed capacity is
// handed out as several work items, each a contiguous range of the round's row order (docs/protocol.md §8)
inline constexpr int64_t kWcFirstRow = 0;   // first row of the round this item holds
inline constexpr int64_t kWcRoundRows = 1;  // rows of the whole round for this FFN rank; the last chunk ends there
inline constexpr int64_t kWcEpoch = 2;      // the round's placement epoch (kHdrEpoch of its records); 0 when empty
inline constexpr int64_t kWcWords = 3;
inline constexpr int64_t kWiEmpty = 0;
inline constexpr int64_t kWiWork = 1;

// ---- Attention state (own window, written only by this rank's kernels) ----
inline constexpr int64_t kAttnSendCountLine = 0;  // rounds dispatched so far
inline constexpr int64_t kAttnRecvCountLine = 1;  // rounds combine-received so far
inline constexpr int64_t kAttnFixedLines = 2;     // then one line per slot:
inline constexpr int64_t kSlotSeq = 0;
inline constexpr int64_t kSlotLayer = 1;
inline constexpr int64_t kSlotTokens = 2;
inline constexpr int64_t kSlotIdsDigest = 3;  // digest of the round's topk_ids: combine_recv must get the same ids

// ---- FFN state (own window, written only by this rank's kernels) ----
inline constexpr int64_t kFfnRrNext = 0;  // first replica the next selection scans
inline constexpr int64_t kFfnServed = 1;  // non-empty work items handed out (diagnostics)

// ---- topology validation: index of the first bad field (0 = valid) ----
namespace field {
inline constexpr int64_t kOk = 0;
inline constexpr int64_t kD = 1;
inline constexpr int64_t kP = 2;
inline constexpr int64_t kF = 3;
inline constexpr int64_t kE = 4;
inline constexpr int64_t kK = 5;
inline constexpr int64_t kH = 6;
inline constexpr int64_t kBmax = 7;
inline constexpr int64_t kL = 8;
inline constexpr int64_t kSlots = 9;
inline constexpr int64_t kActDtypeBytes = 10;
inline constexpr int64_t kQuantized = 11;
inline constexpr int64_t kCapacity = 12;
inline constexpr int64_t kWindowTokens = 13;

inline constexpr int64_t kExpertSlots = 14;

inline constexpr int64_t kWindow = 15;  // the windows would exceed kMaxWindowBytes
}  // namespace field

// Representability limits, not policy: with every dimension <= 2^20 the checks in check_topology cannot overflow,
// (t*K + k) fits the int32 of an index entry, and a valid topology's windows stay below 2^57 bytes.
inline constexpr int64_t kMaxInt32 = 2147483647;
inline constexpr int64_t kMaxDim = int64_t(1) << 20;
inline constexpr int64_t kMaxWindowBytes = int64_t(1) << 56;

namespace layout {

CAM_HOST_DEVICE inline constexpr int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
CAM_HOST_DEVICE inline constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
CAM_HOST_DEVICE inline constexpr int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- topology-derived counts ----
CAM_HOST_DEVICE inline constexpr int64_t attention_ranks(const CamTopology& t) { return t.D * t.P; }
// R: local expert slots per FFN rank (a slot holds one expert of a layer; the FFN side groups rows by slot)
CAM_HOST_DEVICE inline constexpr int64_t experts_per_ffn(const CamTopology& t) {
    return t.expert_slots == 0 ? t.E / t.F : t.expert_slots;
}
// F * R slots in the plane; dispatch_send's per-slot tables are indexed by f * R + local slot
CAM_HOST_DEVICE inline constexpr int64_t plane_slots(const CamTopology& t) { return t.F * experts_per_ffn(t); }
// The contiguous placement (expert e in slot e % R of FFN index e / R) is the only one that needs no table.
CAM_HOST_DEVICE inline constexpr bool contiguous_placement(const CamTopology& t) {
    return t.E % t.F == 0 && experts_per_ffn(t) == t.E / t.F;
}
// A placement table (docs/protocol.md §15), int64 [placement_words]: an epoch line, then [L][E][placement_width]
// rows {n, f0, j0, f1, j1, ...}, n in [1, F] replicas of expert e in layer l, replica i on FFN index f_i, local slot
// j_i; pairs past n are ignored. The epoch word (0 at creation, +1 per rebalance, -1 while a rebalance rewrites the
// rows) is written last by a rebalance; dispatch_send reads it before and after it reads the rows (a seqlock).
inline constexpr int64_t kPlacementEpochWord = 0;
inline constexpr int64_t kPlacementHeaderWords = kLine / 8;  // the epoch has a line of its own; words 1..7 are 0
CAM_HOST_DEVICE inline constexpr int64_t placement_width(const CamTopology& t) { return 1 + 2 * t.F; }
// first word of layer l's rows
CAM_HOST_DEVICE inline constexpr int64_t placement_layer_word(const CamTopology& t, int64_t layer) {
    return kPlacementHeaderWords + layer * t.E * placement_width(t);
}
CAM_HOST_DEVICE inline constexpr int64_t placement_words(const CamTopology& t) {
    return placement_layer_word(t, t.L);
}
CAM_HOST_DEVICE inline constexpr int64_t world_size(const CamTopology& t) { return t.D * t.P + t.F; }
CAM_HOST_DEVICE inline constexpr int64_t replica_of(const CamTopology& t, int64_t attn_rank) { return attn_rank / t.P; }
CAM_HOST_DEVICE inline constexpr int64_t participant_of(const CamTopology& t, int64_t attn_rank) {
    return attn_rank % t.P;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_rank_of(const CamTopology& t, int64_t replica, int64_t participant) {
    return replica * t.P + participant;
}
// Global rank A + f of FFN rank f in [0, F), and its inverse.
CAM_HOST_DEVICE inline constexpr int64_t ffn_rank(const CamTopology& t, int64_t f) { return attention_ranks(t) + f; }
CAM_HOST_DEVICE inline constexpr int64_t ffn_index(const CamTopology& t, int64_t rank) {
    return rank - attention_ranks(t);
}
CAM_HOST_DEVICE inline constexpr int64_t ffn_rank_of_expert(const CamTopology& t, int64_t expert) {
    return ffn_rank(t, expert / experts_per_ffn(t));
}

// Sequence numbers: round r (0-based, per Attention rank) is published as seq r + 1 in slot r % slots, so an
// all-zero window means "nothing published" and needs no initialisation.
CAM_HOST_DEVICE inline constexpr int64_t seq_of_round(int64_t round) { return round + 1; }
CAM_HOST_DEVICE inline constexpr int64_t slot_of_seq(const CamTopology& t, int64_t seq) { return (seq - 1) % t.slots; }

// ---- window bound and capacity (docs/protocol.md §8) ----
// Distinct tokens one participant may send one FFN rank in a round; more is refused by dispatch_send. This, not
// capacity, sizes the windows: a region must hold a whole round, whatever the number of chunks it is served in.
CAM_HOST_DEVICE inline constexpr int64_t window_token_slots(const CamTopology& t) {
    return t.window_tokens == 0 ? t.Bmax : min64(t.Bmax, t.window_tokens);
}
// rows one round can bring to one FFN rank: every participant's tokens, each with K slots there
CAM_HOST_DEVICE inline constexpr int64_t worst_case_rows(const CamTopology& t) {
    return t.P * window_token_slots(t) * t.K;
}
// rows of one work item, and of dispatch_recv's static-shape outputs (expand_x, scales): the FFN working set
CAM_HOST_DEVICE inline constexpr int64_t recv_rows(const CamTopology& t) {
    return min64(t.capacity, worst_case_rows(t));
}
// A participant never sends more than window_token_slots distinct tokens (so at most K times as many rows) to an
// FFN rank without being refused, so these bound a region.
CAM_HOST_DEVICE inline constexpr int64_t region_token_slots(const CamTopology& t) { return window_token_slots(t); }
CAM_HOST_DEVICE inline constexpr int64_t region_index_entries(const CamTopology& t) {
    return window_token_slots(t) * t.K;
}
// Work items one round may take on one FFN rank. A chunk that is not the last either holds capacity rows or, with
// the next chunk, more than capacity (it closed because the next expert did not fit), so n rows take at most
// 2*ceil(n/capacity) chunks; a round with no rows is one (empty-rowed) item.
CAM_HOST_DEVICE inline constexpr int64_t max_chunks_per_round(const CamTopology& t) {
    return max64(1, 2 * ((worst_case_rows(t) + t.capacity - 1) / t.capacity));
}

// ---- row strides ----
CAM_HOST_DEVICE inline constexpr int64_t dispatch_elem_bytes(const CamTopology& t) {
    return t.quantized ? 1 : t.act_dtype_bytes;
}
CAM_HOST_DEVICE inline constexpr int64_t dispatch_row_bytes(const CamTopology& t) {
    return align_up(t.H * dispatch_elem_bytes(t), kAlign);
}
CAM_HOST_DEVICE inline constexpr int64_t combine_row_bytes(const CamTopology& t) {
    return align_up(t.H * t.act_dtype_bytes, kAlign);
}

// ---- dispatch record / region (inside an FFN window; one per (Attention rank, slot)) ----
CAM_HOST_DEVICE inline constexpr int64_t header_words(const CamTopology& t) {
    return kHdrFixedWords + experts_per_ffn(t);
}
CAM_HOST_DEVICE inline constexpr int64_t header_bytes(const CamTopology& t) { return align_up(8 * header_words(t), kAlign); }
// index entry = int32 pair {token slot in this region, t*K + k}
inline constexpr int64_t kIndexEntryBytes = 8;
CAM_HOST_DEVICE inline constexpr int64_t index_bytes(const CamTopology& t) {
    return align_up(kIndexEntryBytes * region_index_entries(t), kAlign);
}
CAM_HOST_DEVICE inline constexpr int64_t tokens_bytes(const CamTopology& t) {
    return region_token_slots(t) * dispatch_row_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t scales_bytes(const CamTopology& t) {
    return t.quantized ? align_up(4 * region_token_slots(t), kAlign) : 0;
}
CAM_HOST_DEVICE inline constexpr int64_t region_header_off(const CamTopology&) { return 0; }
CAM_HOST_DEVICE inline constexpr int64_t region_index_off(const CamTopology& t) { return header_bytes(t); }
CAM_HOST_DEVICE inline constexpr int64_t region_tokens_off(const CamTopology& t) {
    return region_index_off(t) + index_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t region_scales_off(const CamTopology& t) {
    return region_tokens_off(t) + tokens_bytes(t);
}
// Seals (docs/protocol.md §10.2): int64 words, each the seq of the round whose data it follows, written by the
// block that wrote that data, after it, on the same MTE3 queue; a receiver reads the data only once its seal equals
// the round's seq. A region's tables seal (record and index table) has a 32-byte block of its own; then one seal
// per token slot (the slot's row and scale).
inline constexpr int64_t kSealBytes = 8;
CAM_HOST_DEVICE inline constexpr int64_t seals_bytes(const CamTopology& t) {
    return align_up(kAlign + kSealBytes * region_token_slots(t), kAlign);
}
CAM_HOST_DEVICE inline constexpr int64_t region_seals_off(const CamTopology& t) {
    return region_scales_off(t) + scales_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t region_tables_seal_off(const CamTopology& t) { return region_seals_off(t); }
CAM_HOST_DEVICE inline constexpr int64_t region_token_seal_off(const CamTopology& t, int64_t tokenSlot) {
    return region_seals_off(t) + kAlign + kSealBytes * tokenSlot;
}
CAM_HOST_DEVICE inline constexpr int64_t region_bytes(const CamTopology& t) {
    return align_up(region_seals_off(t) + seals_bytes(t), kLine);
}

// ---- FFN window ----
CAM_HOST_DEVICE inline constexpr int64_t ffn_state_off(const CamTopology&) { return kControlBytes; }
// line 0: {rr_next, served}; then done_seq[D]; then combined_seq[D]; then fence[D]; then chunk_cursor[D];
// then combined_rows[D]; then the weights-epoch line
CAM_HOST_DEVICE inline constexpr int64_t ffn_done_seq_off(const CamTopology& t) { return ffn_state_off(t) + kLine; }
CAM_HOST_DEVICE inline constexpr int64_t ffn_combined_seq_off(const CamTopology& t) {
    return ffn_done_seq_off(t) + align_up(8 * t.D, kLine);
}
// fence[d]: 0, or 1 + the Attention rank of replica d found dead (docs/protocol.md §9, replica isolation). Written
// only by the host (camCommFenceDeadRank, from a liveness watchdog), never cleared: a fenced replica does not
// rejoin. The kernels only read it.
CAM_HOST_DEVICE inline constexpr int64_t ffn_fence_off(const CamTopology& t) {
    return ffn_combined_seq_off(t) + align_up(8 * t.D, kLine);
}
// chunk_cursor[d]: first row of the next work item of round done_seq[d] + 1 (0 at a round's start). Written only
// by dispatch_recv: the chunk cursor lives in device memory, so a captured FFN loop needs no host argument.
CAM_HOST_DEVICE inline constexpr int64_t ffn_chunk_cursor_off(const CamTopology& t) {
    return ffn_fence_off(t) + align_up(8 * t.D, kLine);
}
// combined_rows[d]: rows of round combined_seq[d] + 1 already combined (chunks before the last). combine_send only.
CAM_HOST_DEVICE inline constexpr int64_t ffn_combined_rows_off(const CamTopology& t) {
    return ffn_chunk_cursor_off(t) + align_up(8 * t.D, kLine);
}
// The epoch of the slot weights this FFN rank serves with (docs/protocol.md §15): 0 at creation (a zeroed window),
// -1 while a rebalance copies the slots, then the new table's epoch. A line of its own, written only by the host
// (camCommSetWeightsEpoch); dispatch_recv holds back rounds newer than it and refuses older ones, combine_send
// refuses an item whose epoch it no longer is.
CAM_HOST_DEVICE inline constexpr int64_t ffn_weights_epoch_off(const CamTopology& t) {
    return ffn_combined_rows_off(t) + align_up(8 * t.D, kLine);
}
// The stop word of this rank's receive loops (docs/graph.md, "Stopping a captured loop"): an int32 in the
// weights-epoch line's second 8-byte word (its other 4 bytes stay 0), written only by the host
// (aclnnCamDispatchRecvSetStop) and read only by a dispatch_recv launched with it, as a flag: any non-zero value ends
// that receive's wait at once with an empty work item. It sits in a line no kernel writes, so a kernel's write-back
// never replaces a host write; no peer reads it, so it is no part of what peers agree on (the layout version).
CAM_HOST_DEVICE inline constexpr int64_t ffn_stop_off(const CamTopology& t) { return ffn_weights_epoch_off(t) + 8; }
CAM_HOST_DEVICE inline constexpr int64_t ffn_state_bytes(const CamTopology& t) {
    return 2 * kLine + 5 * align_up(8 * t.D, kLine);
}
CAM_HOST_DEVICE inline constexpr int64_t ffn_ready_off(const CamTopology& t) {
    return ffn_state_off(t) + ffn_state_bytes(t);
}
// ready[a][s]: written by Attention rank a, one line each
CAM_HOST_DEVICE inline constexpr int64_t ffn_ready_signal_off(const CamTopology& t, int64_t attn_rank, int64_t slot) {
    return ffn_ready_off(t) + (attn_rank * t.slots + slot) * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t ffn_data_off(const CamTopology& t) {
    return ffn_ready_off(t) + attention_ranks(t) * t.slots * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t ffn_region_off(const CamTopology& t, int64_t attn_rank, int64_t slot) {
    return ffn_data_off(t) + (attn_rank * t.slots + slot) * region_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t ffn_window_bytes(const CamTopology& t) {
    return ffn_data_off(t) + attention_ranks(t) * t.slots * region_bytes(t);
}

// ---- Attention window ----
CAM_HOST_DEVICE inline constexpr int64_t attn_state_off(const CamTopology&) { return kControlBytes; }
CAM_HOST_DEVICE inline constexpr int64_t attn_send_count_off(const CamTopology& t) {
    return attn_state_off(t) + kAttnSendCountLine * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_recv_count_off(const CamTopology& t) {
    return attn_state_off(t) + kAttnRecvCountLine * kLine;
}
// {seq, layer, tokens} of the round currently held by slot s
CAM_HOST_DEVICE inline constexpr int64_t attn_slot_state_off(const CamTopology& t, int64_t slot) {
    return attn_state_off(t) + (kAttnFixedLines + slot) * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_state_bytes(const CamTopology& t) {
    return (kAttnFixedLines + t.slots) * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_completion_off(const CamTopology& t) {
    return attn_state_off(t) + attn_state_bytes(t);
}
// done[s][f]: written by FFN rank A + f, one line each
CAM_HOST_DEVICE inline constexpr int64_t attn_completion_signal_off(const CamTopology& t, int64_t slot, int64_t f) {
    return attn_completion_off(t) + (slot * t.F + f) * kLine;
}
// One seal per combine row (token t, top-k slot k) of each slot, written by the FFN rank that wrote the row
// (docs/protocol.md §10.2)
CAM_HOST_DEVICE inline constexpr int64_t attn_seals_off(const CamTopology& t) {
    return attn_completion_off(t) + t.slots * t.F * kLine;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_seals_bytes(const CamTopology& t) {
    return align_up(kSealBytes * t.slots * t.Bmax * t.K, kLine);
}
CAM_HOST_DEVICE inline constexpr int64_t attn_combine_seal_off(const CamTopology& t, int64_t slot, int64_t tk) {
    return attn_seals_off(t) + (slot * t.Bmax * t.K + tk) * kSealBytes;
}
CAM_HOST_DEVICE inline constexpr int64_t attn_combine_off(const CamTopology& t) {
    return attn_seals_off(t) + attn_seals_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t attn_combine_slot_bytes(const CamTopology& t) {
    return t.Bmax * t.K * combine_row_bytes(t);
}
// the row for (token t, top-k slot k) of the round in slot s: tk = t*K + k
CAM_HOST_DEVICE inline constexpr int64_t attn_combine_row_off(const CamTopology& t, int64_t slot, int64_t tk) {
    return attn_combine_off(t) + slot * attn_combine_slot_bytes(t) + tk * combine_row_bytes(t);
}
CAM_HOST_DEVICE inline constexpr int64_t attn_window_bytes(const CamTopology& t) {
    return attn_combine_off(t) + t.slots * attn_combine_slot_bytes(t);
}

// Transports that give every rank the same window size (HCCL) allocate this on every rank.
CAM_HOST_DEVICE inline constexpr int64_t window_bytes(const CamTopology& t) {
    return max64(attn_window_bytes(t), ffn_window_bytes(t));
}

// ---- work item ----
CAM_HOST_DEVICE inline constexpr int64_t work_item_counts_off(const CamTopology&) { return kWiCounts; }
// cell (local expert j, participant p): first output row
CAM_HOST_DEVICE inline constexpr int64_t work_item_cell_out_off(const CamTopology& t, int64_t j, int64_t p) {
    return kWiCounts + experts_per_ffn(t) + j * t.P + p;
}
// cell (j, p): number of rows
CAM_HOST_DEVICE inline constexpr int64_t work_item_cell_count(const CamTopology& t, int64_t j, int64_t p) {
    return kWiCounts + experts_per_ffn(t) + experts_per_ffn(t) * t.P + j * t.P + p;
}
// cell (j, p): first entry in participant p's index table
CAM_HOST_DEVICE inline constexpr int64_t work_item_cell_src_off(const CamTopology& t, int64_t j, int64_t p) {
    return kWiCounts + experts_per_ffn(t) + 2 * experts_per_ffn(t) * t.P + j * t.P + p;
}
// chunk words (kWc*), after the three cell tables
CAM_HOST_DEVICE inline constexpr int64_t work_item_chunk_off(const CamTopology& t) {
    return kWiCounts + experts_per_ffn(t) + 3 * experts_per_ffn(t) * t.P;
}
CAM_HOST_DEVICE inline constexpr int64_t work_item_words(const CamTopology& t) {
    return align_up(work_item_chunk_off(t) + kWcWords, kAlign / 8);
}

// ---- fingerprint: FNV-1a over the layout version and every field as 8 little-endian bytes, top bit cleared so it
// is the same non-negative value as int64 and as a Python int ----
CAM_HOST_DEVICE inline constexpr uint64_t fnv1a_word(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
    return h;
}
CAM_HOST_DEVICE inline constexpr int64_t fingerprint(const CamTopology& t) {
    uint64_t h = 14695981039346656037ull;
    h = fnv1a_word(h, static_cast<uint64_t>(kLayoutVersion));
    h = fnv1a_word(h, static_cast<uint64_t>(t.D));
    h = fnv1a_word(h, static_cast<uint64_t>(t.P));
    h = fnv1a_word(h, static_cast<uint64_t>(t.F));
    h = fnv1a_word(h, static_cast<uint64_t>(t.E));
    h = fnv1a_word(h, static_cast<uint64_t>(t.K));
    h = fnv1a_word(h, static_cast<uint64_t>(t.H));
    h = fnv1a_word(h, static_cast<uint64_t>(t.Bmax));
    h = fnv1a_word(h, static_cast<uint64_t>(t.L));
    h = fnv1a_word(h, static_cast<uint64_t>(t.slots));
    h = fnv1a_word(h, static_cast<uint64_t>(t.act_dtype_bytes));
    h = fnv1a_word(h, static_cast<uint64_t>(t.quantized));
    h = fnv1a_word(h, static_cast<uint64_t>(t.capacity));
    // the effective bound, so 0 (= Bmax), Bmax and anything above it, which behave alike, are one plane
    h = fnv1a_word(h, static_cast<uint64_t>(window_token_slots(t)));
    // the slot count only when it is not the contiguous default, so 0 and E / F (one plane) hash alike, as before
    if (!contiguous_placement(t)) h = fnv1a_word(h, static_cast<uint64_t>(experts_per_ffn(t)));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

// Index of the first invalid field (field::kOk when valid). The host turns it into an error naming the field.
CAM_HOST_DEVICE inline constexpr int64_t check_topology(const CamTopology& t) {
    if (t.D < 1 || t.D > kMaxDim) return field::kD;
    if (t.P < 1 || t.P > kMaxDim) return field::kP;
    if (t.F < 1 || t.F > kMaxDim) return field::kF;
    if (t.E < 1 || t.E > kMaxDim || (t.expert_slots == 0 && t.E % t.F != 0)) return field::kE;
    if (t.K < 1 || t.K > t.E) return field::kK;
    if (t.H < 1 || t.H > kMaxDim) return field::kH;
    if (t.Bmax < 1 || t.Bmax > kMaxDim || t.Bmax * t.K > kMaxInt32) return field::kBmax;
    if (t.L < 1 || t.L > kMaxDim) return field::kL;
    if (t.slots < 1 || t.slots > kMaxDim) return field::kSlots;
    if (t.act_dtype_bytes != 2) return field::kActDtypeBytes;
    if (t.quantized != 0 && t.quantized != 1) return field::kQuantized;
    if (t.capacity < 1 || t.capacity > kMaxInt32) return field::kCapacity;
    if (t.window_tokens < 0 || t.window_tokens > kMaxInt32) return field::kWindowTokens;
    // every expert needs a slot; F * R bounds dispatch_send's per-slot tables like E does
    if (t.expert_slots < 0 || t.expert_slots > kMaxDim || t.expert_slots * t.F > kMaxDim ||
        (t.expert_slots != 0 && t.expert_slots * t.F < t.E))
        return field::kExpertSlots;
    // Given the limits above: regions < 2^60, a region < 2^43 bytes, slots*Bmax*K < 2^52, so deciding by division
    // never overflows; past these two checks every offset in this file is < kMaxWindowBytes + 2^48.
    const int64_t regions = attention_ranks(t) * t.slots;
    if (regions > kMaxWindowBytes / (kLine + region_bytes(t))) return field::kWindow;
    if (combine_row_bytes(t) > (kMaxWindowBytes - attn_combine_off(t)) / (t.slots * t.Bmax * t.K)) return field::kWindow;
    return field::kOk;
}

}  // namespace layout
}  // namespace cam
