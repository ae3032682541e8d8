// Host-facing entry of the int8 grouped-matmul cube kernel (W1 and W2 share it).
#pragma once

#include "gmm_int8_cube/gmm_int8_cube_tiling_data.h"

namespace cam::kernels {

// table: device array of 2 * layers uint64 GM addresses (weights of each layer, then scales of each layer).
// acc: int32 [m, n] workspace; status: the op's DeviceStatusRecord.
void LaunchGmmInt8Cube(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* groupList, uint8_t* layerIndex,
                       uint8_t* table, uint8_t* acc, uint8_t* status, const GmmCubeTilingData& tiling);

}  // namespace cam::kernels
