// The twin's in-process transport (comm_transport.h).
#include "comm_transport.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <sys/mman.h>

namespace cam::host {

namespace {

struct Block {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    uint64_t mapped = 0;  // bytes of an own mapping (a window of 2 MiB or more), 0 for a heap block
    explicit Block(uint64_t n) : bytes(n) {
        // A window of 2 MiB or more: a mapping of its own, 2 MiB aligned and advised for transparent huge pages
        // (madvise on this mapping only: advice given to heap memory would outlive the window and reach whatever the
        // allocator places there next). The data-plane ops stream tens of MiB through the windows each round, and
        // with 4 KiB pages each 4 KiB of a copy costs a TLB miss, a nested page walk in a VM; the round trip at
        // H 4096, B 1024 took about 3 % less CPU with them under perf (the speed table's record,
        // benchmarks/results/twin-speed.md, has them only together with two other changes).
        constexpr uint64_t kHuge = uint64_t(2) << 20;
        if (n >= kHuge) {
            const uint64_t rounded = (n + kHuge - 1) / kHuge * kHuge;
            void* raw = mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (raw == MAP_FAILED) return;
            // keep the 2 MiB aligned part, give back the slack before and after it
            const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
            const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
            if (aligned > start) munmap(raw, aligned - start);
            const uintptr_t tail = aligned + rounded, end = start + rounded + kHuge;
            if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
            base = reinterpret_cast<uint8_t*>(aligned);
            mapped = rounded;
            madvise(base, rounded, MADV_HUGEPAGE);  // advice: a refusal leaves 4 KiB pages, still correct
            return;  // an anonymous mapping reads as zeros
        }
        base = static_cast<uint8_t*>(std::aligned_alloc(kLine, layout::align_up(static_cast<int64_t>(n), kLine)));
        if (base) std::memset(base, 0, bytes);
    }
    ~Block() {
        if (mapped)
            munmap(base, mapped);
        else
            std::free(base);
    }
};

struct Group {
    std::mutex mutex;
    std::condition_variable cv;
    int64_t world = 0;
    int64_t fingerprint = 0;
    CamTopology topo{};  // the first joiner's, to name the fields a later joiner differs in
    int64_t firstRank = -1;
    std::vector<std::shared_ptr<Block>> windows;
    int64_t joined = 0;
    bool complete = false;
    std::string error;
};

std::mutex gRegistryMutex;
std::map<std::string, std::shared_ptr<Group>> gGroups;

void Unregister(const std::string& name, const std::shared_ptr<Group>& group) {
    std::lock_guard<std::mutex> lock(gRegistryMutex);
    auto it = gGroups.find(name);
    if (it != gGroups.end() && it->second == group) gGroups.erase(it);
}

class InProcessTransport : public Transport {
public:
    explicit InProcessTransport(std::shared_ptr<Group> group) : group_(std::move(group)) {}
    const char* Name() const override { return "in-process"; }
    uint8_t* Window(int64_t rank) const override { return group_->windows[rank]->base; }
    uint64_t WindowBytes(int64_t rank) const override { return group_->windows[rank]->bytes; }

private:
    std::shared_ptr<Group> group_;  // keeps every rank's window alive while this rank may still touch it
};

}  // namespace

std::unique_ptr<Transport> JoinInProcessGroup(const std::string& name, const CamTopology& topo, int64_t rank,
                                              uint64_t bytes, const std::function<void(uint8_t*)>& init,
                                              int32_t joinTimeoutMs, std::string* why) {
    const int64_t world = layout::world_size(topo);
    const int64_t fp = layout::fingerprint(topo);
    std::shared_ptr<Group> g;
    {
        std::lock_guard<std::mutex> lock(gRegistryMutex);
        auto& slot = gGroups[name];
        if (!slot) {
            slot = std::make_shared<Group>();
            slot->world = world;
            slot->fingerprint = fp;
            slot->topo = topo;
            slot->firstRank = rank;
            slot->windows.resize(world);
        }
        g = slot;
    }
    std::unique_lock<std::mutex> lock(g->mutex);
    auto fail = [&](const std::string& reason) -> std::unique_ptr<Transport> {
        if (g->error.empty()) g->error = reason;
        g->cv.notify_all();
        lock.unlock();
        Unregister(name, g);
        *why = reason;
        return nullptr;
    };
    if (!g->error.empty()) return fail(g->error);
    if (g->fingerprint != fp || g->world != world) {
        // Two ranks cannot tell which of them is wrong: the sentence every rank of the group gets names both, with
        // each differing field and both values.
        std::string diff = TopologyDifference(topo, rank, g->topo, g->firstRank);
        if (diff.empty()) diff = "rank " + std::to_string(rank) + " and rank " + std::to_string(g->firstRank) +
                                 " have topologies with different fingerprints";
        return fail("ranks were created with a different topology: " + diff);
    }
    if (g->windows[rank]) return fail("rank " + std::to_string(rank) + " joined twice");
    auto block = std::make_shared<Block>(bytes);
    if (!block->base) return fail("cannot allocate a window of " + std::to_string(bytes) + " bytes");
    init(block->base);
    g->windows[rank] = block;
    if (++g->joined == world) {
        g->complete = true;
        g->cv.notify_all();
        lock.unlock();
        Unregister(name, g);
        lock.lock();
    } else {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(joinTimeoutMs);
        g->cv.wait_until(lock, deadline, [&] { return g->complete || !g->error.empty(); });
        if (!g->complete) {
            if (!g->error.empty()) return fail(g->error);
            std::string missing;
            for (int64_t r = 0; r < world; ++r)
                if (!g->windows[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            return fail("timed out after " + std::to_string(joinTimeoutMs) + " ms; ranks not joined: " + missing);
        }
    }
    lock.unlock();
    return std::make_unique<InProcessTransport>(g);
}

}  // namespace cam::host
