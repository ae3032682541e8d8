// The GetWorkspaceSize of the four data-plane ops (dispatch_send, dispatch_recv, combine_send, combine_recv), written
// once: out-pointers, then the Comm, then the op's tensors, its tiling, the executor that launches its kernel on the
// Comm, and Finish. Each op is a struct that fills the hooks:
//   static constexpr const char* kName;    its name in every message
//   static constexpr bool kAttentionOp;    the role of the Comm it runs on (CheckComm)
//   static constexpr bool kEndsOnItsOwn;   Executor::endsOnItsOwn: its kernel waits on no peer and no host event
//   aclnnStatus Check(const ArgChecker&, camComm*)   views and checks of its tensors and attributes, kept in the struct
//   bool Tile(const tiling::PlatformInfo&, const kernels::dp::CommArgs&, uint64_t* workspaceBytes, std::string* why)
//   void Launch(camComm*, uint8_t* workspace, aclrtStream) const   its kernel, from what Check and Tile kept
#pragma once

#include <memory>
#include <string>

#include "backend.h"
#include "comm.h"
#include "executor.h"
#include "tensor.h"

namespace cam::host {

template <typename Op>
aclnnStatus PrepareDataPlaneOp(camComm* comm, Op op, uint64_t* workspaceSize, aclOpExecutor** executor) {
    ArgChecker check(Op::kName);
    if (aclnnStatus st = CheckOutPointers(Op::kName, workspaceSize, executor)) return st;
    if (aclnnStatus st = CheckComm(Op::kName, comm, Op::kAttentionOp)) return st;
    if (aclnnStatus st = op.Check(check, comm)) return st;
    uint64_t ws = 0;
    std::string why;
    if (!op.Tile(CurrentPlatform(), MakeCommArgs(comm), &ws, &why)) return check.Invalid(why);
    auto ex = std::make_unique<Executor>(Op::kName);
    ex->workspaceSize = ws;
    ex->endsOnItsOwn = Op::kEndsOnItsOwn;
    ex->launch = [op, comm](void* workspace, aclrtStream stream) {
        return LaunchOnComm(comm, stream, [&] { op.Launch(comm, static_cast<uint8_t*>(workspace), stream); });
    };
    return Finish(std::move(ex), workspaceSize, executor);
}

}  // namespace cam::host
