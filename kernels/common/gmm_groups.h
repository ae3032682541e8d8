// Device-side reading of the GMM's device-resident arguments: layer_index and group_list. Every core of both
// GMM kernels runs the same pre-pass before touching any output, so all reach the same verdict without a
// barrier; block 0 alone records a failure in the status record (common/device_status_record.h).
#pragma once

#include "kernel_operator.h"

#include "common/device_status_write.h"
#include "common/gmm_cube_tiling_data.h"
#include "common/group_table.h"
#include "common/ub_math.h"

namespace cam::kernels {

// Walks the groups in row order, giving each group's layer, local expert and row range [start, end). A
// group_list of type 0/1 is the one-layer case: group e is expert e of layer `layer` (the accepted layer_index);
// a group table names each group's layer and expert itself.
class GroupCursor {
public:
    __aicore__ inline void Init(GM_ADDR groupList, uint32_t groups, uint32_t type, int64_t layer) {
        gl_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(groupList),
                            type == kGroupListTable ? uint64_t(groups) * kGroupWords : groups);
        groups_ = groups;
        type_ = type;
        layer_ = layer;
        Reset();
    }
    __aicore__ inline void Reset() {
        group_ = 0;
        start_ = 0;
        end_ = 0;
    }
    // Advances to the next group; false past the last one. Valid only after the pre-pass accepted the groups.
    __aicore__ inline bool Next() {
        if (group_ >= groups_) return false;
        start_ = end_;
        if (type_ == kGroupListTable) {
            const uint64_t w = uint64_t(group_) * kGroupWords;
            layerOf_ = gl_.GetValue(w + kGroupLayer);
            expert_ = static_cast<uint32_t>(gl_.GetValue(w + kGroupExpert));
            end_ = start_ + static_cast<uint64_t>(gl_.GetValue(w + kGroupRows));
        } else {
            layerOf_ = layer_;
            expert_ = group_;
            const int64_t v = gl_.GetValue(group_);
            end_ = type_ == kGroupListCounts ? start_ + static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        }
        ++group_;
        return true;
    }
    __aicore__ inline uint32_t Expert() const { return expert_; }
    __aicore__ inline uint32_t Layer() const { return static_cast<uint32_t>(layerOf_); }
    __aicore__ inline uint64_t Start() const { return start_; }
    __aicore__ inline uint64_t End() const { return end_; }

private:
    AscendC::GlobalTensor<int64_t> gl_;
    uint32_t groups_ = 0;
    uint32_t type_ = kGroupListCounts;
    int64_t layer_ = 0;
    uint32_t group_ = 0;
    uint32_t expert_ = 0;
    int64_t layerOf_ = 0;
    uint64_t start_ = 0;
    uint64_t end_ = 0;
};

struct GmmDeviceArgs {
    int64_t layer;   // accepted layer index (types 0/1; 0 for a group table)
    uint64_t total;  // rows covered by the groups (<= capacity)
};

// Checks every device word the kernels will read, before anything is written, and returns false on the first
// violation (block 0 records it). Types 0/1: layer_index in [0, layers) and group_list (counts >= 0, cumsum
// non-decreasing from >= 0, total <= capacity). A group table: each group's layer in [0, layers), expert in
// [0, experts), rows >= 0, the running total <= capacity; layer_index is not read.
// mayReport false: a core that never records (a mixed kernel's vector cores, whose block 0 is not its cube core's).
__aicore__ inline bool GmmPrePass(GM_ADDR layerIndex, GM_ADDR groupList, uint32_t experts, uint32_t groups,
                                  uint32_t layers, uint32_t type, uint64_t capacity, GM_ADDR status,
                                  GmmDeviceArgs* out, bool mayReport = true) {
    const bool report = mayReport && AscendC::GetBlockIdx() == 0;
    if (type == kGroupListTable) {
        AscendC::GlobalTensor<int64_t> gt;
        gt.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(groupList), uint64_t(groups) * kGroupWords);
        int64_t end = 0;
        for (uint32_t g = 0; g < groups; ++g) {
            const uint64_t w = uint64_t(g) * kGroupWords;
            const int64_t l = gt.GetValue(w + kGroupLayer), e = gt.GetValue(w + kGroupExpert);
            const int64_t v = gt.GetValue(w + kGroupRows);
            if (l < 0 || l >= static_cast<int64_t>(layers)) {
                if (report) WriteDeviceStatus(status, kDeviceStatusOutOfRange, kDeviceArgGroupLayer, g, l, layers);
                return false;
            }
            if (e < 0 || e >= static_cast<int64_t>(experts)) {
                if (report) WriteDeviceStatus(status, kDeviceStatusOutOfRange, kDeviceArgGroupExpert, g, e, experts);
                return false;
            }
            if (v < 0) {
                if (report) WriteDeviceStatus(status, kDeviceStatusNegative, kDeviceArgGroupRows, g, v, 0);
                return false;
            }
            if (v > static_cast<int64_t>(capacity) - end) {  // compared before adding: a huge count cannot wrap
                if (report)
                    WriteDeviceStatus(status, kDeviceStatusTotalExceeds, kDeviceArgGroupRows, g,
                                      v > INT64_MAX - end ? INT64_MAX : end + v, static_cast<int64_t>(capacity));
                return false;
            }
            end += v;
        }
        out->layer = 0;
        out->total = static_cast<uint64_t>(end);
        return true;
    }
    AscendC::GlobalTensor<int64_t> li;
    li.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(layerIndex), 1);
    const int64_t layer = li.GetValue(0);
    if (layer < 0 || layer >= static_cast<int64_t>(layers)) {
        if (report) WriteDeviceStatus(status, kDeviceStatusOutOfRange, kDeviceArgLayerIndex, -1, layer, layers);
        return false;
    }
    AscendC::GlobalTensor<int64_t> gl;
    gl.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(groupList), experts);
    int64_t end = 0;
    for (uint32_t e = 0; e < experts; ++e) {
        const int64_t v = gl.GetValue(e);
        int64_t next;
        if (type == kGroupListCounts) {
            if (v < 0) {
                if (report) WriteDeviceStatus(status, kDeviceStatusNegative, kDeviceArgGroupList, e, v, 0);
                return false;
            }
            // Compare before adding so a huge count cannot wrap the running total.
            if (v > static_cast<int64_t>(capacity) - end) {
                if (report)
                    WriteDeviceStatus(status, kDeviceStatusTotalExceeds, kDeviceArgGroupList, e,
                                      v > INT64_MAX - end ? INT64_MAX : end + v, static_cast<int64_t>(capacity));
                return false;
            }
            next = end + v;
        } else {
            if (v < end) {
                if (report)
                    WriteDeviceStatus(status, v < 0 ? kDeviceStatusNegative : kDeviceStatusDecreasing,
                                      kDeviceArgGroupList, e, v, end);
                return false;
            }
            if (v > static_cast<int64_t>(capacity)) {
                if (report)
                    WriteDeviceStatus(status, kDeviceStatusTotalExceeds, kDeviceArgGroupList, e, v,
                                      static_cast<int64_t>(capacity));
                return false;
            }
            next = v;
        }
        end = next;
    }
    out->layer = layer;
    out->total = static_cast<uint64_t>(end);
    return true;
}

// The GM address of layer `layer`'s tensor from a device-resident table of per-layer base addresses.
template <typename T>
__aicore__ inline __gm__ T* LayerAddress(GM_ADDR table, uint32_t slot) {
    AscendC::GlobalTensor<uint64_t> t;
    t.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(table));
    return reinterpret_cast<__gm__ T*>(static_cast<uintptr_t>(t.GetValue(slot)));
}

// The row tiles of a group of `rows` rows, one rule for both mixed kernels (docs/gmm.md §5): as few tiles as the
// slot allows, ceil(rows / tmMax), none for an empty group. Every tile streams its expert's whole weight, so this
// count is what the weight reads cost.
__aicore__ constexpr uint64_t GmmRowTileCount(uint64_t rows, uint32_t tmMax) { return CeilDiv(rows, tmMax); }

// Tile j of such a group of `tiles` tiles: its first row (from the group's start) and its rows, the balanced share
// with the first rows % tiles tiles one row taller than the rest, so every tile holds at most tmMax rows and none is
// empty. Not rounded up to the cube's 16-row fractal: the cube pads each tile to it anyway, while a tile's copies of
// x scale with its real rows, so equal shares keep the cores' copy work equal.
__aicore__ constexpr uint64_t GmmRowTileRow0(uint64_t rows, uint64_t tiles, uint64_t j) {
    return j * (rows / tiles) + (j < rows % tiles ? j : rows % tiles);
}
__aicore__ constexpr uint64_t GmmRowTileRows(uint64_t rows, uint64_t tiles, uint64_t j) {
    return rows / tiles + (j < rows % tiles ? 1 : 0);
}

// The units (row tile, n-tile) of one AI core of the mixed W2 kernel (docs/gmm.md §5), in the order its cube core
// computes them; the cube core and its vector cores walk the same sequence. The launch's row tiles (the rule above)
// are numbered group by group. The first floor(tiles / cores) · cores of them are dealt whole, tile i to core
// i mod cores: an expert's sibling tiles run at the same time on neighbouring cores, so each weight strip's second
// read follows its first closely (L2). The units of the remaining tiles, n-tiles inner, are split into `cores` runs
// of consecutive units whose sizes differ by at most one, run c to core c: every core ends with the same number of
// units (±1) instead of a whole tile more for some, and each of those weight strips is read by one core. A core's
// units of one tile are consecutive n-tiles, so its rows of x stay resident between them.
class GmmTileUnits {
public:
    __aicore__ inline void Init(GM_ADDR groupList, uint32_t groups, uint32_t type, int64_t layer, uint32_t tmMax,
                                uint32_t nTiles, uint32_t core, uint32_t cores) {
        cursor_.Init(groupList, groups, type, layer);
        tmMax_ = tmMax;
        nTiles_ = nTiles;
        cores_ = cores;
        uint64_t tiles = 0;
        while (cursor_.Next()) tiles += GmmRowTileCount(cursor_.End() - cursor_.Start(), tmMax);
        cursor_.Reset();
        whole_ = tiles / cores * cores;
        const uint64_t split = (tiles - whole_) * nTiles;
        unit_ = whole_ * nTiles + split * core / cores;
        unitEnd_ = whole_ * nTiles + split * (core + 1) / cores;
        nextWhole_ = core;
    }

    // Advances to this core's next unit; false past the last.
    __aicore__ inline bool Next() {
        if (nt_ + 1 < ntEnd_) {
            ++nt_;
            first_ = false;
            return true;
        }
        uint64_t tile;
        if (nextWhole_ < whole_) {
            tile = nextWhole_;
            nextWhole_ += cores_;
            nt_ = 0;
            ntEnd_ = nTiles_;
        } else {
            if (unit_ >= unitEnd_) return false;
            tile = unit_ / nTiles_;
            nt_ = static_cast<uint32_t>(unit_ % nTiles_);
            const uint64_t end = (tile + 1) * nTiles_ < unitEnd_ ? (tile + 1) * nTiles_ : unitEnd_;
            ntEnd_ = static_cast<uint32_t>(end - tile * nTiles_);
            unit_ = end;
        }
        // A core's tiles ascend, so the groups are walked once.
        while (tile >= groupTile_ + groupTiles_) {
            cursor_.Next();
            groupTile_ += groupTiles_;
            const uint64_t rows = cursor_.End() - cursor_.Start();
            groupTiles_ = GmmRowTileCount(rows, tmMax_);
            groupRows_ = rows;
        }
        row0_ = cursor_.Start() + GmmRowTileRow0(groupRows_, groupTiles_, tile - groupTile_);
        rows_ = static_cast<uint32_t>(GmmRowTileRows(groupRows_, groupTiles_, tile - groupTile_));
        first_ = true;
        return true;
    }

    __aicore__ inline uint32_t Expert() const { return cursor_.Expert(); }
    __aicore__ inline uint32_t Layer() const { return cursor_.Layer(); }
    __aicore__ inline uint64_t Row0() const { return row0_; }
    __aicore__ inline uint32_t Rows() const { return rows_; }
    __aicore__ inline uint32_t NTile() const { return nt_; }
    // Whether this unit is the first of a run of its tile on this core (new rows).
    __aicore__ inline bool First() const { return first_; }

private:
    GroupCursor cursor_;
    uint32_t tmMax_ = kGmmM0, nTiles_ = 1, cores_ = 1, rows_ = 0, nt_ = 0, ntEnd_ = 0;
    bool first_ = false;
    uint64_t whole_ = 0, nextWhole_ = 0, unit_ = 0, unitEnd_ = 0;
    uint64_t groupTile_ = 0, groupTiles_ = 0, groupRows_ = 0, row0_ = 0;
};

}  // namespace cam::kernels
