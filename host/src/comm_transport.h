// The twin's two transports: an in-process registry (ranks are threads of one process) and POSIX shared memory
// (ranks are processes). Windows are host memory on the twin; an HCCL transport on Ascend would sit beside these.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm.h"

namespace cam::host {

// Joins rank `rank` of the in-process group `name`: allocates its zeroed window of `bytes`, lets `init` write it
// (the identity line) before any peer can see it, and waits up to joinTimeoutMs for the whole world. On failure
// returns nullptr with *why (the group is poisoned, so the ranks still waiting fail at once with the same reason).
std::unique_ptr<Transport> JoinInProcessGroup(const std::string& name, const CamTopology& topo, int64_t rank,
                                              uint64_t bytes, const std::function<void(uint8_t*)>& init,
                                              int32_t joinTimeoutMs, std::string* why);

// POSIX shm: Create maps this rank's own segment, Map each peer's by name (camCommAttachShm); the creator unlinks
// its name at Unlink or destruction.
class ShmTransport : public Transport {
public:
    ShmTransport(std::string name, int64_t rank, int64_t world);
    ~ShmTransport() override;
    const char* Name() const override { return "posix-shm"; }
    uint8_t* Window(int64_t rank) const override { return maps_[rank].base; }
    uint64_t WindowBytes(int64_t rank) const override { return maps_[rank].bytes; }

    // A segment is its park table (kParkBytes: the twin's process-shared waits, twin/park.h), then the window.
    static constexpr uint64_t kParkBytes = 8192;

    std::string Create(uint64_t bytes);  // "" or the reason
    std::string Map(int64_t rank, const std::string& name);
    void Unlink();

private:
    struct Mapping {
        uint8_t* base = nullptr;  // the window
        uint64_t bytes = 0;
        uint8_t* segment = nullptr;  // what was mapped: the park table, then the window
        uint64_t segmentBytes = 0;
    };
    std::string Adopt(int64_t rank, void* segment, uint64_t segmentBytes);
    std::string name_;
    int64_t rank_;
    std::vector<Mapping> maps_;
    bool created_ = false;
    bool unlinked_ = false;
};

}  // namespace cam::host
