// Replica isolation, the FFN side's account of a fenced replica (docs/protocol.md §9): how many of the replica's
// rounds reached this FFN rank and were never returned. Read from signal words only, so it needs no state of its
// own and no kernel cooperation: what was published is in this rank's ready signals, what was really returned is in
// the replica's done signals (a dropped combine_send writes none).
#include "comm.h"
#include "status.h"

#include <algorithm>
#include <string>

using namespace cam;
using cam::host::Fail;
using cam::host::Transport;

extern "C" aclnnStatus camCommDroppedRounds(const camComm* comm, int64_t replica, int64_t* dropped) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommDroppedRounds: comm is null");
    if (!dropped) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommDroppedRounds: dropped is null");
    const CamTopology& t = comm->topo;
    if (replica < 0 || replica >= t.D)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommDroppedRounds: replica " + std::to_string(replica) +
                                                 " is not in [0, D = " + std::to_string(t.D) + ")");
    const int64_t A = layout::attention_ranks(t);
    if (comm->rank < A)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommDroppedRounds: rank " + std::to_string(comm->rank) +
                                                 " is an Attention rank; dropped rounds are counted by FFN ranks");
    if (!comm->attached) return Fail(ACLNN_ERR_PARAM_INVALID, "camCommDroppedRounds: the communicator is not attached");
    // Through the transport's word access: device copies on the NPU transport (a peer's via own device memory).
    const Transport& tr = *comm->transport;
    std::string why;
    int64_t fence = 0;
    if (!tr.ReadWords(comm->rank, layout::ffn_fence_off(t) + 8 * replica, &fence, 1, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommDroppedRounds: " + why);
    *dropped = 0;
    if (fence == 0) return ACLNN_SUCCESS;
    // Rounds of a replica are published and returned in seq order, and once the fence is seen every later
    // combine_send of the replica writes nothing: the returned rounds are a prefix of the published ones.
    const int64_t f = comm->rank - A;
    int64_t published = 0, returned = 0;
    for (int64_t p = 0; p < t.P; ++p) {
        const int64_t a = layout::attn_rank_of(t, replica, p);
        for (int64_t s = 0; s < t.slots; ++s) {
            int64_t ready = 0, done = 0;
            if (!tr.ReadWords(comm->rank, layout::ffn_ready_signal_off(t, a, s), &ready, 1, &why))
                return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommDroppedRounds: " + why);
            published = std::max(published, ready);
            // A dead Attention rank's window may be gone (its owner freed it): then it returned nothing readable.
            if (tr.ReadWords(a, layout::attn_completion_signal_off(t, s, f), &done, 1, &why))
                returned = std::max(returned, done);
        }
    }
    *dropped = std::max<int64_t>(0, published - returned);
    return ACLNN_SUCCESS;
}
