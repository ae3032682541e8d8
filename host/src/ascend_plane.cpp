// What a data plane on Ascend must satisfy before it is created (docs/ascend.md, "Peer memory"): every rank's window
// is the HCCL communicator's window, HCCL_BUFFSIZE MiB on every rank, so it must hold the larger role's window; and
// the longest device wait of an op (the followers' bound: timeout + idle poll + the follower margin, MakeCommArgs)
// must end before the runtime's AI Core op timeout kills the kernel (cam/cam_timeouts.h). Pure arithmetic over the
// layout: checked on the twin too.
#include <cmath>
#include <string>

#include "cam/cam_comm.h"
#include "cam/cam_timeouts.h"
#include "common/window_layout.h"
#include "status.h"

namespace {

constexpr double kFollowerMarginS = CAM_FOLLOWER_MARGIN_S;
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

extern "C" aclnnStatus camCheckAscendPlane(const CamTopology* topology, const camCommConfig* config,
                                           uint32_t hcclBufferMiB, uint32_t aicoreTimeoutS) {
    using cam::host::Fail;
    if (!topology || !config) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCheckAscendPlane: topology/config is null");
    const int64_t window = cam::layout::window_bytes(*topology);
    if (static_cast<double>(window) > hcclBufferMiB * kMiB) {
        const auto need = static_cast<int64_t>(std::ceil(window / kMiB));
        return Fail(ACLNN_ERR_PARAM_INVALID,
                    "camCheckAscendPlane: the topology needs a " + std::to_string(window) +
                        "-byte window on every rank, more than the HCCL window of " + std::to_string(hcclBufferMiB) +
                        " MiB: set HCCL_BUFFSIZE to at least " + std::to_string(need) +
                        " (MiB) or shrink Bmax, window_tokens or slots");
    }
    // Each bound is refused alone first, and the sum is taken in double: two caller-given int64 values can overflow
    // an int64 sum (signed overflow, and a wrapped negative wait would pass the comparison below).
    if (config->timeoutNs < 0 || config->idlePollNs < 0)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string("camCheckAscendPlane: config->") +
                                                 (config->timeoutNs < 0 ? "timeoutNs" : "idlePollNs") + " is " +
                                                 std::to_string(config->timeoutNs < 0 ? config->timeoutNs
                                                                                      : config->idlePollNs) +
                                                 ", must be >= 0");
    const double waitS =
        (static_cast<double>(config->timeoutNs) + static_cast<double>(config->idlePollNs)) / 1e9 + kFollowerMarginS;
    if (!(waitS < aicoreTimeoutS)) {
        return Fail(ACLNN_ERR_PARAM_INVALID,
                    "camCheckAscendPlane: timeout + idle poll + " + std::to_string(static_cast<int>(kFollowerMarginS)) +
                        " s = " + std::to_string(waitS) + " s must stay below the AI Core op timeout of " +
                        std::to_string(aicoreTimeoutS) + " s, or the runtime kills a waiting kernel first");
    }
    return ACLNN_SUCCESS;
}
