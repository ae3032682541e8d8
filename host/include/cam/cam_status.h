/* Status codes and error reporting shared by every cam op. */
#ifndef CAM_STATUS_H
#define CAM_STATUS_H

#include "cam/acl_compat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cam-specific aclnnStatus values, beside ACLNN_SUCCESS / ACLNN_ERR_PARAM_* / ACLNN_ERR_INNER. */
#define CAM_ERR_DEVICE_ARGUMENT 561201 /* the kernel's pre-pass found a bad device-resident argument */
#define CAM_ERR_COMM_TIMEOUT 561202    /* a device-side wait inside a round expired */
#define CAM_ERR_COMM_ABORTED 561203    /* the communicator's abort word was set */
#define CAM_ERR_KERNEL_FAULT 561204    /* the kernel broke a hardware rule (twin) or crashed */
#define CAM_ERR_SYNC_TIMEOUT 561205    /* the host gave up waiting for the stream; the work goes on */
#define CAM_ERR_COMM_PROTOCOL 561210   /* data-plane state broke an invariant (docs/protocol.md §9); comm unusable */

/* Message of the last failing cam call on this thread ("" if none). Valid until the next failing call. */
CAM_API const char* camGetLastErrorMessage(void);

/* Waits for `stream` at most timeoutMs (< 0: wait without limit) and returns the first error the stream's work
 * raised since the previous synchronize, as one of the codes above (message in camGetLastErrorMessage). */
CAM_API aclnnStatus camSynchronizeStream(aclrtStream stream, int32_t timeoutMs);

/* Backend this library was built for: "twin" or "ascend". */
CAM_API const char* camBackendName(void);

#ifdef __cplusplus
}
#endif

#endif /* CAM_STATUS_H */
