// window_table: reads the HCCL context of the plane's group (the MC2 context) and writes every rank's window base
// into the Comm's peer table, int64 per rank, which the four data-plane ops read. Run once per Comm.
//
// Everything the context says is checked before the first store (rank count = the topology's world size, rank id =
// this rank, no null window), so a refused context leaves the table as it was and says why in the status record.
#include "kernel_operator.h"

#include "common/kernel_frame.h"
#include "lib/hccl/hccl.h"

#include "common/device_status_write.h"
#include "window_table/window_table_tiling_data.h"

namespace cam::kernels {

class WindowTable {
public:
    __aicore__ inline void Init(GM_ADDR peers, GM_ADDR status, GM_ADDR initTiling, const WindowTableTilingData& t) {
        tiling_ = t;
        status_ = status;
        peers_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(peers), t.worldSize);
        // The documented form, with the init tiling: the deprecated tiling-less Init makes the client read the A2
        // flat context, which on A3 is a different structure (docs/ascend.md §5, docs/twin.md "HCCL context").
        hccl_.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_0>(), initTiling);
    }

    // No collective follows: the client's docs ask for Finalize once the last use is done.
    __aicore__ inline void Finish() {
        hccl_.Finalize();
    }

    __aicore__ inline void Process() {
        const uint32_t dim = hccl_.GetRankDim();
        if (dim != tiling_.worldSize) {
            WriteDeviceStatus(status_, kDeviceStatusMismatch, kDeviceArgHcclRankDim, -1, dim, tiling_.worldSize);
            return;
        }
        // The tiling bounds the world too, but the kernel does not lean on it: asking the flat layout for a rank past
        // its windowsIn[] reads other fields' bytes as a window address, which the null check would pass.
        if (dim > kWindowTableFlatRanks) {
            WriteDeviceStatus(status_, kDeviceStatusOutOfRange, kDeviceArgHcclRankDim, -1, dim,
                              kWindowTableFlatRanks + 1);
            return;
        }
        const uint32_t id = hccl_.GetRankId();
        if (id != tiling_.rank) {
            WriteDeviceStatus(status_, kDeviceStatusMismatch, kDeviceArgHcclRankId, -1, id, tiling_.rank);
            return;
        }
        for (uint32_t r = 0; r < dim; ++r) {
            if (hccl_.GetWindowsInAddr(r) == nullptr) {
                WriteDeviceStatus(status_, kDeviceStatusNull, kDeviceArgHcclWindow, r, 0, 0);
                return;
            }
        }
        for (uint32_t r = 0; r < dim; ++r) {
            peers_.SetValue(r, static_cast<int64_t>(reinterpret_cast<uintptr_t>(hccl_.GetWindowsInAddr(r))));
        }
        // The data-plane kernels read the table from other cores: every line it touches leaves this core's data
        // cache (one entry per 64-byte line, and the last one, which may start a line of its own).
        for (uint32_t r = 0; r < dim; r += kInt64PerLine) FlushLineOf(r);
        FlushLineOf(dim - 1);
    }

private:
    __aicore__ inline void FlushLineOf(uint32_t entry) {
        AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(peers_[entry]);
        AscendC::DataSyncBarrier<AscendC::MemDsbT::ALL>();  // each line's write-back lands before the next clean's
    }

    static constexpr uint32_t kInt64PerLine = 64 / sizeof(int64_t);

    WindowTableTilingData tiling_{};
    GM_ADDR status_ = nullptr;
    AscendC::GlobalTensor<int64_t> peers_;
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_window_table(GM_ADDR peers, GM_ADDR status, GM_ADDR initTiling,
                                                       cam::kernels::WindowTableTilingData tiling) {
    if (AscendC::GetBlockIdx() != 0) return;
    cam::kernels::WindowTable op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(peers, status, initTiling, tiling);
    op.Process();
    op.Finish();
}

#include "common/launch.h"
#include "window_table/window_table.h"

void cam::kernels::LaunchWindowTable(uint32_t blockDim, void* stream, const void* hcclContext, uint8_t* peers,
                                     uint8_t* status, uint8_t* initTiling, const WindowTableTilingData& tiling) {
    CAM_MC2_LAUNCH(hcclContext, cam_window_table, blockDim, stream, peers, status, initTiling, tiling);
}
