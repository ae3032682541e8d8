// The device backend seam: everything the host ops need from the device runtime besides kernel launches. One
// implementation per backend: host/twin/backend_twin.cpp (+ acl_twin.cpp) on the twin, backend_ascend.cpp on Ascend. Every
// "Enqueue" call is ordered on `stream` with the launches around it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cam/acl_compat.h"
#include "cam/cam_graph.h"
#include "cam/tiling/platform_info.h"

namespace cam::host {

tiling::PlatformInfo CurrentPlatform();

// The stream an op is queued on: a null stream is the default stream, as in ACL (on Ascend null is passed on).
aclrtStream ResolveStream(aclrtStream stream);

// Entry i < aclGetTensorListSize of a tensor list. aclnn has no C accessor for it: on Ascend it is the
// aclTensorList class of CANN's opdev headers, on the twin the twin's list.
const aclTensor* TensorListEntry(const aclTensorList* list, uint64_t i);

// Runs an op's launch for a caller that synchronizes right after it (camBeginSynchronousLaunches), for work that
// ends on its own (Executor::endsOnItsOwn). Twin: what the launch queues runs on the calling thread while the
// stream is idle (twin::RunHereScope). Ascend: launch() as always.
aclnnStatus LaunchOnCaller(aclrtStream stream, const std::function<aclnnStatus()>& launch);
// Stream tasks the calling threads ran themselves so far (camHostActivity::callerRunTasks); 0 on Ascend.
uint64_t CallerRunTasks();

// Host work in stream order: `task` returns ACLNN_SUCCESS or a status; a failing status (with *message) becomes
// the stream's error, reported by the next camSynchronizeStream. Twin: a task on the stream's worker. Ascend: a
// host callback (aclrtLaunchCallback).
void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task);

// Copies `bytes` host bytes to device memory `dst` (Ascend: aclrtMemcpyAsync from a buffer kept until the copy ran).
void EnqueueHostToDevice(aclrtStream stream, void* dst, std::vector<uint8_t> bytes);

// Zeroes `bytes` bytes of device memory (Ascend: aclrtMemsetAsync).
void EnqueueZero(aclrtStream stream, void* dst, uint64_t bytes);

// Reads `bytes` bytes of device memory `src` once the work queued before it ran, and hands them to `check`
// (Ascend: aclrtMemcpyAsync device-to-host, then a host callback), whose status becomes the stream's error.
void EnqueueDeviceRead(aclrtStream stream, const void* src, uint64_t bytes,
                       std::function<aclnnStatus(const uint8_t* host, std::string* message)> check);

// Capture seam (graph.cpp holds the rules; the backend records and replays). A recording is what a capturing
// stream produces; BeginRecording starts it (twin: the stream's tasks go to the recording; Ascend:
// aclmdlRICaptureBegin), EndRecording stops it (Ascend: aclmdlRICaptureEnd) and, when `keep`, returns something
// LaunchRecording can queue on a stream as one unit (Ascend: aclmdlRIExecuteAsync). `owner` is kept alive until
// the launched work ran, so nothing it owns is freed under a running replay.
struct Recording;
std::shared_ptr<Recording> BeginRecording(aclrtStream stream, camCaptureMode mode);
uint64_t RecordedOps(const Recording& recording);
bool EndRecording(aclrtStream stream, const std::shared_ptr<Recording>& recording, bool keep, std::string* why);
void LaunchRecording(const std::shared_ptr<Recording>& recording, aclrtStream stream, std::shared_ptr<void> owner);

// What the runtime itself says of `stream`'s capture, whoever began it: a framework's graph (torch_npu's NPUGraph)
// begins the runtime's capture without cam, so cam's registry never hears of it (graph.cpp adopts it). While it
// is not NONE, *capture names that capture (Ascend: its aclmdlRI), so a later capture on the same stream is told
// apart. Ascend: aclmdlRICaptureGetInfo. Twin: the twin runtime's own captures (camTwinAclmdlRICaptureBegin), not
// cam's registry.
camCaptureStatus RuntimeCaptureStatus(aclrtStream stream, uintptr_t* capture);

// Device memory a graph owns, zeroed (Ascend: aclrtMalloc + aclrtMemset); freed with FreeGraphMemory.
void* AllocGraphMemory(uint64_t bytes);
void FreeGraphMemory(void* memory);
// Device memory that lives as long as the process, filled once from the host (Ascend: aclrtMalloc +
// synchronous aclrtMemcpy, before any stream uses it).
void* PersistentDeviceCopy(const std::vector<uint8_t>& bytes);
// Copies device memory to the host; only after a synchronize of the streams that wrote it (Ascend: aclrtMemcpy).
void ReadDeviceNow(void* host, const void* device, uint64_t bytes);
// Zeroes device memory no stream is using (Ascend: aclrtMemset).
void ZeroDeviceNow(void* device, uint64_t bytes);

// The HCCL context an MC2 op of `group` gets on `rank` (window_table). Twin: the one registered for it (by a twin
// transport, PublishHcclContext). Ascend: the op framework binds it to the op's launch, so none can be handed over
// here: nullptr, and *why says so.
const void* HcclContextFor(const char* group, int64_t rank, std::string* why);
// Twin transports: the context the HCCL runtime would give rank `rank` of `group` (windows[r] = rank r's window).
// Ascend: throws (an HCCL communicator's contexts come from HCCL).
void PublishHcclContext(const std::string& group, int64_t rank, const std::vector<uint64_t>& windows,
                        uint64_t windowBytes);
void WithdrawHcclContext(const std::string& group, int64_t rank);

// A stream of cam's own for one-shot host work (window_table when a Comm is created); destroyed with
// DestroyOwnStream after it was synchronized.
aclrtStream CreateOwnStream();
void DestroyOwnStream(aclrtStream stream);

// Frequency of the device's system cycle counter (kernels measure their timeouts in it).
uint64_t SystemCycleHz();

}  // namespace cam::host
