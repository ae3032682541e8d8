/* Status codes and error reporting shared by every cam op. */
#ifndef CAM_STATUS_H
#define CAM_STATUS_H

#include "cam/acl_compat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Executors (the aclOpExecutor* of the two-phase API) run once: a second phase that launches (or queues into a
 * capture) consumes the executor of its own op; running it again, or passing a handle that is not a live cam
 * executor, returns ACLNN_ERR_PARAM_INVALID. A second phase refused before launching (a null or too small workspace,
 * an executor made for another op) returns ACLNN_ERR_PARAM_INVALID and leaves the executor live: call the second
 * phase again with a proper workspace, or release it unrun with camDestroyExecutor. aclSetAclOpExecutorRepeatable
 * does not apply to cam executors. A null stream in the second phase is the default stream. */

/* cam-specific aclnnStatus values, beside ACLNN_SUCCESS / ACLNN_ERR_PARAM_* / ACLNN_ERR_INNER. */
#define CAM_ERR_DEVICE_ARGUMENT 561201 /* the kernel's pre-pass found a bad device-resident argument */
#define CAM_ERR_COMM_TIMEOUT 561202    /* a device-side wait inside a round expired */
#define CAM_ERR_COMM_ABORTED 561203    /* the communicator's abort word was set */
#define CAM_ERR_KERNEL_FAULT 561204    /* the kernel broke a hardware rule (twin) or crashed */
#define CAM_ERR_SYNC_TIMEOUT 561205    /* the host gave up waiting for the stream; the work goes on */
#define CAM_ERR_COMM_BUSY 561206       /* camCommDestroy refused: ops of the communicator are queued or running */
#define CAM_ERR_CAPTURE_INVALIDATED 561207 /* a capture rule was broken; the capture is invalidated (cam_graph.h) */
#define CAM_ERR_GRAPH_INVALID 561208 /* the graph was destroyed, or invalidated (a resource it uses was closed) */
#define CAM_ERR_COMM_PROTOCOL 561210   /* data-plane state broke an invariant (docs/protocol.md §9); comm unusable */
#define CAM_ERR_PARAM_DTYPE 561211     /* a tensor argument has a dtype the op does not take (a refused argument,
                                          like ACLNN_ERR_PARAM_INVALID: nothing was made or written) */

/* Message of the last failing cam call on this thread ("" if none). Valid until the next failing call. */
CAM_API const char* camGetLastErrorMessage(void);

/* Waits for `stream` at most timeoutMs (< 0: wait without limit, which the twin caps at a day) and returns the
 * first error the stream's work raised since the previous synchronize, as one of the codes above (message in
 * camGetLastErrorMessage). A null stream is the default stream.
 * After CAM_ERR_SYNC_TIMEOUT the queued ops still run: the caller may free nothing they use (workspaces, tensor
 * data, tensor descriptors of a pending launch, the communicator) until a later synchronize of the same stream
 * returns another status. For data-plane ops camCommAbort makes that prompt; if the caller cannot wait, it must
 * leak those buffers rather than free them. */
CAM_API aclnnStatus camSynchronizeStream(aclrtStream stream, int32_t timeoutMs);

/* A stream of the caller's own on the current device, and its release (after it was synchronized). On Ascend
 * through the runtime cam resolves at run time, so a caller (cam's Python bindings) needs no ACL symbol at link
 * or load time. */
CAM_API aclnnStatus camStreamCreate(aclrtStream* stream);
CAM_API aclnnStatus camStreamDestroy(aclrtStream stream);

/* For a caller that synchronizes `stream` right after its launches (torch's CPU semantics: an op has completed
 * when it returns). Between camBeginSynchronousLaunches(stream) and camEndSynchronousLaunches() on one thread, the
 * work of ops whose kernels wait on nothing outside their own launch (dynamic_quant and the GMM pair, not the
 * data-plane ops) may run on the calling thread inside the op's second phase when the stream is idle, instead of
 * being handed to the stream's worker and back. Stream order, error reporting (at the next synchronize) and
 * capture (the work is recorded, not run) are unchanged; such work ends on its own, so the caller's wait stays
 * bounded by the work itself. A null stream is the default stream. Ascend: no effect (the device runs it). */
CAM_API aclnnStatus camBeginSynchronousLaunches(aclrtStream stream);
CAM_API void camEndSynchronousLaunches(void);

/* Releases an executor a GetWorkspaceSize made that will not run (its second phase was refused, or the caller
 * changed its mind). ACLNN_ERR_PARAM_INVALID for a handle that is not a live cam executor; null is a no-op. */
CAM_API aclnnStatus camDestroyExecutor(aclOpExecutor* executor);

/* Argument checks without data, for a caller that has shapes but no memory (a tracer's fake tensors, a planner):
 * between camBeginArgumentCheck() and camEndArgumentCheck() on one thread, every op's GetWorkspaceSize runs all of
 * its argument checks (the same checks in the same order, with the same statuses and messages) on tensors whose
 * data address may be null, and makes no executor: on success *executor is null and *workspaceSize what the op
 * would need. Nothing is allocated, launched or written. The communicator of a data-plane op must be a live one:
 * its topology, role and state are part of the checks. */
CAM_API void camBeginArgumentCheck(void);
CAM_API void camEndArgumentCheck(void);

/* Backend this library was built for: "twin" or "ascend". */
CAM_API const char* camBackendName(void);

#ifdef __cplusplus
}
#endif

#endif /* CAM_STATUS_H */
