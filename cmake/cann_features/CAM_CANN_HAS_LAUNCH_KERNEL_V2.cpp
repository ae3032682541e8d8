// A launch call that takes the configuration of CAM_CANN_HAS_LAUNCH_KERNEL_CFG: aclrtLaunchKernelV2 on a function
// handle, from a loaded binary or from a kernel's symbol (aclrtGetFuncBySymbol, the data-plane launch's;
// hicann/runtime docs/api_docs/aclrtLaunchKernelV2.md). Declared in torch-npu 2.14.0's acl_rt.h only.
#include <acl/acl.h>

void CamProbe() {
    (void)&aclrtLaunchKernelV2;
    (void)&aclrtBinaryGetFunction;
    (void)&aclrtGetFuncBySymbol;
    aclrtFuncHandle handle = nullptr;
    aclrtLaunchKernelCfg* cfg = nullptr;
    (void)handle;
    (void)cfg;
}
