// The row tiles of the W8A8 mixed W1 kernel (docs/gmm.md §5): each group's rows cut into row tiles by the rule both
// mixed kernels share (common/gmm_groups.h: GmmRowTileCount, GmmRowTileRow0 / GmmRowTileRows, tmMax the tiling's
// cube.tm), and every tile dealt whole, expert-major: the launch's i-th tile runs on AI core i mod cores, so an
// expert's sibling tiles run at the same time on neighbouring cores and read the same weight strips close together.
// W2 (GmmTileUnits) deals whole rounds the same way but splits the leftover tiles by n-tiles; W1's cube hands a whole
// row tile to its vector cores (the per-row amax needs every n-tile), so its tiles are never split.
#pragma once

#include "kernel_operator.h"

#include "common/gmm_cube_tiling_data.h"
#include "common/gmm_groups.h"

namespace cam::kernels {

// One AI core's tiles, in the order its cube core computes them; the cube core and its two vector cores walk the
// same sequence.
class GmmSwigluRowTiles {
public:
    __aicore__ inline void Init(GM_ADDR groupList, uint32_t groups, uint32_t type, int64_t layer, uint32_t tmMax,
                                uint32_t core, uint32_t cores) {
        cursor_.Init(groupList, groups, type, layer);
        tmMax_ = tmMax;
        core_ = core;
        cores_ = cores;
    }

    // Advances to this core's next tile; false past the last.
    __aicore__ inline bool Next() {
        for (;;) {
            if (tile_ >= tiles_) {
                if (!cursor_.Next()) return false;
                const uint64_t rows = cursor_.End() - cursor_.Start();
                tiles_ = GmmRowTileCount(rows, tmMax_);
                groupRows_ = rows;
                // This core's first tile of the group: launch tile index first_ + j with (first_ + j) % cores == core.
                tile_ = (core_ + cores_ - first_ % cores_) % cores_;
                first_ += tiles_;
                continue;
            }
            row0_ = cursor_.Start() + GmmRowTileRow0(groupRows_, tiles_, tile_);
            rows_ = static_cast<uint32_t>(GmmRowTileRows(groupRows_, tiles_, tile_));
            tile_ += cores_;
            return true;
        }
    }

    __aicore__ inline uint32_t Expert() const { return cursor_.Expert(); }
    __aicore__ inline uint32_t Layer() const { return cursor_.Layer(); }
    __aicore__ inline uint64_t Row0() const { return row0_; }
    __aicore__ inline uint32_t Rows() const { return rows_; }

private:
    GroupCursor cursor_;
    uint32_t tmMax_ = kGmmM0, core_ = 0, cores_ = 1, rows_ = 0;
    uint64_t tiles_ = 0, tile_ = 0, groupRows_ = 0, first_ = 0, row0_ = 0;
};

// The units the W1 cube hands over, in order: each row tile of GmmSwigluRowTiles as `units` consecutive units,
// its n-tiles in column order (units = cube.nTiles with scale groups along K, else 1: the whole row tile,
// GmmSwigluUnitsPerTile).
class GmmSwigluUnits {
public:
    __aicore__ inline void Init(GM_ADDR groupList, uint32_t groups, uint32_t type, int64_t layer, uint32_t tmMax,
                                uint32_t units, uint32_t core, uint32_t cores) {
        tiles_.Init(groupList, groups, type, layer, tmMax, core, cores);
        units_ = units;
        nt_ = units;
    }

    // Advances to this core's next unit; false past the last.
    __aicore__ inline bool Next() {
        if (nt_ + 1 < units_) {
            ++nt_;
            return true;
        }
        nt_ = 0;
        return tiles_.Next();
    }

    __aicore__ inline uint32_t Expert() const { return tiles_.Expert(); }
    __aicore__ inline uint32_t Layer() const { return tiles_.Layer(); }
    __aicore__ inline uint64_t Row0() const { return tiles_.Row0(); }
    __aicore__ inline uint32_t Rows() const { return tiles_.Rows(); }
    __aicore__ inline uint32_t NTile() const { return nt_; }
    // Whether this unit is its row tile's last.
    __aicore__ inline bool Last() const { return nt_ + 1 == units_; }

private:
    GmmSwigluRowTiles tiles_;
    uint32_t units_ = 1, nt_ = 0;
};

}  // namespace cam::kernels
