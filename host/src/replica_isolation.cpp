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

namespace {

int64_t LoadWord(const uint8_t* window, int64_t byteOff) {
    return __atomic_load_n(reinterpret_cast<const int64_t*>(window + byteOff), __ATOMIC_ACQUIRE);
}

}  // namespace

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
    const uint8_t* own = comm->Own();
    *dropped = 0;
    if (LoadWord(own, layout::ffn_fence_off(t) + 8 * replica) == 0) return ACLNN_SUCCESS;
    // Rounds of a replica are published and returned in seq order, and once the fence is seen every later
    // combine_send of the replica writes nothing: the returned rounds are a prefix of the published ones.
    const int64_t f = comm->rank - A;
    int64_t published = 0, returned = 0;
    for (int64_t p = 0; p < t.P; ++p) {
        const int64_t a = layout::attn_rank_of(t, replica, p);
        const uint8_t* attn = comm->transport->Window(a);
        for (int64_t s = 0; s < t.slots; ++s) {
            published = std::max(published, LoadWord(own, layout::ffn_ready_signal_off(t, a, s)));
            if (attn) returned = std::max(returned, LoadWord(attn, layout::attn_completion_signal_off(t, s, f)));
        }
    }
    *dropped = std::max<int64_t>(0, published - returned);
    return ACLNN_SUCCESS;
}
