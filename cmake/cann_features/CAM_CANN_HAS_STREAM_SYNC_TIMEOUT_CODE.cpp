// The runtime's "stream sync time out" code as a name. torch-npu 2.8.0's rt_error_codes.h lacks it; the runtime
// still returns it there (the value is the same in the 2.6.0.post5 and 2.14.0 headers).
#include <acl/acl.h>

void CamProbe() { (void)static_cast<int>(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT); }
