// What the two layer-select grouped matmuls share on the host: argument checks for the activations, the per-layer
// weight/scale lists, group_list and layer_index; the workspace layout; the device address table.
#pragma once

#include <cstdint>
#include <vector>

#include "cam/acl_compat.h"
#include "common/gmm_cube_tiling_data.h"
#include "gmm_split_int4/gmm_split_int4_tiling_data.h"
#include "tensor.h"

namespace cam::host {

struct GmmArgs {
    TensorView x, xScale, groupList, layerIndex;
    std::vector<TensorView> weights, scales;
    int64_t m = 0, k = 0, n = 0, experts = 0, layers = 0;
    int64_t groups = 0;  // groups the kernels walk: E_local, or the group table's rows (group_list_type 2)
    int64_t kGroups = 1; // scale groups along K: weight_scales [E, kGroups, N]; 1 for [E, N] (per output channel)
    // W4A8 (docs/gmm.md §9): weights are packed int4 uint8 [E, ceil(K/64), ceil(N/16), 16, 32] and weight_colsums
    // (int32 [E, kGroups, N] per layer, Σ_k w over each K group) carry the recombination's +8 term.
    bool int4 = false;
    std::vector<TensorView> colsums;
};

// Checks everything the host can see (dtypes, ranks, shapes, list lengths, FRACTAL_NZ weight shapes); xName /
// xScaleName are the activation arguments' names ("x"/"x_scale" for W1, "y"/"y_scale" for W2). group_list_type 2:
// group_list is a group table [G, 3] (kernels/common/group_table.h) and layer_index is not read (may be null).
// weightColsums non-null: the W4A8 form (GmmArgs::int4), packed int4 weights.
aclnnStatus CheckGmmInputs(const ArgChecker& check, const char* xName, const char* xScaleName, const aclTensor* x,
                           const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
                           const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
                           GmmArgs* out, const aclTensorList* weightColsums = nullptr);

// A mixed GMM kernel's workspace: [status record | the per-AI-core ring (at `acc`) of ringBytes | W4A8: the split
// activation (at `split`), two int4 planes of M x kSplit], each 512-byte aligned.
struct GmmWorkspace {
    uint64_t status = 0;
    uint64_t acc = 0;
    uint64_t split = 0;  // 0 without int4
    uint64_t bytes = 0;
};
GmmWorkspace GmmRingWorkspace(uint64_t ringBytes, const GmmArgs& a);

// The activations a mixed GMM kernel's cube reads: x itself (W8A8), or (W4A8, cube.int4) x's hi / lo int4 planes,
// which this launches the split to write into the workspace's `split` region first, on the same stream.
uint8_t* LaunchGmmCubeActivations(aclrtStream stream, uint8_t* x, uint8_t* groupList, uint8_t* layerIndex,
                                  uint8_t* workspace, const GmmWorkspace& ws,
                                  const cam::kernels::GmmCubeTilingData& cube,
                                  const cam::kernels::GmmSplitInt4TilingData& split);

// Table the kernels index with the device's layer_index: weights[0..L), then scales[0..L), then (W4A8) colsums.
std::vector<uint8_t> GmmAddressTable(const GmmArgs& args);

// The same table in persistent device memory, built at the first call for a weight set and shared by every later
// call and replay: no host copy per call (and none inside a capture, where a host-sourced copy is refused).
uint8_t* PersistentGmmTable(const GmmArgs& args);

}  // namespace cam::host
