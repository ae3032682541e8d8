// Host-facing entry of the window_table kernel, cam's one MC2 op (docs/ascend.md §5).
#pragma once

#include "window_table/window_table_tiling_data.h"

namespace cam::kernels {

// `hcclContext` is the context of the plane's HCCL group for this rank. On Ascend the op framework binds it to an
// MC2 op's launch (the argument is not used there); on the twin the launch binds a copy of it to the block threads,
// taken when the launch is queued. `initTiling`: kWindowTableInitTilingBytes of device memory holding the group's
// init tiling (window_table_tiling_data.h).
void LaunchWindowTable(uint32_t blockDim, void* stream, const void* hcclContext, uint8_t* peers, uint8_t* status,
                       uint8_t* initTiling, const WindowTableTilingData& tiling);

}  // namespace cam::kernels
