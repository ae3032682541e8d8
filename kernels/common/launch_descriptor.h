// What a launch asks of the runtime beyond its blocks and stream, and the Ascend launch that carries it. Host code
// of both kinds includes this: the kernels' launch wrappers (kernels/common/launch.h) and the Ascend backend that
// defines the configured launch (host/src/backend_ascend.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cam::kernels {

// Ascend puts the schedule mode in the launch configuration's ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE attribute
// (aclrtLaunchKernelAttrValue.schemMode: 0 normal, 1 batch, hicann/runtime docs/api_docs/
// aclrtLaunchKernelAttrValue.md); the twin's SyncAll rule reads the same field (rule syncall-batch-mode).
enum class ScheduleMode : uint8_t { Normal = 0, Batch = 1 };
struct LaunchDescriptor {
    ScheduleMode scheduleMode;
};

// The configured launch, Ascend only: `kernelSymbol` is the kernel's host-side symbol, which bisheng's mixed
// host/device compilation registers, so aclrtGetFuncBySymbol turns it into a function handle; the handle goes to
// aclrtLaunchKernelV2 with a configuration carrying `launch`'s schedule mode. `args` is the kernel's parameter list
// as one argument block. Throws, naming `kernelName`, where the toolkit's headers have no configured launch: a
// SyncAll kernel is never launched without its schedule mode.
void LaunchConfigured(const void* kernelSymbol, const char* kernelName, uint32_t blockDim, void* stream,
                      const void* args, size_t argsBytes, const LaunchDescriptor& launch);

}  // namespace cam::kernels
