// The launch configuration type and its scheduling-mode attribute (hicann/runtime
// docs/api_docs/aclrtLaunchKernelAttrValue.md: schemMode 1 = batch, the kernel starts only once all its blockDim
// cores are free). In the torch-npu 2.6.0.post5 and 2.14.0 headers, not in 2.8.0's.
#include <acl/acl.h>

void CamProbe() {
    aclrtLaunchKernelAttr attr{};
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE;
    attr.value.schemMode = 1;
    aclrtLaunchKernelCfg cfg{&attr, 1};
    (void)cfg;
}
