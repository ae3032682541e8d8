// The row tiles of the W8A8 mixed W1 kernel (docs/gmm.md §5): each group's rows are split into as few tiles as the
// slot allows (tmMax rows, the tiling's cube.tm), of balanced heights, and the tiles are dealt expert-major: the
// launch's i-th tile runs on AI core i mod cores, so an expert's sibling tiles run at the same time on neighbouring
// cores and read the same weight strips close together. Every tile streams its expert's whole K x N weight, so the
// tile count per group is what the weight reads cost.
#pragma once

#include "kernel_operator.h"

#include "common/gmm_groups.h"
#include "gmm_int8_cube/gmm_int8_cube_tiling_data.h"

namespace cam::kernels {

// Tiles of a group of `rows` rows: ceil(rows / tmMax), none for an empty group.
__aicore__ constexpr uint64_t GmmSwigluRowTileCount(uint64_t rows, uint32_t tmMax) { return CeilDiv(rows, tmMax); }

// Tile j of such a group: the balanced share, the first rows % tiles tiles one row taller than the rest (so every
// tile holds at most tmMax rows and none is empty). Not rounded up to the cube's 16-row fractal: the cube pads each
// tile to it anyway, while a tile's copies of x (the critical core's MTE2 work, docs/gmm.md §5) scale with its real
// rows, so equal shares keep the cores' copy work equal.
__aicore__ constexpr uint64_t GmmSwigluRowTileRow0(uint64_t rows, uint64_t tiles, uint64_t j) {
    return j * (rows / tiles) + (j < rows % tiles ? j : rows % tiles);
}
__aicore__ constexpr uint64_t GmmSwigluRowTileRows(uint64_t rows, uint64_t tiles, uint64_t j) {
    return rows / tiles + (j < rows % tiles ? 1 : 0);
}

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
                tiles_ = GmmSwigluRowTileCount(rows, tmMax_);
                groupRows_ = rows;
                // This core's first tile of the group: launch tile index first_ + j with (first_ + j) % cores == core.
                tile_ = (core_ + cores_ - first_ % cores_) % cores_;
                first_ += tiles_;
                continue;
            }
            row0_ = cursor_.Start() + GmmSwigluRowTileRow0(groupRows_, tiles_, tile_);
            rows_ = static_cast<uint32_t>(GmmSwigluRowTileRows(groupRows_, tiles_, tile_));
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

}  // namespace cam::kernels
