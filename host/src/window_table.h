// The peer table of a Comm, from the window_table op (docs/ascend.md §5).
#pragma once

#include <string>

#include "comm.h"

namespace cam::host {

// Writes comm's peer table into `peers` (device memory, world size int64) by running window_table for `group` on a
// stream of cam's own and synchronizing it within timeoutMs. Returns the op's status; *why says what failed. After a
// timeout the kernel may still run: the stream and the status record it uses are then left allocated.
aclnnStatus RunWindowTable(const camComm* comm, const std::string& group, int64_t* peers, int32_t timeoutMs,
                           std::string* why);

// One single-block kernel: 60 s covers a heavily loaded host, as the data plane's follower margin does.
constexpr int32_t kWindowTableTimeoutMs = 60'000;

// The HCCL window path (window_table over an HCCL context) reaches planes of at most tiling::kWindowTableMaxRanks
// ranks: empty when `topo` fits, else the sentence `api` refuses it with, before anything is created.
std::string WindowTablePlaneTooLarge(const char* api, const CamTopology& topo);

// Twin transports: the windows they mapped become the HCCL context of a group private to `comm`, as the HCCL runtime
// would set it up, and window_table turns it into the peer table.
aclnnStatus FillPeerTableFromTransport(camComm* comm, std::string* why);

}  // namespace cam::host
