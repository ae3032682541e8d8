#include "dataplane_backend.h"

#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/stream.h"

namespace cam::host {

void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task) {
    twin::EnqueueHostTask(stream, [task = std::move(task)] {
        std::string message;
        const aclnnStatus status = task(&message);
        if (status != ACLNN_SUCCESS) throw twin::TaskError(status, message);
    });
}

uint64_t SystemCycleHz() { return twin::ActivePlatform().systemCycleHz; }

}  // namespace cam::host
