// The status sentences of the data plane: a communicator status record, an abort word or a bad topology field as
// the sentence the user reads (docs/protocol.md §9).
#include <cstdio>
#include <cstring>
#include <iterator>

#include "comm.h"

namespace cam::host {

std::string AbortReason(int64_t abortWord) {
    if (abortWord < 0)
        return "the communicator was aborted because rank " + std::to_string(-abortWord - 1) +
               " died (its process is gone; found by the plane's liveness watchdog)";
    return "the communicator was aborted by rank " + std::to_string(abortWord - 1);
}

std::string TwinRuleSuffix(const uint8_t* control) {
    // The slot is window memory any process holding the window can write: read at most its bytes, stop at a NUL or
    // at the slot's end, and let only printable ASCII into a message a user reads (anything else becomes '?').
    std::string text;
    for (int64_t i = 0; i < kAbortReasonBytes; ++i) {
        const unsigned char ch = control[kAbortReasonOff + i];
        if (ch == 0) break;
        text += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
    }
    return text.empty() ? std::string() : ": twin rule " + text;
}

namespace {

// Indexed by field::k* (window_layout.h); kWindow is the last.
constexpr const char* kFieldNames[] = {"ok", "D", "P", "F", "E", "K", "H", "Bmax", "L", "slots", "act_dtype_bytes",
                                      "quantized", "capacity", "window_tokens", "expert_slots", "window size"};
static_assert(std::size(kFieldNames) == field::kWindow + 1, "one name per topology field (field::k* in window_layout.h)");

// Indexed by detail::kProto* (window_layout.h); 0 is unused, kProtoIndexEntry is the last.
constexpr const char* kProtocolWhy[] = {"?", "a signal is ahead of the round it should announce",
                                        "a record's seq differs from its ready signal",
                                        "participants published different layers for one round",
                                        "per-expert counts do not sum to the rows",
                                        "the work item was already combined or is out of order",
                                        "no dispatch_send round is in flight",
                                        "a dispatch record or index entry points outside its round",
                                        "a round's placement epoch is not the epoch of this FFN rank's slot weights"};
static_assert(std::size(kProtocolWhy) == detail::kProtoPlacementEpoch + 1,
              "one sentence per protocol invariant (detail::kProto* in window_layout.h)");

}  // namespace

const char* FieldName(int64_t field) {
    return field >= 0 && field < static_cast<int64_t>(std::size(kFieldNames)) ? kFieldNames[field] : "?";
}

std::string TopologyDifference(const CamTopology& a, int64_t rankA, const CamTopology& b, int64_t rankB) {
    // CamTopology is field::kD .. field::kExpertSlots as int64 words, in that order (cam/window_layout.h).
    constexpr int64_t kWords = sizeof(CamTopology) / sizeof(int64_t);
    static_assert(kWords == field::kExpertSlots, "one int64 word per topology field, in field::k* order");
    int64_t wa[kWords], wb[kWords];
    std::memcpy(wa, &a, sizeof(wa));
    std::memcpy(wb, &b, sizeof(wb));
    std::string ours, theirs;
    for (int64_t i = 0; i < kWords; ++i) {
        if (wa[i] == wb[i]) continue;
        const std::string sep = ours.empty() ? "" : ", ";
        ours += sep + FieldName(i + 1) + "=" + std::to_string(wa[i]);
        theirs += sep + FieldName(i + 1) + "=" + std::to_string(wb[i]);
    }
    if (ours.empty()) return "";
    return "rank " + std::to_string(rankA) + " was created with " + ours + "; rank " + std::to_string(rankB) +
           " with " + theirs;
}

namespace {

const char* OpName(int64_t op) {
    switch (op) {
        case op::kDispatchSend: return "dispatch_send";
        case op::kDispatchRecv: return "dispatch_recv";
        case op::kCombineSend: return "combine_send";
        case op::kCombineRecv: return "combine_recv";
        default: return "data-plane op";
    }
}

std::string Seconds(int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g s", static_cast<double>(ns) / 1e9);
    return buf;
}

}  // namespace

// The status record as a sentence, and the C status it maps to.
aclnnStatus Describe(const camComm* c, const int64_t st[kStatusWords], const int64_t args[kStatusArgsWords],
                     int64_t abortWord, std::string* msg) {
    const int64_t code = st[kStatusCode], peer = st[kStatusPeer], replica = st[kStatusReplica];
    const bool epochs = args[kStatusArgKind] == kStatusArgsEpochs;
    const int64_t epochA = args[kStatusArgA], epochB = args[kStatusArgB];
    const int64_t layer = st[kStatusLayer], seq = st[kStatusSeq], det = st[kStatusDetail];
    const CamTopology& t = c->topo;
    std::string m = std::string(OpName(st[kStatusOp])) + " on rank " + std::to_string(st[kStatusRank]);
    const std::string round = "round seq " + std::to_string(seq) + (replica >= 0 ? " of replica " + std::to_string(replica) : "") +
                              (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : "");
    aclnnStatus status = CAM_ERR_COMM_PROTOCOL;
    switch (code) {
        case status::kTimeout:
            status = CAM_ERR_COMM_TIMEOUT;
            m += ": timed out after " + Seconds(c->config.timeoutNs) + " ";
            if (det == detail::kAwaitReplica) {
                m += "waiting for replica " + std::to_string(replica) + " to publish " + round +
                     ": participant rank " + std::to_string(peer) +
                     " has not published it (its ready word, and the seals of what it wrote)";
            } else if (det == detail::kAwaitReplicaMate) {
                m += "waiting for the FFN ranks to complete " + round + ": participant rank " +
                     std::to_string(peer) + " of this replica has not published it, so no FFN rank can serve it";
            } else if (det == detail::kAwaitCompletion && peer < 0) {
                // every done word is in, a combine row's seal is not (docs/protocol.md §10.2)
                m += "waiting for the combine rows of " + round +
                     ": every FFN rank signalled it done, but a row's seal has not arrived";
            } else if (det == detail::kAwaitCompletion) {
                m += "waiting for FFN rank " + std::to_string(peer) + " to complete " + round;
            } else {
                m += "waiting for the slot of " + round + " to be free: " +
                     (peer == st[kStatusRank] ? std::string("this rank's combine_recv of round seq ") +
                                                    std::to_string(seq - t.slots) + " has not run"
                                              : "FFN rank " + std::to_string(peer) + " has not completed round seq " +
                                                    std::to_string(seq - t.slots));
            }
            break;
        case status::kAborted:
            status = CAM_ERR_COMM_ABORTED;
            m += ": " + AbortReason(det);
            if (seq > 0) m += " while in " + round;
            break;
        case status::kCapacity:
            status = CAM_ERR_DEVICE_ARGUMENT;
            if (st[kStatusOp] == op::kDispatchSend) {  // the window bound; more rows than capacity are chunked
                m += ": " + std::to_string(det) + " distinct tokens for FFN rank " + std::to_string(peer) + " in " +
                     round + " exceed window_tokens = " + std::to_string(layout::window_token_slots(t));
            } else if (det <= layout::region_index_entries(t)) {
                // dispatch_recv reports the record's rows; within the row bound, its distinct tokens overflowed.
                m += ": the record " + (peer >= 0 ? "for FFN rank " + std::to_string(peer) : "for this FFN rank") +
                     " in " + round + " claims more distinct tokens than the region's " +
                     std::to_string(layout::region_token_slots(t)) + " token slots (window_tokens)";
            } else {
                m += ": " + std::to_string(det) + " rows " +
                     (peer >= 0 ? "for FFN rank " + std::to_string(peer) : "for this FFN rank") + " in " + round +
                     " exceed the region of " + std::to_string(layout::region_index_entries(t)) + " rows";
            }
            break;
        case status::kBadInput:
            status = CAM_ERR_DEVICE_ARGUMENT;
            if (det == detail::kArgTopkIds) {
                m += ": topk_ids holds an id outside [-1, E=" + std::to_string(t.E) + ")";
            } else if (det == detail::kArgLayer) {
                m += ": rank " + std::to_string(peer) + " published layer outside [0, L=" + std::to_string(t.L) + ")";
            } else if (det == detail::kArgTokens) {
                m += ": the token count (topk_ids rows) differs from the one dispatched in " + round;
            } else if (det == detail::kArgPlacement && epochs && epochA < 0) {
                m += ": the placement table's epoch word is " + std::to_string(epochA) +
                     (epochA == -1 ? " (a rebalance is rewriting the table)" : ", not an epoch") +
                     "; the round of layer " + std::to_string(layer) + " was not published";
            } else if (det == detail::kArgPlacement && epochs) {
                m += ": the placement table changed while dispatch_send read it (epoch " + std::to_string(epochA) +
                     " before its rows were read, " + std::to_string(epochB) + " before publishing); the round of "
                     "layer " + std::to_string(layer) + " was not published: send it again";
            } else if (det == detail::kArgPlacement) {
                m += ": the placement table of layer " + std::to_string(layer) + " holds a word out of bounds (a "
                     "replica count outside [1, F=" + std::to_string(t.F) + "], an FFN index outside [0, F) or a slot "
                     "outside [0, expert_slots=" + std::to_string(layout::experts_per_ffn(t)) + "))";
            } else if (det == detail::kArgIdsDiffer) {
                m += ": topk_ids differ from the ids dispatched in " + round +
                     " (combine_recv must get the ids of the round it receives)";
            } else {
                m += ": work_item is not a work item dispatch_recv produced on this rank of this plane (a word was "
                     "changed, or it comes from another rank or plane)";
            }
            m += " (device pre-pass, nothing written)";
            break;
        case status::kTopologyMismatch:
            m += ": rank " + std::to_string(peer) + " published a record with topology fingerprint " +
                 std::to_string(det) + ", ours is " + std::to_string(layout::fingerprint(t));
            break;
        default: {
            if (det == detail::kProtoPlacementEpoch && epochs) {
                // dispatch_recv names the participant whose record carries the epoch; combine_send the work item
                m += ": protocol violation: " + round + (peer >= 0 ? " as published by rank " + std::to_string(peer) : "") +
                     " was routed by placement epoch " + std::to_string(epochA) + ", but this FFN rank's slot " +
                     "weights are at epoch " + std::to_string(epochB) +
                     (epochB == -1 ? " (being moved by a rebalance)" : "") +
                     (st[kStatusOp] == op::kCombineSend ? ": the weights changed while the work item was computed"
                                                        : ": its experts are no longer in these slots") +
                     " (docs/protocol.md §15)";
                break;
            }
            const bool known = det >= 1 && det <= detail::kProtoPlacementEpoch;
            m += std::string(": protocol violation: ") + (known ? kProtocolWhy[det] : "?") +
                 (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") + " in " + round;
            break;
        }
    }
    if (abortWord == 0) {
        m += "; refused before the round began, the communicator stays usable";
    } else if (code != status::kAborted) {
        m += "; the communicator is aborted (create a new one)";
    }
    *msg = m;
    return status;
}

}  // namespace cam::host
