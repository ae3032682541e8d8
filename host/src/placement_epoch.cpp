// Expert placement's device-side epoch check, the host's part (docs/protocol.md §15): the line in an FFN rank's
// window that says which table's experts its slot weights hold. Only the host writes it (a rebalance, around its
// copies); dispatch_recv and combine_send compare every round's epoch with it.
#include "comm.h"
#include "status.h"

#include <string>

using namespace cam;
using cam::host::Fail;

namespace {

aclnnStatus CheckFfnComm(const camComm* comm, const char* who) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(who) + ": comm is null");
    if (comm->rank < layout::attention_ranks(comm->topo))
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(who) + ": rank " + std::to_string(comm->rank) +
                                                 " is an Attention rank; the weights epoch is an FFN rank's");
    return ACLNN_SUCCESS;
}

}  // namespace

extern "C" aclnnStatus camCommSetWeightsEpoch(camComm* comm, int64_t epoch) {
    if (aclnnStatus st = CheckFfnComm(comm, "camCommSetWeightsEpoch")) return st;
    if (epoch < -1)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommSetWeightsEpoch: epoch " + std::to_string(epoch) +
                                                 " is not an epoch (>= 0) nor -1 (weights being moved)");
    // Through the transport's word access (a release store through a host mapping; a device copy otherwise).
    std::string why;
    if (!comm->transport->WriteWords(comm->rank, layout::ffn_weights_epoch_off(comm->topo), &epoch, 1, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommSetWeightsEpoch: " + why);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommGetWeightsEpoch(const camComm* comm, int64_t* epoch) {
    if (aclnnStatus st = CheckFfnComm(comm, "camCommGetWeightsEpoch")) return st;
    if (!epoch) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetWeightsEpoch: epoch is null");
    std::string why;
    if (!comm->transport->ReadWords(comm->rank, layout::ffn_weights_epoch_off(comm->topo), epoch, 1, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommGetWeightsEpoch: " + why);
    return ACLNN_SUCCESS;
}
