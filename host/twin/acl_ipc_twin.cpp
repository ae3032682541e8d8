// The twin's stand-ins for ACL device memory and its IPC export/import (declared in cam/acl_compat.h), which the NPU
// transport (transport_ipc.cpp) calls through its table exactly as it calls the real ones on Ascend.
//
// "Device memory" is a POSIX shared-memory segment, 0600, of this process's user:
//   [header: magic, nonce, bytes, owner, allow-list][park table (twin/park.h)][the memory aclrtMalloc returns]
// aclrtMalloc creates it without a name (O_TMPFILE in /dev/shm), so memory a process never exports disappears with
// the process even when it is killed, as device memory does with its process. Export links it under a name (the
// twin's shm plane chooses that name: camTwinIpcNameNextExport; otherwise /cam-npu-twin-<pid>-...), and the key is
// the name plus a random nonce drawn at export; SetImportPid writes the allow-list into the header; ImportByKey maps
// the segment only when the key's nonce is the one exported and the caller's pid is allowed (the flow of CANN's
// aclrtIpcMemGetExportKey / aclrtIpcMemSetImportPid / aclrtIpcMemImportByKey pages, docs/ascend.md §5.0); Close
// unmaps an import, or withdraws an export; Free unmaps the owner's segment and removes its name.
// A copy whose device side is not inside memory this process allocated or imported is refused, and so is a host copy
// to or from imported memory (CANN allows only device-to-device copies there). Every call on memory is logged
// (camTwinIpcCallLog; bounded, the oldest entries go first), a refused one as "name!" with its reason for
// aclGetRecentErrMsg, so tests can prove which imports succeeded and were closed.
#include <fcntl.h>
#include <sys/mman.h>
#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "cam/acl_compat.h"
#include "shm_trust.h"
#include "twin/park.h"

namespace {

constexpr uint64_t kMagic = 0x63616d2d69706331ull;  // "cam-ipc1"
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kMaxPids = (kHeaderBytes - 48) / 4;
constexpr uint64_t kPrefixBytes = kHeaderBytes + cam::twin::kSharedParkBytes;
// Where glibc's shm_open keeps POSIX shm on Linux: memory is created there unnamed (O_TMPFILE) and linked at export.
constexpr char kShmDir[] = "/dev/shm";

struct Header {
    uint64_t magic;
    uint64_t nonce;  // 0: not exported (or withdrawn): nothing can import it
    uint64_t bytes;
    uint64_t flags;  // the export's flags (pid validation on unless DISABLE_PID_VALIDATION)
    uint64_t pids;   // entries of allow[]
    int32_t ownerDevice;  // the twin device and the pid of the process that allocated it (what a record would
    int32_t ownerPid;     // publish; a shm-plane attach by name reads them)
    int32_t allow[kMaxPids];
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its page");

struct Segment {
    std::string name;  // "/name" once exported (imports: always), "" before
    uint8_t* base = nullptr;  // the mapping (header first)
    uint64_t mapped = 0;
    int fd = -1;          // the owner's descriptor (export links it under a name); -1 for an import
    bool linked = false;  // the owner's name exists (until camTwinIpcUnlinkName or Free removes it)
    int64_t imports = 0;  // an import: how many ImportByKey of its key are open in this process (one mapping)
    Header* header() const { return reinterpret_cast<Header*>(base); }
    uint8_t* memory() const { return base + kPrefixBytes; }
};

std::mutex gMutex;
std::map<uintptr_t, Segment> gOwned;            // by the address aclrtMalloc returned
// By key. Ranks that are threads of one process (the twin's shm plane in tests) import one key more than once: the
// imports share one mapping and each Close ends one of them.
std::map<std::string, Segment> gImported;
std::string gLog;
uint64_t gLogDropped = 0;  // entries dropped from the front of gLog since the last reset
std::atomic<uint64_t> gCounter{0};

// The log is for tests that read it between phases; a plane that runs for hours (a soak, cam-run) copies words on
// every op, so the log keeps at most its newest kLogCapBytes and counts what it dropped (camTwinIpcCallLog reports
// it as a first entry).
constexpr size_t kLogCapBytes = 256 * 1024;

void Log(const char* call) {
    // gMutex held by the caller
    if (gLog.size() > kLogCapBytes) {
        size_t cut = gLog.find(';', gLog.size() - kLogCapBytes / 2);
        cut = cut == std::string::npos ? gLog.size() : cut + 1;
        const auto end = gLog.begin() + static_cast<std::ptrdiff_t>(cut);
        gLogDropped += static_cast<uint64_t>(std::count(gLog.begin(), end, ';'));
        gLog.erase(0, cut);
    }
    if (!gLog.empty()) gLog += ';';
    gLog += call;
}

// The name the next export of this thread links its memory under (camTwinIpcNameNextExport), "" for the default.
thread_local std::string gNextExportName;

// What aclGetRecentErrMsg returns: the reason of this thread's last refused call ("" before any).
thread_local std::string gRecent;

// Marks the call just logged as refused ("name!"), so a test can tell the imports that succeeded (and must be
// closed) from the ones that did not, and keeps `why` for aclGetRecentErrMsg. Returns rc.
aclError Refused(aclError rc, const char* why = "invalid argument") {
    // gMutex held by the caller
    gLog += '!';
    gRecent = why;
    return rc;
}
aclError Refused(aclError rc, const std::string& why) { return Refused(rc, why.c_str()); }

// A refusal of one of the twin's own calls (not an ACL call, so not in the log): only the reason is kept.
aclError Unanswered(aclError rc, const std::string& why) {
    gRecent = why;
    return rc;
}

// Where [p, p + n) lies (gMutex held): inside memory this process allocated, inside memory it imported from
// another device, or neither. The device side of every copy must lie in one of the first two, as on a device no
// copy reaches an address the runtime never handed out.
enum class Range { kUnknown, kOwned, kImported };
Range DeviceRange(const void* p, size_t n) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto inside = [&](const Segment& s) {
        const auto lo = reinterpret_cast<uintptr_t>(s.memory());
        const uintptr_t hi = reinterpret_cast<uintptr_t>(s.base) + s.mapped;
        return a >= lo && a <= hi && n <= hi - a;
    };
    auto it = gOwned.upper_bound(a);
    if (it != gOwned.begin() && inside(std::prev(it)->second)) return Range::kOwned;
    for (const auto& [key, s] : gImported)
        if (inside(s)) return Range::kImported;
    return Range::kUnknown;
}

// Device memory moves in whole words as the device's DMA moves them: aligned words with atomic accesses on both
// sides (a kernel of this process, or a peer process, may load or store them meanwhile), anything else bytewise.
void CopyDeviceBytes(void* dst, const void* src, size_t n) {
    if (reinterpret_cast<uintptr_t>(dst) % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 8 == 0 && n % 8 == 0) {
        for (size_t i = 0; i < n / 8; ++i)
            __atomic_store_n(static_cast<int64_t*>(dst) + i,
                             __atomic_load_n(static_cast<const int64_t*>(src) + i, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
        return;
    }
    std::memcpy(dst, src, n);
}

// CAM_TWIN_DENY_PEER_ACCESS="a>b,c>d": device a cannot reach device b (a test hook: the twin's devices all share
// one host, where every pair would answer yes).
bool PeerAccessDenied(int32_t from, int32_t to) {
    const char* env = std::getenv("CAM_TWIN_DENY_PEER_ACCESS");
    if (!env) return false;
    const std::string pair = std::to_string(from) + ">" + std::to_string(to);
    const std::string list = std::string(",") + env + ",";
    return list.find("," + pair + ",") != std::string::npos;
}

// One twin "device" per process unless CAM_TWIN_DEVICE_ID says otherwise (tests give each rank its own, so the
// transport's peer-access check runs as it would across the NPUs of one server).
int32_t TwinDevice() {
    const char* env = std::getenv("CAM_TWIN_DEVICE_ID");
    return env ? static_cast<int32_t>(std::atoi(env)) : 0;
}

uint64_t Random64() {
    std::random_device rd;
    uint64_t v = (uint64_t(rd()) << 32) ^ rd();
    return v ? v : 1;
}

// "name:nonce" (hex); false when the key is not of that form.
bool ParseKey(const char* key, std::string* name, uint64_t* nonce) {
    if (!key) return false;
    const char* colon = std::strrchr(key, ':');
    if (!colon || colon == key || colon[1] == '\0') return false;
    char* end = nullptr;
    *nonce = std::strtoull(colon + 1, &end, 16);
    if (*end != '\0' || *nonce == 0) return false;
    name->assign(key, colon);
    return true;
}

void Register(const Segment& s) {
    cam::twin::RegisterSharedRegion(s.memory(), s.mapped - kPrefixBytes, s.base + kHeaderBytes);
}

void Unmap(const Segment& s) {
    cam::twin::UnregisterSharedRegion(s.memory());  // before the unmap: no wait or wake reaches the table after it
    munmap(s.base, s.mapped);
}

}  // namespace

extern "C" aclError camTwinAclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtMalloc");
    if (!devPtr || size == 0) return Refused(ACL_ERROR_INVALID_PARAM);
    // Unnamed until exported: a process killed before it exports (or memory it never exports, a staging area)
    // leaves nothing behind in /dev/shm.
    const int fd = open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return Refused(ACL_ERROR_INTERNAL_ERROR, std::string("cannot create twin device memory (O_TMPFILE in ") +
                                                     kShmDir + "): " + std::strerror(errno));
    const uint64_t total = kPrefixBytes + size;  // ftruncate zeroes it: header, park table and memory start empty
    void* p = ftruncate(fd, static_cast<off_t>(total)) == 0
                  ? mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    if (p == MAP_FAILED) {
        close(fd);
        return Refused(ACL_ERROR_INTERNAL_ERROR, std::string("cannot map twin device memory of ") +
                                                     std::to_string(size) + " bytes: " + std::strerror(errno));
    }
    Segment s{"", static_cast<uint8_t*>(p), total, fd, false};
    s.header()->magic = kMagic;
    s.header()->bytes = size;
    s.header()->ownerDevice = TwinDevice();
    s.header()->ownerPid = static_cast<int32_t>(getpid());
    Register(s);
    *devPtr = s.memory();
    gOwned[reinterpret_cast<uintptr_t>(s.memory())] = s;
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtFree(void* devPtr) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtFree");
    auto it = gOwned.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it == gOwned.end()) return Refused(ACL_ERROR_INVALID_PARAM);
    Unmap(it->second);
    if (it->second.linked) shm_unlink(it->second.name.c_str());
    close(it->second.fd);
    gOwned.erase(it);
    return ACL_SUCCESS;
}

namespace {

// The checks every copy passes (gMutex held; the call is logged): both sides where the runtime handed memory out,
// and memory imported from another device copied only device to device, asynchronously. CANN's
// aclrtIpcMemGetExportKey page (hicann/runtime docs/api_docs): no host copy of an imported address, synchronous or
// not, and no synchronous copy of it at all; an asynchronous device-to-device copy into own memory is the way.
aclError CheckCopy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind, bool async) {
    if (!dst || !src || count > destMax) return Refused(ACL_ERROR_INVALID_PARAM);
    const bool toDevice = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    const bool fromDevice = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    const Range to = toDevice ? DeviceRange(dst, count) : Range::kOwned;
    const Range from = fromDevice ? DeviceRange(src, count) : Range::kOwned;
    if (to == Range::kUnknown || from == Range::kUnknown)
        return Refused(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: the device side is not memory aclrtMalloc or "
                                                "aclrtIpcMemImportByKey handed out");
    if ((kind == ACL_MEMCPY_HOST_TO_DEVICE && to == Range::kImported) ||
        (kind == ACL_MEMCPY_DEVICE_TO_HOST && from == Range::kImported))
        return Refused(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: a host copy to or from memory imported from another "
                                                "device (aclrtIpcMemImportByKey) is not allowed; copy device to "
                                                "device into own memory first");
    if (!async && (to == Range::kImported || from == Range::kImported))
        return Refused(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: a synchronous copy of memory imported from another "
                                                "device is not allowed; use aclrtMemcpyAsync device to device");
    return ACL_SUCCESS;
}

}  // namespace

extern "C" aclError camTwinAclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                                      aclrtMemcpyKind kind) {
    {
        std::lock_guard<std::mutex> lock(gMutex);
        Log("aclrtMemcpy");
        if (aclError rc = CheckCopy(dst, destMax, src, count, kind, false)) return rc;
    }
    CopyDeviceBytes(dst, src, count);
    return ACL_SUCCESS;
}

// The copy is done before the call returns: a schedule an asynchronous copy may have (the caller synchronizes the
// stream before it uses the destination either way).
extern "C" aclError camTwinAclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                                           aclrtMemcpyKind kind, aclrtStream stream) {
    {
        std::lock_guard<std::mutex> lock(gMutex);
        Log("aclrtMemcpyAsync");
        (void)stream;  // null is the default stream, as in ACL
        if (aclError rc = CheckCopy(dst, destMax, src, count, kind, true)) return rc;
    }
    CopyDeviceBytes(dst, src, count);
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtGetDevice(int32_t* deviceId) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtGetDevice");
    if (!deviceId) return Refused(ACL_ERROR_INVALID_PARAM);
    *deviceId = TwinDevice();
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtDeviceGetBareTgid(int32_t* pid) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtDeviceGetBareTgid");
    if (!pid) return Refused(ACL_ERROR_INVALID_PARAM);
    *pid = static_cast<int32_t>(getpid());
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtDeviceCanAccessPeer(int32_t* canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtDeviceCanAccessPeer");
    // As documented for the real call: the two devices must differ. Every twin device reaches every other (one host)
    // unless the test hook says otherwise.
    if (!canAccessPeer || deviceId == peerDeviceId) return Refused(ACL_ERROR_INVALID_PARAM);
    *canAccessPeer = PeerAccessDenied(deviceId, peerDeviceId) ? 0 : 1;
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtIpcMemGetExportKey(void* devPtr, size_t size, char* key, size_t len, uint64_t flags) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtIpcMemGetExportKey");
    const std::string chosen = std::move(gNextExportName);  // the hint is for this export only, whatever its outcome
    gNextExportName.clear();
    auto it = gOwned.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it == gOwned.end() || !key || size == 0 || size > it->second.header()->bytes) return Refused(ACL_ERROR_INVALID_PARAM);
    Segment& s = it->second;
    if (!s.linked) {
        char name[96];
        if (chosen.empty())
            std::snprintf(name, sizeof(name), "/cam-npu-twin-%d-%" PRIu64 "-%016" PRIx64, static_cast<int>(getpid()),
                          gCounter.fetch_add(1), Random64());
        // The key holds the name, a ':' and up to 16 hex digits of nonce: a name that cannot fit is refused here,
        // before it exists.
        const std::string linkName = chosen.empty() ? std::string(name) : chosen;
        if (linkName.size() + 18 > len)
            return Refused(ACL_ERROR_INVALID_PARAM, "the segment name " + linkName + " does not fit a key of " +
                                                        std::to_string(len) + " bytes with its nonce");
        char fdPath[64];
        std::snprintf(fdPath, sizeof(fdPath), "/proc/self/fd/%d", s.fd);
        const std::string path = std::string(kShmDir) + linkName;
        if (linkat(AT_FDCWD, fdPath, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0)
            return Refused(ACL_ERROR_INVALID_PARAM, "cannot name the exported memory " + linkName + ": " +
                                                        std::strerror(errno));
        s.name = linkName;
        s.linked = true;
    } else if (!chosen.empty() && chosen != s.name) {
        return Refused(ACL_ERROR_INVALID_PARAM, "the memory is exported as " + s.name + " already, not " + chosen);
    }
    Header* h = s.header();
    const uint64_t nonce = Random64();
    char text[160];
    const int n = std::snprintf(text, sizeof(text), "%s:%" PRIx64, s.name.c_str(), nonce);
    if (n < 0 || static_cast<size_t>(n) + 1 > len) return Refused(ACL_ERROR_INVALID_PARAM);
    h->flags = flags;
    h->pids = 0;
    __atomic_store_n(&h->nonce, nonce, __ATOMIC_RELEASE);
    std::memcpy(key, text, static_cast<size_t>(n) + 1);
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtIpcMemSetImportPid(const char* key, int32_t* pid, size_t num) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtIpcMemSetImportPid");
    std::string name;
    uint64_t nonce = 0;
    if (!ParseKey(key, &name, &nonce) || (num > 0 && !pid)) return Refused(ACL_ERROR_INVALID_PARAM);
    for (auto& [addr, s] : gOwned) {
        Header* h = s.header();
        if (s.name != name || h->nonce != nonce) continue;
        if (h->pids + num > kMaxPids) return Refused(ACL_ERROR_INVALID_PARAM);
        for (size_t i = 0; i < num; ++i) h->allow[h->pids + i] = pid[i];
        __atomic_store_n(&h->pids, h->pids + num, __ATOMIC_RELEASE);
        return ACL_SUCCESS;
    }
    return Refused(ACL_ERROR_INVALID_PARAM);  // not a key this process exported
}

extern "C" aclError camTwinAclrtIpcMemImportByKey(void** devPtr, const char* key, uint64_t) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtIpcMemImportByKey");
    std::string name;
    uint64_t nonce = 0;
    if (!devPtr || !ParseKey(key, &name, &nonce)) return Refused(ACL_ERROR_INVALID_PARAM);
    if (auto open = gImported.find(key); open != gImported.end()) {
        if (__atomic_load_n(&open->second.header()->nonce, __ATOMIC_ACQUIRE) != nonce)
            return Refused(ACL_ERROR_INVALID_PARAM, "the key is stale (its owner withdrew the export)");
        ++open->second.imports;
        *devPtr = open->second.memory();
        return ACL_SUCCESS;
    }
    const int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) return Refused(ACL_ERROR_INVALID_PARAM, "no memory of that key exists (its owner freed it or never made it)");
    // The plane's one trust rule for a segment (shm_trust.h), its reason kept for aclGetRecentErrMsg.
    uint64_t size = 0;
    const std::string untrusted = cam::host::RefuseUntrustedSegment(fd, "the imported segment " + name, &size);
    void* p = untrusted.empty() && size > kPrefixBytes
                  ? mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (!untrusted.empty()) return Refused(ACL_ERROR_INVALID_PARAM, untrusted.c_str());
    if (p == MAP_FAILED) return Refused(ACL_ERROR_INVALID_PARAM, "the imported segment is too small or cannot be mapped");
    Segment s{name, static_cast<uint8_t*>(p), size};
    const Header* h = s.header();
    bool allowed = (h->flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) != 0;
    const uint64_t npids = std::min<uint64_t>(__atomic_load_n(&h->pids, __ATOMIC_ACQUIRE), kMaxPids);
    for (uint64_t i = 0; i < npids && !allowed; ++i) allowed = h->allow[i] == static_cast<int32_t>(getpid());
    if (h->magic != kMagic || __atomic_load_n(&h->nonce, __ATOMIC_ACQUIRE) != nonce || !allowed ||
        h->bytes + kPrefixBytes > s.mapped) {
        munmap(p, s.mapped);
        return Refused(ACL_ERROR_INVALID_PARAM, !allowed ? "this process's pid is not on the export's allow-list"
                                                         : "the key is stale or altered (not the owner's export)");
    }
    Register(s);
    *devPtr = s.memory();
    s.imports = 1;
    gImported[key] = s;
    return ACL_SUCCESS;
}

// A process that both exports a key and imports it (ranks that are threads of one process) closes that key once as
// its owner and once per import, in an order the key cannot tell apart: the first Close of a live export withdraws
// it, every later one ends one import, so the one shared import mapping lives until the last Close of the key.
extern "C" aclError camTwinAclrtIpcMemClose(const char* key) {
    std::lock_guard<std::mutex> lock(gMutex);
    Log("aclrtIpcMemClose");
    std::string name;
    uint64_t nonce = 0;
    if (!ParseKey(key, &name, &nonce)) return Refused(ACL_ERROR_INVALID_PARAM);
    for (auto& [addr, s] : gOwned) {
        if (s.name == name && s.header()->nonce == nonce) {
            __atomic_store_n(&s.header()->nonce, uint64_t{0}, __ATOMIC_RELEASE);  // no import from now on
            return ACL_SUCCESS;
        }
    }
    auto it = gImported.find(key);
    if (it == gImported.end()) return Refused(ACL_ERROR_INVALID_PARAM);
    if (--it->second.imports > 0) return ACL_SUCCESS;
    Unmap(it->second);
    gImported.erase(it);
    return ACL_SUCCESS;
}

// Not logged: it reads the reason of a refusal, it is not a call on device memory.
extern "C" const char* camTwinAclGetRecentErrMsg(void) { return gRecent.c_str(); }

extern "C" aclError camTwinIpcCallLog(char* out, size_t bytes, int32_t reset) {
    std::lock_guard<std::mutex> lock(gMutex);
    if (!out || bytes == 0) return ACL_ERROR_INVALID_PARAM;
    std::string all;
    if (gLogDropped) {
        all.append("(").append(std::to_string(gLogDropped)).append(" earlier calls dropped)");
        if (!gLog.empty()) all.push_back(';');
    }
    all.append(gLog);
    const size_t n = std::min(bytes - 1, all.size());
    std::memcpy(out, all.data(), n);
    out[n] = '\0';
    const bool whole = n == all.size();
    if (reset) {
        gLog.clear();
        gLogDropped = 0;
    }
    return whole ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM;
}

// ---- the twin's shm plane (camCommCreateShm / camCommAttachShm / camCommUnlinkShm in transport_ipc.cpp): the NPU
// transport over these stand-ins, with segment names a supervisor can find by prefix and remove. Not ACL calls, so
// not logged; a refusal's reason is what aclGetRecentErrMsg returns.

extern "C" aclError camTwinIpcNameNextExport(const char* name) {
    std::lock_guard<std::mutex> lock(gMutex);
    if (!name || name[0] != '/' || name[1] == '\0' || std::strchr(name + 1, '/'))
        return Unanswered(ACL_ERROR_INVALID_PARAM, "a segment name is '/' and a name without another '/'");
    gNextExportName = name;
    return ACL_SUCCESS;
}

extern "C" aclError camTwinIpcKeyOfName(const char* name, char* key, size_t len, uint64_t* bytes, int32_t* deviceId,
                                       int32_t* ownerPid) {
    std::lock_guard<std::mutex> lock(gMutex);
    if (!name || !key || !bytes || !deviceId || !ownerPid) return Unanswered(ACL_ERROR_INVALID_PARAM, "null argument");
    const int fd = shm_open(name, O_RDONLY, 0600);
    if (fd < 0) return Unanswered(ACL_ERROR_INVALID_PARAM, std::string("cannot open it: ") + std::strerror(errno));
    // The plane's one trust rule (shm_trust.h), before anything of the segment is read.
    uint64_t size = 0;
    const std::string untrusted = cam::host::RefuseUntrustedSegment(fd, std::string("the segment ") + name, &size);
    void* p = untrusted.empty() && size > kPrefixBytes ? mmap(nullptr, kHeaderBytes, PROT_READ, MAP_SHARED, fd, 0)
                                                       : MAP_FAILED;
    close(fd);
    if (!untrusted.empty()) return Unanswered(ACL_ERROR_INVALID_PARAM, untrusted);
    if (p == MAP_FAILED)
        return Unanswered(ACL_ERROR_INVALID_PARAM, "it is " + std::to_string(size) + " bytes: no twin device memory");
    const auto* h = static_cast<const Header*>(p);
    const uint64_t nonce = __atomic_load_n(&h->nonce, __ATOMIC_ACQUIRE);
    const uint64_t have = h->bytes;
    const bool ours = h->magic == kMagic && have + kPrefixBytes <= size;
    *deviceId = h->ownerDevice;
    *ownerPid = h->ownerPid;
    munmap(p, kHeaderBytes);
    if (!ours) return Unanswered(ACL_ERROR_INVALID_PARAM, "it is not twin device memory");
    if (nonce == 0) return Unanswered(ACL_ERROR_INVALID_PARAM, "its owner withdrew its export");
    const int n = std::snprintf(key, len, "%s:%" PRIx64, name, nonce);
    if (n < 0 || static_cast<size_t>(n) + 1 > len)
        return Unanswered(ACL_ERROR_INVALID_PARAM, "its key does not fit " + std::to_string(len) + " bytes");
    *bytes = have;
    return ACL_SUCCESS;
}

extern "C" aclError camTwinIpcUnlinkName(const char* key) {
    std::lock_guard<std::mutex> lock(gMutex);
    std::string name;
    uint64_t nonce = 0;
    if (!ParseKey(key, &name, &nonce)) return Unanswered(ACL_ERROR_INVALID_PARAM, "not a key");
    // By name only: the export may be withdrawn already (ranks that are threads of one process: a peer's Close of
    // its import may have been the first Close of the key, see camTwinAclrtIpcMemClose).
    for (auto& [addr, s] : gOwned) {
        if (s.name != name) continue;
        if (s.linked) shm_unlink(s.name.c_str());
        s.linked = false;
        return ACL_SUCCESS;
    }
    return Unanswered(ACL_ERROR_INVALID_PARAM, "not a key this process exported");
}

extern "C" int64_t camTwinIpcOpenImports(void) {
    std::lock_guard<std::mutex> lock(gMutex);
    int64_t open = 0;
    for (const auto& [key, s] : gImported) open += s.imports;
    return open;
}
