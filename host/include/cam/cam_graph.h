/* Stream capture and graph replay, shaped after ACL's model-RI capture (acl_mdl.h: aclmdlRICaptureBegin,
 * aclmdlRICaptureGetInfo, aclmdlRICaptureEnd, aclmdlRIExecuteAsync, aclmdlRIDestroy) with cam's own names.
 * docs/graph.md has the rules and why.
 *
 * While a stream captures, the cam ops queued on it are recorded instead of run; camStreamEndCapture turns the
 * recording into a camGraph, and camGraphLaunch queues the whole recording on a stream as one unit of work.
 * During a capture these fail at once with CAM_ERR_CAPTURE_INVALIDATED and invalidate the capture (ACL reports
 * the same situation as error 107030): a synchronize, a host-to-device copy, a host read of device data (e.g.
 * an op's eager status read-back), a host task on the stream, and an op whose workspace was not taken from the
 * capture's pool (camStreamCaptureAllocWorkspace). Nothing of a failing op is recorded, and ending an
 * invalidated capture fails with a message saying what broke it (the capture is over either way).
 *
 * Device status records of captured ops live in the graph's pool and are not reset per replay (sticky); they are
 * read by the synchronize that follows a camGraphLaunch (one read per synchronize, no host task in the graph), so
 * a bad device-resident argument met during a replay fails that synchronize with the same sentence as eagerly. */
#ifndef CAM_GRAPH_H
#define CAM_GRAPH_H

#include <stdint.h>

#include "cam/acl_compat.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes CAM_ERR_CAPTURE_INVALIDATED and CAM_ERR_GRAPH_INVALID are in cam/cam_status.h. */

/* Values as ACL's aclmdlRICaptureMode / aclmdlRICaptureStatus. GLOBAL: a forbidden call on any thread breaks
 * the capture; THREAD_LOCAL: only on the capturing thread; RELAXED: only on the capturing stream itself. */
typedef enum { CAM_CAPTURE_MODE_GLOBAL = 0, CAM_CAPTURE_MODE_THREAD_LOCAL = 1, CAM_CAPTURE_MODE_RELAXED = 2 } camCaptureMode;
typedef enum {
    CAM_CAPTURE_STATUS_NONE = 0,
    CAM_CAPTURE_STATUS_ACTIVE = 1,
    CAM_CAPTURE_STATUS_INVALIDATED = 2
} camCaptureStatus;

typedef struct camGraph camGraph; /* opaque; a registry handle, so a destroyed one is refused, not dereferenced */

/* Starts recording on `stream` (null: the default stream). Fails if the stream already captures. */
CAM_API aclnnStatus camStreamBeginCapture(aclrtStream stream, camCaptureMode mode);

/* Status of `stream`'s capture (NONE when it does not capture) and, while a capture exists, how many ops it
 * recorded (`ops` may be null). */
CAM_API aclnnStatus camStreamGetCaptureInfo(aclrtStream stream, camCaptureStatus* status, uint64_t* ops);

/* Workspace for an op queued on the capturing `stream`: owned by the graph the capture becomes (freed by
 * camGraphDestroy, or by a failed camStreamEndCapture), so the recorded launches keep valid addresses. */
CAM_API aclnnStatus camStreamCaptureAllocWorkspace(aclrtStream stream, uint64_t bytes, void** workspace);

/* Ends the capture on `stream`. ACTIVE: *graph receives the graph. INVALIDATED: fails with
 * CAM_ERR_CAPTURE_INVALIDATED naming the first broken rule, *graph is null and the recording is discarded. */
CAM_API aclnnStatus camStreamEndCapture(aclrtStream stream, camGraph** graph);

/* Queues the recording on `stream` (it must not be capturing). The host does no per-op work. No bound on how many
 * launches queue: a later synchronize must outlast all of them (use camGraphLaunchBounded). */
CAM_API aclnnStatus camGraphLaunch(camGraph* graph, aclrtStream stream);

/* camGraphLaunch with back-pressure: while `maxQueued` (>= 1) launches of this graph are queued and not yet run,
 * waits for one to finish, at most `timeoutMs` (< 0: no bound), so a synchronize after any number of launches
 * waits for at most `maxQueued` replays. On timeout returns CAM_ERR_SYNC_TIMEOUT and queues nothing; the queued
 * replays go on (free nothing they use: see camSynchronizeStream). Twin: a launch counts until its replay ran.
 * Ascend (untested here): until the synchronize that sees the stream pass it, since the host observes a replay's
 * end only there; so on Ascend synchronize at least every `maxQueued` launches. */
CAM_API aclnnStatus camGraphLaunchBounded(camGraph* graph, aclrtStream stream, uint32_t maxQueued, int32_t timeoutMs);

/* How many launches of `graph` are queued and not yet run (as camGraphLaunchBounded counts them). */
CAM_API aclnnStatus camGraphQueuedReplays(camGraph* graph, uint64_t* queued);

/* Marks the graph unusable: later launches fail with CAM_ERR_GRAPH_INVALID and `reason`. For resources a graph
 * uses that are closed under it (e.g. a communicator). */
CAM_API aclnnStatus camGraphInvalidate(camGraph* graph, const char* reason);

/* Destroys the handle at once (later calls with it fail with CAM_ERR_GRAPH_INVALID). Launches already queued
 * still run: the graph's pool is freed after the last of them, never under a running replay. */
CAM_API aclnnStatus camGraphDestroy(camGraph* graph);

/* Process-wide counts of the host's interactions with device work since load, for measuring what a replay saves
 * (cam-bench ffn-loop): synchronizes, reads of device data by the host (stream-ordered read-backs and the status
 * reads after a graph's synchronize), host-to-device copies, host tasks, kernel launches queued or recorded, graph
 * launches, and stream tasks run by the calling thread instead of the stream's worker. */
typedef struct {
    uint64_t synchronizes;
    uint64_t deviceReads;
    uint64_t hostToDeviceCopies;
    uint64_t hostTasks;
    uint64_t graphLaunches;
    uint64_t callerRunTasks; /* stream tasks the calling thread ran itself (camBeginSynchronousLaunches); twin */
} camHostActivity;
CAM_API aclnnStatus camGetHostActivity(camHostActivity* activity);

/* A capture cam did not begin (a framework's graph: torch_npu's NPUGraph begins the runtime's capture itself) is
 * adopted: camStreamGetCaptureInfo reports the runtime's status for it (ops: 0), camStreamCaptureAllocWorkspace
 * takes workspace from a pool cam keeps for the life of the process (cam cannot know when the framework destroys
 * its graph; one workspace per op launch recorded into such a capture), and the captured ops' status records are
 * read by every camSynchronizeStream of the stream they were captured on (the framework's replay is not a
 * camGraphLaunch). A captured data-plane op keeps its communicator in flight (camCommDestroy refuses) until this
 * call, made once the framework destroyed every graph it captured on `stream`: it ends those status reads and
 * releases the communicators; the pool stays. Fails while the stream still captures. */
CAM_API aclnnStatus camStreamReleaseAdoptedCaptures(aclrtStream stream);

#if !defined(CAM_WITH_CANN)
/* The twin runtime's model-RI capture, the calls a framework makes to ACL (aclmdlRICaptureBegin(stream, mode),
 * aclmdlRICaptureEnd(stream, &model), aclmdlRIExecuteAsync(model, stream), aclmdlRIDestroy(model)), for tests
 * that stand in for torch_npu's NPUGraph: cam's registry does not see these captures and adopts them. */
CAM_API aclError camTwinAclmdlRICaptureBegin(aclrtStream stream, int32_t mode);
CAM_API aclError camTwinAclmdlRICaptureEnd(aclrtStream stream, void** model);
CAM_API aclError camTwinAclmdlRIExecuteAsync(void* model, aclrtStream stream);
CAM_API aclError camTwinAclmdlRIDestroy(void* model);
#endif

#ifdef __cplusplus
}
#endif

#endif /* CAM_GRAPH_H */
